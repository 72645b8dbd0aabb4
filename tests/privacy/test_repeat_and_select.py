r"""The uniform Papernot-Steinke branch against dp_accounting's ``RepeatAndSelectDpEvent``, order by order.

dp_accounting's ``RdpAccountant`` handles ``RepeatAndSelectDpEvent(event, mean, shape)`` with its own
implementation of Papernot & Steinke 2022 (arXiv:2110.03620v2) Theorem 2 (truncated negative binomial T: shape 0 =
logarithmic, 1 = geometric, 0 < shape < ∞) and Theorem 6 (Poisson T, shape ∞). dphypo's P-S branch
(``rdp_bounds(...)["rdp"]``, which is ``tuning_rdp(..., adaptive_theorem="A")`` for a uniform search; the default
``tuning_rdp`` is the order-wise minimum of it and Theorem B at C = c = 1) is computed here on the *same* order grid
from the curve's own event, so the two curves are compared at every one of the 280 orders.

Known differences, each checked below rather than tolerated blindly:

* **γ.** dp_accounting is parameterised by the mean and finds γ by bisection to a relative 1e-9, returning the
  conservative (smaller) end; dphypo keeps γ exactly. log(1/γ) then differs by ≤ ~1e-9, and the curves by
  ≤ (1+η)·1e-9/α̂: hence :data:`TOL` = 1e-8 nats per order for 0 < η ≠ 1 and η = 0 (observed ≤ 1.5e-9); for
  geometric T (γ = 1/mean exactly) and Poisson T the same formula gives the same floats (observed ≤ 3e-14).
* **α̂ = 1.** dphypo also offers the limit α̂ → 1 (term (1+η) log(1/γ), Papernot & Steinke footnote 4); dp_accounting
  minimises over the grid orders only (and giving it order 1 does not help: its RDP there is ∞ and 0·∞ = NaN
  poisons the whole curve). Where α̂ = 1 wins (a weak base mechanism with E[T] small), dphypo's curve is lower by
  exactly the constant (1+η)·(min over the grid − log(1/γ)) at every order.
* **Poisson envelope.** dp_accounting does not apply the monotone envelope ε̃(α) = min_{α' ≥ α} ε(α') to Theorem 6
  (its curve blows up like log(μ)/(α−1) near α = 1); dphypo does (valid since D_α is non-decreasing in α), so
  dphypo's curve is the envelope of dp_accounting's, and never above it.

A tolerance that admitted a wrong formula would prove nothing, so plausible mistakes (the (1+η) factor dropped,
log(1/γ) for log E[T], no envelope, the research code's ``figure7.py`` variants, Theorem 6 without μ·δ̂ or with
ε̂ = 1/(α−1)) are each shown to miss dp_accounting by more than 100 × the tolerance.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant

from dphypo.privacy import (
    Poisson,
    RdpCurve,
    TruncatedNegativeBinomial,
    delta_from_rdp,
    dpsgd_rdp,
    epsilon_from_rdp,
    tuning_rdp,
)
from dphypo.privacy.search_rdp import rdp_bounds

#: Per-order absolute tolerance (nats) for TNB T with η ≠ 1: dp_accounting's mean → γ bisection (module docstring).
TOL = 1e-8
#: Relative tolerance everywhere (float rounding of values up to ~1e6 at order 1024), and the absolute one for
#: geometric and Poisson T: the same formula on the same floats.
TOL_EXACT = 1e-12
SHAPES = [0.0, 0.5, 1.0, 3.0, math.inf]  # logarithmic, TNB, geometric, TNB, Poisson
#: (σ, q, steps) and E[T]: the MNIST settings (σ = 1 and 0.71, q = 256/60000), a mid rate, full-batch DP-SGD
#: (a Gaussian), and a weak run where α̂ = 1 wins for the larger shapes.
SETTINGS = [
    (1.0, 256 / 60000, 2340, (2.0, 10.0, 100.0)),
    (0.71, 256 / 60000, 2344, (10.0,)),
    (2.0, 0.01, 500, (2.0, 100.0)),
    (0.8, 0.05, 100, (2.0, 10.0)),
    (5.0, 1.0, 10, (3.0, 30.0)),
    (0.5, 0.05, 1000, (10.0,)),
]


def _run_count(shape: float, mean: float) -> TruncatedNegativeBinomial | Poisson:
    return Poisson(mean) if shape == math.inf else TruncatedNegativeBinomial.from_mean(shape, mean)


def _dp_accounting(base: RdpCurve, mean: float, shape: float) -> rdp_privacy_accountant.RdpAccountant:
    accountant = rdp_privacy_accountant.RdpAccountant(list(base.orders))
    accountant.compose(dp_event.RepeatAndSelectDpEvent(base.event, mean, shape))  # the curve's own event
    return accountant


def _envelope(eps: np.ndarray) -> np.ndarray:
    return np.minimum.accumulate(eps[::-1])[::-1]


@pytest.fixture(autouse=True)
def _quiet_absl() -> None:
    logging.getLogger("absl").setLevel(logging.ERROR)  # non-converging fractional orders: inf on both sides


@pytest.mark.parametrize(("sigma", "q", "steps", "means"), SETTINGS)
def test_the_uniform_papernot_steinke_branch_is_dp_accountings_repeat_and_select(
    sigma: float, q: float, steps: int, means: tuple[float, ...]
) -> None:
    base = dpsgd_rdp(sigma, q, steps)
    alpha_hat_one = 0
    for mean in means:
        for shape in SHAPES:
            runs = _run_count(shape, mean)
            ours = rdp_bounds(base, runs, adaptive_theorem="A")["rdp"]  # the P-S branch (Theorem 2, or 6 for Poisson)
            assert ours.theorem.startswith(("DP-HyPO Theorem 1 = Papernot-Steinke Theorem 2", "Papernot-Steinke"))
            legacy = tuning_rdp(base, runs, adaptive_theorem="A").curve  # P-S alone for a uniform search
            np.testing.assert_array_equal(legacy.epsilons, ours.curve.epsilons)
            accountant = _dp_accounting(base, runs.mean, shape)
            theirs = np.where(np.isnan(accountant.rdp), np.inf, accountant.rdp)
            case = f"sigma={sigma}, q={q:.4g}, steps={steps}, mean={mean}, shape={shape}"
            if shape == math.inf:  # Theorem 6: dphypo applies the monotone envelope, dp_accounting does not
                assert np.all(ours.curve.epsilons <= theirs * (1 + TOL_EXACT)), case
                np.testing.assert_allclose(ours.curve.epsilons, _envelope(theirs), rtol=TOL_EXACT, err_msg=case)
                continue
            tol = TOL_EXACT if shape == 1.0 else TOL
            if ours.order_hat == 1.0:  # the α̂ → 1 limit won: lower by exactly a constant (module docstring)
                alpha_hat_one += 1
                gamma, a = runs.gamma, base.orders
                grid = np.min((1 - 1 / a) * base.epsilons + math.log(1 / gamma) / a)
                shift = (1 + shape) * (grid - math.log(1 / gamma))
                assert shift > 100 * TOL, case
                finite = np.isfinite(theirs)
                np.testing.assert_array_equal(finite, np.isfinite(ours.curve.epsilons), err_msg=case)
                np.testing.assert_allclose(ours.curve.epsilons[finite] + shift, theirs[finite], rtol=TOL_EXACT,
                                           atol=tol, err_msg=case)
                continue
            assert 1.0 < ours.order_hat < math.inf, case
            np.testing.assert_allclose(ours.curve.epsilons, theirs, rtol=TOL_EXACT, atol=tol, err_msg=case)
            # and so ε at δ, through either conversion
            eps, _ = epsilon_from_rdp(base.orders, ours.curve.epsilons, 1e-5)
            assert eps == pytest.approx(accountant.get_epsilon(1e-5), abs=tol), case
    assert alpha_hat_one == {0.5: 4, 0.8: 1}.get(sigma, 0)  # both branches are exercised


def test_the_default_uniform_curve_is_never_above_the_papernot_steinke_branch() -> None:
    base = dpsgd_rdp(1.0, 256 / 60000, 2340)
    for shape in (0.0, 1.0):
        runs = _run_count(shape, 10.0)
        default = tuning_rdp(base, runs)  # order-wise min with Theorem B at C = c = 1
        theirs = _dp_accounting(base, runs.mean, shape).rdp
        assert np.all(default.curve.epsilons <= theirs + TOL)
        assert np.any(default.curve.epsilons < theirs - 1e-3)  # Theorem B is strictly sharper somewhere


def _theorem2(base: RdpCurve, shape: float, gamma: float, mean: float, mistake: str = "") -> np.ndarray:
    """Papernot-Steinke Theorem 2 over the grid orders (dp_accounting's form), or with one plausible mistake."""
    a, e = base.orders, base.epsilons
    log_inv_gamma = -math.log(gamma)
    factor = 1.0 if mistake == "no (1+eta)" else 1.0 + shape
    constant = factor * np.min((1 - 1 / a) * e + log_inv_gamma / a)
    log_mean = log_inv_gamma if mistake == "log(1/gamma) for log E[T]" else math.log(mean)
    out = e + constant + log_mean / (a - 1)
    if mistake == "figure7.py":  # tensorflow/privacy research/hyperparameters_2022 (its NB / logarithmic formulas)
        if shape == 0.0:
            j = np.min((1 - 1 / a) * e + math.log(1 / gamma - 1) / a)
            out = e + j + (math.log(1 / gamma - 1) - math.log(log_inv_gamma)) / (a - 1)
        else:
            foo = math.log(shape) - math.log1p(-gamma**shape)
            j = np.min((1 + shape) * (1 - 1 / a) * e + (1 + shape) * (log_inv_gamma + math.log1p(-gamma)) / a)
            out = e + j + (log_inv_gamma + foo) / (a - 1)
    return out if mistake == "no envelope" else _envelope(out)


def _theorem6(base: RdpCurve, mean: float, mistake: str = "") -> np.ndarray:
    """Papernot-Steinke Theorem 6 (dp_accounting's form, enveloped), or with one plausible mistake."""
    out = np.empty_like(base.orders)
    for i, alpha in enumerate(base.orders):
        eps_hat = 1 / (alpha - 1) if mistake == "eps_hat = 1/(alpha-1)" else math.log1p(1 / (alpha - 1))
        delta_hat = 0.0 if mistake == "no mu*delta_hat" else delta_from_rdp(base.orders, base.epsilons, eps_hat)[0]
        out[i] = base.epsilons[i] + mean * delta_hat + math.log(mean) / (alpha - 1)
    return _envelope(out)


@pytest.mark.parametrize("shape", SHAPES)
def test_the_tolerance_rejects_a_wrong_formula(shape: float) -> None:
    base = dpsgd_rdp(1.0, 256 / 60000, 2340)
    runs = _run_count(shape, 10.0)
    theirs = _envelope(_dp_accounting(base, runs.mean, shape).rdp)
    finite = np.isfinite(theirs)

    def miss(curve: np.ndarray) -> float:
        return float(np.max(np.abs(curve[finite] - theirs[finite])))

    if shape == math.inf:
        assert miss(_theorem6(base, runs.mean)) <= TOL_EXACT  # the right formula, a third implementation
        for mistake in ("no mu*delta_hat", "eps_hat = 1/(alpha-1)"):
            assert miss(_theorem6(base, runs.mean, mistake)) > 100 * TOL, mistake
        return
    gamma = runs.gamma
    assert miss(_theorem2(base, shape, gamma, runs.mean)) <= TOL
    mistakes = ["no envelope"] + (["no (1+eta)"] if shape > 0 else [])  # η = 0: the factor is 1 anyway
    if shape != 1.0:  # for geometric T, E[T] = 1/γ and the research code's formula is Theorem 2 itself
        mistakes += ["log(1/gamma) for log E[T]", "figure7.py"]
    for mistake in mistakes:
        assert miss(_theorem2(base, shape, gamma, runs.mean, mistake)) > 100 * TOL, mistake
