from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from dphypo.search.execution import (
    Executor,
    ProcessExecutor,
    SequentialExecutor,
    WorkerLost,
    make_executor,
    visible_gpus,
)

# ------------------------------------------------------------------ worker functions (module level: picklable)


def _square_slowly(x: int) -> int:
    time.sleep(0.02 * (4 - x % 4))  # later items tend to finish first
    return x * x


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


def _worker_info(_: int) -> tuple[int, int, str | None, str | None]:
    import torch

    time.sleep(0.05)
    env = os.environ
    return os.getpid(), torch.get_num_threads(), env.get("OMP_NUM_THREADS"), env.get("CUDA_VISIBLE_DEVICES")


# ------------------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def process_executor():
    with ProcessExecutor(2, gpus=[]) as executor:
        yield executor


@pytest.fixture(scope="module")
def ray_executor():
    ray = pytest.importorskip("ray")
    from dphypo.search.execution import RayExecutor

    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=256 * 1024**2)
    try:
        with RayExecutor(2) as executor:
            yield executor
        assert ray.is_initialized(), "RayExecutor shut down a Ray instance it did not start"
    finally:
        ray.shutdown()


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


def test_process_workers_get_one_thread_and_one_gpu_each(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.delenv("DPHYPO_TORCH_THREADS", raising=False)
    with ProcessExecutor(2, gpus=[3, 5]) as executor:
        info = executor.run(_worker_info, list(range(6)))
    assert os.environ["OMP_NUM_THREADS"] == "3"  # the parent's environment is restored
    assert {(threads, omp) for _, threads, omp, _ in info} == {(1, "1")}
    gpu_of = dict((pid, gpu) for pid, _, _, gpu in info)
    assert set(gpu_of.values()) <= {"3", "5"}
    assert len(set(gpu_of.values())) == len(gpu_of)  # distinct workers hold distinct GPUs
    assert all(gpu_of[pid] == gpu for pid, _, _, gpu in info)  # a worker keeps its GPU


def test_ray_workers_run_one_torch_thread(ray_executor) -> None:
    info = ray_executor.run(_worker_info, [0, 1, 2])
    assert {threads for _, threads, _, _ in info} == {1}


def test_visible_gpus_follows_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, 7")
    ids = visible_gpus()
    if ids:  # torch imported and reporting fewer devices truncates the list (no GPU here: torch says 0)
        assert ids == ["2", "7"]
        executor = ProcessExecutor()
        assert executor.gpus == ["2", "7"] and executor.workers == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert visible_gpus() == []
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert ProcessExecutor(3, gpus=[1]).gpus == ["1"]


def test_visible_gpus_reads_the_list_without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,-1,2")
    assert visible_gpus() == ["0", "1"]  # CUDA ignores the entries after an invalid one
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-8a1b,GPU-77fe")
    assert visible_gpus() == ["GPU-8a1b", "GPU-77fe"]


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


def test_sequential_executor_counts() -> None:
    calls = Counter()
    assert SequentialExecutor().run(abs, [-2, 3], on_result=lambda i, r: calls.update([i])) == [2, 3]
    assert calls == Counter({0: 1, 1: 1})


def test_process_executor_survives_an_interrupted_run_and_rejects_lambdas(process_executor) -> None:
    def stop(index: int, result: int) -> None:
        raise RuntimeError("caller gives up")

    with pytest.raises(RuntimeError, match="caller gives up"):
        process_executor.run(_square_slowly, [1, 2, 3], on_result=stop)
    assert process_executor.run(_square_slowly, [1, 2, 3]) == [1, 4, 9]
    with pytest.raises(TypeError, match="picklable"):
        process_executor.run(lambda x: x, [1])


# ------------------------------------------------------------------------ issue #12: unreachable Ray clusters
def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_ray_endpoint_parsing() -> None:
    from dphypo.search.execution.ray import _ray_endpoint

    assert _ray_endpoint("auto") is None and _ray_endpoint("local") is None
    assert _ray_endpoint("10.0.0.1:6379") == ("10.0.0.1", 6379)
    assert _ray_endpoint("ray://head:10001") == ("head", 10001)
    assert _ray_endpoint("ray://head") == ("head", 10001)
    assert _ray_endpoint("[::1]:6379") == ("::1", 6379)
    with pytest.raises(ValueError, match="host:port"):
        _ray_endpoint("head:port")


def test_nothing_listening_fails_at_once_with_one_line(monkeypatch) -> None:
    from dphypo.search.execution import check_ray_address

    port = _free_port()
    start = time.monotonic()
    with pytest.raises(ConnectionError, match=f"127.0.0.1:{port}") as info:
        check_ray_address(f"127.0.0.1:{port}", timeout=5)
    assert time.monotonic() - start < 5 and "\n" not in str(info.value)
    monkeypatch.setenv("DPHYPO_RAY_CONNECT_TIMEOUT", "0")
    with pytest.raises(ValueError, match="connect_timeout"):
        check_ray_address(f"127.0.0.1:{port}")


def test_an_address_that_never_answers_times_out(monkeypatch) -> None:
    import socket

    from dphypo.search.execution import check_ray_address

    def silent(address, timeout):  # a blackholed host: the connection attempt hangs until the timeout
        time.sleep(timeout)
        raise TimeoutError("timed out")

    monkeypatch.setattr(socket, "create_connection", silent)
    monkeypatch.setenv("DPHYPO_RAY_CONNECT_TIMEOUT", "0.5")
    start = time.monotonic()
    with pytest.raises(ConnectionError, match=r"within 0.5 s \(timed out\)"):
        check_ray_address("10.255.255.1:6379")
    assert time.monotonic() - start < 3


def test_a_listener_that_is_not_ray_is_given_up_on_in_time(capfd) -> None:
    # Something accepts TCP at the address but never speaks Ray's protocol: Ray alone retried for 80 s, printing
    # a warning a second. Now: one ConnectionError after about the timeout, and nothing else on stderr.
    import socket

    pytest.importorskip("ray")
    from dphypo.search.execution import check_ray_address

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        address = f"127.0.0.1:{server.getsockname()[1]}"
        start = time.monotonic()
        with pytest.raises(ConnectionError, match=r"cannot reach a Ray cluster .*no answer from Ray") as info:
            check_ray_address(address, timeout=4)
        assert time.monotonic() - start < 15
    assert "\n" not in str(info.value)
    assert capfd.readouterr().err.strip() == ""


def test_ray_executor_checks_the_address_before_ray_init(monkeypatch) -> None:
    ray = pytest.importorskip("ray")
    import dphypo.search.execution.ray as ray_module

    calls = []

    def refuse(address, timeout):
        calls.append((address, timeout))
        raise ConnectionError("cannot reach a Ray cluster")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda *a, **k: pytest.fail("ray.init must not run"))
    monkeypatch.setattr(ray_module, "check_ray_address", refuse)
    with pytest.raises(ConnectionError):
        make_executor("ray", address="head:6379", connect_timeout=7)
    assert calls == [("head:6379", 7.0)]
