"""The Ray executor (dphypo/search/execution/ray.py): its workers and unreachable clusters (issue #12)."""

from __future__ import annotations

import time

import pytest

from dphypo.search.execution import make_executor
from tests.search.execution._helpers import _worker_info


def test_ray_workers_run_one_torch_thread(ray_executor) -> None:
    info = ray_executor.run(_worker_info, [0, 1, 2])
    assert {threads for _, threads, _, _ in info} == {1}


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

