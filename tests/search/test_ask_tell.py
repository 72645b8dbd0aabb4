"""Tuner.ask()/tell(): a search driven by the caller's own training loop keeps every privacy rule of Tuner.run()."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dphypo.privacy import PrivacyAccounting, RepeatAndSelect, dpsgd_rdp, geometric
from dphypo.search.records import PrivateScore, RunMisuse
from dphypo.search.tuner import Tuner
from dphypo.space import Float, LogFloat, SearchSpace
from dphypo.strategies import GPUCB
from dphypo.train import DPSGDMechanism
from tests._private import train_privately

SPACE = SearchSpace({"lr": LogFloat(1e-3, 1.0, 7), "clip": Float(0.5, 2.0, 4)})


def _privacy(C: float = 1.0, c: float = 1.0, p: float = 0.2) -> PrivacyAccounting:
    return PrivacyAccounting(RepeatAndSelect(geometric(p), C, c), dpsgd_rdp(1.0, 0.01, 100), 1e-5)


def _score(params: dict, run=None) -> float:
    return -((math.log10(params["lr"]) + 1.5) ** 2) - (params["clip"] - 1.0) ** 2


def _drive(tuner: Tuner, score=_score, batch: int = 1) -> list[int]:
    """Ask ``batch`` candidates at a time (as parallel workers would), tell each; the asked run numbers."""
    asked: list[int] = []
    while True:
        candidates = [c for c in (tuner.ask() for _ in range(batch)) if c is not None]
        if not candidates:
            return asked
        for candidate in candidates:
            asked.append(candidate.number)
            tuner.tell(candidate, score(candidate.params, candidate.run), artifact={"lr": candidate.params["lr"]})


@pytest.mark.parametrize("strategy", [None, GPUCB(C=2.0, c=0.75)], ids=["uniform", "gp"])
def test_ask_tell_releases_what_run_releases_at_the_same_seed(strategy) -> None:
    C, c = (1.0, 1.0) if strategy is None else (strategy.C, strategy.c)
    ran = Tuner(_score, SPACE, _privacy(C, c), strategy=strategy, seed=5).run()
    tuner = Tuner(None, SPACE, _privacy(C, c), strategy=strategy, seed=5)
    asked = _drive(tuner)
    told = tuner.result()
    assert asked == list(range(ran.history.run_count))
    assert told.release.params == ran.release.params and told.release.score == ran.release.score
    assert told.release.epsilon == ran.release.epsilon
    assert [t.grid_index for t in told.history.trials] == [t.grid_index for t in ran.history.trials]


def test_asking_several_before_telling_draws_them_from_one_density() -> None:
    """runs_per_update = k: k candidates per projected density, as with k workers; the same release as run()."""
    ran = Tuner(_score, SPACE, _privacy(2.0, 0.75), strategy=GPUCB(C=2.0, c=0.75), seed=8, runs_per_update=3).run()
    tuner = Tuner(None, SPACE, _privacy(2.0, 0.75), strategy=GPUCB(C=2.0, c=0.75), seed=8, runs_per_update=3)
    _drive(tuner, batch=3)
    told = tuner.result()
    assert [t.grid_index for t in told.history.trials] == [t.grid_index for t in ran.history.trials]
    assert told.release.params == ran.release.params


def test_only_the_best_is_released_and_failures_score_worst_without_retry() -> None:
    tuner = Tuner(None, SPACE, _privacy(p=0.1), seed=2)
    scores: dict[int, float] = {}

    def score(params, run):
        value = float("nan") if len(scores) % 3 == 0 else _score(params)  # every third run fails on the data
        scores[len(scores)] = value
        return value

    asked = _drive(tuner, score)
    result = tuner.result()
    assert asked == sorted(set(asked))  # every run asked once: a failed run is not retried (privacy rule 5)
    finite = {k: v for k, v in scores.items() if math.isfinite(v)}
    assert result.release.score == max(finite.values())
    assert result.release.artifact == {"lr": result.release.params["lr"]}
    assert sum(not math.isfinite(t.score) for t in result.history.trials) == len(scores) - len(finite)


def test_tell_refuses_a_foreign_or_repeated_candidate_and_result_waits_for_every_run() -> None:
    tuner = Tuner(None, SPACE, _privacy(p=0.05), seed=1)
    with pytest.raises(RuntimeError, match="nothing was asked"):
        tuner.result()
    first = tuner.ask()
    assert first is not None and first.number == 0
    other = Tuner(None, SPACE, _privacy(p=0.05), seed=1).ask()
    with pytest.raises(RuntimeError, match="left"):
        tuner.result()
    tuner.tell(first, 0.5)
    with pytest.raises(ValueError, match="was not asked from this tuner, or was told already"):
        tuner.tell(first, 0.5)
    assert other is not None
    second = tuner.ask()
    assert second is not None and second.number == 1
    with pytest.raises(ValueError, match="was not asked from this tuner"):
        tuner.tell(type(other)(7, other.params, other.run), 0.1)


def test_tell_refuses_a_candidate_another_tuner_handed_out_with_the_same_number() -> None:
    """Tuner A (σ 1.1) told a candidate trained through tuner B's run (σ 0.3): A's ε would not cover that model."""
    def tuner(sigma: float) -> Tuner:
        mechanism = DPSGDMechanism(sigma=sigma, batch_size=4, epochs=1, n_train=8, n_val=10, score_noise=2.0)
        privacy = PrivacyAccounting(RepeatAndSelect(geometric(0.5)), mechanism.rdp(), 1e-5)
        return Tuner(None, SPACE, privacy, mechanism=mechanism, seed=3)

    a, b = tuner(1.1), tuner(0.3)
    mine, foreign = a.ask(), b.ask()
    assert mine is not None and foreign is not None and mine.number == foreign.number == 0
    assert foreign.params == mine.params  # same seed: only the run (and its σ) tells them apart
    train_privately(foreign.run)
    score = foreign.run.private_score(7)
    with pytest.raises(ValueError, match="not handed out by this tuner"):
        a.tell(foreign, score)
    with pytest.raises(ValueError, match="not handed out by this tuner"):  # the same number and params, B's run
        a.tell(type(mine)(mine.number, mine.params, foreign.run), score)
    train_privately(mine.run)  # A's own candidate is still pending and is accepted
    a.tell(mine, mine.run.private_score(7))


def test_tell_refuses_a_bare_score_when_the_mechanism_releases_a_noisy_one() -> None:
    mechanism = DPSGDMechanism(sigma=1.0, batch_size=4, epochs=1, n_train=8, n_val=10, score_noise=2.0)
    privacy = PrivacyAccounting(RepeatAndSelect(geometric(0.5)), mechanism.rdp(), 1e-5)
    tuner = Tuner(None, SPACE, privacy, mechanism=mechanism, seed=4)
    candidate = tuner.ask()
    assert candidate is not None
    train_privately(candidate.run)
    with pytest.raises(TypeError, match="private_score"):
        tuner.tell(candidate, 0.7)
    # The private score, made by the run itself, is accepted; all runs through, the release is one of them.
    tuner = Tuner(None, SPACE, privacy, mechanism=mechanism, seed=4)
    while (candidate := tuner.ask()) is not None:
        train_privately(candidate.run)
        score = candidate.run.private_score(7)
        assert isinstance(score, PrivateScore)
        tuner.tell(candidate, score)
    result = tuner.result()
    assert result.release.score in [t.score for t in result.history.trials]


def test_a_candidate_that_never_trained_privately_stops_the_search() -> None:
    mechanism = DPSGDMechanism(sigma=1.0, batch_size=4, epochs=1, n_train=8, n_val=10, score_noise=2.0)
    privacy = PrivacyAccounting(RepeatAndSelect(geometric(0.5)), mechanism.rdp(), 1e-5)
    tuner = Tuner(None, SPACE, privacy, mechanism=mechanism, seed=4)
    candidate = tuner.ask()
    assert candidate is not None
    with pytest.raises(RunMisuse, match="make_private"):
        tuner.tell(candidate, candidate.run.private_score(3))


def test_an_ask_tell_search_resumes_from_its_journal(tmp_path) -> None:
    path = tmp_path / "search.db"
    reference = Tuner(_score, SPACE, _privacy(p=0.1), seed=9).run()
    assert reference.history.run_count >= 3
    first = Tuner(None, SPACE, _privacy(p=0.1), seed=9, journal=path)
    for _ in range(2):
        candidate = first.ask()
        assert candidate is not None
        first.tell(candidate, _score(candidate.params))
    first.close()  # the curator stops here: two runs finished and journaled
    second = Tuner(None, SPACE, _privacy(p=0.1), seed=9, journal=path)
    asked = _drive(second)
    assert asked == list(range(2, reference.history.run_count))  # finished runs are replayed, never asked again
    result = second.result()
    assert result.release.params == reference.release.params
    assert np.isclose(result.release.epsilon, reference.release.epsilon)
    with pytest.raises(RuntimeError, match="nothing was asked"):
        first.result()  # a closed tuner has no search left to finish
