"""Two-stage accounting (dphypo.privacy.two_stage): closed forms, dp_accounting as the oracle, refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from dphypo.privacy import (
    DEFAULT_ORDERS,
    CalibrationError,
    RepeatAndSelect,
    epsilon_from_rdp,
    gaussian_rdp,
    geometric,
    tuning_rdp,
)
from dphypo.privacy.dpsgd_run import dpsgd_run_profile, dpsgd_run_rdp
from dphypo.privacy.events import canonical_event
from dphypo.privacy.rdp import compose
from dphypo.privacy.two_stage import (
    FinalRun,
    FinalSelection,
    ProbeRelease,
    ProbeSelection,
    TwoStageDesignError,
    account_two_stage,
    calibrate_two_stage,
)

DELTA = 1e-5
Q = 64 / 1079  # the digits default's sampling rate


def test_released_gaussian_probes_and_a_final_run_compose_to_one_gaussian() -> None:
    # n releases at σ_p and one at σ_f are one Gaussian at (n/σ_p² + 1/σ_f²)^(-1/2) in RDP (Mironov 2017, Prop. 7).
    n, sp, sf = 12, 9.0, 2.0
    report = account_two_stage(gaussian_rdp(sp), gaussian_rdp(sf), ProbeRelease(n), FinalRun(), DELTA)
    single = gaussian_rdp((n / sp**2 + 1.0 / sf**2) ** -0.5)
    assert report.epsilon == pytest.approx(epsilon_from_rdp(single.orders, single.epsilons, DELTA)[0], rel=1e-12)
    assert report.method == "rdp" and report.expected_runs == (12.0, 1.0)
    # stage 1 alone costs what 12 Gaussian releases cost, and less than the whole
    alone = gaussian_rdp(sp, count=n)
    assert report.stage1_epsilon == pytest.approx(epsilon_from_rdp(alone.orders, alone.epsilons, DELTA)[0])
    assert report.stage1_epsilon < report.epsilon and report.stage2_epsilon < report.epsilon


def test_released_dpsgd_probes_match_dp_accountings_rdp_accountant_on_the_composed_event() -> None:
    probe = dpsgd_run_rdp(2.0, Q, 34, score_noise=7.18)  # 2 epochs
    final = dpsgd_run_rdp(1.1, Q, 170, score_noise=7.18)
    report = account_two_stage(probe, final, ProbeRelease(20, top_k=3), FinalRun(), DELTA)
    event = dp_event.ComposedDpEvent([dp_event.SelfComposedDpEvent(probe.event, 20), final.event])
    oracle = rdp_privacy_accountant.RdpAccountant(list(DEFAULT_ORDERS))
    oracle.compose(event)
    np.testing.assert_allclose(report.curve.epsilons, oracle._rdp, rtol=1e-12)
    assert report.curve.event == canonical_event(event)  # the release is described by the event it bounds
    assert report.methods["rdp"] == pytest.approx(epsilon_from_rdp(DEFAULT_ORDERS, oracle._rdp, DELTA)[0])


def test_the_pld_bound_equals_dp_accountings_pld_accountant_and_is_used_when_smaller() -> None:
    probe_args, final_args = (3.0, 0.02, 50), (1.2, 0.02, 200)
    profile = {"discretization": 1e-3, "score_noise": 5.0}
    report = account_two_stage(
        dpsgd_run_rdp(*probe_args, score_noise=5.0), dpsgd_run_rdp(*final_args, score_noise=5.0),
        ProbeRelease(8), FinalRun(), DELTA,
        probe_profile=dpsgd_run_profile(*probe_args, **profile),
        final_profile=dpsgd_run_profile(*final_args, **profile),
    )
    oracle = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-3)
    probe_event = dpsgd_run_profile(*probe_args, **profile).event
    oracle.compose(probe_event, 8)
    oracle.compose(dpsgd_run_profile(*final_args, **profile).event)
    # equal up to the PLD truncation of the two compositions (their grouping differs; 1.4e-6 relative here)
    assert report.methods["pld"] == pytest.approx(oracle.get_epsilon(DELTA), rel=1e-5)
    assert report.methods["pld"] < report.methods["rdp"]  # the PLD is tighter for DP-SGD, as for one run
    assert report.method == "pld" and report.epsilon == report.methods["pld"] and math.isnan(report.order)


def test_a_probe_selection_is_its_search_theorem_composed_with_the_final_run() -> None:
    probe = dpsgd_run_rdp(2.0, Q, 34, score_noise=7.18)
    final = dpsgd_run_rdp(1.1, Q, 170, score_noise=7.18)
    for C, c in ((1.0, 1.0), (2.0, 0.75)):
        search = RepeatAndSelect(geometric(1 / 20), C, c)
        report = account_two_stage(probe, final, ProbeSelection(search), FinalRun(), DELTA)
        tuned = tuning_rdp(probe, search.run_count, C, c)
        total = compose(tuned.curve, final)
        assert report.epsilon == pytest.approx(epsilon_from_rdp(total.orders, total.epsilons, DELTA)[0], rel=1e-12)
        assert report.stage1_theorem == tuned.theorem and "pld" not in report.methods
    # adaptivity in stage 1 costs more than uniform probes, all else equal
    costs = [account_two_stage(probe, final, ProbeSelection(RepeatAndSelect(geometric(1 / 20), C, c)), FinalRun(),
                               DELTA).epsilon for C, c in ((1.0, 1.0), (2.0, 0.75))]
    assert costs[0] < costs[1]


def test_a_final_selection_is_a_uniform_search_over_the_top_k() -> None:
    probe, final = gaussian_rdp(20.0), dpsgd_run_rdp(1.5, Q, 170, score_noise=7.18)
    search = RepeatAndSelect(geometric(1 / 3))
    report = account_two_stage(probe, final, ProbeRelease(30, top_k=4), FinalSelection(search), DELTA)
    total = compose(probe.repeated(30), tuning_rdp(final, search.run_count).curve)
    assert report.epsilon == pytest.approx(epsilon_from_rdp(total.orders, total.epsilons, DELTA)[0], rel=1e-12)
    assert report.expected_runs == (30.0, pytest.approx(3.0))


def test_charged_attempts_are_extra_runs_of_their_stage() -> None:
    probe, final = gaussian_rdp(10.0), gaussian_rdp(3.0)
    charged = account_two_stage(probe, final, ProbeRelease(5), FinalRun(), DELTA, charged_probes=2, charged_finals=1)
    same = account_two_stage(probe, final.repeated(2), ProbeRelease(7), FinalRun(), DELTA)
    assert charged.epsilon == pytest.approx(same.epsilon, rel=1e-12)
    assert charged.expected_runs == (7.0, 2.0) and "2 charged" in charged.stage1_theorem


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: ProbeRelease(3, top_k=4), "top_k must be at most"),
        (lambda: ProbeRelease(0), "probes"),
        (lambda: account_two_stage(gaussian_rdp(5.0), gaussian_rdp(5.0),
                                   ProbeSelection(RepeatAndSelect(geometric(0.1))),
                                   FinalSelection(RepeatAndSelect(geometric(0.5))), DELTA),
         "at least two stage-1 candidates"),
        (lambda: FinalSelection(RepeatAndSelect(geometric(0.5), 2.0, 0.75)), "must be uniform"),
        (lambda: account_two_stage(gaussian_rdp(5.0), gaussian_rdp(5.0, orders=[2.0, 3.0]), ProbeRelease(2),
                                   FinalRun(), DELTA), "same orders"),
        (lambda: calibrate_two_stage(8.0, DELTA, ProbeRelease(5), FinalRun(), gaussian_rdp, gaussian_rdp,
                                     split=1.0), "leaves a stage nothing"),
        (lambda: calibrate_two_stage(8.0, DELTA, ProbeRelease(5), FinalRun(), gaussian_rdp, gaussian_rdp,
                                     split=0.0), "leaves a stage nothing"),
        (lambda: account_two_stage(gaussian_rdp(5.0), gaussian_rdp(5.0), "probes", FinalRun(), DELTA), "stage1"),
    ],
)
def test_designs_no_theorem_covers_are_refused_in_one_line(build, message: str) -> None:
    with pytest.raises((TwoStageDesignError, ValueError, TypeError), match=message) as caught:
        build()
    assert "\n" not in str(caught.value)


def test_calibration_meets_the_target_tightly_and_keeps_the_split() -> None:
    def probe(s: float):
        return dpsgd_run_rdp(s, Q, 34, score_noise=7.18)

    def final(s: float):
        return dpsgd_run_rdp(s, Q, 170, score_noise=7.18)

    stage1 = ProbeSelection(RepeatAndSelect(geometric(1 / 20)))
    result = calibrate_two_stage(8.0, DELTA, stage1, FinalRun(), probe, final, split=0.5)
    assert result.report.epsilon <= 8.0
    assert result.report.epsilon > 8.0 * (1 - 1e-3)  # tight: a smaller common scale would overspend
    slightly_less = account_two_stage(probe(result.probe_sigma * 0.995), final(result.final_sigma * 0.995), stage1,
                                      FinalRun(), DELTA)
    assert slightly_less.epsilon > 8.0
    # more of the budget to the probes makes them cheaper in noise and the final run noisier
    generous = calibrate_two_stage(8.0, DELTA, stage1, FinalRun(), probe, final, split=0.8)
    assert generous.probe_sigma < result.probe_sigma and generous.final_sigma > result.final_sigma


def test_a_stage_whose_score_releases_alone_exceed_its_share_is_refused_naming_the_floor() -> None:
    def run(s: float):
        return dpsgd_run_rdp(s, Q, 170, score_noise=7.18)

    with pytest.raises(CalibrationError, match=r"stage 1 \(the probes\) alone costs at least epsilon=") as caught:
        calibrate_two_stage(4.0, DELTA, ProbeRelease(200), FinalRun(), run, run, split=0.5)
    assert "\n" not in str(caught.value)
