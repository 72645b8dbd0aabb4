"""The tuner keeps the privacy rules: T drawn once first, every density projected, only the best released."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

import dphypo.search.loop as loop_module
from dphypo.privacy import (
    PrivacyAccounting,
    RepeatAndSelect,
    TruncatedNegativeBinomial,
    dpsgd_rdp,
    geometric,
)
from dphypo.privacy.run_counts import Poisson
from dphypo.search.loop import better
from dphypo.search.records import DataFailure
from dphypo.search.tuner import Release, Tuner
from dphypo.simulation.synthetic import synthetic_landscape
from dphypo.space import Choice, Float, LogFloat, SearchSpace
from dphypo.strategies import GPUCB, Uniform

SPACE = SearchSpace({"lr": LogFloat(1e-3, 1.0, 7), "clip": Float(0.5, 2.0, 4)})


def _privacy(C: float = 1.0, c: float = 1.0, runs=None) -> PrivacyAccounting:
    """The accounted search; the default (C, c) = (1, 1) are the default strategy's (Uniform) bounds."""
    return PrivacyAccounting(RepeatAndSelect(runs or geometric(0.1), C, c), dpsgd_rdp(1.0, 0.01, 100), 1e-5)


def _score(params: dict, run) -> float:
    return -((math.log10(params["lr"]) + 1.5) ** 2) - (params["clip"] - 1.0) ** 2


@dataclasses.dataclass(frozen=True)
class SpyRuns(TruncatedNegativeBinomial):
    """A TNB that logs when it is sampled (frozen dataclasses allow a logging side list)."""

    log: list = dataclasses.field(default_factory=list, compare=False, hash=False)

    def sample(self, rng: np.random.Generator) -> int:
        self.log.append("T")
        return super().sample(rng)


def test_T_is_drawn_once_before_any_run() -> None:
    runs = SpyRuns(1.0, 0.1)

    def objective(params: dict, run) -> float:
        runs.log.append("run")
        return _score(params, run)

    result = Tuner(objective, SPACE, _privacy(runs=runs), seed=3).run()
    assert runs.log[0] == "T" and runs.log.count("T") == 1
    assert runs.log.count("run") == result.history.run_count == len(result.history.trials)


class Spiky:
    """A strategy whose densities are as far from S_{C,c} as possible: all mass on one point, or garbage."""

    name = "spiky"

    def start(self, space, direction, seed):
        outer = self

        class Session:
            events: tuple = ()
            seen = 0

            def observe(self, index, score):
                self.seen += 1

            def density(self):
                outer.calls += 1
                if self.seen % 2:
                    return np.full(space.size, -5.0)  # not even a density
                d = np.zeros(space.size)
                d[self.seen % space.size] = 1.0
                return d

        return Session()

    calls = 0


def test_every_sampling_density_is_projected() -> None:
    C, c = 1.5, 0.5
    result = Tuner(_score, SPACE, _privacy(C, c, geometric(0.05)), strategy=Spiky(), seed=1,
                   record_densities=True).run()
    prior = SPACE.prior
    assert len(result.history.densities) == result.history.run_count
    for d in result.history.densities:
        assert np.all(d >= c * prior - 1e-15) and np.all(d <= C * prior + 1e-15)
        assert d.sum() == pytest.approx(1.0, abs=1e-12)


def test_a_broken_projection_is_never_sampled(monkeypatch) -> None:
    monkeypatch.setattr(loop_module, "project", lambda p, prior, C, c: np.eye(prior.size)[0])
    calls = []
    with pytest.raises(RuntimeError, match="outside S"):
        Tuner(lambda p, r: calls.append(p) or 0.0, SPACE, _privacy(), seed=0).run()
    assert calls == []


def test_release_exposes_only_the_best_run() -> None:
    result = Tuner(lambda p, r: (_score(p, r), {"model": p}), SPACE, _privacy(), seed=7).run()
    release, history = result.release, result.history
    assert {f.name for f in dataclasses.fields(Release)} == {"params", "score", "artifact", "epsilon", "delta",
                                                            "privacy", "mechanism"}
    scores = [t.score for t in history.trials]
    assert release.score == max(scores)
    assert release.artifact == {"model": release.params}
    assert release.epsilon == _privacy().account().epsilon
    assert "run_count" not in repr(release) and str(history.run_count) not in {repr(release.score)}
    assert "NOT PRIVATE" in type(history).__doc__


def test_data_failures_score_worst_and_are_not_retried() -> None:
    calls: list[int] = []

    def objective(params: dict, run) -> float:
        calls.append(run.number)
        if params["clip"] == 1.0:
            raise DataFailure("loss diverged")
        if params["lr"] > 0.3:
            return float("nan")
        return _score(params, run)

    result = Tuner(objective, SPACE, _privacy(2.0, 0.75, geometric(0.02)), seed=2, strategy=GPUCB()).run()
    history = result.history
    assert calls == list(range(history.run_count))  # every run exactly once, in order
    failed = [t for t in history.trials if t.failed]
    assert failed and all(math.isnan(t.score) for t in failed)
    assert math.isfinite(result.release.score)


def test_all_failed_release_is_explicit() -> None:
    with pytest.warns(RuntimeWarning, match="every run of the search failed"):
        result = Tuner(lambda p, r: float("nan"), SPACE, _privacy(), seed=0).run()
    assert math.isnan(result.release.score) and result.release.artifact is None
    assert result.release.params is not None


