"""Journaling a search's attempts and replaying what a resumed search already finished.

Every attempt is written to a :class:`~dphypo.search.storage.Journal` when it starts and when it ends (an in-memory
one by default, so simulations and the tuner share one code path); the best finished run's artifact is kept in the
same transaction as its result; a resumed search replays the finished runs and counts the attempts a dead process
left in flight. Lost attempts are paid for up front (``max_lost``, in the accounted ε); one more than that stops
the search (docs/parallel.md).
"""

from __future__ import annotations

from typing import Any

from dphypo.privacy.errors import DphypoError
from dphypo.search.loop import better
from dphypo.search.records import Trial
from dphypo.search.storage import Journal, JournalMismatch, MemoryJournal
from dphypo.strategies.base import Direction

__all__ = ["MAX_ATTEMPTS", "REPLAYED", "LostAttemptsExceeded", "Recorder"]


class LostAttemptsExceeded(DphypoError, RuntimeError):
    """More attempts were lost (dead worker or process) than the search's ``max_lost`` charged up front.

    The search stops without a release: charging the extra attempt would raise ε after the fact, and the
    number of losses must not move the reported ε (docs/parallel.md).
    """


#: Attempts per run before a run whose worker keeps dying stops the search (each lost attempt is charged).
MAX_ATTEMPTS = 3

#: Stands in for the artifact of a run replayed from a journal (only the incumbent's artifact is journaled).
REPLAYED: Any = type("Replayed", (), {"__repr__": lambda self: "REPLAYED"})()


class Recorder:
    """Journals every attempt of a search and replays what a resumed search already finished.

    Every attempt is written to a :class:`~dphypo.search.storage.Journal` when it starts and when it ends (an
    in-memory one by default, so simulations and the tuner share this one code path), the best finished run's
    artifact is kept in the same transaction as its result, and :meth:`resume` counts the attempts a dead process
    left in flight. Lost attempts are paid for up front (``max_lost``, in the accounted ε); one more than that
    stops the search.

    Args:
        direction: ``"maximize"`` or ``"minimize"``: which finished run is the incumbent.
        journal: An open journal (default: a new :class:`~dphypo.search.storage.MemoryJournal`).
        max_lost: Lost attempts the accounted ε already covers.
    """

    def __init__(self, direction: Direction, journal: Journal | None = None, max_lost: int = 0) -> None:
        self.direction = direction
        self.journal: Journal = MemoryJournal() if journal is None else journal
        self.max_lost = max_lost
        self.lost_attempts = 0
        self._finished: dict[int, Trial] = {}
        self._incumbent: tuple[float, int, int] | None = None  # (score, grid index, run number)

    def resume(self) -> None:
        """Count the attempts left in flight by a dead process and load the finished runs for replay.

        Raises:
            LostAttemptsExceeded: The journal holds more lost attempts than ``max_lost`` covers.
        """
        self.journal.charge_interrupted()
        self.lost_attempts = self.journal.charged_attempts()
        self.check_lost_budget()
        self._finished = self.journal.finished_runs()
        for trial in self._finished.values():
            self._update_incumbent(trial.score, trial.grid_index, trial.number)

    def replayed(self, number: int, grid_index: int) -> Trial | None:
        """The journaled result of run ``number``, or ``None`` if it must run.

        Raises:
            JournalMismatch: The replayed search drew another grid point than the journaled one.
        """
        trial = self._finished.get(number)
        if trial is None:
            return None
        if trial.grid_index != grid_index:
            raise JournalMismatch(
                f"replay diverged at run {number}: the journal ran grid point {trial.grid_index}, this search drew "
                f"{grid_index}; the strategy or library version differs from the one that wrote the journal"
            )
        return trial

    def started(self, number: int, grid_index: int, params: dict[str, Any]) -> int:
        """Record the start of an attempt; returns its handle."""
        return self.journal.start_attempt(number, grid_index, params)

    def finished(self, attempt: int, trial: Trial, artifact: Any) -> None:
        """Record a finished attempt (and keep its artifact if it is the new incumbent)."""
        improved = self._update_incumbent(trial.score, trial.grid_index, trial.number)
        self.journal.finish_attempt(
            attempt, "data_failure" if trial.failed else "done", trial.score, trial.seconds,
            incumbent=(trial.number, artifact) if improved else None, note=trial.error or "",
        )

    def lost(self, attempt: int, *, note: str, status: str = "lost") -> None:
        """An attempt that touched the data without a result (covered by ``max_lost``; re-run on resume)."""
        self.lost_attempts += 1
        self.journal.finish_attempt(attempt, status, note=note)

    def check_lost_budget(self) -> None:
        """Raise :class:`LostAttemptsExceeded` once more attempts were lost than ``max_lost`` covers."""
        if self.lost_attempts > self.max_lost:
            raise LostAttemptsExceeded(
                f"{self.lost_attempts} attempt(s) were lost (dead worker or process) but the search was accounted "
                f"with max_lost={self.max_lost}: it stops without a release, because charging the extra attempt "
                "would raise the epsilon after the fact; start a new search with a larger max_lost (--max-lost)"
            )

    def artifact(self, number: int, artifact: Any) -> Any:
        """The artifact of run ``number``: as returned, or the journaled incumbent's for a replayed run."""
        if artifact is not REPLAYED:
            return artifact
        stored = self.journal.incumbent()
        if stored is None or stored[0] != number:
            raise RuntimeError(f"the journal holds no artifact for the released run {number}")
        return stored[1]

    def _update_incumbent(self, score: float, grid_index: int, number: int) -> bool:
        current = self._incumbent
        if current is None or better((score, grid_index), current[:2], self.direction) or (
            not better(current[:2], (score, grid_index), self.direction) and number < current[2]
        ):
            self._incumbent = (score, grid_index, number)
            return True
        return False
