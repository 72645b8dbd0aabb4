"""Single-stage searches under a per-record split: every bound on each side, the worse side (Corollary S1).

dp_accounting is the oracle: its RDP accountant with ``RepeatAndSelectDpEvent`` (Papernot-Steinke 2022 Theorem 2)
bounds each side's search on its own (the DP-SGD events alone; the Gaussian score events alone), and Theorem S says
the search is bounded by the worse of the two (docs/proofs/split.md).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant as oracle

from dphypo.privacy import (
    DEFAULT_ORDERS,
    PrivacyAccounting,
    RepeatAndSelect,
    account,
    calibrate_dpsgd_sigma,
    dpsgd_rdp,
    gaussian_rdp,
    geometric,
)
from dphypo.privacy.dpsgd_run import dpsgd_run_profile, dpsgd_run_rdp
from dphypo.privacy.heterogeneous import (
    CandidateRun,
    ReferenceRun,
    calibrate_heterogeneous,
    dominating_sigma,
    profile_dominated,
)
from dphypo.privacy.split import SplitRule
from dphypo.privacy.split_account import SPLIT_MAX_BOUND, SplitParts, account_split, split_parts

RULE = SplitRule("draw", 0.6, 0.2, 0.2)
Q, STEPS, SCORE = 0.05, 60, 3.0  # a small run whose score part is not negligible
SEARCH = RepeatAndSelect(geometric(0.1))  # E[T] = 10, uniform


def _repeat_and_select(event: dp_event.DpEvent, mean: float = 10.0) -> float:
    """dp_accounting's ε at δ = 1e-5 of a uniform selection (geometric T: TNB shape 1) of runs of ``event``."""
    accountant = oracle.RdpAccountant(list(DEFAULT_ORDERS))
    accountant.compose(dp_event.RepeatAndSelectDpEvent(event, mean, 1.0))
    return float(accountant.get_epsilon(1e-5))


def test_a_uniform_selection_is_the_worse_of_its_sides_as_dp_accounting_bounds_each() -> None:
    sigma = 1.1
    parts = split_parts(sigma, Q, STEPS, score_noise=SCORE, rule=RULE)
    base = dpsgd_run_rdp(sigma, Q, STEPS, score_noise=SCORE)
    training = dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(Q, dp_event.GaussianDpEvent(sigma)), STEPS)
    oracle_train = _repeat_and_select(training)
    oracle_val = _repeat_and_select(dp_event.GaussianDpEvent(SCORE))
    oracle_sum = _repeat_and_select(dp_event.ComposedDpEvent([training, dp_event.GaussianDpEvent(SCORE)]))
    # Theorem "A" keeps Papernot-Steinke alone for a uniform search: exactly dp_accounting's route on each side.
    report = account_split(parts, SEARCH, 1e-5, adaptive_theorem="A")
    assert report.methods["train:rdp"] == pytest.approx(oracle_train, rel=1e-6)
    assert report.methods["val:rdp"] == pytest.approx(oracle_val, rel=1e-6)
    assert report.epsilon == pytest.approx(max(oracle_train, oracle_val), rel=1e-6)
    summed = account(base, SEARCH, 1e-5, adaptive_theorem="A")
    assert summed.epsilon == pytest.approx(oracle_sum, rel=1e-6) and report.epsilon < summed.epsilon
    assert report.bound == SPLIT_MAX_BOUND and summed.bound is None and "bound" not in summed.to_dict()
    payload = report.to_dict()
    assert payload["bound"] == SPLIT_MAX_BOUND and payload["split"]["worse_side"] == "training"
    assert payload["split"]["validation_epsilon"] == pytest.approx(oracle_val, rel=1e-6)
    # The default accounting (every bound, Theorem B and the profile bounds): each side's smallest, then the worse,
    # through the plan the tuner reads, equal to accounting each side on its own.
    with_profiles = split_parts(sigma, Q, STEPS, score_noise=SCORE, rule=RULE, profiles=True)
    plan = PrivacyAccounting(SEARCH, base, 1e-5, split=with_profiles).account()
    sides = [account(dpsgd_rdp(sigma, Q, STEPS), SEARCH, 1e-5, profile=with_profiles.training_profile),
             account(gaussian_rdp(SCORE, sensitivity=1.0), SEARCH, 1e-5, profile=with_profiles.score_profile)]
    assert plan.epsilon == max(s.epsilon for s in sides) <= report.epsilon
    assert {"train:profile-tnb", "val:profile-tnb", "train:rdp-theorem-b"} <= set(plan.methods)
    assert plan.method == "train:" + sides[0].method
    breakdown = plan.to_dict()["breakdown"]
    assert sum(breakdown.values()) == pytest.approx(plan.epsilon, abs=1e-9)
    summed_profile = dpsgd_run_profile(sigma, Q, STEPS, score_noise=SCORE)
    assert plan.epsilon < PrivacyAccounting(SEARCH, base, 1e-5, profile=summed_profile).account().epsilon


