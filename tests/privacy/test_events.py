"""Mechanisms as dp_accounting DpEvents: every curve and profile carries its event, composition is associative in
events, equal events are what lets a profile stand next to a curve, and the events are dp_accounting's own (its
accountants reproduce dphypo's curves from them)."""

from __future__ import annotations

import json
import logging
import math
import re

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

import dphypo.privacy
from dphypo.privacy import (
    DEFAULT_ORDERS,
    RepeatAndSelect,
    account,
    compose,
    custom_rdp,
    dpsgd_rdp,
    gaussian_rdp,
    geometric,
    pure_dp_rdp,
    zero_rdp,
)
from dphypo.privacy.dpsgd_run import dpsgd_run_profile, dpsgd_run_profile_or_skip, dpsgd_run_rdp
from dphypo.privacy.events import (
    PureDpEvent,
    canonical_event,
    compose_events,
    describe_event,
    event_description,
    repeat_event,
)
from dphypo.privacy.profiles import (
    DiscreteProfile,
    GaussianProfile,
    MaxProfile,
    PldProfile,
    ProfileSkipped,
    ProfileTooLargeError,
    dpsgd_profile,
    profile_or_skipped,
)
from dphypo.privacy.rdp import monotone_envelope

Q = 256 / 60000


def _dpsgd(sigma: float, q: float, steps: int) -> dp_event.DpEvent:
    step = dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma))
    return step if steps == 1 else dp_event.SelfComposedDpEvent(step, steps)


def test_every_curve_and_profile_built_by_dphypo_carries_the_expected_event() -> None:
    G = dp_event.GaussianDpEvent
    run = _dpsgd(1.1, 0.05, 170)
    assert dpsgd_rdp(1.1, 0.05, 170).event == run
    assert dpsgd_profile(1.1, 0.05, 170, discretization=1e-3).event == run
    assert dpsgd_rdp(1.1, 0.05, 1).event == _dpsgd(1.1, 0.05, 1)  # one step: the bare PoissonSampledDpEvent
    # Gaussian: dp_accounting's noise multiplier is std / sensitivity
    assert gaussian_rdp(6.0, sensitivity=2.0).event == G(3.0) == GaussianProfile(6.0, 2.0).event
    assert gaussian_rdp(2.0, count=3).event == dp_event.SelfComposedDpEvent(G(2.0), 3)
    assert pure_dp_rdp(0.5).event == PureDpEvent(0.5)
    assert zero_rdp().event == dp_event.NoOpDpEvent()
    assert custom_rdp([2.0, 3.0], [0.1, 0.2]).event is None
    assert custom_rdp([2.0, 3.0], [0.1, 0.2], event=G(2.0)).event == G(2.0)
    # one candidate run: training, then the score release (sensitivity 1), in that order, curve and profile alike
    with_score = dp_event.ComposedDpEvent([run, G(7.18)])
    assert dpsgd_run_rdp(1.1, 0.05, 170, score_noise=7.18).event == with_score
    assert dpsgd_run_profile(1.1, 0.05, 170, score_noise=7.18, discretization=1e-3).event == with_score
    assert dpsgd_run_rdp(1.1, 0.05, 170).event == run
    # kept by the envelope, multiplied by repetition
    assert dpsgd_rdp(1.1, 0.05, 170).monotone().event == run
    assert dpsgd_rdp(1.1, 0.05, 170).repeated(4).event == _dpsgd(1.1, 0.05, 680)
    assert gaussian_rdp(2.0).repeated(5).event == dp_event.SelfComposedDpEvent(G(2.0), 5)
    assert dpsgd_run_rdp(1.1, 0.05, 170, score_noise=7.18).repeated(2).event == dp_event.SelfComposedDpEvent(
        with_score, 2)
    # profiles of unknown or user-given mechanisms; a max is of the members' common event only
    assert DiscreteProfile(np.array([0.6, 0.4]), np.array([0.4, 0.6])).event is None
    assert DiscreteProfile(np.array([0.6, 0.4]), np.array([0.4, 0.6]), event=G(1.0)).event == G(1.0)
    assert MaxProfile([GaussianProfile(2.0), GaussianProfile(4.0, 2.0)]).event == G(2.0)
    assert MaxProfile([GaussianProfile(2.0), GaussianProfile(3.0)]).event is None
    assert PldProfile(_gaussian_pld(2.0)).event is None


def _gaussian_pld(sigma: float) -> object:
    from dp_accounting.pld import privacy_loss_distribution

    return privacy_loss_distribution.from_gaussian_mechanism(sigma, value_discretization_interval=1e-3)


