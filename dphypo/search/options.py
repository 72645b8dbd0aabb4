"""How a search runs (:class:`SearchOptions`): one parameter object for the tuner, the API and the CLI.

These options change where and how the runs execute, never what is accounted: the privacy of a search is fixed by
its :class:`~dphypo.privacy.PrivacyAccounting` (T's law, C, c, the per-run curve, δ, lost attempts) and its
strategy. Every entry point takes them either as one object (``options=SearchOptions(...)``, what the CLI builds
once from its flags) or as keywords (``Tuner(..., seed=3)``, ``dphypo.tune(..., executor="process")``), which
replace the object's fields; :func:`resolve_options` is the one place that merges and validates them.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from dphypo.privacy.validation import check_non_negative_int, check_positive_int
from dphypo.strategies.base import Direction, check_direction

if TYPE_CHECKING:
    from dphypo.search.execution import Executor

__all__ = ["SearchOptionFields", "SearchOptions", "resolve_options"]


@dataclass(frozen=True)
class SearchOptions:
    """How a search runs: direction, secret seed, where runs execute, the journal, batching and progress.

    Args:
        direction: ``"maximize"`` (accuracy) or ``"minimize"`` (loss) the score.
        seed: Seed of every random choice of the search (T, candidate draws, strategy, per-run seeds for batches,
            DP-SGD noise and score noise). ``None`` (default) draws 128 bits of fresh OS entropy, kept only in the
            curator-only history and journal. A given seed is a **curator secret**: anyone who knows it (and the
            code) can recompute T and subtract the noise, so never use a public value (privacy rule 6).
        executor: Where runs execute: ``"sequential"`` (default, in this process), ``"process"`` (a local pool,
            one thread and one GPU per worker), ``"ray"``, or a :class:`dphypo.search.execution.Executor`. The
            release does not depend on the executor; it depends on ``runs_per_update``.
        journal: Path of a crash-safe journal (:class:`dphypo.search.storage.SQLiteJournal`, curator only): a new
            search is sealed into it before any data is touched, an interrupted one resumes from it without
            redrawing T (``docs/parallel.md``).
        runs_per_update: Candidates drawn from one projected density before the strategy's next update (still
            DP-HyPO's Framework 1: the update rule may keep π unchanged, §3); default one per worker.
        progress: Called with the number of completed runs after each run (counts only, never scores: rule 1).

    Raises:
        ValueError: An invalid direction, seed or ``runs_per_update`` (at construction, before any data is read).
    """

    direction: Direction = "maximize"
    seed: int | None = None
    executor: Executor | str | None = None
    journal: str | os.PathLike[str] | None = None
    runs_per_update: int | None = None
    progress: Callable[[int], None] | None = None

    def __post_init__(self) -> None:
        check_direction(self.direction)
        check_non_negative_int("seed", self.seed, optional=True)
        check_positive_int("runs_per_update", self.runs_per_update, optional=True)
        if self.progress is not None and not callable(self.progress):
            raise TypeError(f"progress must be callable or None, got {self.progress!r}")


class SearchOptionFields(TypedDict, total=False):
    """The fields of :class:`SearchOptions` as keywords (for ``**options`` in the entry points' signatures)."""

    direction: Direction
    seed: int | None
    executor: Executor | str | None
    journal: str | os.PathLike[str] | None
    runs_per_update: int | None
    progress: Callable[[int], None] | None


_FIELDS = tuple(field.name for field in dataclasses.fields(SearchOptions))


def resolve_options(function: str, options: SearchOptions | None, fields: Mapping[str, Any]) -> SearchOptions:
    """``options`` (default: all defaults) with the keywords ``fields`` replacing its fields, validated.

    Args:
        function: The entry point's name, for the error message.
        options: The options object, or ``None``.
        fields: Keywords given to the entry point beside its own parameters.

    Returns:
        The merged options.

    Raises:
        TypeError: ``options`` is not a :class:`SearchOptions`, or a keyword is not one of its fields.
        ValueError: An invalid field value.
    """
    if options is not None and not isinstance(options, SearchOptions):
        raise TypeError(f"options must be a dphypo.SearchOptions, got {type(options).__name__}")
    unknown = sorted(set(fields) - set(_FIELDS))
    if unknown:
        raise TypeError(f"{function}() got an unexpected keyword argument {unknown[0]!r} (its search options are "
                        f"{', '.join(_FIELDS)})")
    return dataclasses.replace(options or SearchOptions(), **fields)
