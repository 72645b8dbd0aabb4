"""Executors: where the runs of a search (or the repeats of a simulation) are evaluated.

An executor evaluates ``fn(item)`` for a list of items, up to :attr:`~Executor.workers` at a time, and returns
the results in *item* order, so a search releases the same run whichever executor evaluated it. Three are
provided: :class:`SequentialExecutor` (in this process, the default), :class:`ProcessExecutor` (a local spawn
process pool, one torch thread and optionally one GPU per worker) and :class:`RayExecutor` (a local or remote
Ray cluster; ``pip install 'dphypo[ray]'``).

Failures come in two kinds, and the privacy accounting treats them differently:

* ``fn`` raised: the exception belongs to the caller (a run that failed *because of the data* is handled inside
  ``fn`` and never gets here; see :class:`dphypo.tuner.DataFailure`). It is not retried; the items already in
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
import math
import multiprocessing
import os
import pickle
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from dphypo._worker_pool import WorkerPool, call_in_worker, visible_gpus

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

A = TypeVar("A")
R = TypeVar("R")

#: Names :func:`make_executor` accepts.
EXECUTORS: tuple[str, ...] = ("sequential", "process", "ray")

#: Object-store size of a Ray instance this module starts (Ray's default took 7.5 GB on a 24 GB machine).
RAY_OBJECT_STORE_BYTES = 256 * 1024**2

#: Seconds to wait for a Ray cluster at ``address`` to answer before giving up (Ray itself retries for minutes
#: without a word); ``$DPHYPO_RAY_CONNECT_TIMEOUT`` overrides it.
RAY_CONNECT_TIMEOUT = 30.0


class WorkerLost(RuntimeError):
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


class _ExecutorBase:
    """Context-manager plumbing shared by the executors."""

    workers: int

    def close(self) -> None:  # pragma: no cover - overridden where there is something to release
        """Release the workers (idempotent)."""

    def __enter__(self) -> _ExecutorBase:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(workers={self.workers})"


def _check_workers(workers: int | None) -> None:
    if workers is not None and not (isinstance(workers, int) and not isinstance(workers, bool) and workers >= 1):
        raise ValueError(f"workers must be a positive integer or None, got {workers!r}")


def _check_attempts(max_attempts: int) -> None:
    if not (isinstance(max_attempts, int) and max_attempts >= 1):
        raise ValueError(f"max_attempts must be a positive integer, got {max_attempts!r}")


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
        """The next item to submit (starting its next attempt), or ``None``: nothing left, or a failure
        occurred (the items in flight finish, nothing new starts)."""
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


# --------------------------------------------------------------------------------------------- sequential
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


# ------------------------------------------------------------------------------------------------ process
class ProcessExecutor(_ExecutorBase):
    """A local pool of spawned worker processes, one torch thread each and, with GPUs, one GPU each.

    Workers are started with the ``spawn`` method, never ``fork``: the parent may hold torch/OpenMP state that a
    forked child must not inherit. ``fn`` and the items must therefore be picklable (module-level functions,
    instances of module-level classes; not lambdas or closures). Workers live across :meth:`run` calls (their
    imports stay warm) until :meth:`close`. Each worker runs one item at a time over its own pipe, so a worker
    death loses only the item it held, and a new worker replaces it (see :mod:`dphypo._worker_pool`).

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


# ---------------------------------------------------------------------------------------------------- ray
def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("RayExecutor needs ray: pip install 'dphypo[ray]'") from exc
    return ray


def _ray_lost_errors(ray: Any) -> tuple[type[BaseException], ...]:
    """Ray exceptions meaning the worker, its node or the result was lost (not raised by ``fn``)."""
    names = (
        "WorkerCrashedError",
        "NodeDiedError",
        "LocalRayletDiedError",
        "OutOfMemoryError",
        "ObjectLostError",
        "RayActorError",
    )
    return tuple(getattr(ray.exceptions, name) for name in names if hasattr(ray.exceptions, name))


def ray_connect_timeout(timeout: float | None = None) -> float:
    """The connect timeout: ``timeout``, else ``$DPHYPO_RAY_CONNECT_TIMEOUT``, else :data:`RAY_CONNECT_TIMEOUT`."""
    if timeout is None:
        text = os.environ.get("DPHYPO_RAY_CONNECT_TIMEOUT")
        if text is None:
            return RAY_CONNECT_TIMEOUT
        try:
            timeout = float(text)
        except ValueError:
            raise ValueError(f"$DPHYPO_RAY_CONNECT_TIMEOUT must be a number of seconds, got {text!r}") from None
    if not (isinstance(timeout, int | float) and not isinstance(timeout, bool) and 0 < timeout < math.inf):
        raise ValueError(f"connect_timeout must be a positive number of seconds, got {timeout!r}")
    return float(timeout)


