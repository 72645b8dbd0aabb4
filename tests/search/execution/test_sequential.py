"""The in-process executor (dphypo/search/execution/sequential.py)."""

from __future__ import annotations

from collections import Counter

from dphypo.search.execution import SequentialExecutor


def test_sequential_executor_counts() -> None:
    calls = Counter()
    assert SequentialExecutor().run(abs, [-2, 3], on_result=lambda i, r: calls.update([i])) == [2, 3]
    assert calls == Counter({0: 1, 1: 1})