def test_seeded_searches_are_reproducible() -> None:
    a = Tuner(_score, SPACE, _privacy(2.0, 0.75), strategy=GPUCB(), seed=11).run()
    b = Tuner(_score, SPACE, _privacy(2.0, 0.75), strategy=GPUCB(), seed=11).run()
    c = Tuner(_score, SPACE, _privacy(2.0, 0.75), strategy=GPUCB(), seed=12).run()
    assert [t.grid_index for t in a.history.trials] == [t.grid_index for t in b.history.trials]
    assert a.release.params == b.release.params
    assert [t.grid_index for t in a.history.trials] != [t.grid_index for t in c.history.trials]


def test_gp_with_C_equal_c_equal_1_is_exactly_uniform() -> None:
    privacy = _privacy(1.0, 1.0, geometric(0.05))
    gp = Tuner(_score, SPACE, privacy, strategy=GPUCB(C=1.0, c=1.0, beta=50.0), seed=5).run()
    uniform = Tuner(_score, SPACE, privacy, strategy=Uniform(), seed=5).run()
    assert [t.grid_index for t in gp.history.trials] == [t.grid_index for t in uniform.history.trials]


def test_a_strategy_with_other_bounds_than_the_accountant_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^the strategy's density bounds \(C, c\) = \(2, 0.75\) differ from "
                                         r"privacy.search's \(C, c\) = \(1.5, 0.75\);[^\n]*$"):
        Tuner(_score, SPACE, _privacy(1.5, 0.75), strategy=GPUCB())
    with pytest.raises(ValueError, match=r"\(C, c\) = \(1, 1\) differ from privacy.search's \(C, c\) = \(2, 0.75\)"):
        Tuner(_score, SPACE, _privacy(2.0, 0.75))  # the default strategy is Uniform: (C, c) = (1, 1)
    Tuner(_score, SPACE, _privacy(2.0, 0.75), strategy=GPUCB(C=2.0, c=0.75))  # the same pair: fine
    Tuner(_score, SPACE, _privacy(1.5, 0.5), strategy=Spiky())  # no bounds of its own: projected with the mechanism's


def test_minimize_releases_the_lowest_score() -> None:
    result = Tuner(lambda p, r: -_score(p, r), SPACE, _privacy(), direction="minimize", seed=4).run()
    assert result.release.score == min(t.score for t in result.history.trials)


def test_batches_draw_several_runs_per_projected_density() -> None:
    result = Tuner(_score, SPACE, _privacy(2.0, 0.75, geometric(0.05)), strategy=GPUCB(), seed=9, runs_per_update=4,
                   record_densities=True).run()
    assert len(result.history.densities) == math.ceil(result.history.run_count / 4)


def test_poisson_T_zero_releases_the_default_output() -> None:
    privacy = _privacy(1.0, 1.0, Poisson(1.0))
    results = [Tuner(_score, SPACE, privacy, seed=s).run() for s in range(40)]
    empty = [r for r in results if r.history.run_count == 0]
    assert empty, "P[T=0] = e^-1 ≈ 0.37; some of 40 seeds must give T = 0"
    assert all(r.release.params is None and r.release.score is None for r in empty)


def test_order_is_total_and_data_independent() -> None:
    assert better((0.9, 5), (0.8, 1), "maximize")
    assert better((0.9, 1), (0.9, 5), "maximize")  # ties: smaller grid index
    assert better((0.1, 3), (float("nan"), 0), "maximize")
    assert better((0.1, 3), (0.2, 0), "minimize")
    assert not better((float("nan"), 0), (-1e300, 9), "minimize")


def test_objective_gets_run_seed_and_privacy() -> None:
    seen = []
    privacy = _privacy()
    Tuner(lambda p, r: seen.append((p, r)) or 0.0, SPACE, privacy, seed=8).run()
    runs = [r for _, r in seen]
    assert runs and all(r.privacy is privacy for r in runs)
    assert [r.number for r in runs] == list(range(len(runs)))
    assert len({r.seed for r in runs}) == len(runs)
    assert all(params == SPACE.params(r.grid_index) for params, r in seen)  # the params of the drawn grid point


def test_categorical_axes_and_bad_outputs() -> None:
    space = SearchSpace({"opt": Choice(("sgd", "adam")), "lr": LogFloat(0.01, 1.0, 3)})
    result = Tuner(lambda p, r: float(p["opt"] == "adam"), space, _privacy(), seed=1).run()
    assert result.release.params["opt"] in ("sgd", "adam")
    with pytest.raises(TypeError, match="objective must return"):
        Tuner(lambda p, r: "good", space, _privacy(), seed=1).run()


def test_landscape_objective_plugs_in() -> None:
    land = synthetic_landscape("smooth")
    result = Tuner(land.objective(np.random.default_rng(0)), land.space, _privacy(), seed=0).run()
    trials = result.history.trials
    best = trials[result.history.best_number]
    assert land.space.index(result.release.params) == best.grid_index  # the released params are the best run's
    assert result.release.score == best.score == max(t.score for t in trials)


def test_a_mechanism_costlier_than_the_accounted_curve_is_refused() -> None:
    from dphypo.train.mechanism import DPSGDMechanism

    mechanism = DPSGDMechanism(sigma=0.5, batch_size=64, epochs=10, n_train=1079)
    cheap = PrivacyAccounting(RepeatAndSelect(geometric(0.1)), mechanism.rdp().repeated(1), 1e-5)
    Tuner(_score, SPACE, cheap, mechanism=mechanism)  # exactly the mechanism's curve: fine
    too_cheap = PrivacyAccounting(RepeatAndSelect(geometric(0.1)), dpsgd_rdp(5.0, 0.01, 100), 1e-5)
    with pytest.raises(ValueError, match=r"more per run than privacy\.base"):
        Tuner(_score, SPACE, too_cheap, mechanism=mechanism)
