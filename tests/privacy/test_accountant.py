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
    PrivacyAccounting,
    RepeatAndSelect,
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


#: Theorem B (docs/proofs/adaptive.md §5b) in the paper's MNIST setting, E[T] = 100, δ = 1e-5: C = 2, c = 0.75 and
#: C = c = 1, computed (an independent mpmath evaluation of the supremum, tests/privacy/test_theorem_b.py, is within
#: 3e-3 below at every order checked). Theorem A gives 10.9287, Papernot-Steinke Theorem 2 7.9522.
THEOREM_B_MNIST, THEOREM_B_MNIST_UNIFORM = 9.2746, 6.4963


def test_breakdown_parts_match_independent_computations() -> None:
    report = account(dpsgd_rdp(0.71, Q, 2344), RepeatAndSelect(geometric(0.01), 2.0, 0.75), 1e-5)
    one_run = _oracle_epsilon(None)
    uniform = _oracle_epsilon(1.0)  # geometric T = TNB with shape 1
    assert one_run == pytest.approx(3.433278, abs=1e-5) and uniform == pytest.approx(7.952158, abs=1e-5)
    assert report.base_epsilon == pytest.approx(one_run, rel=1e-9)
    # The uniform search's Papernot-Steinke route is dp_accounting's RepeatAndSelect exactly; Theorem B at
    # C = c = 1 is smaller and is the uniform ε of the breakdown.
    plain = account(dpsgd_rdp(0.71, Q, 2344), RepeatAndSelect(geometric(0.01)), 1e-5)
    assert plain.methods["rdp"] == pytest.approx(uniform, rel=1e-9)
    assert plain.method == "rdp-theorem-b" and plain.epsilon == pytest.approx(THEOREM_B_MNIST_UNIFORM, abs=1e-3)
    assert plain.adaptivity_epsilon == 0.0 and plain.epsilon < uniform
    assert report.repetition_epsilon == pytest.approx(plain.epsilon - one_run, rel=1e-9)
    # Theorem B for C = 2, c = 0.75 (the default); Theorem A (opt-in) is 10.9287 (shared/notes/adaptive-bound.md).
    assert report.epsilon == pytest.approx(THEOREM_B_MNIST, abs=1e-3)
    assert report.adaptivity_epsilon == pytest.approx(report.epsilon - plain.epsilon, abs=1e-12)
    d = report.to_dict()
    assert d["breakdown"] == pytest.approx(
        {"one_run": one_run, "repetition": plain.epsilon - one_run, "adaptivity": report.epsilon - plain.epsilon,
         "charged_runs": 0.0},
        abs=1e-9,
    )
    assert d["expected_runs"] == pytest.approx(100.0)
    assert d["order"] > 1 and math.isnan(report.order_hat)  # Theorem B has no single α̂
    # Naming Theorem A reproduces the accounting before Theorem B was the default, breakdown included.
    legacy = account(dpsgd_rdp(0.71, Q, 2344), RepeatAndSelect(geometric(0.01), 2.0, 0.75), 1e-5, adaptive_theorem="A")
    assert legacy.epsilon == pytest.approx(10.928736, abs=1e-5) and legacy.to_dict()["order_hat"] >= 1
    assert legacy.repetition_epsilon == pytest.approx(uniform - one_run, rel=1e-9)
    assert legacy.adaptivity_epsilon == pytest.approx(10.928736 - uniform, abs=1e-5)


def test_pure_accounting() -> None:
    search = RepeatAndSelect(TruncatedNegativeBinomial(0.5, 0.05), 1.5, 0.8)
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
        account_pure(1.0, RepeatAndSelect(Poisson(5.0)))


def test_privacy_config_is_the_single_source() -> None:
    search = RepeatAndSelect(geometric(0.1), 1.5, 0.8)
    config = PrivacyAccounting(search, gaussian_rdp(5.0), 1e-6)
    assert config.account().epsilon == account(gaussian_rdp(5.0), search, 1e-6).epsilon
    assert config.account().search is search
    with pytest.raises(ValueError, match="delta"):
        PrivacyAccounting(search, gaussian_rdp(5.0), 0.0)


