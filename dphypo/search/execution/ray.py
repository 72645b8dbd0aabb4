"""Runs as Ray tasks on a local or remote cluster (``pip install 'dphypo[ray]'``).

Ray's own retries are off: every attempt whose worker died must reach ``on_lost`` and the privacy accountant
(see :mod:`dphypo.search.execution.base`).
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from dphypo.search.execution._ledger import _check_workers, _ExecutorBase, _Ledger
from dphypo.search.execution.pool import call_in_worker

__all__ = ["RAY_CONNECT_TIMEOUT", "RAY_OBJECT_STORE_BYTES", "RayExecutor", "check_ray_address", "ray_connect_timeout"]

A = TypeVar("A")
R = TypeVar("R")

#: Object-store size of a Ray instance this module starts (Ray's default took 7.5 GB on a 24 GB machine).
RAY_OBJECT_STORE_BYTES = 256 * 1024**2

#: Seconds to wait for a Ray cluster at ``address`` to answer before giving up (Ray itself retries for minutes
#: without a word); ``$DPHYPO_RAY_CONNECT_TIMEOUT`` overrides it.
RAY_CONNECT_TIMEOUT = 30.0


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
    """Bound Ray's own wait for an existing cluster's GCS by ``timeout`` seconds while ``ray.init`` runs.

    Ray tries about once a second, 20 times by default and up to 120; ``$RAY_gcs_server_port_wait_time_s``, when
    set, wins.
    """
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
    """Hold back everything written to file descriptor 2 (Python and Ray's C++ logging) inside the block.

    It is written out afterwards, unless the block called ``discard()`` (e.g. before raising its own one-line
    error).
    """
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
