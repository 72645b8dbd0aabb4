"""Book-keeping shared by the executors.

The lost-worker error, the context-manager plumbing, and the ledger of one
:meth:`~dphypo.search.execution.Executor.run` (pending items, attempts, results, failures).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Self

from dphypo.privacy.errors import DphypoError
from dphypo.privacy.validation import check_positive_int

__all__ = ["WorkerLost"]


class WorkerLost(DphypoError, RuntimeError):
    """An item's worker died on every one of its attempts (an infrastructure failure, not the data's).

    Attributes:
        index: Position of the item in the ``items`` passed to :meth:`Executor.run`.
        attempts: How many attempts were lost.
    """

    def __init__(self, index: int, attempts: int) -> None:
        super().__init__(f"item {index} lost its worker on all {attempts} attempts")
        self.index = index
        self.attempts = attempts

    def __reduce__(self) -> tuple[type[WorkerLost], tuple[int, int]]:
        return type(self), (self.index, self.attempts)


class _ExecutorBase:
    """Context-manager plumbing shared by the executors."""

    workers: int

    def close(self) -> None:  # pragma: no cover - overridden where there is something to release
        """Release the workers (idempotent)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(workers={self.workers})"


def _check_workers(workers: int | None) -> None:
    check_positive_int("workers", workers, optional=True)


def _check_attempts(max_attempts: int) -> None:
    check_positive_int("max_attempts", max_attempts)


class _Ledger:
    """Book-keeping of one :meth:`Executor.run`: pending items, attempts, results and failures."""

    def __init__(
        self,
        n: int,
        on_result: Callable[[int, Any], None] | None,
        on_lost: Callable[[int, int], None] | None,
        max_attempts: int,
        on_start: Callable[[int, int], None] | None = None,
    ) -> None:
        _check_attempts(max_attempts)
        self._on_start = on_start
        self.results: list[Any] = [None] * n
        self.pending: deque[int] = deque(range(n))
        self.attempts = [0] * n
        self.failures: dict[int, BaseException] = {}
        self._on_result, self._on_lost, self._max_attempts = on_result, on_lost, max_attempts

    def next_item(self) -> int | None:
        """The next item to submit (starting its next attempt), or ``None``.

        ``None`` means nothing is left, or a failure occurred (the items in flight finish, nothing new starts).
        """
        if self.failures or not self.pending:
            return None
        index = self.pending.popleft()
        self.attempts[index] += 1
        if self._on_start is not None:
            self._on_start(index, self.attempts[index])
        return index

    def finished(self, index: int, result: Any) -> None:
        self.results[index] = result
        if self._on_result is not None:
            self._on_result(index, result)

    def raised(self, index: int, error: BaseException) -> None:
        self.failures[index] = error

    def lost(self, indices: Sequence[int], cause: BaseException) -> None:
        """Report lost attempts (in index order) and queue them again, first, unless attempts are exhausted."""
        retry = []
        for index in sorted(indices):
            if self._on_lost is not None:
                self._on_lost(index, self.attempts[index])
            if self.attempts[index] >= self._max_attempts:
                error = WorkerLost(index, self.attempts[index])
                error.__cause__ = cause
                self.failures[index] = error
            else:
                retry.append(index)
        self.pending.extendleft(reversed(retry))

    def outcome(self) -> list[Any]:
        """The results, or the first failure by item index."""
        if self.failures:
            raise self.failures[min(self.failures)]
        return self.results
