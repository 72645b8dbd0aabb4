"""Recommendation rules of a two-stage search: the best probe, or the GP's posterior mean (strategies.recommend)."""

from __future__ import annotations

import numpy as np
import pytest

from dphypo.space import SearchSpace
from dphypo.strategies.recommend import Recommendation, recommend
from dphypo.strategies.released import ReleasedProbes

SPACE = SearchSpace.from_grid({"lr": np.geomspace(1e-3, 1.0, 8), "clip": np.linspace(0.5, 3.0, 8)},
                              {"lr": "log", "clip": "linear"})


def test_best_probe_is_the_best_released_score_ties_to_the_earlier_probe() -> None:
    released = ReleasedProbes(np.array([[4, 9, 4, 7, 2]]), np.array([[0.5, 0.8, 0.9, 0.8, np.nan]]))
    chosen = recommend(Recommendation(), SPACE, released, "maximize", top_k=3, seed=0)
    assert chosen.indices.tolist() == [[4, 9, 7]] and chosen.available.tolist() == [3]
    low = recommend(Recommendation(), SPACE, released, "minimize", top_k=2, seed=0)
    assert low.indices.tolist() == [[4, 9]]  # 0.5 at point 4 is the smallest; the failed probe is never chosen
    none = recommend(Recommendation("gp-mean"), SPACE, ReleasedProbes(np.array([[3]]), np.array([[np.nan]])),
                     "maximize", seed=0)
    assert none.available.tolist() == [0] and none.fallback.tolist() == [True]


def _lucky() -> ReleasedProbes:
    """A smooth ridge along lr index 5 scored 0.8, and one lucky noisy probe (0.85) in a region that scores 0.3."""
    ridge = [5 * 8 + j for j in range(8)]
    region = [0 * 8 + j for j in range(8)]
    indices = np.array([ridge + region])
    scores = np.array([[0.8, 0.79, 0.81, 0.8, 0.78, 0.8, 0.79, 0.8, 0.3, 0.28, 0.31, 0.85, 0.3, 0.29, 0.3, 0.3]])
    return ReleasedProbes(indices, scores)


def test_the_posterior_mean_discounts_a_lucky_probe_that_its_neighbours_contradict() -> None:
    released = _lucky()
    assert recommend(Recommendation(), SPACE, released, "maximize", seed=0).indices[0, 0] == 3  # the lucky probe
    for rule in ("gp-mean", "gp-near-best"):
        chosen = recommend(Recommendation(rule), SPACE, released, "maximize", seed=1)
        assert chosen.indices[0, 0] // 8 == 5 and not chosen.fallback[0]  # on the ridge, a probed point
        assert chosen.indices[0, 0] in released.indices[0]
    grid = recommend(Recommendation("gp-mean-grid"), SPACE, released, "maximize", top_k=4, seed=2)
    assert np.all(np.abs(grid.indices[0] // 8 - 5) <= 1) and grid.available.tolist() == [4]


def test_a_gp_rule_without_a_usable_fit_falls_back_to_the_best_probe() -> None:
    flat = ReleasedProbes(np.array([[1, 2, 3], [1, 2, 3]]), np.array([[0.5, 0.5, 0.5], [0.5, 0.7, 0.6]]))
    chosen = recommend(Recommendation("gp-mean"), SPACE, flat, "maximize", seed=3)
    assert chosen.fallback.tolist() == [True, False] and chosen.indices[0, 0] == 1
    with pytest.raises(ValueError, match="recommendation must be one of best-probe, gp-mean"):
        Recommendation("median")
    assert Recommendation("gp-near-best", 0.02).describe() == {"rule": "gp-near-best", "tolerance": 0.02}
