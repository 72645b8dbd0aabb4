"""The executors shared by the tests of this folder: one process pool and one Ray executor per module."""

from __future__ import annotations

import pytest

from dphypo.search.execution import ProcessExecutor


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

