"""Runs evaluated one by one in the calling process (the default executor)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from dphypo.search.execution._ledger import _check_attempts, _ExecutorBase

__all__ = ["SequentialExecutor"]

A = TypeVar("A")
R = TypeVar("R")


class SequentialExecutor(_ExecutorBase):
    """Evaluates the items one by one in this process, in item order (``workers = 1``; the default).

    Nothing is pickled; a fatal crash takes the calling process with it, so ``on_lost`` is never called.
    """

    def __init__(self) -> None:
        self.workers = 1

    def run(
        self,
        fn: Callable[[A], R],
        items: Sequence[A],
        *,
        on_result: Callable[[int, R], None] | None = None,
        on_lost: Callable[[int, int], None] | None = None,
        max_attempts: int = 3,
        on_start: Callable[[int, int], None] | None = None,
    ) -> list[R]:
        """See :meth:`Executor.run`; an exception raised by ``fn`` propagates at once (nothing else is in flight)."""
        _check_attempts(max_attempts)
        results = []
        for index, item in enumerate(items):
            if on_start is not None:
                on_start(index, 1)
            results.append(fn(item))
            if on_result is not None:
                on_result(index, results[-1])
        return results
