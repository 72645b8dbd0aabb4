"""Where the runs of a search execute: in this process, in a pool of worker processes, or on a Ray cluster.

:mod:`~dphypo.search.execution.base` holds the :class:`Executor` protocol and the factory,
:mod:`~dphypo.search.execution.sequential`, :mod:`~dphypo.search.execution.pool` and
:mod:`~dphypo.search.execution.ray` one executor each (Ray is imported only when a :class:`RayExecutor` is made).
"""

from __future__ import annotations

from dphypo.search.execution.base import EXECUTORS, Executor, WorkerLost, executor_scope, make_executor
from dphypo.search.execution.pool import ProcessExecutor, visible_gpus
from dphypo.search.execution.ray import RayExecutor, check_ray_address
from dphypo.search.execution.sequential import SequentialExecutor

__all__ = [
    "EXECUTORS",
    "Executor",
    "ProcessExecutor",
    "RayExecutor",
    "SequentialExecutor",
    "WorkerLost",
    "check_ray_address",
    "executor_scope",
    "make_executor",
    "visible_gpus",
]
