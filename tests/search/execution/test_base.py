"""The Executor contract (dphypo/search/execution/base.py), checked on every executor: order, errors, lost workers."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from dphypo.search.execution import Executor, ProcessExecutor, SequentialExecutor, WorkerLost, make_executor
from tests.search.execution._helpers import _square_slowly


# ------------------------------------------------------------------ worker functions (module level: picklable)
def _fail(item: tuple[int, str, float]) -> int:
    index, failure, delay = item
    time.sleep(delay)
    if failure == "key":
        raise KeyError(index)
    if failure == "value":
        raise ValueError(index)
    return index


def _die_on_first_attempt(item: tuple[int, str, str]) -> int:
    """Item 1 kills its worker the first time it runs (a marker file remembers that it did)."""
    index, marker_dir, how = item
    marker = Path(marker_dir) / f"attempted-{index}"
    if index == 1 and not marker.exists():
        marker.touch()
        _die(how)
    return 10 * index


def _die_always(item: tuple[int, str]) -> int:
    index, how = item
    if index == 0:
        _die(how)
    return index


def _die(how: str) -> None:
    if how == "exit":
        os._exit(1)
    os.kill(os.getpid(), signal.SIGKILL)


def _seeded_draw(seed: int) -> list[float]:
    import torch

    rng = np.random.default_rng(seed)
    weights = torch.randn(8, 8, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    x = torch.from_numpy(rng.normal(size=8))
    return [*rng.normal(size=2).tolist(), float((weights @ x).sum())]


# ------------------------------------------------------------------------------------------------ fixtures
@pytest.fixture(params=["sequential", "process", "ray"])
def executor(request) -> Executor:
    if request.param == "sequential":
        return SequentialExecutor()
    return request.getfixturevalue(f"{request.param}_executor")


PARALLEL = ["process", "ray"]


@pytest.fixture(params=PARALLEL)
def parallel_executor(request) -> Executor:
    return request.getfixturevalue(f"{request.param}_executor")


# ------------------------------------------------------------------------------------------------- tests
def test_results_come_in_item_order_and_on_result_fires_once_per_item(executor: Executor) -> None:
    seen: list[tuple[int, int]] = []
    results = executor.run(_square_slowly, list(range(9)), on_result=lambda i, r: seen.append((i, r)))
    assert results == [x * x for x in range(9)]
    assert sorted(seen) == [(i, i * i) for i in range(9)]


def test_an_exception_from_fn_propagates_after_the_items_in_flight_finish(executor: Executor) -> None:
    seen: list[int] = []
    with pytest.raises(KeyError) as caught:
        executor.run(_fail, [(0, "", 0.3), (1, "key", 0.0), (2, "", 0.0)], on_result=lambda i, r: seen.append(i))
    assert 0 in seen and 1 not in seen  # item 0 was in flight when item 1 failed; it still finished
    if not isinstance(executor, SequentialExecutor):
        assert "_fail" in str(caught.value.__cause__)  # the worker's traceback comes along
    # Both fail while in flight; the first by item index wins, not the first to arrive.
    with pytest.raises(ValueError):
        executor.run(_fail, [(0, "value", 0.3), (1, "key", 0.0)])


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_a_killed_worker_is_reported_and_its_item_retried(
    parallel_executor: Executor, tmp_path: Path, how: str
) -> None:
    lost: list[tuple[int, int]] = []
    finished: list[int] = []
    items = [(i, str(tmp_path), how) for i in range(4)]
    results = parallel_executor.run(
        _die_on_first_attempt,
        items,
        on_result=lambda i, r: finished.append(i),
        on_lost=lambda i, attempt: lost.append((i, attempt)),
    )
    assert results == [0, 10, 20, 30]
    assert sorted(finished) == [0, 1, 2, 3]
    # Only the dead worker's item is lost, once: no silent retry by the backend, no other item charged.
    assert lost == [(1, 1)]


def test_an_item_that_loses_every_attempt_raises_worker_lost(parallel_executor: Executor) -> None:
    lost: list[tuple[int, int]] = []
    with pytest.raises(WorkerLost, match="item 0") as caught:
        parallel_executor.run(
            _die_always, [(0, "kill"), (1, "kill")], on_lost=lambda i, a: lost.append((i, a)), max_attempts=2
        )
    assert caught.value.index == 0 and caught.value.attempts == 2
    assert [attempt for index, attempt in lost if index == 0] == [1, 2]
    # The executor still works afterwards.
    assert parallel_executor.run(_square_slowly, [3, 2]) == [9, 4]


def test_seeded_results_are_identical_with_every_executor(process_executor, ray_executor) -> None:
    seeds = [5, 1, 8, 2, 9]
    expected = SequentialExecutor().run(_seeded_draw, seeds)
    assert len({tuple(r) for r in expected}) == len(seeds)  # the seed matters
    assert process_executor.run(_seeded_draw, seeds) == expected
    assert ray_executor.run(_seeded_draw, seeds) == expected


def test_make_executor_by_name_and_its_argument_checks() -> None:
    assert isinstance(make_executor(), SequentialExecutor)
    process = make_executor("process", workers=3, num_gpus=0)
    assert isinstance(process, ProcessExecutor) and process.workers == 3 and process.gpus == []
    assert make_executor(process) is process
    with pytest.raises(ValueError, match="executor must be one of"):
        make_executor("dask")
    with pytest.raises(ValueError, match="address"):
        make_executor("process", address="auto")
    with pytest.raises(ValueError, match="workers"):
        make_executor("sequential", workers=2)
    with pytest.raises(ValueError, match="workers"):
        ProcessExecutor(0)
    with pytest.raises(ValueError, match="gpus"):
        ProcessExecutor(2, gpus=[-1])
    with pytest.raises(ValueError, match="max_attempts"):
        SequentialExecutor().run(abs, [1], max_attempts=0)
