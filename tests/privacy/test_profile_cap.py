"""The PLD path bounds its own size (issue #12 item 2): adaptive discretisation, a cap, and the RDP fallback.

Every check asserts sizes, intervals and fallback methods, not timings, except the two end-to-end checks that
the extreme inputs of the issue finish (limits of 60 s, several times the measured ≈ 4–12 s).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution

from dphypo.privacy import RepeatAndSelect, account, dpsgd_rdp, geometric
from dphypo.privacy.calibration import calibrate_dpsgd_sigma
from dphypo.privacy.profiles import (
    DEFAULT_DISCRETIZATION,
    MAX_DISCRETIZATION,
    MAX_PLD_POINTS,
    GaussianProfile,
    PldProfile,
    ProfileSkipped,
    ProfileTooLargeError,
    dpsgd_discretization,
    dpsgd_profile,
    dpsgd_profile_or_skip,
)
from dphypo.privacy.rdp import MIN_DPSGD_SIGMA
from dphypo.privacy.run_counts import Binomial

MNIST_Q = 256 / 60000
ISSUE_Q = 0.0042667


def test_ordinary_inputs_keep_the_requested_discretisation() -> None:
    # The largest ordinary benchmark setting (σ = 0.64, 10 MNIST epochs) fits the cap at 1e-4: values unchanged.
    assert dpsgd_discretization(0.64, MNIST_Q, 2344) == DEFAULT_DISCRETIZATION
    assert dpsgd_discretization(1.0, MNIST_Q, 2344, discretization=1e-3) == 1e-3
    profile = dpsgd_profile(1.0, MNIST_Q, 300)
    assert profile.discretization == DEFAULT_DISCRETIZATION
    assert "coarsened" not in profile.label
    assert profile.points < MAX_PLD_POINTS


def test_a_large_pld_is_coarsened_to_fit_the_cap() -> None:
    cap = 2**16
    profile = dpsgd_profile(0.1, ISSUE_Q, 2344, max_points=cap)  # at 1e-4 it would need 2.2e7 points
    assert DEFAULT_DISCRETIZATION < profile.discretization <= MAX_DISCRETIZATION
    assert profile.points <= cap
    assert "coarsened from 0.0001" in profile.label
    # The planner's exact size check agrees with what was built, and the cap is not wasted (≥ 1/4 used).
    assert profile.points > cap / 4
    assert profile.discretization == dpsgd_discretization(0.1, ISSUE_Q, 2344, max_points=cap)


def test_coarsened_profile_stays_an_upper_bound() -> None:
    # q = 1: the run is the Gaussian mechanism with std σ/√steps, whose profile is exact (Balle & Wang 2018).
    sigma, steps, cap = 1.0, 100, 4096
    coarse = dpsgd_profile(sigma, 1.0, steps, max_points=cap)
    assert coarse.discretization > 10 * DEFAULT_DISCRETIZATION and coarse.points <= cap
    exact = GaussianProfile(sigma / math.sqrt(steps))
    eps = np.linspace(-2.0, 60.0, 400)
    assert np.all(coarse.delta(eps) >= exact.delta(eps) - 1e-15)
    for delta in (1e-2, 1e-5, 1e-10):
        assert coarse.epsilon(delta) >= exact.epsilon(delta) - 1e-9
    # Looser than the fine grid, but still a usable bound (not vacuous).
    fine = dpsgd_profile(sigma, 1.0, steps, discretization=1e-3)
    assert fine.epsilon(1e-5) <= coarse.epsilon(1e-5) < fine.epsilon(1e-5) + 0.5


@pytest.mark.parametrize(
    ("sigma", "steps"),
    [(1e-3, 2344), (1e-6, 2344), (1.0, 10**12)],
)
def test_hopeless_plds_are_refused_before_any_allocation(sigma: float, steps: int) -> None:
    with pytest.raises(ProfileTooLargeError, match="grid points"):
        dpsgd_profile(sigma, ISSUE_Q, steps)
    skipped = dpsgd_profile_or_skip(sigma, ISSUE_Q, steps)
    assert isinstance(skipped, ProfileSkipped)
    assert f"sigma={sigma:g}" in skipped.reason and "cap: " in skipped.reason


def test_invalid_arguments_still_raise_plain_value_errors() -> None:
    with pytest.raises(ValueError, match="max_points"):
        dpsgd_profile(1.0, MNIST_Q, 10, max_points=10)
    with pytest.raises(ValueError, match="discretization"):
        dpsgd_profile(1.0, MNIST_Q, 10, discretization=0.5)
    with pytest.raises(ValueError, match="sigma must be >= 1e-100"):
        dpsgd_profile_or_skip(1e-120, MNIST_Q, 10)


def test_account_falls_back_to_rdp_and_names_the_reason() -> None:
    base = dpsgd_rdp(1e-3, ISSUE_Q, 2344)
    search = RepeatAndSelect(geometric(0.01))
    report = account(base, search, 1e-5, profile=dpsgd_profile_or_skip(1e-3, ISSUE_Q, 2344))
    # RDP only: Papernot-Steinke Theorem 2 and Theorem B at C = c = 1 (equal here, the printed form is reported)
    assert report.method == "rdp" and set(report.methods) == {"rdp", "rdp-theorem-b"}
    assert report.profile_skipped is not None and "grid points" in report.profile_skipped
    assert report.to_dict()["profile_skipped"] == report.profile_skipped
    assert report.epsilon == account(base, search, 1e-5).epsilon  # the RDP bound, unchanged
    assert math.isfinite(report.epsilon)
    # A profile that was built reports no skip.
    ok = account(dpsgd_rdp(1.0, MNIST_Q, 300), search, 1e-5, profile=dpsgd_profile(1.0, MNIST_Q, 300))
    assert ok.profile_skipped is None and "profile-tnb" in ok.methods


def test_binomial_search_without_a_profile_is_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match=r"binomial T has no RDP theorem.*grid points"):
        account(dpsgd_rdp(1e-3, ISSUE_Q, 2344), RepeatAndSelect(Binomial(20, 0.5)), 1e-5,
                profile=dpsgd_profile_or_skip(1e-3, ISSUE_Q, 2344))


def test_pld_epsilon_matches_dp_accountings_inversion() -> None:
    plds = [
        dpsgd_profile(1.0, MNIST_Q, 2344, discretization=1e-3),
        dpsgd_profile(2.0, 1.0, 10, discretization=1e-3),  # symmetric (one direction)
        PldProfile(privacy_loss_distribution.from_laplace_mechanism(1.0, value_discretization_interval=1e-3)),
    ]
    for profile in plds:
        for delta in (0.5, 0.1, 1e-3, 1e-6, 1e-10, 1e-14):
            assert profile.epsilon(delta) == pytest.approx(
                max(0.0, profile.pld.get_epsilon_for_delta(delta)), rel=1e-10, abs=1e-12
            )


def test_rdp_path_handles_tiny_sigma_and_huge_steps() -> None:
    search = RepeatAndSelect(geometric(0.01))
    for sigma, steps in ((MIN_DPSGD_SIGMA, 2344), (1e-6, 2344), (1.0, 10**12)):
        report = account(dpsgd_rdp(sigma, ISSUE_Q, steps), search, 1e-5)
        assert math.isfinite(report.epsilon) and report.epsilon > 1e6
    with pytest.raises(ValueError, match="sigma must be >= 1e-100"):
        dpsgd_rdp(1e-200, ISSUE_Q, 10)


def test_calibration_with_a_huge_budget_finishes_and_meets_it() -> None:
    # A guard against the unbounded PLD of old (MemoryError, or minutes per evaluation), not a timing: the timings are
    # benchmarks/accountant_worst_case.py's and benchmarks/calibration.py's. ~1 min alone; two test processes share
    # the machine's cores, so the bound leaves room.
    started = time.perf_counter()
    result = calibrate_dpsgd_sigma(1e6, 1e-5, ISSUE_Q, 2344, RepeatAndSelect(geometric(0.01)))
    assert time.perf_counter() - started < 300.0
    assert result.report.epsilon <= 1e6


@pytest.mark.parametrize("sigma", ["0.001", "1e-6"])
def test_cli_account_on_extreme_inputs_is_fast_and_reports_rdp(sigma: str) -> None:
    argv = [sys.executable, "-m", "dphypo", "account", "--sigma", sigma, "--sample-rate", str(ISSUE_Q), "--steps",
            "2344", "--runs", "geometric", "--gamma", "0.01", "--C", "1", "--c", "1", "--delta", "1e-5", "--json"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(proc.stdout)
    # RDP only (Theorem B at C = c = 1 is listed too once the CLI's --adaptive-theorem defaults to B; equal here)
    assert payload["method"] == "rdp" and {"rdp"} <= set(payload["methods"]) <= {"rdp", "rdp-theorem-b"}
    assert "grid points" in payload["profile_skipped"]


def test_a_run_profile_with_a_capped_training_pld_still_composes_the_score_release() -> None:
    from dphypo.train.mechanism import DPSGDMechanism

    # One step's PLD at σ = 0.05 needs 3.9e5 points at 1e-3 (> the per-step cap): the training grid is coarsened
    # and the score's Gaussian PLD must be built on the same grid to compose.
    plan = DPSGDMechanism(sigma=0.05, batch_size=64, epochs=1, n_train=640, n_val=300, score_noise=6.0)
    profile = plan.profile(1e-3)
    assert profile.discretization > 1e-3
    assert profile.event == plan.rdp().event is not None
    assert profile.epsilon(1e-5) > dpsgd_profile(0.05, plan.sample_rate, plan.steps).epsilon(1e-5)
