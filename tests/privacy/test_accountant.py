"""The accountant: the reported (ε, δ), its breakdown, pure-DP statements and the plan shared with the tuner."""

from __future__ import annotations

import math

import pytest
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant as oracle

import dphypo.privacy
from dphypo.privacy import (
    DEFAULT_ORDERS,
    Poisson,
    PrivacyPlan,
    SearchSpec,
    TruncatedNegativeBinomial,
    account,
    account_pure,
    dpsgd_rdp,
    gaussian_rdp,
    geometric,
)

Q = 256 / 60000


def _oracle_epsilon(repeat_shape: float | None) -> float:
    """dp_accounting's ε of DP-SGD(0.71, Q, 2344) alone, or repeated with E[T] = 100 and TNB shape ``repeat_shape``.

    An independent implementation (Google's RDP accountant with its RepeatAndSelectDpEvent, Papernot-Steinke 2022
    Theorem 2) against which the breakdown's parts are checked.
    """
    accountant = oracle.RdpAccountant(list(DEFAULT_ORDERS))
    run = dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(Q, dp_event.GaussianDpEvent(0.71)), 2344)
    accountant.compose(run if repeat_shape is None else dp_event.RepeatAndSelectDpEvent(run, 100.0, repeat_shape))
    return float(accountant.get_epsilon(1e-5))


def test_breakdown_parts_match_independent_computations() -> None:
    report = account(dpsgd_rdp(0.71, Q, 2344), SearchSpec(geometric(0.01), 2.0, 0.75), 1e-5)
    one_run = _oracle_epsilon(None)
    uniform = _oracle_epsilon(1.0)  # geometric T = TNB with shape 1
    assert one_run == pytest.approx(3.433278, abs=1e-5) and uniform == pytest.approx(7.952158, abs=1e-5)
    assert report.base_epsilon == pytest.approx(one_run, rel=1e-9)
    assert report.repetition_epsilon == pytest.approx(uniform - one_run, rel=1e-9)
    # Theorem A (docs/proofs/adaptive.md) at this setting is 10.9287 (shared/notes/adaptive-bound.md: 10.929).
    assert report.epsilon == pytest.approx(10.928736, abs=1e-5)
    assert report.adaptivity_epsilon == pytest.approx(10.928736 - uniform, abs=1e-5)
    plain = account(dpsgd_rdp(0.71, Q, 2344), SearchSpec(geometric(0.01)), 1e-5)
    assert plain.adaptivity_epsilon == 0.0 and plain.epsilon == pytest.approx(uniform, rel=1e-9)
    d = report.to_dict()
    assert d["breakdown"] == pytest.approx(
        {"one_run": one_run, "repetition": uniform - one_run, "adaptivity": 10.928736 - uniform, "charged_runs": 0.0},
        abs=1e-5,
    )
    assert d["expected_runs"] == pytest.approx(100.0)
    assert d["order"] > 1 and d["order_hat"] >= 1


def test_pure_accounting() -> None:
    search = SearchSpec(TruncatedNegativeBinomial(0.5, 0.05), 1.5, 0.8)
    report = account_pure(1.0, search)
    # Theorem A-infinity (docs/proofs/adaptive.md): ε + log(C/c) + (1+θ) log((γ + (1−γ)C)/(γ + (1−γ)c e^(−ε)))
    expected = 1.0 + math.log(1.5 / 0.8) + 1.5 * math.log((0.05 + 0.95 * 1.5) / (0.05 + 0.95 * 0.8 * math.exp(-1.0)))
    assert report.epsilon == pytest.approx(expected, rel=1e-12) and report.epsilon == pytest.approx(3.876462, abs=1e-6)
    assert report.method == "pure-dp-theorem-a" and report.theorem.startswith("Theorem A-infinity")
    assert report.delta == 0.0
    # Regression: the published DP-HyPO Theorem 2, opt-in only.
    published = account_pure(1.0, search, adaptive_theorem="published")
    assert published.epsilon == pytest.approx(2.5 * (1.0 + math.log(1.5 / 0.8)))
    assert published.method == "pure-dp-published-thm2" and "known gap" in published.theorem
    uniform = account_pure(1.0, search.uniform())
    assert uniform.epsilon == 2.5 and uniform.method == "pure-dp"  # Papernot-Steinke Corollary 3, unchanged
    with pytest.raises(ValueError, match="Poisson"):
        account_pure(1.0, SearchSpec(Poisson(5.0)))


def test_privacy_config_is_the_single_source() -> None:
    search = SearchSpec(geometric(0.1), 1.5, 0.8)
    config = PrivacyPlan(search, gaussian_rdp(5.0), 1e-6)
    assert config.account().epsilon == account(gaussian_rdp(5.0), search, 1e-6).epsilon
    assert config.account().search is search
    with pytest.raises(ValueError, match="delta"):
        PrivacyPlan(search, gaussian_rdp(5.0), 0.0)


def test_adaptive_default_is_theorem_a_and_published_theorem1_is_opt_in() -> None:
    base, search = dpsgd_rdp(0.71, Q, 2344), SearchSpec(geometric(0.01), 2.0, 0.75)
    report = account(base, search, 1e-5)
    # Theorem A (docs/proofs/adaptive.md), computed: 10.9287 (shared/notes/adaptive-bound.md table: 10.929).
    assert report.epsilon == pytest.approx(10.928736, abs=1e-5)
    assert report.method == "rdp-theorem-a" and set(report.methods) == {"rdp-theorem-a"}
    assert report.theorem == "Theorem A (docs/proofs/adaptive.md; replaces DP-HyPO Theorem 1)"
    assert report.to_dict()["method"] == "rdp-theorem-a"
    # Regression: DP-HyPO Theorem 1 as published (11.151), only on request, labelled.
    published = account(base, search, 1e-5, adaptive_theorem="published")
    assert published.epsilon == pytest.approx(11.150587, abs=1e-5)
    assert published.method == "rdp-published-thm1"
    assert published.theorem == "DP-HyPO Theorem 1 (published; proof has a known gap; implied by Theorem A)"
    assert PrivacyPlan(search, base, 1e-5, adaptive_theorem="published").account().epsilon == published.epsilon
    assert PrivacyPlan(search, base, 1e-5).account().epsilon == report.epsilon
    # A uniform search is exactly as before (Papernot-Steinke Theorem 2), whatever the choice.
    uniform = SearchSpec(geometric(0.01))
    plain = account(base, uniform, 1e-5)
    assert plain.method == "rdp" and plain.epsilon == account(base, uniform, 1e-5, adaptive_theorem="published").epsilon
    assert plain.epsilon == pytest.approx(7.952158, abs=1e-5)
    with pytest.raises(ValueError, match="adaptive_theorem must be one of"):
        account(base, search, 1e-5, adaptive_theorem="Theorem 1")
    with pytest.raises(ValueError, match="adaptive_theorem must be one of"):
        PrivacyPlan(search, base, 1e-5, adaptive_theorem="paper")


def test_renamed_classes_name_their_replacement() -> None:
    for old, new in (("SearchPrivacy", "SearchSpec"), ("PrivacyConfig", "PrivacyPlan")):
        with pytest.raises(AttributeError, match=rf"^dphypo\.privacy\.{old} was renamed to dphypo\.privacy\.{new}$"):
            getattr(dphypo.privacy, old)
        assert not hasattr(dphypo.privacy, old)
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchName'"):
        dphypo.privacy.NoSuchName  # noqa: B018
