"""One stage of a multi-stage search, recorded in its search's one journal (a view, not a second format).

A two-stage search (:func:`dphypo.api.tune_two_stage`) journals both stages in one
:class:`~dphypo.search.storage.Journal` sealed once: its runs are numbered on from one stage to the next (stage 1's
probes ``0 .. T−1``, stage 2's runs ``T .. T+T′−1``), so every attempt is one row of the same ``attempts`` table
and ``dphypo release FILE`` reads the file as any other journal. :class:`StageJournal` is the journal as one stage's
:class:`~dphypo.search.recording.Recorder` sees it: run numbers counted from the stage's first run, the stage's own
finished runs, lost attempts and incumbent artifact only. **NOT PRIVATE — curator only**, like the journal.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from dphypo.privacy.validation import check_non_negative_int
from dphypo.search.records import Trial
from dphypo.search.storage.base import CHARGED_STATES, Journal, JournalError, SealedSearch

__all__ = ["StageJournal"]


class StageJournal:
    """Runs ``first .. first+count−1`` of ``journal``, numbered from 0 (a :class:`~dphypo.search.storage.Journal`).

    Args:
        journal: The search's journal, sealed (the search seals once, before any stage runs).
        first: The stage's first run number in the journal, ≥ 0.
        count: The stage's run count (its drawn T), ≥ 0.
        keep_artifacts: Whether the stage's incumbent artifact is journaled (only a stage whose run is released
            with its model needs it; the journal holds one incumbent, the search's released run).
    """

    def __init__(self, journal: Journal, first: int, count: int, *, keep_artifacts: bool = True) -> None:
        check_non_negative_int("first", first)
        check_non_negative_int("count", count)
        self.journal, self.first, self.count, self.keep_artifacts = journal, first, count, keep_artifacts

    def __repr__(self) -> str:
        return f"StageJournal(runs {self.first}..{self.first + self.count - 1} of {self.journal!r})"

    def _own(self, number: int) -> bool:
        return self.first <= number < self.first + self.count

    def _global(self, number: int) -> int:
        if not 0 <= number < self.count:
            raise ValueError(f"run number must be in [0, {self.count}) for this stage, got {number}")
        return self.first + number

    def sealed(self) -> SealedSearch | None:
        """The search's sealed description (both stages' counts are in it)."""
        return self.journal.sealed()

    def seal(self, config: dict[str, Any], run_count: int) -> SealedSearch:
        """Refused: a multi-stage search is sealed once, as a whole, before its first stage."""
        raise JournalError("a stage of a search cannot be sealed on its own: seal the search's journal once")

    def verify(self, config: dict[str, Any], *, ignore: tuple[str, ...] = ()) -> SealedSearch:
        """The search's sealed description, checked against ``config`` (see the journal's ``verify``)."""
        return self.journal.verify(config, ignore=ignore)

    def start_attempt(self, number: int, grid_index: int, params: dict[str, Any]) -> int:
        """Record that the stage's run ``number`` starts; returns the journal's attempt id."""
        return self.journal.start_attempt(self._global(number), grid_index, params)

    def finish_attempt(self, attempt: int, status: str, score: float | None = None, seconds: float | None = None,
                       *, note: str | None = None, incumbent: tuple[int, Any] | None = None) -> None:
        """Close an attempt; the incumbent artifact is kept only when the stage keeps artifacts."""
        kept = None if incumbent is None or not self.keep_artifacts else (self._global(incumbent[0]), incumbent[1])
        self.journal.finish_attempt(attempt, status, score, seconds, note=note, incumbent=kept)

    def charge_interrupted(self) -> int:
        """Mark every attempt still ``running`` in the journal as ``lost`` (a dead process left it, whatever stage)."""
        return self.journal.charge_interrupted()

    def charged_attempts(self) -> int:
        """The stage's attempts that touched the data without a usable output (``lost`` or ``error``)."""
        return sum(a["status"] in CHARGED_STATES for a in self.attempts())

    def finished_runs(self) -> dict[int, Trial]:
        """The stage's runs with a final outcome, by their number within the stage."""
        return {number - self.first: dataclasses.replace(trial, number=number - self.first)
                for number, trial in self.journal.finished_runs().items() if self._own(number)}

    def attempts(self) -> list[dict[str, Any]]:
        """The stage's attempts in order, numbered within the stage (curator-only view)."""
        return [{**a, "number": a["number"] - self.first} for a in self.journal.attempts() if self._own(a["number"])]

    def incumbent(self) -> tuple[int, Any] | None:
        """``(run number within the stage, artifact)`` of the journal's incumbent if it is this stage's."""
        stored = self.journal.incumbent() if self.keep_artifacts else None
        if stored is None or not self._own(stored[0]):
            return None
        return stored[0] - self.first, stored[1]

    def write_release(self, payload: dict[str, Any]) -> None:
        """Store the search's release (the search's, not the stage's: written once the last stage finished)."""
        self.journal.write_release(payload)

    def release(self) -> dict[str, Any] | None:
        """The search's release, or ``None``."""
        return self.journal.release()

    def close(self) -> None:
        """Nothing: the journal belongs to the search, which closes it."""
