"""The GP top-set rule (issue #15): C·π⁰ on the points most likely near the best, c derived from (C, top_mass)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from dphypo.density import in_bounded_set
from dphypo.privacy import PrivacyAccounting, RepeatAndSelect, account, gaussian_rdp, geometric
from dphypo.search.tuner import Tuner
from dphypo.space import Float, SearchSpace
from dphypo.strategies import GPUCB
from dphypo.strategies.gp.rules import GPTopSet, near_best_probability
from tests.strategies._feed import density_after


def test_near_best_probability_closed_form() -> None:
    p = near_best_probability([0.0, 1.0, 2.0, 1.9], [1.0, 2.0, 0.0, 0.0], 0.5)
    np.testing.assert_allclose(p, [stats.norm.cdf(-1.5), stats.norm.cdf(-0.25), 1.0, 1.0], rtol=1e-12)
    batch = near_best_probability([[0.0, 1.0], [3.0, 0.0]], [[1.0, 1.0], [1.0, 1.0]], [0.0, 1.0])
    np.testing.assert_allclose(batch, [[stats.norm.cdf(-1.0), 0.5], [1.0 - stats.norm.cdf(-1.0), stats.norm.cdf(-2.0)]])


def test_c_is_derived_from_C_and_the_top_mass() -> None:
    rule = GPTopSet(C=2.0, top_mass=0.05)
    assert rule.c == pytest.approx(0.9 / 0.95)
    assert (rule.C, rule.name) == (2.0, "gp-top-set")
    with pytest.raises(TypeError):
        GPTopSet(c=0.5)  # type: ignore[call-arg]  # c is derived, never chosen freely
    with pytest.raises(ValueError, match="top_mass must be in"):
        GPTopSet(C=2.0, top_mass=0.6)
    with pytest.raises(ValueError, match="tolerance must be"):
        GPTopSet(tolerance=-1.0)


def test_the_density_favours_the_near_best_points_and_is_in_the_set() -> None:
    space = SearchSpace({"x": Float(0.0, 1.0, 20)})
    rule = GPTopSet(C=2.0, top_mass=0.1)  # the favoured set: 2 of 20 points
    session = rule.start(space, "maximize", seed=0)
    np.testing.assert_allclose(density_after(session, []), space.prior)
    observations = [(i, float(-((i - 15) ** 2)) / 100.0) for i in (0, 5, 10, 14, 15, 16, 19)]
    density = density_after(session, observations)
    assert in_bounded_set(density, space.prior, rule.C, rule.c)
    favoured = np.flatnonzero(np.isclose(density, rule.C * space.prior))
    assert favoured.size == 2 and set(favoured) <= {14, 15, 16}
    np.testing.assert_allclose(np.delete(density, favoured), rule.c * 0.05)


def test_a_search_accounts_the_derived_c_and_pays_less_than_the_paper_bounds() -> None:
    space = SearchSpace({"x": Float(0.0, 1.0, 8)})
    rule = GPTopSet(C=2.0, top_mass=0.05)
    base, runs = gaussian_rdp(4.0), geometric(0.2)
    privacy = PrivacyAccounting(RepeatAndSelect(runs, rule.C, rule.c), base, 1e-5)
    result = Tuner(lambda params, run: -abs(params["x"] - 0.6), space, privacy, strategy=rule, seed=3).run()
    assert result.release.params is not None
    paper = account(base, RepeatAndSelect(runs, 2.0, 0.75), 1e-5).epsilon
    assert result.release.epsilon < paper  # log(C/c) = 0.75 instead of log(8/3) = 0.98
    with pytest.raises(ValueError, match="differ"):
        Tuner(lambda params, run: 0.0, space, privacy, strategy=GPUCB(), seed=3)


def test_the_batched_engine_makes_the_runs_of_the_sequential_loop() -> None:
    from dphypo.simulation.batched import search_paths
    from dphypo.simulation.simulate import _sequential_trials
    from dphypo.simulation.synthetic import synthetic_landscape

    land = synthetic_landscape("smooth")
    rule = GPTopSet(C=2.0, top_mass=0.1)
    indices, scores = search_paths(land, rule, 6, list(range(4)), C=rule.C, c=rule.c, seed=5)
    for r in range(4):
        trials = _sequential_trials(land, rule, T=6, run_count=None, C=rule.C, c=rule.c, seed=5, repeat=r)
        assert [t.grid_index for t in trials] == indices[r].tolist()
        np.testing.assert_allclose([t.score for t in trials], scores[r], rtol=0, atol=0)
