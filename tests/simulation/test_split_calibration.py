"""The simulations' and the planner's calibrations pass a per-record split rule through (docs/proofs/split.md)."""

from __future__ import annotations

import json

from dphypo.privacy import geometric
from dphypo.privacy.split import SplitRule
from dphypo.privacy.split_account import SPLIT_MAX_BOUND
from dphypo.privacy.split_search import SplitTwoStageReport
from dphypo.privacy.two_stage import FinalRun, ProbeRelease, TwoStage
from dphypo.simulation.equal_epsilon import arm_calibration
from dphypo.simulation.planner import two_stage_calibration
from dphypo.simulation.two_stage import calibrate_design

RULE = SplitRule("draw", 0.6, 0.2, 0.2)
META = {"dataset": "digits", "model": "digits-mlp", "epochs": 3, "batch_size": 64, "seeds": 5, "data_seed": 0,
        "score_noise": 0.02, "n_train": 1079, "n_val": 359}


def test_an_arm_is_calibrated_under_the_split_rule_it_is_given() -> None:
    summed = arm_calibration(2.0, 1e-5, geometric(0.1), 1.0, 1.0, META)
    split = arm_calibration(2.0, 1e-5, geometric(0.1), 1.0, 1.0, META, split_rule=RULE)
    assert split.report.bound == SPLIT_MAX_BOUND and summed.report.bound is None
    assert split.sigma < summed.sigma and split.report.epsilon <= 2.0


def test_a_design_is_calibrated_side_by_side_in_the_simulator_and_the_planner() -> None:
    design = TwoStage(ProbeRelease(5), FinalRun(), split=0.5)
    probe = {**META, "epochs": 1}
    split = calibrate_design(design, 3.0, 1e-5, META, probe, split_rule=RULE)
    assert isinstance(split.report, SplitTwoStageReport) and split.report.epsilon <= 3.0
    summed = calibrate_design(design, 3.0, 1e-5, META, probe)
    assert not isinstance(summed.report, SplitTwoStageReport)
    planned = two_stage_calibration(design, 3.0, 1e-5, json.dumps(META, sort_keys=True),
                                    json.dumps(probe, sort_keys=True), RULE)
    assert (planned.probe_sigma, planned.final_sigma) == (split.probe_sigma, split.final_sigma)
