"""A local pool of spawned worker processes (:class:`ProcessExecutor`), one item at a time per worker.

Why not ``concurrent.futures.ProcessPoolExecutor``: a worker death breaks that whole pool, so every item in
flight is lost (and each loss is charged to the privacy budget), and with the spawn start method it starts
workers lazily from ``submit``, which races with its own clean-up of a broken pool (seen here with Python
3.11.7: ``OSError: handle is closed`` from ``submit``, and a hang joining a worker spawned after the pool had
terminated the others). Here every worker has its own pipe, so the parent knows which item a dead worker held
and only that item is lost.

Workers are started with ``spawn`` (never ``fork``: the parent may hold torch/OpenMP state), with the
thread-count variables set to ``$DPHYPO_TORCH_THREADS`` (default 1) and, when GPUs are handed out, their own
``CUDA_VISIBLE_DEVICES``: worker slot k gets ``gpus[k % len(gpus)]``, and a replacement worker inherits the slot.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from multiprocessing import connection, util
from multiprocessing.context import SpawnContext
from typing import Any, TypeVar

from dphypo._threads import torch_threads
from dphypo.search.execution._ledger import _check_workers, _ExecutorBase, _Ledger

__all__ = ["ProcessExecutor", "WorkerPool", "call_in_worker", "visible_gpus"]

A = TypeVar("A")
R = TypeVar("R")

#: Thread-count variables set for every worker process (OpenMP, MKL, OpenBLAS read them when loaded).
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
_STOP = b""


def thread_count() -> str:
    """Intra-op threads per worker: ``$DPHYPO_TORCH_THREADS`` or 1 (see :mod:`dphypo._threads`)."""
    return os.environ.get("DPHYPO_TORCH_THREADS", "1")


@contextlib.contextmanager
def worker_environment(threads: str) -> Iterator[None]:
    """Set the thread-count variables while a worker is spawned (it inherits the environment), then restore.

    They must be in place before the worker imports numpy or torch, and a spawned worker may import those
    before any code of ours runs in it (when it re-imports the parent's ``__main__`` module).
    """
    saved = {name: os.environ.get(name) for name in THREAD_VARIABLES}
    os.environ.update(dict.fromkeys(THREAD_VARIABLES, threads))
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def visible_gpus() -> list[str]:
    """Ids of the GPUs this process may use, without initialising CUDA (and without importing torch).

    ``$CUDA_VISIBLE_DEVICES`` when set (its entries up to the first invalid one, as CUDA reads it); otherwise
    ``torch.cuda.device_count()`` when torch is already imported (it does not create a CUDA context), otherwise
    the NVIDIA driver's ``/proc/driver/nvidia/gpus`` entries. Entries are returned as strings because they are
    written into a worker's ``CUDA_VISIBLE_DEVICES``, where a UUID is as valid as an index.

    Returns:
        The ids; empty without a GPU.
    """
    torch = sys.modules.get("torch")
    count = None if torch is None else int(torch.cuda.device_count())
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        entries = [entry.strip() for entry in listed.split(",")]
        ids = list(itertools.takewhile(lambda entry: entry != "" and not entry.startswith("-"), entries))
        return ids if count is None else ids[:count]
    if count is None:
        with contextlib.suppress(OSError):
            count = len(os.listdir("/proc/driver/nvidia/gpus"))
    return [str(k) for k in range(count or 0)]


def call_in_worker(fn: Callable[[A], R], item: A) -> R:
    """``fn(item)`` in a worker, with torch limited to its intra-op thread count if torch is loaded."""
    if "torch" not in sys.modules:  # the worker's thread variables govern torch if fn imports it
        return fn(item)
    with torch_threads():
        return fn(item)


class _RemoteTraceback(Exception):
    """The formatted traceback of an exception raised in a worker (set as that exception's ``__cause__``)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _portable(error: BaseException) -> tuple[BaseException, str]:
    """The exception (or, if it does not survive pickling, a RuntimeError describing it) and its traceback."""
    text = "".join(traceback.format_exception(error))
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        return RuntimeError(f"{type(error).__qualname__}: {error} (not picklable)"), text
    return error, text


def _exit_with_parent(parent: int, interval: float = 1.0) -> None:
    """Daemon thread body: end this worker as soon as its parent is gone (killed with ``kill -9``, say).

    An idle worker notices from its pipe, but a busy one would otherwise finish its item for nobody, holding a
    core (and a GPU) long after the search died.
    """
    while os.getppid() == parent:
        time.sleep(interval)
    os._exit(1)


def _worker_main(conn: connection.Connection, threads: str, gpu: str | None) -> None:
    """Worker loop: receive a pickled ``(fn, item)``, send back ``(True, result)`` or ``(False, (error, tb))``."""
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    # Ctrl-C reaches the whole process group; the parent handles it (and kills busy workers), idle ones wait.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ.update(dict.fromkeys(THREAD_VARIABLES, threads))
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu  # before anything in this process initialises CUDA
    while True:
        try:
            message = conn.recv_bytes()
        except (EOFError, OSError):  # the parent is gone
            return
        if message == _STOP:
            return
        try:
            fn, item = pickle.loads(message)
            payload = pickle.dumps((True, call_in_worker(fn, item)), protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException as error:  # everything fn raises belongs to the caller
            payload = pickle.dumps((False, _portable(error)), protocol=pickle.HIGHEST_PROTOCOL)
        try:
            conn.send_bytes(payload)
        except OSError:  # the parent is gone
            return


class _Worker:
    """One spawned process and the parent's end of its pipe."""

    def __init__(self, context: SpawnContext, slot: int, gpu: str | None) -> None:
        self.conn, child = context.Pipe(duplex=True)
        threads = thread_count()
        self.process = context.Process(
            target=_worker_main, args=(child, threads, gpu), name=f"dphypo-worker-{slot}", daemon=False
        )
        with worker_environment(threads):
            self.process.start()
        child.close()
        self.slot = slot
        self.index: int | None = None

    def send(self, payload: bytes) -> bool:
        try:
            self.conn.send_bytes(payload)
        except OSError:  # the worker died while idle
            return False
        return True

    def stop(self, timeout: float = 5.0) -> None:
        with contextlib.suppress(OSError):
            self.conn.send_bytes(_STOP)
        self.process.join(timeout)
        if self.process.is_alive():
            self.kill()
        self.conn.close()

    def kill(self) -> None:
        self.process.kill()
        self.process.join()
        self.conn.close()


def _stop_all(idle: list[_Worker], busy: dict[int, _Worker]) -> None:
    for worker in busy.values():
        worker.kill()
    for worker in idle:
        worker.stop()
    busy.clear()
    idle.clear()


class WorkerPool:
    """Up to ``size`` spawned workers, each running one item at a time; dead workers are replaced on demand.

    Args:
        size: Maximum number of workers.
        gpus: Ids handed out through ``CUDA_VISIBLE_DEVICES`` (slot k gets ``gpus[k % len(gpus)]``); empty: none.
        context: The spawn multiprocessing context.
    """

    def __init__(self, size: int, gpus: Sequence[str], context: SpawnContext) -> None:
        self.size, self.gpus, self._context = size, list(gpus), context
        self._idle: list[_Worker] = []
        self._busy: dict[int, _Worker] = {}
        # Stop the workers when the pool is collected, and at exit before multiprocessing joins its children.
        self._finalizer = util.Finalize(self, _stop_all, args=(self._idle, self._busy), exitpriority=10)

    @property
    def in_flight(self) -> int:
        """Items being evaluated."""
        return len(self._busy)

    def submit(self, index: int, payload: bytes) -> None:
        """Hand the pickled ``(fn, item)`` of item ``index`` to an idle worker (starting one if needed)."""
        for _ in range(2):  # an idle worker found dead (it never got the item) is replaced once
            worker = self._idle.pop() if self._idle else self._spawn()
            if worker.send(payload):
                worker.index = index
                self._busy[index] = worker
                return
            worker.kill()
        raise RuntimeError("could not start a worker process")

    def _spawn(self) -> _Worker:
        used = {worker.slot for worker in (*self._idle, *self._busy.values())}
        slot = min(set(range(self.size)) - used)
        return _Worker(self._context, slot, self.gpus[slot % len(self.gpus)] if self.gpus else None)

    def wait(self) -> list[tuple[int, bool | None, Any]]:
        """Block until at least one item in flight finished or lost its worker.

        Returns:
            ``(index, ok, value)`` per such item: ``ok`` True with the result, False with the exception ``fn``
            raised (its ``__cause__`` the worker's traceback), or ``None`` when the worker died (``value`` its
            exit code).
        """
        workers = list(self._busy.values())
        connection.wait([w.conn for w in workers] + [w.process.sentinel for w in workers])
        outcomes: list[tuple[int, bool | None, Any]] = []
        for worker in workers:
            index = worker.index
            assert index is not None
            if worker.conn.poll():  # a reply, or end-of-file if the worker died
                try:
                    ok, value = pickle.loads(worker.conn.recv_bytes())
                except (EOFError, OSError):
                    outcomes.append((index, None, self._retire(worker)))
                    continue
                except Exception as error:  # a result that cannot be unpickled here
                    ok, value = False, (error, "")
                if not ok:
                    value, text = value
                    if text and value.__cause__ is None:
                        value.__cause__ = _RemoteTraceback(text)
                del self._busy[index]
                worker.index = None
                self._idle.append(worker)
                outcomes.append((index, ok, value))
            elif not worker.process.is_alive():
                outcomes.append((index, None, self._retire(worker)))
        return outcomes

    def _retire(self, worker: _Worker) -> int | None:
        del self._busy[worker.index]  # type: ignore[arg-type]
        worker.kill()
        return worker.process.exitcode

    def abort(self) -> None:
        """Kill the workers still evaluating an item (the run was interrupted); idle workers stay."""
        for worker in self._busy.values():
            worker.kill()
        self._busy.clear()

    def close(self) -> None:
        """Stop every worker."""
        self._finalizer()


class ProcessExecutor(_ExecutorBase):
    """A local pool of spawned worker processes, one torch thread each and, with GPUs, one GPU each.

    Workers are started with the ``spawn`` method, never ``fork``: the parent may hold torch/OpenMP state that a
    forked child must not inherit. ``fn`` and the items must therefore be picklable (module-level functions,
    instances of module-level classes; not lambdas or closures). Workers live across :meth:`run` calls (their
    imports stay warm) until :meth:`close`. Each worker runs one item at a time over its own pipe, so a worker
    death loses only the item it held, and a new worker replaces it (see :class:`WorkerPool`).

    Args:
        workers: Processes (default: one per GPU if there are GPUs, else ``os.cpu_count()``).
        gpus: GPU ids to hand out, one per worker (round-robin when there are more workers than ids) through
            the worker's ``CUDA_VISIBLE_DEVICES``; default :func:`visible_gpus`; ``[]`` hands out none.
    """

    def __init__(self, workers: int | None = None, *, gpus: Sequence[int | str] | None = None) -> None:
        _check_workers(workers)
        if gpus is None:
            gpus = visible_gpus()
        elif isinstance(gpus, str) or not all(
            (isinstance(g, int) and not isinstance(g, bool) and g >= 0) or (isinstance(g, str) and g.strip())
            for g in gpus
        ):
            raise ValueError(f"gpus must be a sequence of non-negative ints or device ids, got {gpus!r}")
        self.gpus = [str(g).strip() for g in gpus]
        self.workers = workers or len(self.gpus) or os.cpu_count() or 1
        self._pool: WorkerPool | None = None

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
        """See :meth:`Executor.run`. A worker death loses only the item it was evaluating."""
        ledger = _Ledger(len(items), on_result, on_lost, max_attempts, on_start)
        if self._pool is None:
            self._pool = WorkerPool(self.workers, self.gpus, multiprocessing.get_context("spawn"))
        pool = self._pool
        try:
            while True:
                while pool.in_flight < self.workers and (index := ledger.next_item()) is not None:
                    pool.submit(index, _pickled_call(fn, items[index]))
                if not pool.in_flight:
                    return ledger.outcome()
                lost, codes = [], []
                for index, ok, value in sorted(pool.wait(), key=lambda outcome: outcome[0]):
                    if ok is None:
                        lost.append(index)
                        codes.append(value)
                    elif ok:
                        ledger.finished(index, value)
                    else:
                        ledger.raised(index, value)
                if lost:
                    ledger.lost(lost, ChildProcessError(f"worker processes exited with codes {codes}"))
        finally:
            pool.abort()  # only if interrupted (e.g. by a callback): stop the items still running

    def close(self) -> None:
        """Stop the worker processes."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None


def _pickled_call(fn: Callable[[A], R], item: A) -> bytes:
    try:
        return pickle.dumps((fn, item), protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, AttributeError, TypeError) as error:
        raise TypeError(
            "ProcessExecutor sends fn and the items to other processes, so they must be picklable "
            f"(module-level functions or instances of module-level classes, not lambdas): {error}"
        ) from error