def test_the_events_are_dp_accountings_own_its_rdp_accountant_reproduces_every_curve() -> None:
    # The event describes the mechanism exactly: dp_accounting, given nothing but the event, computes the same curve.
    logging.getLogger("absl").setLevel(logging.ERROR)  # non-converging fractional orders warn (both sides: inf)
    curves = [
        dpsgd_rdp(1.0, Q, 2340),
        dpsgd_rdp(0.8, 0.05, 1),
        gaussian_rdp(6.0, sensitivity=2.0),
        gaussian_rdp(2.0, count=3),
        dpsgd_run_rdp(0.71, Q, 2344, score_noise=7.18),
        compose(dpsgd_rdp(1.0, 0.01, 100), gaussian_rdp(3.0), zero_rdp()).repeated(3),
    ]
    for k, curve in enumerate(curves):
        accountant = rdp_privacy_accountant.RdpAccountant(list(DEFAULT_ORDERS))
        accountant.compose(curve.event)
        theirs = np.where(np.isnan(accountant.rdp), np.inf, accountant.rdp)
        # dphypo keeps each mechanism's curve as its running minimum from the right (D_α is non-decreasing in α:
        # docs/proofs/heterogeneous.md §5), where dp_accounting's series may not converge (∞ at low fractional
        # orders). A single mechanism's curve is exactly the envelope of theirs; a composition sums envelopes,
        # which is never above the envelope of the sum.
        envelope = monotone_envelope(theirs)
        if k < 4:
            np.testing.assert_allclose(curve.epsilons, envelope, rtol=1e-12, err_msg=curve.label)
        assert np.all(curve.epsilons <= envelope * (1 + 1e-12)), curve.label
        finite = np.isfinite(theirs)
        assert np.all(curve.epsilons[finite] <= theirs[finite] * (1 + 1e-12)), curve.label
    # and its PLD accountant builds the same profile from the profile's event
    profile = dpsgd_run_profile(1.0, 0.01, 200, score_noise=5.0, discretization=1e-3)
    pld = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-3)
    pld.compose(profile.event)
    assert profile.epsilon(1e-5) == pytest.approx(pld.get_epsilon(1e-5), rel=1e-9)


def test_composition_is_associative_in_events_and_keeps_the_order() -> None:
    parts = [dpsgd_rdp(1.0, 0.01, 10), gaussian_rdp(3.0), pure_dp_rdp(0.5), dpsgd_rdp(2.0, 0.02, 5)]
    flat = dp_event.ComposedDpEvent([p.event for p in parts])

    def groupings(items: list) -> list:  # every binary bracketing
        if len(items) == 1:
            return items
        return [compose(left, right) for k in range(1, len(items))
                for left in groupings(items[:k]) for right in groupings(items[k:])]

    built = groupings(parts)
    assert len(built) == 5 and all(c.event == flat for c in built)
    assert compose(*parts).event == flat
    assert compose(parts[1], parts[0]).event != compose(parts[0], parts[1]).event  # the order is kept
    # the no-op is neutral, a part composed with itself is its repetition, and unknown poisons the whole
    assert compose(zero_rdp(), parts[0], zero_rdp()).event == parts[0].event
    assert compose(parts[1], parts[1]).event == parts[1].repeated(2).event == gaussian_rdp(3.0, count=2).event
    assert compose(dpsgd_rdp(1.0, 0.01, 10), dpsgd_rdp(1.0, 0.01, 15)).event == dpsgd_rdp(1.0, 0.01, 25).event
    assert compose(parts[0], custom_rdp(DEFAULT_ORDERS, parts[1].epsilons)).event is None
    # PLD profiles compose the same way
    a, b, c = (PldProfile(_gaussian_pld(s), f"G{s}", dp_event.GaussianDpEvent(s)) for s in (1.0, 2.0, 3.0))
    assert a.compose(b).compose(c).event == a.compose(b.compose(c)).event == compose_events(a.event, b.event, c.event)


