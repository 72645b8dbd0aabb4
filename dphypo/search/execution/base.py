"""The executor protocol: where the runs of a search (or the repeats of a simulation) are evaluated.

An executor evaluates ``fn(item)`` for a list of items, up to :attr:`~Executor.workers` at a time, and returns
the results in *item* order, so a search releases the same run whichever executor evaluated it. Three are
provided: :class:`SequentialExecutor` (in this process, the default), :class:`ProcessExecutor` (a local spawn
process pool, one torch thread and optionally one GPU per worker) and :class:`RayExecutor` (a local or remote
Ray cluster; ``pip install 'dphypo[ray]'``).

Failures come in two kinds, and the privacy accounting treats them differently:

* ``fn`` raised: the exception belongs to the caller (a run that failed *because of the data* is handled inside
  ``fn`` and never gets here; see :class:`dphypo.search.tuner.DataFailure`). It is not retried; the items already in
  flight finish, then the exception is re-raised with its original type.
* the worker died (killed by a signal, ``os._exit``, a segfault, the OOM killer, a lost node): an
  infrastructure failure. The attempt is reported through ``on_lost(index, attempt)``, because it may have
  touched the data and the caller must charge it to the privacy budget, and the item is resubmitted, up to
  ``max_attempts`` attempts, after which :class:`WorkerLost` is raised. This is also why the executors never
  let a backend retry silently (Ray tasks run with ``max_retries=0``): an unreported retry is an unaccounted
  run.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol, TypeVar, runtime_checkable

from dphypo.search.execution._ledger import WorkerLost, _check_workers
from dphypo.search.execution.pool import ProcessExecutor
from dphypo.search.execution.ray import RayExecutor
from dphypo.search.execution.sequential import SequentialExecutor

__all__ = [
    "EXECUTORS",
    "Executor",
    "WorkerLost",
    "executor_scope",
    "make_executor",
]

A = TypeVar("A")
R = TypeVar("R")

#: Names :func:`make_executor` accepts.
EXECUTORS: tuple[str, ...] = ("sequential", "process", "ray")


@runtime_checkable
class Executor(Protocol):
    """Evaluates a function on many items, up to :attr:`workers` at a time (a context manager)."""

    workers: int

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
        """``[fn(item) for item in items]``, evaluated by the executor's workers.

        Args:
            fn: The function (picklable for process and Ray executors: a module-level function or an instance
                of a module-level class).
            items: Its arguments (picklable likewise).
            on_result: Called in the calling process as ``on_result(index, result)`` when an item finishes
                (completion order), e.g. to journal a finished run at once.
            on_lost: Called in the calling process as ``on_lost(index, attempt)`` (attempt counts from 1) for
                every attempt lost with its worker, before the item is resubmitted.
            max_attempts: Attempts per item, ≥ 1; an item that lost that many raises :class:`WorkerLost`.
            on_start: Called in the calling process as ``on_start(index, attempt)`` just before an attempt is
                handed to a worker, so the caller knows exactly which attempts may have touched the data
                (items never started after a failure are never reported).

        Returns:
            The results, in item order.

        Raises:
            WorkerLost: An item lost ``max_attempts`` workers.
            Exception: The first (by item index) exception raised by ``fn``, with its type, after the items in
                flight finished.
        """
        ...

    def close(self) -> None:
        """Release the workers (idempotent)."""
        ...

    def __enter__(self) -> Executor: ...

    def __exit__(self, *exc_info: object) -> None: ...


def make_executor(
    name: str | Executor | None = None,
    *,
    workers: int | None = None,
    address: str | None = None,
    num_gpus: float | None = None,
    connect_timeout: float | None = None,
) -> Executor:
    """An executor by name.

    Args:
        name: ``"sequential"`` (default), ``"process"`` or ``"ray"``; an :class:`Executor` is returned as is
            (the other arguments are then ignored).
        workers: Items at a time (``"sequential"``: only 1; others: default all CPUs, or one per GPU).
        address: Ray cluster address (``"ray"`` only; ``None`` starts a local instance).
        num_gpus: ``"ray"``: GPUs per task (default 1 if the cluster has GPUs); ``"process"``: only 0 (hand out
            no GPU; by default each worker gets one of :func:`visible_gpus`).
        connect_timeout: ``"ray"`` with an ``address``: seconds to wait for the cluster to answer (default
            ``$DPHYPO_RAY_CONNECT_TIMEOUT`` or 30), then :class:`ConnectionError`.

    Returns:
        The executor (the caller closes it, or uses it as a context manager).
    """
    if name is not None and not isinstance(name, str):
        if isinstance(name, Executor):
            return name
        raise TypeError(f"name must be one of {EXECUTORS}, an Executor or None, got {name!r}")
    name = "sequential" if name is None else name
    if name not in EXECUTORS:
        raise ValueError(f"executor must be one of {EXECUTORS}, got {name!r}")
    if address is not None and name != "ray":
        raise ValueError(f"address is for the ray executor only, got address={address!r} with {name!r}")
    if name == "ray":
        return RayExecutor(workers, address=address, num_gpus=num_gpus, connect_timeout=connect_timeout)
    if name == "process":
        if num_gpus not in (None, 0):
            raise ValueError(f"num_gpus must be None or 0 for the process executor, got {num_gpus!r}")
        return ProcessExecutor(workers, gpus=[] if num_gpus == 0 else None)
    if workers not in (None, 1):
        raise ValueError(f"workers must be 1 (or None) for the sequential executor, got {workers!r}")
    if num_gpus not in (None, 0):
        raise ValueError(f"num_gpus must be None or 0 for the sequential executor, got {num_gpus!r}")
    return SequentialExecutor()


@contextlib.contextmanager
def executor_scope(executor: Executor | str | None, *, workers: int | None = None) -> Iterator[Executor]:
    """The executor to use for one job, closed afterwards only if it was created here.

    Args:
        executor: An :class:`Executor` (used as is, left open), a name for :func:`make_executor`, or ``None``:
            a local :class:`ProcessExecutor` with ``workers`` processes (default all cores), or a
            :class:`SequentialExecutor` when ``workers == 1``.
        workers: Workers of an executor created here.

    Yields:
        The executor.
    """
    if executor is not None and not isinstance(executor, str):
        yield make_executor(executor)
        return
    if executor is None:
        _check_workers(workers)
        workers = workers or os.cpu_count() or 1
        created: Executor = SequentialExecutor() if workers == 1 else ProcessExecutor(workers)
    else:
        created = make_executor(executor, workers=workers)
    with created:
        yield created
