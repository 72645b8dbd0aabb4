"""Work the calibration no longer repeats (issue #30.6): each σ accounted once, each step PLD's bounds sized once."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

import numpy as np
import pytest

from dphypo.privacy import gaussian_pld
from dphypo.privacy.calibration import coarse_to_fine_sigma


def _counted(scale: float, counts: Counter[float]) -> Callable[[float], float]:
    def epsilon_at(sigma: float) -> float:
        counts[sigma] += 1
        return scale / sigma  # continuous, decreasing

    return epsilon_at


def test_coarse_to_fine_accounts_each_sigma_once_and_answers_as_before() -> None:
    fine, coarse = Counter[float](), Counter[float]()
    sigma = coarse_to_fine_sigma(_counted(4.0, fine), _counted(4.1, coarse), 2.0, rtol=1e-4)
    # the coarse root is asked again for the slope: it used to be accounted twice
    assert max(fine.values()) == 1 and max(coarse.values()) == 1
    assert 4.0 / sigma <= 2.0 < 4.0 / (sigma / (1.0 + 1e-4))
    again = coarse_to_fine_sigma(lambda s: 4.0 / s, lambda s: 4.1 / s, 2.0, rtol=1e-4)
    assert again == sigma


def test_a_read_only_pmf_is_bounded_once_and_a_writable_one_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = Counter[int]()
    evaluate = gaussian_pld._self_convolve_bounds

    def counted(probs: np.ndarray, num_times: int, tail: float) -> tuple[int, int]:
        calls[id(probs)] += 1
        return evaluate(probs, num_times, tail)

    monkeypatch.setattr(gaussian_pld, "_self_convolve_bounds", counted)
    step = gaussian_pld.subsampled_gaussian_pld(1.1, 0.05, 1e-2)
    probs = step._pmf_remove._probs
    assert not probs.flags.writeable  # a step's PMF is shared: read-only
    first = gaussian_pld.self_convolve_bounds(probs, 170, 1e-15)
    assert gaussian_pld.self_convolve_bounds(probs, 170, 1e-15) == first and calls[id(probs)] == 1
    assert gaussian_pld.self_convolve_bounds(probs, 34, 1e-15) != first and calls[id(probs)] == 2
    copy = probs.copy()  # writable: evaluated every time (it could change in between)
    assert gaussian_pld.self_convolve_bounds(copy, 170, 1e-15) == first
    copy[: copy.size // 2] = 0.0
    copy /= copy.sum()
    assert gaussian_pld.self_convolve_bounds(copy, 170, 1e-15) == evaluate(copy, 170, 1e-15) != first
    assert calls[id(copy)] == 2


def test_composing_a_step_gives_the_same_pld_with_the_bounds_remembered() -> None:
    step = gaussian_pld.subsampled_gaussian_pld(0.9, 0.04, 1e-3)
    size = gaussian_pld.composed_size(step, 60, 1e-15)
    composed = gaussian_pld.self_compose(step, 60)
    writable = type(step)(*(type(p)(p._discretization, p._lower_loss, p._probs.copy(), p._infinity_mass,
                                    p._pessimistic_estimate) for p in (step._pmf_remove, step._pmf_add)))
    fresh = gaussian_pld.self_compose(writable, 60)
    for a, b in ((composed._pmf_remove, fresh._pmf_remove), (composed._pmf_add, fresh._pmf_add)):
        assert a._lower_loss == b._lower_loss and np.array_equal(a._probs, b._probs)
        assert a._infinity_mass == b._infinity_mass
    assert size == max(composed._pmf_remove._probs.size, composed._pmf_add._probs.size)
    assert math.isfinite(composed.get_epsilon_for_delta(1e-5))