def test_events_are_stored_in_one_canonical_form() -> None:
    g1, g2, g3 = (dp_event.GaussianDpEvent(s) for s in (1.0, 2.0, 3.0))
    nested = dp_event.ComposedDpEvent([g1, dp_event.ComposedDpEvent((g2, dp_event.NoOpDpEvent(), g3))])
    assert nested != dp_event.ComposedDpEvent([g1, g2, g3])  # dp_accounting compares structure only
    assert canonical_event(nested) == dp_event.ComposedDpEvent([g1, g2, g3])
    assert dp_event.ComposedDpEvent((g1, g2)) != dp_event.ComposedDpEvent([g1, g2])  # tuple vs list: unequal there
    assert canonical_event(dp_event.ComposedDpEvent((g1, g2))) == dp_event.ComposedDpEvent([g1, g2])
    assert canonical_event(dp_event.SelfComposedDpEvent(g1, 1)) == g1
    assert canonical_event(dp_event.SelfComposedDpEvent(dp_event.SelfComposedDpEvent(g1, 2), 3)) == \
        dp_event.SelfComposedDpEvent(g1, 6)
    inner = dp_event.PoissonSampledDpEvent(0.1, dp_event.ComposedDpEvent([g1]))
    assert canonical_event(inner) == dp_event.PoissonSampledDpEvent(0.1, g1)  # nested events too
    # a curve or profile given a non-canonical event stores the canonical one; anything else is refused
    assert custom_rdp([2.0], [0.1], event=nested).event == dp_event.ComposedDpEvent([g1, g2, g3])
    with pytest.raises(ValueError, match=r"event must be a dp_accounting DpEvent or None, got \('Gaussian"):
        custom_rdp([2.0], [0.1], event=("Gaussian(sensitivity=1.0, sigma=2.0)",))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="count must be a positive integer, got 0"):
        repeat_event(g1, 0)


def test_a_training_only_profile_next_to_a_curve_of_training_and_score_is_refused() -> None:
    search = RepeatAndSelect(geometric(0.1))
    with_score = dpsgd_run_rdp(1.0, 0.01, 300, score_noise=6.0)
    training_only = dpsgd_run_profile(1.0, 0.01, 300, discretization=1e-3)
    with pytest.raises(ValueError, match=(
        r"^the privacy profile must describe the same mechanism as the RDP curve: the curve covers "
        r"DP-SGD\(σ=1, q=0\.01, steps=300\) \+ Gaussian\(σ=6\), the profile covers DP-SGD\(σ=1, q=0\.01, steps=300\)$"
    )):
        account(with_score, search, 1e-5, profile=training_only)
    # the other way round too, and the matching pairs are accepted
    with pytest.raises(ValueError, match="same mechanism"):
        account(dpsgd_rdp(1.0, 0.01, 300), search, 1e-5,
                profile=dpsgd_run_profile(1.0, 0.01, 300, score_noise=6.0, discretization=1e-3))
    report = account(dpsgd_rdp(1.0, 0.01, 300), search, 1e-5, profile=training_only)
    assert set(report.methods) - {"rdp", "rdp-theorem-b"}  # the profile bounds were evaluated
    both = dpsgd_run_profile(1.0, 0.01, 300, score_noise=6.0, discretization=1e-3)
    assert account(with_score, search, 1e-5, profile=both).epsilon > 0
    # events that differ beyond the third digit are printed in full
    with pytest.raises(ValueError, match=r"curve covers Gaussian\(σ=2\.0\), the profile covers Gaussian\(σ=2\.0001\)"):
        account(gaussian_rdp(2.0), search, 1e-5, profile=GaussianProfile(2.0001))


def test_describe_event_reads_like_the_mechanism() -> None:
    event = dpsgd_run_rdp(1.1, 1 / 17, 170, score_noise=7.18).event
    assert describe_event(event) == "DP-SGD(σ=1.1, q=0.0588, steps=170) + Gaussian(σ=7.18)"
    assert describe_event(None) == "unknown" and describe_event(zero_rdp().event) == "data-independent"
    assert describe_event(compose(gaussian_rdp(2.0), pure_dp_rdp(0.5)).repeated(3).event) == \
        "3 × (Gaussian(σ=2) + pure-DP(ε=0.5))"
    assert describe_event(dp_event.RepeatAndSelectDpEvent(dp_event.LaplaceDpEvent(2.0), 10.0, math.inf)) == \
        "RepeatAndSelect(event=Laplace(noise_multiplier=2), mean=10, shape=inf)"


