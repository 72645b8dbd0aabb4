"""DPSGDObjective.train_pass (issue #22): a search's runs trained in vectorised passes, each as its Opacus run.

Oracle: the Opacus path of the same objective (``objective(params, run)``) on the same run seeds.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from dphypo import DPSGD, SearchSpace, tune
from dphypo.privacy import geometric
from dphypo.search.records import DataFailure, Run, RunMisuse
from dphypo.search.storage import SQLiteJournal
from dphypo.space import Grid
from dphypo.train import DPSGDMechanism, DPSGDObjective, load_dataset
from dphypo.train.mechanism import check_budget
from dphypo.train.vectorized import Booked

DIGITS = load_dataset("digits")
MECHANISM = DPSGDMechanism.from_splits(DIGITS, sigma=1.0, batch_size=64, epochs=2, score_noise=5.0)
OBJECTIVE = DPSGDObjective("digits", "digits-mlp", device="cpu")
PARAMS = [{"lr": 0.5, "clip": 1.0}, {"lr": 2.0, "clip": 0.3}, {"lr": 0.1, "clip": 2.0}]


def _runs(mechanism: DPSGDMechanism = MECHANISM) -> list[Run]:
    return [Run(number, seed, None, number, mechanism) for number, seed in enumerate((1234, 99, 2**40 + 5))]


def test_each_run_of_a_pass_gets_its_opacus_runs_score_model_and_booking() -> None:
    runs = _runs()
    contexts = [run.open() for run in runs]
    outs = OBJECTIVE.train_pass(list(zip(PARAMS, contexts, strict=True)))
    for params, run, context, out in zip(PARAMS, runs, contexts, outs, strict=True):
        score, model = out
        reference = run.open()
        opacus_score, opacus_model = OBJECTIVE(params, reference)
        # The same count privatised from the same secret score stream: the same released number.
        assert score == pytest.approx(opacus_score, abs=1e-12)
        assert any(score is issued for issued in context.scores)  # released through the run's own private_score
        torch.testing.assert_close(model.state_dict, opacus_model.state_dict, rtol=1e-4, atol=1e-5)
        assert model.params == params and model.model_name == "digits-mlp"
        assert isinstance(context.engines[0], Booked)
        context.check(finished=True)  # compares the vectorised booking with the mechanism
        check_budget(context.engines[0], MECHANISM)


def test_padding_a_pass_with_dummies_changes_no_real_run() -> None:
    plain = OBJECTIVE.train_pass([(p, r.open()) for p, r in zip(PARAMS, _runs(), strict=True)])
    padded = OBJECTIVE.train_pass([(p, r.open()) for p, r in zip(PARAMS, _runs(), strict=True)], pad_to=7)
    assert len(padded) == 3
    for (a, ma), (b, mb) in zip(plain, padded, strict=True):
        assert a == b
        torch.testing.assert_close(ma.state_dict, mb.state_dict)


def test_a_diverged_run_is_a_data_failure_of_that_run_only_and_books_what_it_spent() -> None:
    runs = _runs()
    contexts = [run.open() for run in runs]
    params = [PARAMS[0], {"lr": 1e12, "clip": 1e30}, PARAMS[2]]  # its first update overflows
    outs = OBJECTIVE.train_pass(list(zip(params, contexts, strict=True)))
    assert isinstance(outs[1], DataFailure) and "non-finite" in str(outs[1])
    alone = OBJECTIVE.train_pass([(PARAMS[0], runs[0].open()), (PARAMS[2], runs[2].open())])
    assert [outs[0][0], outs[2][0]] == [alone[0][0], alone[1][0]]
    contexts[1].check(finished=False)  # the steps it took are booked and within the budget
    assert contexts[1].engines[0].history[0][2] < MECHANISM.steps


def test_bad_hyperparameters_are_a_misuse_and_a_foreign_mechanism_is_refused_per_run() -> None:
    runs = _runs()
    other = dataclasses.replace(MECHANISM, sigma=2.0)
    tasks = [({"lr": 0.5}, runs[0].open()), (PARAMS[1], runs[1].open()),
             (PARAMS[2], Run(2, 7, None, 2, other).open())]
    outs = DPSGDObjective("digits", "digits-mlp", MECHANISM, device="cpu").train_pass(tasks)
    assert isinstance(outs[0], RunMisuse) and isinstance(outs[2], ValueError)
    assert isinstance(outs[1], tuple)


def test_engine_choice_is_checked_and_defaults_to_vectorized_with_sgd() -> None:
    assert DPSGDObjective("digits").engine == "vectorized" and DPSGDObjective("digits").trains_in_passes
    assert DPSGDObjective("digits", optimizer="adam").engine == "opacus"
    assert not DPSGDObjective("digits", engine="opacus").trains_in_passes
    with pytest.raises(ValueError, match="plain SGD only"):
        DPSGDObjective("digits", optimizer="adam", engine="vectorized")
    with pytest.raises(ValueError, match="engine must be one of"):
        DPSGDObjective("digits", engine="jax")
    with pytest.raises(ValueError, match="pass_size must be"):
        DPSGDObjective("digits", pass_size=0)
    assert DPSGDObjective("digits", pass_size=5).default_pass_size(MECHANISM) == 5
    if not torch.cuda.is_available():
        assert DPSGDObjective("digits").default_pass_size(MECHANISM) == 32


SPACE = SearchSpace({"lr": Grid([0.05, 0.2, 0.5, 1.0], scale="log"), "clip": Grid([0.5, 1.0, 2.0], scale="linear")})
TRAINING = DPSGD(batch_size=64, epochs=1, n_train=len(DIGITS.y_train), n_val=len(DIGITS.y_val), score_noise=7.0)


@pytest.mark.parametrize("strategy", ["uniform", "gp"])
def test_a_search_releases_what_the_opacus_path_releases_at_a_fixed_seed(strategy: str) -> None:
    # Uniform: passes of 4 drawn 4 at a time vs Opacus run by run (one uniform per draw either way); GP: a pass per
    # batch of runs_per_update = 3 on both engines. Float round-off could flip a prediction; at these seeds it does not.
    results = {}
    for engine in ("vectorized", "opacus"):
        objective = DPSGDObjective("digits", engine=engine, pass_size=4 if engine == "vectorized" else None)
        result = tune(objective, SPACE, TRAINING, sigma=1.0, runs=geometric(0.1), seed=3, strategy=strategy,
                      runs_per_update=None if strategy == "uniform" else 3)
        results[engine] = result
    vec, opa = results["vectorized"], results["opacus"]
    assert vec.history.run_count == opa.history.run_count >= 5
    assert [t.grid_index for t in vec.history.trials] == [t.grid_index for t in opa.history.trials]
    np.testing.assert_allclose([t.score for t in vec.history.trials], [t.score for t in opa.history.trials],
                               atol=1.5 / len(DIGITS.y_val))
    assert vec.release.params == opa.release.params and vec.release.epsilon == opa.release.epsilon


def test_max_lost_below_the_pass_size_is_refused_before_any_run_trains(monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("a run trained")

    monkeypatch.setattr(DPSGDObjective, "train_pass", never)
    monkeypatch.setattr(DPSGDObjective, "__call__", never)
    with pytest.raises(ValueError, match="max_lost must be ≥ the pass size 8"):
        tune(DPSGDObjective("digits", pass_size=8), SPACE, TRAINING, epsilon=8.0, max_lost=3, strategy="uniform")
    with pytest.raises(ValueError, match="max_lost must be ≥ the pass size 3"):
        tune(DPSGDObjective("digits"), SPACE, TRAINING, epsilon=8.0, max_lost=2, strategy="gp", runs_per_update=3)


def test_the_default_design_trains_its_placed_probes_in_passes_no_larger_than_max_lost(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The default design places its released probes by a GP, one per fit after a space-filling start of 5 (20 probes);
    # with max_lost=3 charged, a kill -9 must lose at most 3 runs, so every batch (probes and final runs) trains in
    # passes of at most 3 whatever pass_size.
    import dphypo.api.two_stage as two_stage

    passes: list[int] = []
    real_run_batch = two_stage.run_batch

    def recorded(objective, space, batch, *args, **kwargs):
        passes.append(len(batch))
        return real_run_batch(objective, space, batch, *args, **kwargs)

    def fails(*args: object, **kwargs: object) -> None:
        raise DataFailure("no training in this test")

    monkeypatch.setattr(two_stage, "run_batch", recorded)
    monkeypatch.setattr(DPSGDObjective, "train_pass", fails)
    monkeypatch.setattr(DPSGDObjective, "__call__", fails)
    result = tune(DPSGDObjective("digits", pass_size=8), SPACE, TRAINING, epsilon=8.0, max_lost=3, seed=0)
    assert result.two_stage.placement["strategy"] == "gp" and result.two_stage.max_lost == 3
    assert passes and max(passes) <= 3 and sum(passes) == result.history.run_count + result.final_history.run_count


@pytest.mark.parametrize(("pass_size", "max_lost", "expected"),
                         [(None, 0, 32), (None, 4, 4), (None, 40, 32), (6, 0, 6)])
def test_a_uniform_search_passes_at_the_pass_size_capped_by_max_lost(pass_size, max_lost, expected) -> None:
    from dphypo.api.search import pass_options
    from dphypo.search.options import SearchOptions

    if torch.cuda.is_available() and pass_size is None:
        pytest.skip("the default pass size on CUDA depends on free memory")
    objective = DPSGDObjective("digits", pass_size=pass_size)
    options, in_flight = pass_options(objective, SearchOptions(), False, TRAINING, max_lost)
    assert options.runs_per_update == in_flight == expected
    options, in_flight = pass_options(objective, SearchOptions(), True, TRAINING, 0)
    assert options.runs_per_update is None and in_flight == 1  # adaptive: one pass per batch of runs_per_update
    opacus = DPSGDObjective("digits", engine="opacus")
    assert pass_options(opacus, SearchOptions(), False, TRAINING, 0)[1] == 1


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@needs_cuda
def test_cuda_passes_give_the_cpu_results_and_size_the_pass_from_free_memory() -> None:
    objective = DPSGDObjective("digits", "digits-mlp")  # device None: CUDA when present
    cpu = OBJECTIVE.train_pass([(p, r.open()) for p, r in zip(PARAMS, _runs(), strict=True)])
    cuda = objective.train_pass([(p, r.open()) for p, r in zip(PARAMS, _runs(), strict=True)])
    for (a, ma), (b, mb) in zip(cpu, cuda, strict=True):
        assert abs(a - b) <= 1.5 / len(DIGITS.y_val)
        torch.testing.assert_close(ma.state_dict, mb.state_dict, rtol=1e-3, atol=1e-4)
    assert objective.default_pass_size(MECHANISM) >= 1
    small = DPSGDObjective("digits", "digits-mlp", pass_size=2)
    assert small.default_pass_size(MECHANISM) == 2


# -- kill -9 with a pass in flight (a child process killing itself; see _pass_child.py) ---------------------------
CHILD = Path(__file__).with_name("_pass_child.py")
ROOT = Path(__file__).resolve().parents[2]


def _child(tmp_path: Path, out: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(CHILD), str(tmp_path / out), *args], env=env, capture_output=True,
                          text=True, timeout=600)


def test_a_search_killed_with_a_pass_in_flight_loses_that_pass_and_resumes_to_the_uninterrupted_release(
    tmp_path: Path,
) -> None:
    reference = _child(tmp_path, "ref.json")
    assert reference.returncode == 0, reference.stderr
    expected = json.loads((tmp_path / "ref.json").read_text())
    assert expected["T"] >= 3 and expected["lost"] == 0  # at least two passes of 2
    journal, marker = str(tmp_path / "j.db"), str(tmp_path / "marker")
    killed = _child(tmp_path, "x.json", "--journal", journal, "--die-at-pass", "2", "--marker", marker)
    assert killed.returncode == -signal.SIGKILL
    with SQLiteJournal.open(journal, read_only=True) as opened:
        statuses = [a["status"] for a in opened.attempts()]
    assert statuses.count("running") == 2 and statuses.count("done") + statuses.count("data_failure") == 2
    resumed = _child(tmp_path, "res.json", "--journal", journal, "--die-at-pass", "2", "--marker", marker)
    assert resumed.returncode == 0, resumed.stderr
    released = json.loads((tmp_path / "res.json").read_text())
    assert released["lost"] == 2  # both runs of the pass in flight, charged through max_lost = 2
    assert {k: released[k] for k in ("params", "score", "epsilon", "T")} == {
        k: expected[k] for k in ("params", "score", "epsilon", "T")}


def test_a_pass_lost_beyond_max_lost_stops_the_resume_and_names_the_pass_size(tmp_path: Path) -> None:
    journal, marker = str(tmp_path / "j.db"), str(tmp_path / "marker")
    args = ("--journal", journal, "--die-at-pass", "2", "--marker", marker, "--max-lost", "0")
    assert _child(tmp_path, "x.json", *args).returncode == -signal.SIGKILL
    resumed = _child(tmp_path, "res.json", *args)
    assert resumed.returncode == 3 and not (tmp_path / "res.json").exists()
    last = resumed.stderr.strip().splitlines()[-1]
    assert last.startswith("LostAttemptsExceeded") and "max_lost=0" in last
    assert "passes of 2 lose all 2" in last and "--max-lost (max_lost) ≥ 2" in last


def test_a_run_books_one_training_only() -> None:
    context = _runs()[0].open()
    booked = Booked(((MECHANISM.sigma, MECHANISM.sample_rate, MECHANISM.steps),))
    context.book(booked)
    with pytest.raises(RunMisuse, match="one DP-SGD training per run"):
        context.book(booked)
    with pytest.raises(RunMisuse):  # recorded on the run: its check stops the search even if the caller caught it
        context.check(finished=False)


def test_a_booking_beyond_the_mechanism_fails_the_runs_check() -> None:
    from dphypo.train.mechanism import BudgetExceeded

    context = _runs()[0].open()
    context.book(Booked(((MECHANISM.sigma, MECHANISM.sample_rate, MECHANISM.steps + 1),)))  # one step too many
    with pytest.raises(BudgetExceeded):
        context.check(finished=False)
