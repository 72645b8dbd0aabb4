"""The worker-process pool (dphypo/search/execution/pool.py): threads, GPUs, interrupted runs."""

from __future__ import annotations

import os

import pytest

from dphypo.search.execution import ProcessExecutor, visible_gpus
from tests.search.execution._helpers import _square_slowly, _worker_info


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


def test_process_executor_survives_an_interrupted_run_and_rejects_lambdas(process_executor) -> None:
    def stop(index: int, result: int) -> None:
        raise RuntimeError("caller gives up")

    with pytest.raises(RuntimeError, match="caller gives up"):
        process_executor.run(_square_slowly, [1, 2, 3], on_result=stop)
    assert process_executor.run(_square_slowly, [1, 2, 3]) == [1, 4, 9]
    with pytest.raises(TypeError, match="picklable"):
        process_executor.run(lambda x: x, [1])

