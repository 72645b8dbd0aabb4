"""Where dphypo.tune accounts and calibrates under a per-record split (docs/proofs/split.md, §8 items 3-6).

The calibration cache keeps split rules apart; subsampled tuning refuses a split (no proof); the two-stage default
design is accounted side by side (Corollary S3), dp_accounting composing each side as the oracle.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dphypo import DPSGD, LogFloat, SearchSpace, tune_subsampled
from dphypo.api.calibration_cache import cached_calibration
from dphypo.api.search import calibrated_sigma, profile_or_skipped, split_parts_of
from dphypo.api.two_stage import DEFAULT_TWO_STAGE, two_stage_mechanisms
from dphypo.privacy import RepeatAndSelect, geometric
from dphypo.privacy.split import SplitRule
from dphypo.privacy.split_account import SPLIT_MAX_BOUND
from dphypo.privacy.split_search import SplitTwoStageReport
from dphypo.privacy.two_stage import FinalRun, ProbeRelease, TwoStage
from dphypo.train.mechanism import DPSGDMechanism

DRAW = SplitRule("draw", 0.6, 0.2, 0.2)
HASH = SplitRule("hash", 0.6, 0.2, 0.2)
SEARCH = RepeatAndSelect(geometric(0.1))
#: digits under tune's defaults: 1079 / 359 nominal records, batch 64 (q = 1/17), score noise 0.02 × 359 counts
DIGITS = {"batch_size": 64, "n_train": 1079, "n_val": 359, "score_noise": 0.02 * 359}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DPHYPO_CACHE_DIR", str(tmp_path))
    return tmp_path / "calibration"


def test_the_calibration_cache_never_mixes_split_rules(cache: Path) -> None:
    mechanism = DPSGDMechanism(sigma=1.0, batch_size=50, epochs=3, n_train=1000, n_val=200, score_noise=3.0)

    def calibrate(rule: SplitRule | None) -> float:
        at = DPSGDMechanism(**{**mechanism.__dict__, "split_rule": rule})
        return cached_calibration(4.0, 1e-5, SEARCH, at, profiles=True, profile_for=profile_or_skipped).sigma

    summed = calibrate(None)
    split = calibrate(DRAW)  # a cached sum σ meets the split target too: only the key can keep them apart
    assert split < summed
    assert calibrate(HASH) == pytest.approx(split, rel=2e-4)  # the max bound does not depend on the rule...
    assert len(list(cache.glob("*.json"))) == 3  # ...but each rule has its own entry
    assert calibrate(None) == summed and calibrate(DRAW) == split  # read back, each its own


def test_tune_calibrates_and_accounts_under_the_trainings_split_rule() -> None:
    training = DPSGD(epochs=3, **DIGITS)
    split = DPSGD(epochs=3, split_rule=DRAW, **DIGITS)
    assert split_parts_of(training.mechanism(1.0), profiles=False) is None
    sigma, summed = (calibrated_sigma(SEARCH, t, epsilon=2.0, delta=1e-5) for t in (split, training))
    assert sigma < summed
    parts = split_parts_of(split.mechanism(sigma), profiles=True)
    assert parts is not None and parts.rule == DRAW and parts.training_profile is not None
    with pytest.raises(ValueError, match="needs a private score"):
        split_parts_of(DPSGD(batch_size=64, epochs=3, n_train=1079, split_rule=DRAW).mechanism(1.0), profiles=False)


class _NeverRun:
    optimizer = "sgd"

    def with_subset(self, subset: object) -> _NeverRun:
        return self

    def __call__(self, params: dict, run: object) -> float:
        raise AssertionError("a run was started before the arguments were checked")


def test_subsampled_tuning_refuses_a_per_record_split() -> None:
    training = DPSGD(batch_size=50, epochs=1, n_train=1000, n_val=200, score_noise=5.0, split_rule=DRAW)
    with pytest.raises(ValueError, match=r"does not support a per-record split \(--data-split per-record\)"):
        tune_subsampled(_NeverRun(), SearchSpace({"lr": LogFloat(1e-3, 1.0, 4)}), training, fraction=0.25, sigma=1.0,
                        seed=1)


def test_a_two_stage_design_is_calibrated_side_by_side_under_the_split() -> None:
    design = TwoStage(ProbeRelease(5), FinalRun(), split=0.5)
    training = DPSGD(epochs=5, **DIGITS)
    split = DPSGD(epochs=5, split_rule=DRAW, **DIGITS)
    probe, final, report = two_stage_mechanisms(split, design, probe_epochs=1, epsilon=3.0, delta=1e-5)
    assert isinstance(report, SplitTwoStageReport) and report.epsilon <= 3.0
    assert report.bound.startswith(SPLIT_MAX_BOUND) and report.method == "train:pld"
    assert report.to_dict()["bound"] == report.bound and set(report.to_dict()["train"]["methods"]) == {"rdp", "pld"}
    # the sum's σ pair spends less than 3.0 under the split: the slack the split's calibration gives back
    summed_probe, summed_final, summed = two_stage_mechanisms(training, design, probe_epochs=1, epsilon=3.0,
                                                              delta=1e-5)
    at_sum = two_stage_mechanisms(split, design, probe_epochs=1, epsilon=None, delta=1e-5,
                                  sigmas=(summed_probe.sigma, summed_final.sigma))[2]
    assert at_sum.epsilon < summed.epsilon <= 3.0
    assert (probe.split_rule, final.split_rule) == (DRAW, DRAW)
    # the design's σ ratio is kept (the sum's stage-alone calibration), both σ lowered by one factor
    assert probe.sigma < summed_probe.sigma and final.sigma < summed_final.sigma
    assert probe.sigma / final.sigma == pytest.approx(summed_probe.sigma / summed_final.sigma, rel=1e-9)


@pytest.mark.slow  # ≈ 15 s: the default design's PLDs at the default discretisation, as dphypo tune builds them
def test_the_default_design_spends_its_training_side_where_the_sum_spent_7_995() -> None:
    """Issue #32: at the σ pair the sum calibrates for ε = 8 (2.003, 0.9168), the split spends 7.353."""
    from dp_accounting import dp_event
    from dp_accounting.pld import pld_privacy_accountant

    sigmas = (2.003319373201579, 0.9168356030647883)
    training = DPSGD(epochs=10, **DIGITS)
    split = DPSGD(epochs=10, split_rule=HASH, **DIGITS)
    _, _, summed = two_stage_mechanisms(training, DEFAULT_TWO_STAGE, probe_epochs=2, epsilon=None, sigmas=sigmas,
                                        delta=1e-5)
    probe, final, report = two_stage_mechanisms(split, DEFAULT_TWO_STAGE, probe_epochs=2, epsilon=None,
                                                sigmas=sigmas, delta=1e-5)
    assert round(summed.epsilon, 3) == 7.995 and round(report.epsilon, 3) == 7.353
    assert report.method == "train:pld" and round(report.val.epsilon, 3) == 2.621

    def oracle(events: list) -> float:
        accountant = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-3)
        accountant.compose(dp_event.ComposedDpEvent(events))
        return float(accountant.get_epsilon(1e-5))

    def dpsgd(m: DPSGDMechanism) -> dp_event.DpEvent:
        step = dp_event.PoissonSampledDpEvent(m.sample_rate, dp_event.GaussianDpEvent(m.sigma))
        return dp_event.SelfComposedDpEvent(step, m.steps)

    train_side = oracle([dp_event.SelfComposedDpEvent(dpsgd(probe), 20), dpsgd(final)])
    val_side = oracle([dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(DIGITS["score_noise"]), 21)])
    assert report.epsilon <= max(train_side, val_side) <= report.epsilon + 1e-3


