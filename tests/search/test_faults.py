"""Fault injection: kill -9 mid-search and resume, dead workers, data failures, a changed configuration.

A search runs in a child process (``_search_child.py``) with a journal; the child kills itself with SIGKILL at a
chosen point (inside a run, or between runs), or the test kills it from outside. The resumed search must keep T,
never repeat a finished run, count what was in flight as lost, and release what an uninterrupted search releases
with the *same* ε: lost attempts are charged up front (``max_lost``), so the reported ε never depends on how many
were lost; one more than ``max_lost`` stops the search without a release (docs/parallel.md).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dphypo.cli import run
from dphypo.privacy import PrivacyAccounting, RepeatAndSelect, gaussian_rdp, geometric
from dphypo.search.execution import ProcessExecutor
from dphypo.search.recording import LostAttemptsExceeded
from dphypo.search.storage import JournalMismatch, SQLiteJournal
from dphypo.search.tuner import Tuner
from dphypo.strategies import GPUCB
from tests.search._search_child import LAWS, SPACE, STRATEGIES, DyingObjective, make_strategy, privacy_accounting, score

CHILD = Path(__file__).with_name("_search_child.py")
ROOT = Path(__file__).resolve().parents[2]


def _child(journal: Path, log: Path, *args: str, wait: bool = True) -> subprocess.Popen | subprocess.CompletedProcess:
    command = [sys.executable, str(CHILD), str(journal), str(log), *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    if not wait:
        return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)


def _started(log: Path) -> list[int]:
    """Run numbers whose objective was called, in call order (one line per call)."""
    return [int(line.split()[1]) for line in log.read_text().splitlines() if line.startswith("start")]


def _release(done: subprocess.CompletedProcess) -> dict:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("reference")
    return _release(_child(folder / "j.db", folder / "log"))


def test_the_reference_search_has_enough_runs_to_interrupt(uninterrupted) -> None:
    assert uninterrupted["run_count"] >= 6  # the kill points below are inside the search


def test_kill_between_runs_then_resume_releases_the_uninterrupted_result(tmp_path, uninterrupted) -> None:
    journal, log = tmp_path / "j.db", tmp_path / "log"
    killed = _child(journal, log, "--kill-after-run", "3")
    assert killed.returncode == -signal.SIGKILL
    assert _started(log) == [0, 1, 2, 3]
    resumed = _release(_child(journal, log))
    assert _started(log) == list(range(uninterrupted["run_count"]))  # no finished run repeated
    assert resumed["run_count"] == uninterrupted["run_count"]  # T read from the journal, not redrawn
    assert resumed["lost_attempts"] == 0  # nothing was in flight: nothing lost
    for key in ("params", "score", "epsilon", "artifact"):
        assert resumed["release"][key] == uninterrupted["release"][key]


def test_kill_inside_a_run_counts_it_as_lost_and_reruns_it_at_the_same_epsilon(tmp_path, uninterrupted) -> None:
    journal, log = tmp_path / "j.db", tmp_path / "log"
    assert _child(journal, log, "--kill-inside-run", "2").returncode == -signal.SIGKILL
    resumed = _release(_child(journal, log))
    calls = _started(log)
    assert calls.count(2) == 2 and all(calls.count(n) == 1 for n in set(calls) - {2})
    assert resumed["run_count"] == uninterrupted["run_count"]
    assert resumed["lost_attempts"] == 1 == resumed["max_lost"]
    assert resumed["release"]["params"] == uninterrupted["release"]["params"]  # the re-run used the same seed
    # the loss was paid for up front: the reported ε is the one the uninterrupted search reports (no odometer)
    assert resumed["release"]["epsilon"] == uninterrupted["release"]["epsilon"]
    with SQLiteJournal.open(journal) as j:
        assert [a["status"] for a in j.attempts() if a["number"] == 2] == ["lost", "done"]


def test_a_loss_beyond_max_lost_refuses_the_resume_and_releases_nothing(tmp_path) -> None:
    journal, log = tmp_path / "j.db", tmp_path / "log"
    killed = _child(journal, log, "--kill-inside-run", "2", "--max-lost", "0")
    assert killed.returncode == -signal.SIGKILL
    refused = _child(journal, log, "--max-lost", "0")
    assert refused.returncode == 3 and "LostAttemptsExceeded" in refused.stderr and "max_lost=0" in refused.stderr
    assert _started(log) == [0, 1, 2]  # nothing ran after the refusal
    with SQLiteJournal.open(journal) as j:
        assert j.release() is None


def test_max_lost_is_charged_up_front_in_every_report() -> None:
    def config(k: int) -> PrivacyAccounting:
        return PrivacyAccounting(RepeatAndSelect(geometric(0.1), 2.0, 0.75), gaussian_rdp(4.0), 1e-5, max_lost=k)

    eps = [config(k).account().epsilon for k in range(3)]
    assert eps[0] < eps[1] < eps[2]
    assert config(2).account().charged_runs == 2


def test_kill_from_outside_at_any_moment_never_double_spends(tmp_path, uninterrupted) -> None:
    journal, log = tmp_path / "j.db", tmp_path / "log"
    child = _child(journal, log, "--slow", wait=False)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and (not log.exists() or len(_started(log)) < 3):
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=60)
    before = _started(log)
    resumed = _release(_child(journal, log))
    calls = _started(log)
    repeated = [n for n in set(calls) if calls.count(n) > 1]
    assert set(calls) == set(range(uninterrupted["run_count"]))
    assert len(repeated) == resumed["lost_attempts"] <= 1  # at most the one in flight, and it was counted
    assert all(n == before[-1] for n in repeated)
    assert resumed["release"]["params"] == uninterrupted["release"]["params"]


#: Every strategy with every run-count law a theorem covers for it (an adaptive search has no Poisson theorem).
RESUMABLE = [(strategy, law) for strategy in STRATEGIES for law in LAWS if strategy == "uniform" or law != "poisson"]


@pytest.mark.parametrize(("strategy", "law"), RESUMABLE)
def test_every_strategy_and_run_count_law_resumes_after_kill_9_and_releases_the_uninterrupted_result(
    tmp_path, strategy: str, law: str
) -> None:
    # The uninterrupted search, in this process: a resume in a new process must seal-match and replay it.
    reference = Tuner(score, SPACE, privacy_accounting(strategy, law, 2.0, 1), strategy=make_strategy(strategy, 2.0),
                      seed=11, objective_id="tests/search/_search_child").run()
    journal, log = tmp_path / "j.db", tmp_path / "log"
    kill_at = min(2, reference.history.run_count - 1)
    killed = _child(journal, log, "--kill-inside-run", str(kill_at), "--strategy", strategy, "--runs", law)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = _release(_child(journal, log, "--strategy", strategy, "--runs", law))
    assert resumed["run_count"] == reference.history.run_count  # T read from the journal, not redrawn
    assert resumed["lost_attempts"] == 1  # the run in flight, charged up front by max_lost = 1
    assert resumed["release"]["params"] == reference.release.params
    assert resumed["release"]["score"] == reference.release.score
    assert resumed["release"]["epsilon"] == reference.release.epsilon
    assert resumed["release"]["artifact"] == reference.release.artifact
    assert run(["release", str(journal), "--json"]) == 0  # the journal's release is publishable as it stands


def test_a_data_failure_is_journaled_and_never_retried(tmp_path) -> None:
    journal, log = tmp_path / "j.db", tmp_path / "log"
    first = _release(_child(journal, log, "--nan-run", "1"))
    again = _release(_child(journal, log, "--nan-run", "1"))  # a finished journal replays, runs nothing
    assert _started(log).count(1) == 1
    assert first["lost_attempts"] == again["lost_attempts"] == 0
    assert first["release"] == again["release"]
    with SQLiteJournal.open(journal) as j:
        assert [a["status"] for a in j.attempts() if a["number"] == 1] == ["data_failure"]


def test_a_changed_configuration_is_refused_on_resume(tmp_path) -> None:
    journal, log = tmp_path / "j.db", tmp_path / "log"
    assert _child(journal, log, "--kill-after-run", "1").returncode == -signal.SIGKILL
    changed = _child(journal, log, "--C", "1.5")
    assert changed.returncode == 3 and "privacy.C" in changed.stderr
    assert JournalMismatch.__name__ in changed.stderr
    assert _started(log) == [0, 1]  # nothing ran


def _pool_search(tmp_path, executor, *, die_at: int, batch_size: int = 2, journal=None, max_lost: int = 2):
    privacy = PrivacyAccounting(RepeatAndSelect(geometric(0.1), 2.0, 0.75), gaussian_rdp(4.0), 1e-5, max_lost=max_lost)
    objective = DyingObjective(str(tmp_path / f"died-{die_at}"), die_at)
    return Tuner(objective, SPACE, privacy, strategy=GPUCB(), seed=11, runs_per_update=batch_size, executor=executor,
                 journal=journal).run()


def test_a_dead_pool_worker_is_retried_within_max_lost_at_a_fixed_epsilon(tmp_path) -> None:
    reference = _pool_search(tmp_path, None, die_at=-1)
    with ProcessExecutor(2) as pool:
        result = _pool_search(tmp_path, pool, die_at=1, journal=tmp_path / "j.db")
    assert (tmp_path / "died-1").exists()
    assert result.release.params == reference.release.params
    assert result.release.score == reference.release.score
    # run 1 died with its worker; its batch mate (run 0) was in flight in the same broken pool: both lost
    assert 1 <= result.history.lost_attempts <= 2
    assert result.release.privacy.charged_runs == 2  # max_lost, charged up front
    assert result.release.epsilon == reference.release.epsilon
    with SQLiteJournal.open(tmp_path / "j.db") as journal:
        statuses = [a["status"] for a in journal.attempts()]
    assert statuses.count("lost") == result.history.lost_attempts
    assert statuses.count("done") == result.history.run_count


def test_a_dead_pool_worker_beyond_max_lost_stops_the_search(tmp_path) -> None:
    with ProcessExecutor(2) as pool, pytest.raises(LostAttemptsExceeded, match="max_lost=0"):
        _pool_search(tmp_path, pool, die_at=1, max_lost=0)


@pytest.mark.parametrize("executor", ["sequential", "process"])
def test_the_release_does_not_depend_on_the_executor(tmp_path, executor) -> None:
    reference = _pool_search(tmp_path, None, die_at=-1)
    result = _pool_search(tmp_path, executor, die_at=-1)
    assert result.release.params == reference.release.params
    assert result.release.score == reference.release.score
    assert result.release.epsilon == reference.release.epsilon
    assert [t.grid_index for t in result.history.trials] == [t.grid_index for t in reference.history.trials]


def test_a_dead_ray_worker_is_retried_and_charged(tmp_path) -> None:
    pytest.importorskip("ray")
    from dphypo.search.execution import RayExecutor

    reference = _pool_search(tmp_path, None, die_at=-1)
    with RayExecutor(2) as cluster:
        result = _pool_search(tmp_path, cluster, die_at=2)
    assert (tmp_path / "died-2").exists()
    assert result.history.lost_attempts == 1  # Ray loses only the dead worker's task
    assert result.release.params == reference.release.params
    assert result.release.epsilon == reference.release.epsilon


def test_an_exception_from_the_objective_is_a_data_failure_never_retried(tmp_path) -> None:
    privacy = PrivacyAccounting(RepeatAndSelect(geometric(0.1), 2.0, 0.75), gaussian_rdp(4.0), 1e-5)
    calls: list[int] = []

    def objective(params: dict, run) -> float:
        calls.append(run.number)
        if run.number == 3:
            raise MemoryError("a Poisson batch too large for the device")  # may depend on the data: no retry
        return -(params["x"] - 0.6) ** 2 + run.rng.normal(0.0, 0.02)

    def search():
        return Tuner(objective, SPACE, privacy, strategy=GPUCB(), seed=11, runs_per_update=3,
                     journal=tmp_path / "j.db", objective_id="test").run()

    result = search()
    assert calls.count(3) == 1 and result.history.lost_attempts == 0
    failed = result.history.trials[3]
    assert failed.failed and failed.error.startswith("MemoryError")
    again = search()  # a finished journal replays, runs nothing, and keeps the failure (curator-only note)
    assert calls.count(3) == 1 and again.history.trials[3].error == failed.error
    assert again.release.params == result.release.params
    with SQLiteJournal.open(tmp_path / "j.db") as journal:
        assert [a["status"] for a in journal.attempts() if a["number"] == 3] == ["data_failure"]


def test_ctrl_c_inside_a_run_is_a_lost_attempt_covered_only_by_max_lost(tmp_path) -> None:
    calls: list[int] = []

    def objective(params: dict, run) -> float:
        calls.append(run.number)
        if run.number == 2 and calls.count(2) == 1:
            raise KeyboardInterrupt  # the curator stops the search while run 2 touches the data
        return -(params["x"] - 0.6) ** 2 + run.rng.normal(0.0, 0.02)

    def search(max_lost: int):
        privacy = PrivacyAccounting(RepeatAndSelect(geometric(0.1), 2.0, 0.75), gaussian_rdp(4.0), 1e-5,
                                    max_lost=max_lost)
        return Tuner(objective, SPACE, privacy, strategy=GPUCB(), seed=11, journal=tmp_path / f"j{max_lost}.db",
                     objective_id="test").run()

    for max_lost in (0, 1):
        calls.clear()
        with pytest.raises(KeyboardInterrupt):
            search(max_lost)
        if max_lost == 0:
            with pytest.raises(LostAttemptsExceeded):
                search(0)
        else:
            assert search(1).history.lost_attempts == 1 and calls.count(2) == 2


def test_a_busy_pool_worker_exits_when_its_parent_is_killed(tmp_path) -> None:
    pid_file = tmp_path / "worker.pid"
    script = (
        "from dphypo.search.execution import ProcessExecutor\n"
        "from tests.search._search_child import report_pid_and_sleep\n"
        f"ProcessExecutor(1).run(report_pid_and_sleep, [{str(pid_file)!r}])\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    deadline = time.monotonic() + 120
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline and parent.poll() is None
        time.sleep(0.05)
    worker = int(pid_file.read_text())
    parent.kill()
    parent.wait(timeout=30)
    deadline = time.monotonic() + 15
    while _alive(worker):
        assert time.monotonic() < deadline, "the worker kept running after its parent was killed"
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie has exited; only its parent has not reaped it yet
        return stat.read().split()[2] != "Z"
