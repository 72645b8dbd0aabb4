"""GP placement of released probes: BoTorch acquisitions on the project's GP, a space-filling start, a uniform
share and a fallback when the GP is uninformative (dphypo.strategies.gp.placement)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dphypo.space import SearchSpace
from dphypo.strategies.gp.acquisition import GridModel
from dphypo.strategies.gp.fit import fit_surrogate
from dphypo.strategies.gp.placement import ProbePlacement, place_batch, place_probes, space_filling
from dphypo.strategies.released import ReleasedProbes

SPACE = SearchSpace.from_grid({"lr": np.geomspace(1e-3, 1.0, 8), "clip": np.linspace(0.5, 3.0, 8)},
                              {"lr": "log", "clip": "linear"})
UNIT = SPACE.unit_coordinates
#: A smooth bump with its peak at unit (0.7, 0.3), 0.1 at the corners of the grid.
TRUE = 0.1 + 0.8 * np.exp(-(((UNIT[:, 0] - 0.7) ** 2) + (UNIT[:, 1] - 0.3) ** 2) / 0.08)


def _scores(noise: float, members: int, probes: int, seed: int = 1):
    z = np.random.default_rng(seed).standard_normal((members, probes))
    return lambda indices, first: TRUE[indices] + noise * z[:, first : first + indices.shape[1]]


def test_the_schedule_is_a_start_then_batches_and_uniform_places_all_at_once() -> None:
    # the default (docs/studies.md, "GP placement schedule"): max(3, ⌈n/4⌉) space-filling probes, then one per fit
    assert ProbePlacement().schedule(20) == (5,) + (1,) * 15 and ProbePlacement().schedule(10) == (3,) + (1,) * 7
    assert ProbePlacement(start=5, batch=5, start_share=0.0).schedule(20) == (5, 5, 5, 5)  # the earlier schedule
    assert ProbePlacement(batch=4, start=3).schedule(12) == (3, 4, 4, 1)
    assert ProbePlacement("uniform").schedule(20) == (20,)
    assert ProbePlacement().uniform_count(5) == 1 and ProbePlacement(uniform_share=0.0).uniform_count(5) == 0
    for bad, message in (({"strategy": "tpe"}, "probe placement must be one of uniform, gp"),
                         ({"acquisition": "ei"}, "acquisition must be one of ucb, log-nei"),
                         ({"start": 1}, "start"), ({"uniform_share": 1.5}, "uniform_share must be in"),
                         ({"uninformative_noise": 0.0}, "uninformative_noise must be in")):
        with pytest.raises(ValueError, match=message):
            ProbePlacement(**bad)


def test_the_schedule_can_grow_with_the_probe_count_and_keeps_the_uniform_share_over_small_batches() -> None:
    scaled = ProbePlacement(start=3, batch=1, start_share=0.25, batch_share=0.125)
    assert scaled.schedule(10) == (3, 2, 2, 2, 1) and scaled.schedule(20) == (5, 3, 3, 3, 3, 3)
    assert scaled.schedule(2) == (2,) and scaled.schedule(45) == (12, 6, 6, 6, 6, 6, 3)
    # batches of five after a start of five keep one prior draw each, as before
    fives = ProbePlacement(start=5, batch=5, start_share=0.0)
    assert fives.uniform_counts(20) == (0, 1, 1, 1) and fives.uniform_counts(13) == (0, 1, 1)
    assert ProbePlacement().uniform_count(5) == ProbePlacement().uniform_count(5, 10) == 1
    # smaller batches keep one in five over the stage (per batch, round(0.2 · 1) would keep none)
    singles = ProbePlacement(start_share=0.0).uniform_counts(13)
    assert singles == (0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1) and scaled.uniform_counts(20) == (0, 1, 0, 1, 0, 1)
    assert ProbePlacement(uniform_share=0.0, batch=2).uniform_counts(11) == (0,) * 5  # (3, 2, 2, 2, 2)
    assert ProbePlacement(**scaled.describe()) == scaled  # the release states the schedule exactly
    for bad, message in (({"start_share": 1.5}, "start_share must be in"), ({"batch_share": -0.1}, "batch_share")):
        with pytest.raises(ValueError, match=message):
            ProbePlacement(**bad)


def test_a_batch_draws_its_share_of_the_stage_from_the_prior_by_probe_number() -> None:
    indices = np.random.default_rng(12).choice(SPACE.size, size=(3, 7))
    placement = ProbePlacement(start=3, batch=2, mc_samples=32)  # after 7 probes: round(1.8) - round(1.4) = 1
    for count, kept in ((7, 1), (5, 0)):
        released = ReleasedProbes(indices[:, :count], TRUE[indices[:, :count]])
        gp = place_batch(placement, SPACE, released, 2, np.random.default_rng(13), "maximize")
        prior = place_batch(ProbePlacement("uniform"), SPACE, released, 2, np.random.default_rng(13), "maximize")
        assert placement.uniform_count(2, count) == kept
        assert np.array_equal(gp[:, :kept], prior[:, :kept]) and not np.array_equal(gp[:, kept:], prior[:, kept:])


def test_the_start_is_a_latin_hypercube_on_every_axis() -> None:
    start = space_filling(SPACE, 4, 500, np.random.default_rng(0))
    lr = UNIT[start][..., 0]  # (500, 4)
    # one point per quarter of each axis (snapped to the nearest of 8 grid values: within 1/14 of its stratum)
    strata = np.sort(lr, axis=1)
    assert np.all(strata[:, 0] <= 0.25 + 1 / 14) and np.all(strata[:, -1] >= 0.75 - 1 / 14)
    uniform = np.random.default_rng(0).choice(SPACE.size, size=(500, 4))
    assert np.mean(UNIT[uniform][..., 0].max(axis=1) < 0.5) > 0.02  # i.i.d. draws cluster; the hypercube never


def test_the_grid_model_is_the_fitted_posterior() -> None:
    rng = np.random.default_rng(2)
    indices = rng.choice(SPACE.size, size=(3, 9))
    fit = fit_surrogate(UNIT, indices, TRUE[indices] + 0.05 * rng.standard_normal((3, 9)), seed=0)
    assert fit.ok.all()
    model = GridModel(torch.as_tensor(UNIT.copy()), torch.as_tensor(fit.mean), fit.posterior.factor_rows(np.arange(3)),
                      torch.as_tensor(fit.hyper[:, 2:]), torch.as_tensor(fit.score_scale))
    X = torch.tensor([[5.0], [40.0], [5.0]]).expand(3, 3, 1)
    posterior = model.posterior(X)
    assert posterior.mean.shape == (3, 3, 1)
    np.testing.assert_allclose(posterior.mean[..., 0].numpy(), fit.mean[:, [5, 40, 5]], rtol=1e-10)
    np.testing.assert_allclose(posterior.variance[..., 0].numpy(), fit.std[:, [5, 40, 5]] ** 2, rtol=1e-5,
                               atol=1e-10)
    covariance = posterior.distribution.covariance_matrix
    np.testing.assert_allclose(covariance[:, 0, 2].numpy(), covariance[:, 0, 0].numpy(), atol=1e-9)  # one point


@pytest.mark.parametrize("acquisition", ["ucb", "log-nei"])
def test_gp_batches_go_where_the_released_scores_are_high(acquisition: str) -> None:
    placement = ProbePlacement(acquisition=acquisition, start=5, batch=5, mc_samples=64)
    members = 16
    guided = place_probes(placement, SPACE, 15, members, _scores(0.02, members, 15), np.random.default_rng(3),
                          "maximize")
    uniform = place_probes(ProbePlacement("uniform"), SPACE, 15, members, _scores(0.02, members, 15),
                           np.random.default_rng(3), "maximize")
    # the last batch's GP picks (its first probe is the uniform share): 0.49 (ucb), 0.55 (log-nei) against 0.25
    assert TRUE[guided.indices[:, 11:]].mean() > TRUE[uniform.indices[:, 11:]].mean() + 0.15
    for first in (5, 10):  # the GP part of a batch never probes one point twice
        batch = guided.indices[:, first + 1 : first + 5]
        assert all(len(set(row)) == row.size for row in batch)


def test_the_uniform_share_and_an_uninformative_gp_place_from_the_prior() -> None:
    indices = np.random.default_rng(4).choice(SPACE.size, size=(3, 12))
    indices[2] = np.tile([3, 30, 60, 20], 3)  # four points probed three times each
    scores = TRUE[indices].copy()
    scores[1] = 0.5  # all equal: no fit
    scores[2] = 0.5 + 0.05 * np.random.default_rng(5).standard_normal(12)  # noise only: fitted noise share 0.55
    released = ReleasedProbes(indices, scores)
    gp = place_batch(ProbePlacement(), SPACE, released, 5, np.random.default_rng(9), "maximize")
    prior = place_batch(ProbePlacement("uniform"), SPACE, released, 5, np.random.default_rng(9), "maximize")
    assert gp[0, 0] == prior[0, 0] and not np.array_equal(gp[0], prior[0])  # one of five kept uniform
    np.testing.assert_array_equal(gp[1:], prior[1:])  # the fallback: the whole batch from the prior
    strict = place_batch(ProbePlacement(uninformative_noise=1.0, uniform_share=0.0), SPACE, released, 5,
                         np.random.default_rng(9), "maximize")
    assert not np.array_equal(strict[2], prior[2])  # without the test, the noise-only member follows its GP


def test_placement_is_a_function_of_the_released_probes_and_the_stream() -> None:
    rng = np.random.default_rng(6)
    indices = rng.choice(SPACE.size, size=(2, 6))
    released = ReleasedProbes(indices, TRUE[indices])
    first = place_batch(ProbePlacement(), SPACE, released, 4, np.random.default_rng(7), "maximize")
    again = place_batch(ProbePlacement(), SPACE, released, 4, np.random.default_rng(7), "maximize")
    np.testing.assert_array_equal(first, again)
    flipped = place_batch(ProbePlacement(), SPACE, ReleasedProbes(indices, -TRUE[indices]), 4,
                          np.random.default_rng(7), "minimize")
    np.testing.assert_array_equal(first, flipped)  # minimising the negated scores is the same search
