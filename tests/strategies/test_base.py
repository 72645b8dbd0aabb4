"""dphypo.strategies.base: score orientation and the release order, batch-native and as the tuner uses them."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from dphypo.search.loop import best_trial, better
from dphypo.search.records import Trial
from dphypo.strategies import best_runs, orient, release_key


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_orient_imputes_failed_runs_per_search(direction: str) -> None:
    scores = np.array([[0.2, math.nan, 0.7], [math.nan, math.nan, math.inf], [0.1, -math.inf, 0.3]])
    sign = 1.0 if direction == "maximize" else -1.0
    utilities = orient(scores, direction)  # type: ignore[arg-type]
    worst = [min(sign * 0.2, sign * 0.7), math.nan, min(sign * 0.1, sign * 0.3)]
    expected = np.array([[sign * 0.2, worst[0], sign * 0.7], [math.nan] * 3, [sign * 0.1, worst[2], sign * 0.3]])
    np.testing.assert_array_equal(utilities, expected)
    for row, observed in zip(utilities, scores, strict=True):  # a single search is the batch of one
        np.testing.assert_array_equal(orient(observed, direction), row)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="direction"):
        orient(scores, "max")  # type: ignore[arg-type]


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_best_runs_is_the_tuners_release_order(direction: str) -> None:
    """Ties (equal scores, equal grid points) and failed runs; lengths cut each search at its own T."""
    rng = np.random.default_rng(2)
    scores = rng.choice([0.1, 0.5, 0.9, math.nan], size=(300, 5))
    scores[0] = math.nan
    indices = rng.integers(0, 4, size=(300, 5))
    lengths = rng.integers(1, 6, size=300)
    positions = best_runs(indices, scores, direction, lengths)  # type: ignore[arg-type]
    for b in range(300):
        trials = [
            Trial(j, int(indices[b, j]), {}, float(scores[b, j]), not math.isfinite(scores[b, j]), 0.0)
            for j in range(lengths[b])
        ]
        assert positions[b] == best_trial(trials, direction)  # type: ignore[arg-type]
        incumbent = 0
        for j in range(1, lengths[b]):  # the incremental order the tuner's recorder applies
            if better((scores[b, j], indices[b, j]), (scores[b, incumbent], indices[b, incumbent]), direction):
                incumbent = j
        assert positions[b] == incumbent
    assert best_trial([], direction) is None  # type: ignore[arg-type]


def test_release_key_and_better_are_a_strict_total_order() -> None:
    outputs = [(0.5, 3), (0.5, 1), (0.9, 2), (math.nan, 0), (-math.inf, 4), (math.inf, 5)]
    for direction in ("maximize", "minimize"):
        for a, b in itertools.permutations(outputs, 2):
            assert better(a, b, direction) != better(b, a, direction)  # type: ignore[arg-type]
        assert not better(outputs[0], outputs[0], direction)  # type: ignore[arg-type]
    assert release_key([1.0, math.nan, math.inf], "minimize").tolist() == [-1.0, -math.inf, -math.inf]
    with pytest.raises(ValueError, match="T >= 1"):
        best_runs(np.zeros((2, 0), dtype=int), np.zeros((2, 0)), "maximize")
