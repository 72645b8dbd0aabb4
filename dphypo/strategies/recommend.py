r"""Which point a two-stage search commits to: a rule applied to the released probes (post-processing).

Stage 2 of a two-stage design trains the point (or the top k) that stage 1's release recommends. With released
probes (:class:`~dphypo.privacy.two_stage.ProbeRelease`) that is any function of the released (params, noisy
score) values, so it costs no privacy (docs/privacy.md, rule 3 for released probes). Rules
(:data:`RECOMMENDATIONS`):

* ``"best-probe"``: the best released noisy score (ties: the earlier probe); the k best distinct points;
* ``"gp-mean"``: the argmax of the posterior mean of the GP fitted on every released probe
  (:func:`~dphypo.strategies.gp.fit.fit_surrogate`, the project's fit of BoTorch's default ``SingleTaskGP``) among
  the probed points: the posterior mean averages a point's noisy score with its neighbours', which the winner's
  curse of the best noisy score does not;
* ``"gp-mean-grid"``: the same argmax over the whole grid (a point never probed may be committed);
* ``"gp-near-best"``: among the probed points, the largest posterior probability of lying within ``tolerance`` of
  the best posterior mean (:func:`~dphypo.strategies.gp.rules.near_best_probability`).

A GP rule falls back to ``"best-probe"`` for a search whose fit is not usable (fewer than two scores, all equal, a
numerical failure); :class:`Recommended` says which members did. The rule's name is part of the design and is
stated with the release (:meth:`Recommendation.describe`).

Batch-native: B searches' released probes in, B recommendations out (one batched fit).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dphypo.privacy.validation import check_positive_int
from dphypo.strategies.base import Direction, check_direction
from dphypo.strategies.released import CuratorOnlyError, ReleasedProbes, gp_targets

if TYPE_CHECKING:
    from dphypo.space import SearchSpace

__all__ = ["RECOMMENDATIONS", "Recommendation", "Recommended", "recommend"]

#: The recommendation rules (module docstring).
RECOMMENDATIONS: tuple[str, ...] = ("best-probe", "gp-mean", "gp-mean-grid", "gp-near-best")


@dataclass(frozen=True)
class Recommendation:
    """A recommendation rule (module docstring), configuration fixed before any data.

    Args:
        rule: One of :data:`RECOMMENDATIONS`.
        tolerance: ``"gp-near-best"`` only: how far below the best posterior mean still counts as near, in score
            units (> 0).

    Raises:
        ValueError: An unknown rule or a bad tolerance, in one line.
    """

    rule: str = "best-probe"
    tolerance: float = 0.01

    def __post_init__(self) -> None:
        if self.rule not in RECOMMENDATIONS:
            raise ValueError(f"recommendation must be one of {', '.join(RECOMMENDATIONS)}, got {self.rule!r}")
        if not (isinstance(self.tolerance, (int, float)) and self.tolerance > 0):
            raise ValueError(f"tolerance must be > 0, got {self.tolerance!r}")

    @property
    def uses_gp(self) -> bool:
        """Whether the rule fits a GP (every rule but ``"best-probe"``)."""
        return self.rule != "best-probe"

    def describe(self) -> dict[str, Any]:
        """JSON-ready configuration: stated with the release."""
        out: dict[str, Any] = {"rule": self.rule}
        if self.rule == "gp-near-best":
            out["tolerance"] = self.tolerance
        return out


@dataclass(frozen=True)
class Recommended:
    """The recommendations of B searches.

    Attributes:
        indices: Grid indices, best first, shape ``(B, k)`` (rows with fewer than k distinct candidates repeat
            their best).
        available: Distinct candidates per search, shape ``(B,)`` (0: no successful probe, the prior's mode).
        fallback: Searches whose GP rule fell back to ``"best-probe"`` (no usable fit), shape ``(B,)``.
    """

    indices: np.ndarray
    available: np.ndarray
    fallback: np.ndarray


def _ranked_distinct(points: np.ndarray, keys: np.ndarray, valid: np.ndarray, k: int, default: int
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the k distinct points of largest key among valid entries (ties: earlier entry), padded with the best.

    Args:
        points: Shape ``(B, w)``.
        keys: Shape ``(B, w)``; larger is better.
        valid: Shape ``(B, w)``.
        k: Points per row.
        default: The point of a row with no valid entry.
    """
    order = np.argsort(-np.where(valid, keys, -np.inf), axis=1, kind="stable")
    out = np.full((points.shape[0], k), default, dtype=np.int64)
    available = np.zeros(points.shape[0], dtype=np.int64)
    for r in range(points.shape[0]):
        ranked = points[r, order[r]][valid[r, order[r]]]
        _, first = np.unique(ranked, return_index=True)
        distinct = ranked[np.sort(first)][:k]
        available[r] = distinct.size
        if distinct.size:
            out[r] = np.resize(distinct, k)
    return out, available


def recommend(rule: Recommendation, space: SearchSpace, released: ReleasedProbes, direction: Direction, *,
              seed: int | np.ndarray, top_k: int = 1) -> Recommended:
    """The point(s) each search commits to, from its released probes alone (module docstring).

    Args:
        rule: The rule.
        space: The grid (``unit_coordinates``, ``prior``).
        released: Every probe each search released, shape ``(B, t)``.
        direction: ``"maximize"`` or ``"minimize"`` the score.
        seed: Seed(s) of BoTorch's fallback fit (torch's RNG, only on its retry path), one int or shape ``(B,)``;
            on the private path a value drawn from the search's secret stream (privacy rule 6), never a constant.
        top_k: Distinct points per search, best first (the finalists of a final selection) ≥ 1.

    Returns:
        The recommendations.

    Raises:
        CuratorOnlyError: ``released`` is not :class:`~dphypo.strategies.released.ReleasedProbes`.
    """
    if not isinstance(released, ReleasedProbes):
        raise CuratorOnlyError(f"a recommendation reads ReleasedProbes only (released (params, noisy score)), got "
                               f"{type(released).__name__}")
    check_direction(direction)
    check_positive_int("top_k", top_k)
    prior = np.asarray(space.prior, dtype=np.float64)
    default = int(np.argmax(prior))
    targets, usable = gp_targets(released, direction)
    finite = np.isfinite(released.scores)
    best_probe = _ranked_distinct(released.indices, np.where(finite, targets, -np.inf), finite, top_k, default)
    members = released.members
    fallback = np.zeros(members, dtype=bool)
    if not rule.uses_gp:
        return Recommended(*best_probe, fallback)
    indices, available = best_probe[0].copy(), best_probe[1].copy()
    fitted = np.flatnonzero(usable & (released.count >= 2))
    fallback[:] = True
    if fitted.size:
        from dphypo.strategies.gp.fit import fit_surrogate

        seeds = np.broadcast_to(np.asarray(seed, dtype=np.int64), (members,))[fitted]
        fit = fit_surrogate(np.asarray(space.unit_coordinates, dtype=np.float64), released.indices[fitted],
                            targets[fitted], seed=seeds)
        ok = np.asarray(fit.ok, dtype=bool)
        rows, members_ok = np.flatnonzero(ok), fitted[ok]
        mean, std = fit.mean[rows], fit.std[rows]
        if rule.rule == "gp-mean-grid":
            grid = np.broadcast_to(np.arange(prior.size), mean.shape)
            chosen = _ranked_distinct(grid, mean, np.broadcast_to(prior > 0, mean.shape), top_k, default)
        else:
            if rule.rule == "gp-near-best":
                from dphypo.strategies.gp.rules import near_best_probability

                mean = near_best_probability(mean, std, rule.tolerance)
            probed = released.indices[members_ok]
            keys = np.take_along_axis(mean, probed, axis=1)
            chosen = _ranked_distinct(probed, keys, np.ones_like(probed, dtype=bool), top_k, default)
        indices[members_ok], available[members_ok] = chosen
        fallback[members_ok] = False
    return Recommended(indices, available, fallback)