def test_adaptive_default_is_theorem_b_and_theorem_a_and_published_theorem1_are_opt_in() -> None:
    base, search = dpsgd_rdp(0.71, Q, 2344), RepeatAndSelect(geometric(0.01), 2.0, 0.75)
    report = account(base, search, 1e-5)
    assert report.epsilon == pytest.approx(THEOREM_B_MNIST, abs=1e-3)
    assert report.method == "rdp-theorem-b" and set(report.methods) == {"rdp-theorem-b"}
    assert report.theorem == "Theorem B (docs/proofs/adaptive.md; replaces DP-HyPO Theorem 1)"
    assert report.to_dict()["method"] == "rdp-theorem-b"
    # Theorem A (computed: 10.9287; shared/notes/adaptive-bound.md table: 10.929), only on request.
    closed_form = account(base, search, 1e-5, adaptive_theorem="A")
    assert closed_form.epsilon == pytest.approx(10.928736, abs=1e-5)
    assert closed_form.method == "rdp-theorem-a" and set(closed_form.methods) == {"rdp-theorem-a"}
    assert closed_form.theorem == "Theorem A (docs/proofs/adaptive.md; replaces DP-HyPO Theorem 1)"
    # Regression: DP-HyPO Theorem 1 as published (11.151), only on request, labelled.
    published = account(base, search, 1e-5, adaptive_theorem="published")
    assert published.epsilon == pytest.approx(11.150587, abs=1e-5)
    assert published.method == "rdp-published-thm1"
    assert published.theorem == "DP-HyPO Theorem 1 (published; proof has a known gap; implied by Theorem A)"
    assert PrivacyAccounting(search, base, 1e-5, adaptive_theorem="published").account().epsilon == published.epsilon
    assert PrivacyAccounting(search, base, 1e-5, adaptive_theorem="A").account().epsilon == closed_form.epsilon
    assert PrivacyAccounting(search, base, 1e-5).account().epsilon == report.epsilon
    # A uniform search lists Papernot-Steinke Theorem 2 (as before) and Theorem B at C = c = 1; naming Theorem A or
    # the published theorem reproduces the accounting before Theorem B was the default (Papernot-Steinke alone).
    uniform = RepeatAndSelect(geometric(0.01))
    plain = account(base, uniform, 1e-5)
    assert set(plain.methods) == {"rdp", "rdp-theorem-b"} and plain.method == "rdp-theorem-b"
    assert plain.methods["rdp"] == pytest.approx(7.952158, abs=1e-5)
    assert plain.epsilon == pytest.approx(THEOREM_B_MNIST_UNIFORM, abs=1e-3)
    assert plain.theorem == "Theorem B at C = c = 1 (docs/proofs/adaptive.md; sharpens Papernot-Steinke Theorem 2)"
    for choice in ("A", "published"):
        older = account(base, uniform, 1e-5, adaptive_theorem=choice)
        assert older.methods == {"rdp": plain.methods["rdp"]} and older.method == "rdp"
    with pytest.raises(ValueError, match="adaptive_theorem must be one of"):
        account(base, search, 1e-5, adaptive_theorem="Theorem 1")
    with pytest.raises(ValueError, match="adaptive_theorem must be one of"):
        PrivacyAccounting(search, base, 1e-5, adaptive_theorem="paper")


def test_renamed_classes_name_their_replacement() -> None:
    for old, new in (("PrivacyPlan", "PrivacyAccounting"), ("SearchSpec", "RepeatAndSelect")):
        with pytest.raises(AttributeError, match=rf"^dphypo\.privacy\.{old} was renamed to dphypo\.privacy\.{new}$"):
            getattr(dphypo.privacy, old)
        assert not hasattr(dphypo.privacy, old)
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchName'"):
        dphypo.privacy.NoSuchName  # noqa: B018