def test_describe_seals_the_event_exactly_and_json_ready() -> None:
    curve = dpsgd_run_rdp(1.1, 1 / 17, 170, score_noise=7.18)
    described = curve.describe()
    assert set(described) == {"label", "event", "sha256"} and len(described["sha256"]) == 64
    assert json.loads(json.dumps(described)) == described
    assert described["event"] == {
        "type": "dp_accounting.dp_event.ComposedDpEvent",
        "events": [
            {"type": "dp_accounting.dp_event.SelfComposedDpEvent", "count": 170,
             "event": {"type": "dp_accounting.dp_event.PoissonSampledDpEvent", "sampling_probability": 1 / 17,
                       "event": {"type": "dp_accounting.dp_event.GaussianDpEvent", "noise_multiplier": 1.1}}},
            {"type": "dp_accounting.dp_event.GaussianDpEvent", "noise_multiplier": 7.18},
        ],
    }
    assert dpsgd_run_rdp(1.1, 1 / 17, 170, score_noise=7.18).describe() == described
    assert dpsgd_run_rdp(1.1, 1 / 17, 171, score_noise=7.18).describe()["event"] != described["event"]
    assert custom_rdp(curve.orders, curve.epsilons).describe()["event"] is None
    assert custom_rdp(curve.orders, curve.epsilons).describe()["sha256"] == described["sha256"]
    assert pure_dp_rdp(0.5).describe()["event"] == {"type": "dphypo.privacy.events.PureDpEvent", "epsilon": 0.5}
    assert pure_dp_rdp(0.5).describe()["sha256"] != custom_rdp(DEFAULT_ORDERS, pure_dp_rdp(0.5).epsilons).describe()[
        "sha256"]  # the pure ε is part of the curve
    # a profile seals its event the same way
    profile = dpsgd_run_profile(1.1, 1 / 17, 170, score_noise=7.18, discretization=1e-3).describe()
    assert profile["event"] == described["event"] and set(profile) == {"label", "event", "sha256"}
    assert GaussianProfile(2.0).describe()["event"] == {"type": "dp_accounting.dp_event.GaussianDpEvent",
                                                        "noise_multiplier": 2.0}
    poisson = event_description(dp_event.RepeatAndSelectDpEvent(dp_event.GaussianDpEvent(1.0), 5.0, math.inf))
    assert poisson is not None and poisson["shape"] == "inf"  # JSON has no infinity
    json.dumps(poisson, allow_nan=False)


def test_one_profile_or_skipped() -> None:
    def too_large() -> PldProfile:
        raise ProfileTooLargeError("the PLD would need ~1e9 grid points")

    skipped = profile_or_skipped(too_large)
    assert isinstance(skipped, ProfileSkipped) and skipped.reason == "the PLD would need ~1e9 grid points"
    profile = GaussianProfile(2.0)
    assert profile_or_skipped(lambda: profile) is profile
    with pytest.raises(ValueError, match="sigma must be"):  # anything else propagates
        profile_or_skipped(lambda: dpsgd_run_profile(-1.0, 0.01, 10))
    assert isinstance(dpsgd_run_profile_or_skip(1e-3, Q, 2344), ProfileSkipped)


@pytest.mark.parametrize(
    ("old", "new"),
    [("Mechanism", "dp_accounting.dp_event.DpEvent"), ("mechanism_key", "dp_accounting.dp_event"),
     ("compose_mechanisms", "dphypo.privacy.events.compose_events"),
     ("dpsgd_mechanism", "dphypo.privacy.events.dpsgd_event")],
)
def test_the_tuple_mechanism_names_fail_in_one_line_naming_the_events(old: str, new: str) -> None:
    with pytest.raises(AttributeError, match=rf"^dphypo\.privacy\.{old} was renamed to {re.escape(new)}"):
        getattr(dphypo.privacy, old)
    assert not any(hasattr(dphypo.privacy.rdp, name) for name in ("Mechanism", "mechanism_key", "compose_mechanisms",
                                                                  "dpsgd_mechanism"))


def test_dpevent_value_equality_holds_on_nested_compositions() -> None:
    # The property the accountant's check rests on (dp_accounting 0.5.0 and 0.6.0: attrs value equality).
    def build(sigma: float) -> dp_event.DpEvent:
        return dp_event.ComposedDpEvent([_dpsgd(sigma, 1 / 17, 170), dp_event.GaussianDpEvent(7.18)])

    assert build(1.1) == build(1.1) and build(1.1) is not build(1.1)
    assert build(1.1) != build(1.1 + 1e-12)
    assert dp_event.GaussianDpEvent(1) == dp_event.GaussianDpEvent(1.0) == dp_event.GaussianDpEvent(np.float64(1.0))
    assert dp_event.GaussianDpEvent(1.0) != dp_event.LaplaceDpEvent(1.0)
    with pytest.raises(TypeError, match="unhashable"):  # a ComposedDpEvent holds a list: compare, never hash
        hash(build(1.1))
