from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from dphypo.cli import run
from dphypo.privacy import geometric
from dphypo.simulation.simulate import mean_ci95, simulate, simulate_once
from dphypo.simulation.synthetic import synthetic_landscape
from dphypo.strategies import GPUCB, Uniform


def test_mean_ci95_is_the_student_t_interval() -> None:
    x = np.random.default_rng(0).normal(size=50)
    mean, (lo, hi) = mean_ci95(x)
    ref = stats.t.interval(0.95, 49, loc=x.mean(), scale=stats.sem(x))
    assert mean == pytest.approx(x.mean())
    assert (lo, hi) == pytest.approx(ref)


def test_simulate_once_is_reproducible_and_releases_a_grid_value() -> None:
    land = synthetic_landscape("ridge")
    a = simulate_once(land, Uniform(), T=10, seed=3, repeat=2)
    b = simulate_once(land, Uniform(), T=10, seed=3, repeat=2)
    assert a == b and a in set(land.mean.ravel())


def test_uniform_best_of_T_matches_its_distribution() -> None:
    """Noise-free landscape: the released value is the max of T uniform draws; check E against the exact value."""
    land = synthetic_landscape("smooth").with_std(np.zeros(synthetic_landscape("smooth").shape))
    values = np.array([simulate_once(land, Uniform(), T=5, seed=0, repeat=r) for r in range(400)])
    means = np.sort(land.mean.ravel())
    n = means.size
    # P[max of 5 draws = k-th smallest] = (k/n)^5 − ((k−1)/n)^5
    k = np.arange(1, n + 1)
    expected = np.sum(means * ((k / n) ** 5 - ((k - 1) / n) ** 5))
    assert abs(values.mean() - expected) < 5 * values.std() / np.sqrt(values.size)


def test_random_T_and_argument_checks() -> None:
    land = synthetic_landscape("smooth")
    value = simulate_once(land, Uniform(), run_count=geometric(0.3), seed=1)
    assert np.isfinite(value)
    with pytest.raises(ValueError, match="exactly one"):
        simulate_once(land, Uniform(), seed=1)
    with pytest.raises(ValueError, match="T must be"):
        simulate_once(land, Uniform(), T=0)


def test_simulate_compares_strategies() -> None:
    land = synthetic_landscape("smooth")
    results = simulate(land, [Uniform(), GPUCB()], repeats=4, T=4, C=2.0, c=0.75, seed=0, workers=1)
    assert [r.strategy for r in results] == ["uniform", "gp-ucb"]
    for r in results:
        assert r.repeats == 4 and r.values.shape == (4,)
        assert r.ci95[0] <= r.mean <= r.ci95[1]
        assert r.to_dict()["T"] == 4


def test_simulate_cli_json(capsys) -> None:
    argv = (
        "simulate --landscape synthetic:smooth --strategy uniform --strategy gp --fixed-T 3 --repeats 3 "
        "--C 2 --c 0.75 --tau 0.1 --beta 1 --seed 0 --workers 1 --json"
    ).split()
    assert run(argv) == 0
    payload = json.loads(capsys.readouterr().out)
    assert [r["strategy"] for r in payload["results"]] == ["uniform", "gp-ucb"]
    for r in payload["results"]:
        assert set(r) >= {"strategy", "T", "mean", "ci95", "repeats"} and r["T"] == 3 and r["repeats"] == 3


def test_simulate_cli_rejects_unknown_strategy(capsys) -> None:
    assert run(["simulate", "--landscape", "synthetic:smooth", "--strategy", "tpe", "--fixed-T", "3"]) == 2
    assert "strategy" in capsys.readouterr().err


def test_batched_engine_releases_the_values_of_the_sequential_engine() -> None:
    land = synthetic_landscape("smooth")
    kwargs = dict(repeats=5, T=4, C=2.0, c=0.75, seed=6, workers=1)
    sequential = simulate(land, [Uniform(), GPUCB()], **kwargs)
    batched = simulate(land, [Uniform(), GPUCB()], engine="batched", batch=2, **kwargs)
    for s, b in zip(sequential, batched, strict=True):
        assert (s.strategy, s.T, s.repeats) == (b.strategy, b.T, b.repeats)
        np.testing.assert_array_equal(s.values, b.values)
        assert s.mean == b.mean and s.ci95 == b.ci95


def test_batched_engine_with_random_T() -> None:
    land = synthetic_landscape("ridge")
    runs = geometric(0.25)
    result = simulate(land, [Uniform()], repeats=50, run_count=runs, seed=2, workers=1, engine="batched")[0]
    assert result.T is None and result.run_count == repr(runs)
    expected = [simulate_once(land, Uniform(), run_count=runs, seed=2, repeat=r) for r in range(50)]
    assert result.values.tolist() == expected


def test_simulate_cli_with_random_T(capsys) -> None:
    argv = "simulate --landscape synthetic:smooth --strategy uniform --runs geometric --gamma 0.3 --repeats 20 --json"
    assert run(argv.split()) == 0
    result = json.loads(capsys.readouterr().out)["results"][0]
    assert result["T"] is None and "gamma=0.3" in result["run_count"] and result["repeats"] == 20
    both = "simulate --landscape synthetic:smooth --strategy uniform --fixed-T 3 --runs geometric --gamma 0.3"
    assert run(both.split()) == 2
    assert "exactly one of --fixed-T or --runs" in capsys.readouterr().err


@pytest.mark.parametrize("engine", ["sequential", "batched"])
def test_simulate_gives_the_same_values_with_every_executor(engine: str) -> None:
    from dphypo.search.execution import ProcessExecutor

    land = synthetic_landscape("ridge")
    kwargs = dict(repeats=6, T=4, C=2.0, c=0.75, seed=11, engine=engine, batch=2)
    strategies = [Uniform(), GPUCB()]
    expected = [r.values for r in simulate(land, strategies, executor="sequential", **kwargs)]
    assert len(set(expected[1].tolist())) > 1  # the repeats differ: a mix-up of repeats would show
    with ProcessExecutor(2, gpus=[]) as pool:
        in_pool = [r.values for r in simulate(land, strategies, executor=pool, **kwargs)]
    for values, reference in zip(in_pool, expected, strict=True):
        np.testing.assert_array_equal(values, reference)
    if engine == "batched":
        pytest.importorskip("ray")
        on_ray = [r.values for r in simulate(land, strategies, executor="ray", workers=2, **kwargs)]
        for values, reference in zip(on_ray, expected, strict=True):
            np.testing.assert_array_equal(values, reference)
