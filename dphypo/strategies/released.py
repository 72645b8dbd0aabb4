"""Released probes: the only input of probe placement and of the recommendation (privacy rule 3, released probes).

A two-stage design with released probes (:class:`~dphypo.privacy.two_stage.ProbeRelease`) publishes every probe's
(hyperparameters, noisy score). Where the next probes go (:mod:`dphypo.strategies.gp.placement`) and which point is
committed (:mod:`dphypo.strategies.recommend`) may be any function of those released values and of the curator's
secret randomness: that is post-processing, covered by the adaptive composition that accounts the probes
(docs/privacy.md, rule 3 for released probes). Nothing else may reach them: T, other runs' raw scores, timings,
errors and models are curator-only (rule 1).

:class:`ReleasedProbes` is that input, batch-native (B searches × t probes, as the strategies' arrays):
:func:`released_probes` builds it from released probes (objects or mappings holding exactly ``params`` and
``score``, such as :class:`dphypo.api.two_stage.ReleasedProbe`) and refuses, in one line, anything that carries a
curator-only field (a :class:`~dphypo.search.records.Trial` has its timing and error; a history has T and every
run).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dphypo.privacy.errors import DphypoError
from dphypo.strategies.base import Direction, check_direction, orient

if TYPE_CHECKING:
    from dphypo.space import SearchSpace

__all__ = ["RELEASED_FIELDS", "CuratorOnlyError", "ReleasedProbes", "gp_targets", "released_probes"]

#: What a released probe publishes: its hyperparameters and its noisy score (``None``/``nan``: failed, scored worst).
RELEASED_FIELDS = frozenset({"params", "score"})


class CuratorOnlyError(DphypoError, TypeError):
    """Probe placement or a recommendation was given something that is not a released value."""


@dataclass(frozen=True, eq=False)
class ReleasedProbes:
    """The released probes of B searches: grid indices and noisy scores in release order.

    Attributes:
        indices: Grid indices, shape ``(B, t)``, int64.
        scores: Released noisy scores, shape ``(B, t)``, float64; non-finite for a probe that failed on the data
            (released as failed, scored worst).
    """

    indices: np.ndarray
    scores: np.ndarray

    def __post_init__(self) -> None:
        indices, scores = np.asarray(self.indices), np.asarray(self.scores, dtype=np.float64)
        if indices.ndim != 2 or indices.shape != scores.shape:
            raise ValueError(f"indices and scores must have one shape (B, t), got {indices.shape} and {scores.shape}")
        if indices.size and not np.issubdtype(indices.dtype, np.integer):
            raise ValueError(f"indices must be integers, got dtype {indices.dtype}")
        if indices.size and indices.min() < 0:
            raise ValueError(f"indices must be >= 0, got {int(indices.min())}")
        for name, array in (("indices", indices.astype(np.int64)), ("scores", scores.copy())):
            array.setflags(write=False)
            object.__setattr__(self, name, array)

    @classmethod
    def empty(cls, members: int) -> ReleasedProbes:
        """No probe yet, for ``members`` searches."""
        return cls(np.zeros((members, 0), dtype=np.int64), np.zeros((members, 0)))

    @property
    def members(self) -> int:
        """Number of searches B."""
        return int(self.indices.shape[0])

    @property
    def count(self) -> int:
        """Probes released per search t."""
        return int(self.indices.shape[1])

    def extended(self, indices: np.ndarray, scores: np.ndarray) -> ReleasedProbes:
        """These probes followed by ``indices``/``scores`` of shape ``(B, k)`` (the next released batch)."""
        return ReleasedProbes(np.concatenate([self.indices, np.asarray(indices, dtype=np.int64)], axis=1),
                              np.concatenate([self.scores, np.asarray(scores, dtype=np.float64)], axis=1))


def _fields(item: object) -> set[str]:
    """The public fields an item carries (a mapping's keys, a dataclass's fields, or its attributes)."""
    if isinstance(item, Mapping):
        return {str(key) for key in item}
    if dataclasses.is_dataclass(item):
        return {f.name for f in dataclasses.fields(item)}
    names = set(getattr(item, "__dict__", {})) | set(getattr(type(item), "__slots__", ()))
    return {name for name in names if not name.startswith("_")}


def released_probes(probes: Any, space: SearchSpace) -> ReleasedProbes:
    """One search's released probes (B = 1), refusing anything curator-only in one line.

    Args:
        probes: The released probes in release order: each a mapping or an object holding exactly ``params`` and
            ``score`` (``None`` or ``nan``: failed), e.g. :attr:`dphypo.api.two_stage.TwoStageOutcome.probes`; or a
            :class:`ReleasedProbes` (returned as is).
        space: The grid (to index ``params``).

    Returns:
        The probes as one search's :class:`ReleasedProbes`.

    Raises:
        CuratorOnlyError: ``probes`` is not a sequence of released probes, or an item carries a field beyond
            ``params`` and ``score`` (a trial's timing or error, a history's T: curator-only).
    """
    if isinstance(probes, ReleasedProbes):
        return probes
    if isinstance(probes, (str, bytes, Mapping)) or not isinstance(probes, Sequence):
        raise CuratorOnlyError(
            "probe placement and recommendation read released probes only (a sequence of (params, noisy score)), "
            f"got {type(probes).__name__}: T, other runs' scores and timings are curator-only"
        )
    indices, scores = [], []
    for item in probes:
        fields = _fields(item)
        if fields != RELEASED_FIELDS:
            extra = sorted(fields - RELEASED_FIELDS)
            what = f"curator-only field(s) {', '.join(extra)}" if extra else f"fields {sorted(fields)}"
            raise CuratorOnlyError(
                f"probe placement and recommendation read released values only (params, noisy score), got a "
                f"{type(item).__name__} with {what}"
            )
        params, score = (item["params"], item["score"]) if isinstance(item, Mapping) else (item.params, item.score)
        indices.append(space.index(params))
        scores.append(np.nan if score is None else float(score))
    return ReleasedProbes(np.asarray([indices], dtype=np.int64).reshape(1, -1), np.asarray([scores]).reshape(1, -1))


def gp_targets(released: ReleasedProbes, direction: Direction) -> tuple[np.ndarray, np.ndarray]:
    """Scores a surrogate is fitted to: oriented (higher is better), a failed probe imputed as the worst finite one.

    :func:`~dphypo.strategies.base.orient`, as the GP strategies do: a failed run scores worst.

    Returns:
        ``(targets, usable)``: shape ``(B, t)`` (rows that are not usable hold zeros) and which members have at
        least one finite score, shape ``(B,)``.
    """
    check_direction(direction)
    targets = orient(released.scores, direction).reshape(released.indices.shape)
    usable = np.all(np.isfinite(targets), axis=1) & (released.count > 0)
    return np.where(usable[:, None], targets, 0.0), usable