def test_a_single_stage_release_names_theorem_s_and_spends_no_more_than_its_budget() -> None:
    torch = pytest.importorskip("torch")
    from torch import nn

    from dphypo import Uniform, tune

    x = torch.randn(400, 4, generator=torch.Generator().manual_seed(0))
    y = (x[:, 0] > 0).long()

    def objective(params: dict, run: object) -> float:
        model = nn.Linear(4, 2)
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=50)
        optimizer = torch.optim.SGD(model.parameters(), lr=params["lr"])
        model, optimizer, loader = run.make_private(model, optimizer, loader, max_grad_norm=1.0)  # type: ignore[attr-defined]
        for xb, yb in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()
            optimizer.step()
        return run.private_score(int((model(x[:100]).argmax(1) == y[:100]).sum()))  # type: ignore[attr-defined]

    training = DPSGD(batch_size=50, epochs=1, n_train=400, n_val=100, score_noise=5.0, split_rule=DRAW)
    result = tune(objective, SearchSpace({"lr": LogFloat(1e-2, 1.0, 3)}), training, epsilon=4.0,
                  strategy=Uniform(), runs=geometric(0.5), seed=1)
    privacy = result.release.privacy
    assert privacy.bound == SPLIT_MAX_BOUND and privacy.epsilon <= 4.0 and privacy.method.startswith("train:")
    assert privacy.to_dict()["split"]["rule"] == DRAW.describe()
    assert result.release.mechanism.sigma == calibrated_sigma(RepeatAndSelect(geometric(0.5)), training, epsilon=4.0,
                                                              delta=1e-5)