def test_lost_attempts_are_charged_on_both_sides_and_an_adaptive_search_uses_rdp_only() -> None:
    parts = split_parts(1.1, Q, STEPS, score_noise=SCORE, rule=RULE, profiles=True)
    base = parts.summed
    plain = PrivacyAccounting(SEARCH, base, 1e-5, split=parts).account()
    charged = PrivacyAccounting(SEARCH, base, 1e-5, split=parts, max_lost=2).account()
    assert charged.epsilon > plain.epsilon and charged.charged_runs == 2 and charged.charged_epsilon > 0
    adaptive = RepeatAndSelect(geometric(0.1), 2.0, 0.75)
    report = account_split(parts, adaptive, 1e-5)
    assert not any("profile" in name for name in report.methods) and report.epsilon > plain.epsilon


def test_split_parts_must_be_the_parts_of_the_accounted_run() -> None:
    parts = split_parts(1.1, Q, STEPS, score_noise=SCORE, rule=RULE)
    with pytest.raises(ValueError, match="split parts must be the training and score parts"):
        PrivacyAccounting(SEARCH, dpsgd_run_rdp(1.5, Q, STEPS, score_noise=SCORE), 1e-5, split=parts)
    with pytest.raises(ValueError, match="split parts must be"):
        PrivacyAccounting(SEARCH, dpsgd_rdp(1.1, Q, STEPS), 1e-5, split=parts)  # the curve lacks the score
    with pytest.raises(ValueError, match="needs a private score"):
        split_parts(1.1, Q, STEPS, score_noise=None, rule=RULE)
    with pytest.raises(ValueError, match="rule must be a SplitRule"):
        SplitParts("draw", parts.training, parts.score)  # type: ignore[arg-type]


def test_per_record_calibration_needs_less_noise_and_meets_the_target() -> None:
    summed = calibrate_dpsgd_sigma(4.0, 1e-5, Q, STEPS, SEARCH, score_noise=SCORE)
    split = calibrate_dpsgd_sigma(4.0, 1e-5, Q, STEPS, SEARCH, score_noise=SCORE, split_rule=RULE)
    assert split.sigma < summed.sigma and split.report.epsilon <= 4.0 and split.report.bound == SPLIT_MAX_BOUND
    # the certificate is the split accounting at that σ, and 1e-4 less noise would exceed the target
    at = split_parts(split.sigma, Q, STEPS, score_noise=SCORE, rule=RULE, profiles=True)
    assert PrivacyAccounting(SEARCH, at.summed, 1e-5, split=at).account().epsilon <= 4.0
    below = split_parts(split.sigma / (1 + 2e-4), Q, STEPS, score_noise=SCORE, rule=RULE, profiles=True)
    assert PrivacyAccounting(SEARCH, below.summed, 1e-5, split=below).account().epsilon > 4.0
    with pytest.raises(ValueError, match="needs a private score"):
        calibrate_dpsgd_sigma(4.0, 1e-5, Q, STEPS, SEARCH, split_rule=RULE)


def test_per_candidate_sigma_under_the_split_dominates_training_plds_alone() -> None:
    """Corollary S4: the profile check compares the DP-SGD parts; the RDP check is today's (a common score curve)."""
    reference = ReferenceRun(0.1, 40, score_noise=SCORE)
    candidate = CandidateRun(0.05, 100)
    sigma = dominating_sigma(candidate, reference, 1.2, profiles=True, split=True)
    assert profile_dominated(reference.training_profile(sigma, candidate), reference.training_profile(1.2),
                             slack=1e-15)
    calibration = calibrate_heterogeneous(4.0, 1e-5, SEARCH, [candidate, CandidateRun(0.1, 40)], score_noise=SCORE,
                                          reference=reference, split_rule=RULE)
    summed = calibrate_heterogeneous(4.0, 1e-5, SEARCH, [candidate, CandidateRun(0.1, 40)], score_noise=SCORE,
                                     reference=reference)
    assert calibration.report.bound == SPLIT_MAX_BOUND and calibration.report.epsilon <= 4.0
    assert calibration.plan.sigma_ref < summed.plan.sigma_ref and calibration.plan.split_rule == RULE
    assert not math.isnan(calibration.report.epsilon) and np.all(np.asarray(calibration.plan.sigmas) > 0)
