"""The batched simulation engine against the sequential tuner loop it must reproduce.

Three levels of evidence:

* the vectorised building blocks equal their per-vector originals (projection, UCB, softmax, draw, release);
* path by path: with the same seed, every repeat makes the same runs in both engines;
* in distribution: with *independent* seeds, two-sample tests on the released value and on how close GP-driven
  draws land to the incumbent do not reject, while the same tests reject a changed algorithm.

Error rates of the two-sample tests: each p-value is compared with ``ALPHA = 5e-5`` and three are checked, so
for a correct engine the chance (over the choice of seeds) that the test fails is at most 1.5e-4. The seeds
are fixed, so a given version of the code either passes or fails deterministically; nothing is flaky.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dphypo._batched import (
    _draw_batch,
    _oriented,
    incumbent_distance,
    project_batch,
    release_batch,
    search_paths,
    simulate_batched,
    tilted_softmax_batch,
    ucb_scores_batch,
)
from dphypo._loop import _draw
from dphypo.density import project
from dphypo.landscapes import Landscape
from dphypo.privacy import Poisson, geometric
from dphypo.simulate import _sequential_trials, simulate, simulate_once
from dphypo.strategies import GPUCB, Direction, Uniform, oriented_scores, tilted_softmax, ucb_scores
from dphypo.surrogate import SurrogateFit
from dphypo.synthetic import synthetic_landscape
from dphypo.tuner import Trial, best_trial

ALPHA = 5e-5
#: The statistical comparison: GP-UCB with a peaked softmax whose projection onto S_{C,c} binds.
STRATEGY, T, C, c = GPUCB(tau=0.1, beta=4.0), 5, 3.0, 1.0 / 3.0
SEQUENTIAL_REPEATS, BATCHED_REPEATS = 120, 1500


def _tilted_plane(size: int = 6, noise: float = 0.01) -> Landscape:
    """mean = 0.2 + 0.3 u + 0.2 v on a size x size unit grid with constant noise: the GP finds the slope."""
    u = np.linspace(0.0, 1.0, size)
    mean = 0.2 + 0.3 * u[:, None] + 0.2 * u[None, :]
    return Landscape.from_axes(
        mean, np.full(mean.shape, noise), {"u": u, "v": u}, {"u": "linear", "v": "linear"}
    )


def _sequential_paths(land: Landscape, strategy, T: int, repeats: int, *, C: float, c: float, seed: int):
    runs = [
        _sequential_trials(land, strategy, T=T, run_count=None, C=C, c=c, seed=seed, repeat=r)
        for r in range(repeats)
    ]
    return (
        np.array([[t.grid_index for t in trials] for trials in runs]),
        np.array([[t.score for t in trials] for trials in runs]),
    )


@pytest.fixture(scope="module")
def plane() -> Landscape:
    return _tilted_plane()


@pytest.fixture(scope="module")
def sequential(plane):
    """The reference sample: the sequential tuner loop (BoTorch fit per step), seed 11."""
    return _sequential_paths(plane, STRATEGY, T, SEQUENTIAL_REPEATS, C=C, c=c, seed=11)


# ------------------------------------------------------------------------------------- building blocks
def _softmax(z: np.ndarray, beta: float) -> np.ndarray:
    weights = np.exp(beta * (z - z.max()))
    return weights / weights.sum()


@pytest.mark.parametrize("n", [2, 7, 320, 2500])
@pytest.mark.parametrize(
    "bounds", [(2.0, 0.75), (10.0, 0.1), (1.0, 0.5), (3.0, 1.0), (1.0, 1.0), (1e6, 1e-6)]
)
def test_project_batch_equals_project_row_by_row(n: int, bounds: tuple[float, float]) -> None:
    """Flat to very peaked softmaxes, a non-probability vector with a large offset, constants, the prior."""
    rng = np.random.default_rng(n)
    weights = rng.uniform(0.2, 2.0, n)
    for prior in (np.full(n, 1.0 / n), weights / weights.sum()):
        rows = [_softmax(rng.normal(size=n), beta) for beta in (0.0, 0.1, 1.0, 10.0, 50.0)]
        rows += [rng.normal(size=n) * 1e3 + 1e6, np.zeros(n), prior]
        densities = np.array(rows)
        batched = project_batch(densities, prior, *bounds)
        expected = np.array([project(row, prior, *bounds) for row in densities])
        np.testing.assert_allclose(batched, expected, rtol=1e-12, atol=0.0)


def test_project_batch_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="densities"):
        project_batch(np.ones(4), np.full(4, 0.25), 2.0, 0.5)
    with pytest.raises(ValueError, match="C must"):
        project_batch(np.ones((1, 4)), np.full(4, 0.25), 0.5, 0.5)


@pytest.mark.parametrize("kind", ["raw", "standardized", "range"])
def test_ucb_and_softmax_equal_the_strategy_functions(kind: str) -> None:
    rng = np.random.default_rng(1)
    mean, std = rng.normal(size=(4, 9)), rng.uniform(0.1, 1.0, size=(4, 9))
    mean[3], std[3] = 0.5, 0.0  # constant s: the "range" scale maps it to zeros
    loc, scale = rng.normal(size=4), rng.uniform(0.5, 2.0, size=4)
    prior = (w := rng.uniform(0.5, 1.5, 9)) / w.sum()
    s = ucb_scores_batch(mean, std, loc, scale, 0.3, kind)
    density = tilted_softmax_batch(s, 2.5, prior)
    for b in range(4):
        fit = SurrogateFit(mean[b], std[b], True, None, float(loc[b]), float(scale[b]))
        expected = ucb_scores(fit, 0.3, kind)  # type: ignore[arg-type]
        np.testing.assert_allclose(s[b], expected, rtol=1e-15, atol=1e-15)
        np.testing.assert_allclose(density[b], tilted_softmax(s[b], 2.5, prior), rtol=1e-14)


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_orientation_draw_and_release_equal_the_tuner(direction: str) -> None:
    rng = np.random.default_rng(2)
    scores = rng.choice([0.1, 0.5, 0.9, math.nan], size=(200, 5))  # ties and failed runs
    scores[0] = math.nan
    indices = rng.integers(0, 6, size=(200, 5))
    oriented = _oriented(scores, direction)  # type: ignore[arg-type]
    released = release_batch(indices, scores, direction)  # type: ignore[arg-type]
    for b in range(200):
        observations = list(zip(indices[b].tolist(), scores[b].tolist(), strict=True))
        expected = oriented_scores(observations, 6, direction)[1]  # type: ignore[arg-type]
        np.testing.assert_array_equal(oriented[b], expected)
        trials = [
            Trial(j, int(i), {}, float(q), not math.isfinite(q), 0.0) for j, (i, q) in enumerate(observations)
        ]
        best = best_trial(trials, direction)  # type: ignore[arg-type]
        assert best is not None and released[b] == trials[best].grid_index
    densities = rng.dirichlet(np.ones(50), size=30)
    uniforms = np.random.default_rng(3).random(30)
    generator = np.random.default_rng(3)
    assert _draw_batch(densities, uniforms).tolist() == [_draw(d, generator) for d in densities]


# ------------------------------------------------------------------------------------------ path by path
def test_uniform_engine_is_bit_identical_to_simulate_once() -> None:
    land = synthetic_landscape("ridge")
    for kwargs in (dict(T=7), dict(run_count=Poisson(2.0)), dict(run_count=geometric(0.3))):
        batched = simulate_batched(land, Uniform(), repeats=150, C=2.0, c=0.75, seed=4, workers=1, **kwargs)
        sequential = [
            simulate_once(land, Uniform(), C=2.0, c=0.75, seed=4, repeat=r, **kwargs) for r in range(150)
        ]
        np.testing.assert_array_equal(batched, sequential)


def test_uniform_engine_with_poisson_T_releases_the_default_when_T_is_zero() -> None:
    land = synthetic_landscape("smooth")
    values = simulate_batched(land, Uniform(), repeats=60, run_count=Poisson(1.0), seed=0, workers=1)
    assert np.sum(values == land.worst_value) >= 10  # P[T = 0] = e^-1 ≈ 0.37 of the 60 repeats
    assert values.tolist() == [
        simulate_once(land, Uniform(), run_count=Poisson(1.0), seed=0, repeat=r) for r in range(60)
    ]


def test_gp_engine_makes_the_same_runs_as_the_sequential_loop(plane, sequential) -> None:
    indices, scores = search_paths(plane, STRATEGY, T, range(SEQUENTIAL_REPEATS), C=C, c=c, seed=11)
    np.testing.assert_array_equal(indices, sequential[0])
    np.testing.assert_array_equal(scores, sequential[1])


def test_path_comparison_detects_beta_times_ten(plane, sequential) -> None:
    changed = GPUCB(tau=STRATEGY.tau, beta=10 * STRATEGY.beta)
    indices, _ = search_paths(plane, changed, T, range(SEQUENTIAL_REPEATS), C=C, c=c, seed=11)
    assert np.mean(np.any(indices != sequential[0], axis=1)) > 0.2


def test_gp_engine_with_random_T_matches_simulate_once() -> None:
    land = _tilted_plane(size=4)
    batched = simulate_batched(
        land, GPUCB(beta=2.0), repeats=8, run_count=geometric(0.3), C=2.0, c=0.5, seed=2, batch=3, workers=1
    )
    expected = [
        simulate_once(land, GPUCB(beta=2.0), run_count=geometric(0.3), C=2.0, c=0.5, seed=2, repeat=r)
        for r in range(8)
    ]
    np.testing.assert_array_equal(batched, expected)


def test_gp_engine_is_reproducible_and_independent_of_the_batch_size(plane) -> None:
    runs = [
        simulate_batched(plane, STRATEGY, repeats=24, T=5, C=C, c=c, seed=3, batch=batch, workers=1)
        for batch in (24, 5, 24)
    ]
    np.testing.assert_array_equal(runs[0], runs[1])
    np.testing.assert_array_equal(runs[0], runs[2])


def test_workers_do_not_change_the_result() -> None:
    land = synthetic_landscape("multimodal")
    one = simulate_batched(land, Uniform(), repeats=5000, T=3, C=2.0, c=0.75, seed=9, workers=1)
    two = simulate_batched(land, Uniform(), repeats=5000, T=3, C=2.0, c=0.75, seed=9, workers=2)
    np.testing.assert_array_equal(one, two)


def test_simulate_batched_validates_its_arguments(plane) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        simulate_batched(plane, Uniform(), repeats=2)
    with pytest.raises(ValueError, match="T must"):
        simulate_batched(plane, Uniform(), repeats=2, T=0)
    with pytest.raises(ValueError, match="batch must"):
        simulate_batched(plane, Uniform(), repeats=2, T=2, batch=0)
    with pytest.raises(ValueError, match="strategy must"):
        simulate_batched(plane, object(), repeats=2, T=2)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="engine must"):
        simulate(plane, [Uniform()], repeats=2, T=2, engine="fast")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------ in distribution
def _two_sample_p_values(land: Landscape, reference, candidate) -> dict[str, float]:
    """Welch t-tests on the released value and the incumbent distance, KS on the released value."""
    direction: Direction = land.direction  # type: ignore[assignment]
    released = [land.true_values(release_batch(i, s, direction)) for i, s in (reference, candidate)]
    distance = [incumbent_distance(land, i, s) for i, s in (reference, candidate)]
    return {
        "released mean": float(stats.ttest_ind(*released, equal_var=False).pvalue),
        "released KS": float(stats.ks_2samp(*released).pvalue),
        "incumbent distance": float(stats.ttest_ind(*distance, equal_var=False).pvalue),
    }


def test_batched_and_sequential_engines_agree_in_distribution(plane, sequential) -> None:
    batched = search_paths(plane, STRATEGY, T, range(BATCHED_REPEATS), C=C, c=c, seed=12)
    p_values = _two_sample_p_values(plane, sequential, batched)
    assert min(p_values.values()) > ALPHA, p_values


def test_two_sample_test_detects_a_skipped_projection(plane, sequential) -> None:
    """C = 1e6, c = 1e-6 leaves the softmax unprojected (with β = 4 far more peaked than S_{3,1/3} allows).

    Expected z ≈ 10 at these sample sizes. (β × 10 shifts the incumbent distance by ~0.55 sd, z ≈ 5.5 here:
    too little margin over the 4.06 threshold for a unit test; ``benchmarks/simulate.py --compare`` shows it
    with larger samples, and the path-by-path test above catches it.)
    """
    unprojected = search_paths(plane, STRATEGY, T, range(BATCHED_REPEATS), C=1e6, c=1e-6, seed=12)
    p_values = _two_sample_p_values(plane, sequential, unprojected)
    assert p_values["incumbent distance"] < ALPHA, p_values


@pytest.mark.parametrize("strategy", [Uniform(), GPUCB(beta=2.0)], ids=["uniform", "gp"])
def test_members_with_different_T_leave_the_batch_without_changing_the_others(strategy) -> None:
    land = _tilted_plane(size=4)
    lengths = [7, 3, 5, 1, 7]
    mixed_indices, mixed_scores = search_paths(land, strategy, lengths, range(5), C=2.0, c=0.5, seed=4)
    assert mixed_indices.shape == (5, 7)
    for member, T_member in enumerate(lengths):
        alone_indices, alone_scores = search_paths(land, strategy, T_member, [member], C=2.0, c=0.5, seed=4)
        np.testing.assert_array_equal(mixed_indices[member, :T_member], alone_indices[0])
        np.testing.assert_allclose(mixed_scores[member, :T_member], alone_scores[0], rtol=0, atol=0)
        assert np.all(mixed_indices[member, T_member:] == -1) and np.all(np.isnan(mixed_scores[member, T_member:]))
    released = release_batch(mixed_indices, mixed_scores, "maximize", np.array(lengths))
    for member, T_member in enumerate(lengths):
        prefix = release_batch(mixed_indices[member : member + 1, :T_member],
                               mixed_scores[member : member + 1, :T_member], "maximize")
        assert released[member] == prefix[0]