def _ray_endpoint(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of a Ray address (``host:port`` or ``ray://host:port``); None for ``auto``/``local``."""
    text = address.strip()
    if text in ("auto", "local", ""):
        return None
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "", text
    rest = rest.split("/", 1)[0]
    host, colon, port = rest.rpartition(":")
    if not colon:
        host, port = rest, ("10001" if scheme == "ray" else "6379")  # Ray's default client / GCS ports
    host = host.strip("[]")
    if not host or not port.isdigit():
        raise ValueError(f"address must look like host:port or ray://host:port, got {address!r}")
    return host, int(port)


def check_ray_address(address: str, timeout: float | None = None) -> None:
    """Fail fast unless a Ray cluster answers at ``address`` within ``timeout`` seconds.

    ``ray.init(address=...)`` on an unreachable address retries for minutes (up to 40 s per attempt, a warning a
    second); this turns that into one error after at most about ``timeout`` seconds. First a TCP connection (a
    refused or blackholed address fails here), then, if something listens, one ``ray.init`` in a child process
    that is killed at the deadline (only Ray can tell a Ray cluster from another server).

    Args:
        address: ``host:port``, ``ray://host:port``, or ``auto``/``local`` (not checked).
        timeout: Seconds (default :func:`ray_connect_timeout`).

    Raises:
        ConnectionError: Nothing answered at the address in time.
        ValueError: A malformed address or timeout.
    """
    timeout = ray_connect_timeout(timeout)
    endpoint = _ray_endpoint(address)
    if endpoint is None:
        return

    def unreachable(reason: str, error: BaseException | None = None) -> ConnectionError:
        failure = ConnectionError(
            f"cannot reach a Ray cluster at address {address!r} within {timeout:g} s ({reason}); check the address "
            "or start one with `ray start --head` (wait longer: $DPHYPO_RAY_CONNECT_TIMEOUT)"
        )
        failure.__cause__ = error
        return failure

    start = time.monotonic()
    try:
        with socket.create_connection(endpoint, timeout=timeout):
            pass
    except OSError as error:
        reason = "timed out" if isinstance(error, TimeoutError) else (error.strerror or str(error) or "failed")
        raise unreachable(reason, error) from error
    # Something answers TCP; whether it is a Ray cluster only Ray can tell, and in-process Ray would wait up to
    # 40 s per attempt. Ask it in a child process that is killed at the deadline.
    remaining = max(1.0, timeout - (time.monotonic() - start))
    code = (
        "import sys, ray; ray.init(address=sys.argv[1], include_dashboard=False, logging_level='ERROR'); "
        "ray.shutdown()"
    )
    env = {**os.environ, "RAY_gcs_server_port_wait_time_s": str(max(1, math.ceil(remaining)))}
    try:
        probe = subprocess.run([sys.executable, "-c", code, address], capture_output=True, text=True,
                               timeout=remaining, env=env, check=False)
    except subprocess.TimeoutExpired as error:
        raise unreachable("no answer from Ray", error) from None
    if probe.returncode != 0:
        lines = [line.strip() for line in probe.stderr.splitlines() if line.strip() and not line.startswith("[")]
        raise unreachable(lines[-1] if lines else f"probe exited with status {probe.returncode}")


@contextlib.contextmanager
def _ray_connect_budget(timeout: float | None) -> Iterator[None]:
    """Bound Ray's own wait for an existing cluster's GCS (about one attempt per second, 20 by default and up to
    120) by ``timeout`` seconds while ``ray.init`` runs, unless ``$RAY_gcs_server_port_wait_time_s`` is set."""
    name = "RAY_gcs_server_port_wait_time_s"
    if timeout is None or name in os.environ:
        yield
        return
    os.environ[name] = str(max(1, math.ceil(timeout)))
    try:
        yield
    finally:
        os.environ.pop(name, None)


class _HeldOutput:
    """What a :func:`_held_stderr` block wrote; shown afterwards unless discarded."""

    def __init__(self) -> None:
        self.show = True

    def discard(self) -> None:
        self.show = False


@contextlib.contextmanager
def _held_stderr() -> Iterator[_HeldOutput]:
    """Hold back everything written to file descriptor 2 (Python and Ray's C++ logging) inside the block, then
    write it out, unless the block called ``discard()`` (e.g. before raising its own one-line error)."""
    import tempfile

    held = _HeldOutput()
    try:
        saved = os.dup(2)
    except OSError:  # no stderr at all: nothing to hold
        yield held
        return
    with tempfile.TemporaryFile() as buffer:
        sys.stderr.flush()
        os.dup2(buffer.fileno(), 2)
        try:
            yield held
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            if held.show:
                buffer.seek(0)
                text = buffer.read()
                if text:
                    os.write(2, text)


class RayExecutor(_ExecutorBase):
    """Ray tasks on a local or remote cluster, at most ``workers`` in flight.

    Ray must be installed (``pip install 'dphypo[ray]'``). If Ray is not initialised yet, ``ray.init`` starts a
    local instance (``address=None``: ``num_cpus = workers · num_cpus``, no dashboard, a 256 MB object store)
    or connects to ``address``; :meth:`close` shuts Ray down only if this executor initialised it. Ray pickles
    with cloudpickle, so ``fn`` may be a closure here, but it and the items must be importable on the workers.

    Ray's own retries are off (``max_retries=0``, ``retry_exceptions=False``): Ray would otherwise rerun a task
    whose worker died without telling anyone, and every attempt may have touched the data, so every attempt
    must reach ``on_lost`` and the privacy accountant.

    Args:
        workers: Tasks in flight (default: the cluster's CPUs / ``num_cpus``).
        address: Ray cluster address (``"auto"``, ``"ray://host:10001"``, ...); ``None`` starts a local one.
        num_cpus: CPUs each task reserves, > 0.
        num_gpus: GPUs each task reserves, ≥ 0 (default 1 if the cluster has GPUs, else 0); Ray sets the
            task's ``CUDA_VISIBLE_DEVICES``.
        init_kwargs: Extra keyword arguments for ``ray.init`` (they override the defaults above).
        connect_timeout: Seconds to wait for the cluster at ``address`` to answer before raising
            :class:`ConnectionError` (default ``$DPHYPO_RAY_CONNECT_TIMEOUT`` or 30).
    """

    def __init__(
        self,
        workers: int | None = None,
        *,
        address: str | None = None,
        num_cpus: float = 1,
        num_gpus: float | None = None,
        init_kwargs: Mapping[str, Any] | None = None,
        connect_timeout: float | None = None,
    ) -> None:
        _check_workers(workers)
        timeout = ray_connect_timeout(connect_timeout)
        if not (isinstance(num_cpus, int | float) and math.isfinite(num_cpus) and num_cpus > 0):
            raise ValueError(f"num_cpus must be a positive number, got {num_cpus!r}")
        if num_gpus is not None and not (isinstance(num_gpus, int | float) and 0 <= num_gpus < math.inf):
            raise ValueError(f"num_gpus must be a non-negative number or None, got {num_gpus!r}")
        ray = _import_ray()
        self._ray = ray
        self._started = False
        if not ray.is_initialized():
            options: dict[str, Any] = {"include_dashboard": False}
            if address is None:
                options["num_cpus"] = None if workers is None else math.ceil(workers * num_cpus)
                options["object_store_memory"] = RAY_OBJECT_STORE_BYTES
            options.update(init_kwargs or {})
            if address is None:
                ray.init(address=address, **options)
            else:
                check_ray_address(address, timeout)
                with _ray_connect_budget(timeout), _held_stderr() as held:
                    try:
                        ray.init(address=address, **options)
                    except ConnectionError as error:  # Ray's retries printed one warning a second: drop them
                        held.discard()
                        raise ConnectionError(
                            f"cannot connect to a Ray cluster at address {address!r} within {timeout:g} s ({error}); "
                            "check the address (wait longer: $DPHYPO_RAY_CONNECT_TIMEOUT)"
                        ) from error
            self._started = True
        resources = ray.cluster_resources()
        self.workers = workers or max(1, int(resources.get("CPU", 1) // num_cpus))
        self.num_cpus = num_cpus
        self.num_gpus = (1 if resources.get("GPU", 0) > 0 else 0) if num_gpus is None else num_gpus
        # No silent retries: a retried attempt must be reported (module docstring).
        self._remote = ray.remote(call_in_worker).options(
            num_cpus=num_cpus, num_gpus=self.num_gpus, max_retries=0, retry_exceptions=False
        )
        self._lost_errors = _ray_lost_errors(ray)

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
        """See :meth:`Executor.run`. A worker death loses only the task it was running."""
        ray = self._ray
        ledger = _Ledger(len(items), on_result, on_lost, max_attempts, on_start)
        in_flight: dict[Any, int] = {}
        fn_ref = ray.put(fn)  # shipped once, not with every task
        try:
            while True:
                while len(in_flight) < self.workers and (index := ledger.next_item()) is not None:
                    in_flight[self._remote.remote(fn_ref, items[index])] = index
                if not in_flight:
                    return ledger.outcome()
                done, _ = ray.wait(list(in_flight), num_returns=1)
                for ref in done:
                    self._collect(ref, in_flight.pop(ref), ledger)
        finally:
            for ref in in_flight:  # interrupted (e.g. by a callback): stop the tasks still running
                ray.cancel(ref, force=True)

    def _collect(self, ref: Any, index: int, ledger: _Ledger) -> None:
        try:
            result = self._ray.get(ref)
        except self._lost_errors as error:
            ledger.lost([index], error)
        except self._ray.exceptions.RayTaskError as error:
            cause = error.cause if isinstance(error.cause, BaseException) else error
            if cause is not error and cause.__cause__ is None:
                cause.__cause__ = error  # keeps the remote traceback in the report
            ledger.raised(index, cause)
        else:
            ledger.finished(index, result)

    def close(self) -> None:
        """Shut Ray down if this executor started it."""
        if self._started and self._ray.is_initialized():
            self._ray.shutdown()
        self._started = False


# -------------------------------------------------------------------------------------------------- factory
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
