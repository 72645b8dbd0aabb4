"""Tests of the exact DP-HyPO audit: the engine against closed forms and brute force, then the audit itself.

Engine checks (must be able to fail if the dynamic programme, the truncation or the divergences are wrong):
best-of-k cdf F^k (Papernot & Steinke 2022, Lemma 7 proof), A(o) = f(F(≤o)) − f(F(<o)) for random T,
Proposition 17's exact randomized-response divergences, and brute-force enumeration of histories for adaptive
rules. Audit checks: no violation on a random sample, and violations *are* flagged for a rule outside
S_{C,c} and for bounds that are too small.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest

from dphypo.privacy import TruncatedNegativeBinomial, dphypo_theorem1, dphypo_theorem2, geometric, logarithmic
from dphypo.testing.audit import (
    LEMMA_A5_TARGET,
    AuditInstance,
    BaseMechanisms,
    FixedT,
    UpdateRule,
    adversarial_rule,
    audit_instance,
    automaton_rule,
    history_rule,
    lemma_a5_check,
    lemma_a5_counterexample,
    lookup_table_rule,
    max_divergence_bounds,
    output_distribution,
    random_instance,
    renyi_bounds,
    softmax_projected_rule,
    uniform_rule,
    vertex_density,
)


def _one_run_law(prior: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """Law of one uniform run over outputs o = y·L + λ, shape (K,)."""
    return (prior[:, None] * probs).T.ravel()


def _random_probs(rng: np.random.Generator, n_cand: int, n_scores: int) -> np.ndarray:
    p = rng.dirichlet(np.ones(n_scores), size=n_cand) + 0.01
    return p / p.sum(axis=1, keepdims=True)


# -- engine vs closed forms ----------------------------------------------------------------------------------
@pytest.mark.parametrize("k", [1, 2, 7])
def test_uniform_fixed_t_is_best_of_k_cdf(k: int) -> None:
    # Best of k i.i.d. runs has cdf F^k, so A(o) = F(≤o)^k − F(<o)^k (Papernot & Steinke 2022, Lemma 7 proof).
    rng = np.random.default_rng(k)
    prior, probs = rng.dirichlet(np.full(3, 2.0)), _random_probs(rng, 3, 4)
    law = output_distribution(uniform_rule(prior, 12), probs, FixedT(k))
    cdf = np.cumsum(_one_run_law(prior, probs))
    expected = cdf**k - np.concatenate([[0.0], cdf[:-1]]) ** k
    np.testing.assert_allclose(law.lower, expected, rtol=1e-9, atol=1e-15)
    assert law.tail == 0.0


@pytest.mark.parametrize("theta", [-0.5, 0.0, 0.5, 1.0, 2.0])
def test_uniform_tnb_matches_pgf_and_interval_is_rigorous(theta: float) -> None:
    # A(o) = f(F(≤o)) − f(F(<o)) with the TNB pgf f; the exact value must lie inside [lower, upper].
    rng = np.random.default_rng(11)
    run_count = TruncatedNegativeBinomial(theta, 0.08)
    prior, probs = np.full(2, 0.5), _random_probs(rng, 2, 3)
    law = output_distribution(uniform_rule(prior, 6), probs, run_count)
    cdf = np.minimum(np.cumsum(_one_run_law(prior, probs)), 1.0)
    exact = run_count.pgf(cdf) - run_count.pgf(np.concatenate([[0.0], cdf[:-1]]))
    assert np.all(law.lower <= exact) and np.all(exact <= law.upper)
    assert law.tail < 1e-12 and np.all(law.upper - law.lower < 1e-9)
    # A coarse truncation gives a wider interval that still contains the exact law.
    coarse = output_distribution(uniform_rule(prior, 6), probs, run_count, tail_target=1e-3)
    assert coarse.t_max < law.t_max
    assert np.all(coarse.lower <= exact) and np.all(exact <= coarse.upper)


@pytest.mark.parametrize("k", [1, 3, 6])
@pytest.mark.parametrize("eps", [0.3, 1.5])
def test_proposition17_randomized_response_exact_divergences(k: int, eps: float) -> None:
    # Papernot & Steinke 2022, Prop. 17: RR with the good score w.p. 1/(1+e^ε) on D, e^ε/(1+e^ε) on D′;
    # best of k: A = (1 − p^k, p^k) on (good, bad) with p = e^ε/(1+e^ε); D_∞(A‖A′) = kε.
    p, q = math.exp(eps) / (1 + math.exp(eps)), 1 / (1 + math.exp(eps))
    prior = np.array([1.0])
    law = output_distribution(uniform_rule(prior, 2), np.array([[p, q]]), FixedT(k))
    law_p = output_distribution(uniform_rule(prior, 2), np.array([[q, p]]), FixedT(k))
    np.testing.assert_allclose(law.lower, [p**k, 1 - p**k], rtol=1e-9)
    lo, hi = max_divergence_bounds(law, law_p)
    assert lo == pytest.approx(k * eps, rel=1e-8) and hi == pytest.approx(k * eps, rel=1e-8)
    orders = np.array([1.5, 2.0, 5.0, 50.0])
    lo_r, hi_r = renyi_bounds(law, law_p, orders)
    bad, good = p ** (k * orders) * q ** (k * (1 - orders)), (1 - p**k) ** orders * (1 - q**k) ** (1 - orders)
    exact = np.log(bad + good)
    np.testing.assert_allclose(lo_r, exact / (orders - 1), rtol=1e-8)
    np.testing.assert_allclose(hi_r, exact / (orders - 1), rtol=1e-8)
    # Prop. 17's lower bound (tight at large α, so allow the interval's float slack).
    assert np.all(lo_r >= k * eps - k * np.log1p(math.exp(-eps)) / (orders - 1) - 1e-8)


def test_proposition17_constant_bad_event_variant() -> None:
    # Q = (e^{−1/k}, 1 − e^{−1/k}) on (bad, good), Q′ with e^{−ε−1/k}: A(bad) = e^{−1}, A′(bad) = e^{−kε−1}.
    k, eps = 4, 0.7
    bad, bad_p = math.exp(-1 / k), math.exp(-eps - 1 / k)
    prior = np.array([1.0])
    law = output_distribution(uniform_rule(prior, 2), np.array([[bad, 1 - bad]]), FixedT(k))
    law_p = output_distribution(uniform_rule(prior, 2), np.array([[bad_p, 1 - bad_p]]), FixedT(k))
    assert law.lower[0] == pytest.approx(math.exp(-1), rel=1e-9)
    assert law_p.lower[0] == pytest.approx(math.exp(-k * eps - 1), rel=1e-9)
    assert max_divergence_bounds(law, law_p)[0] == pytest.approx(k * eps, rel=1e-8)


def _brute_force_law(rule: UpdateRule, probs: np.ndarray, k: int) -> np.ndarray:
    """Enumerate all K^k histories, run the rule's automaton on each, release the max."""
    n_cand = probs.shape[0]
    law = np.zeros(probs.size)
    for history in itertools.product(range(probs.size), repeat=k):
        state, prob = rule.initial, 1.0
        for o in history:
            prob *= rule.densities[state, o % n_cand] * probs[o % n_cand, o // n_cand]
            state = rule.transitions[state, o]
        law[max(history)] += prob
    return law


@pytest.mark.parametrize("family", ["table", "history", "adversarial", "softmax"])
@pytest.mark.parametrize("k", [1, 2, 4])
def test_adaptive_rules_match_brute_force_enumeration(family: str, k: int) -> None:
    rng = np.random.default_rng(100 + k)
    n_cand, n_scores = 3, 2
    prior, probs = rng.dirichlet(np.full(n_cand, 3.0)), _random_probs(rng, n_cand, n_scores)
    C, c = 2.0, 0.4
    base = BaseMechanisms(probs, _random_probs(rng, n_cand, n_scores))
    rule = {
        "table": lambda: lookup_table_rule(rng, prior, C, c, n_scores, horizon=2),
        "history": lambda: history_rule(rng, prior, C, c, n_cand * n_scores, depth=3, kind="mixed"),
        "adversarial": lambda: adversarial_rule(prior, C, c, base, trigger="llr"),
        "softmax": lambda: softmax_projected_rule(prior, C, c, n_scores, beta=8.0),
    }[family]()
    rule.check_in_density_set(prior, C, c)
    assert len({tuple(d) for d in rule.densities}) > 1  # genuinely adaptive
    law = output_distribution(rule, probs, FixedT(k))
    np.testing.assert_allclose(law.lower, _brute_force_law(rule, probs, k), rtol=1e-9, atol=1e-15)


def test_every_family_is_uniform_when_c_equals_big_c() -> None:
    rng = np.random.default_rng(5)
    prior, probs = np.full(2, 0.5), _random_probs(rng, 2, 3)
    base = BaseMechanisms(probs, _random_probs(rng, 2, 3))
    expected = output_distribution(uniform_rule(prior, 6), probs, logarithmic(0.2)).lower
    for rule in (
        lookup_table_rule(rng, prior, 1.0, 1.0, 3),
        adversarial_rule(prior, 1.0, 1.0, base),
        softmax_projected_rule(prior, 1.0, 1.0, 3),
    ):
        np.testing.assert_allclose(rule.densities, np.broadcast_to(prior, rule.densities.shape), atol=1e-15)
        law = output_distribution(rule, probs, logarithmic(0.2))
        np.testing.assert_allclose(law.lower, expected, rtol=1e-9)


def test_vertex_density_is_an_extreme_point_of_the_bounded_set() -> None:
    prior = np.array([0.1, 0.2, 0.3, 0.4])
    f = vertex_density(np.array([2, 0, 3, 1]), prior, 2.0, 0.5)
    assert f.sum() == pytest.approx(1.0)
    ratio = f / prior
    assert np.all(ratio >= 0.5 - 1e-15) and np.all(ratio <= 2.0 + 1e-15)
    assert np.sum((np.abs(ratio - 2.0) > 1e-12) & (np.abs(ratio - 0.5) > 1e-12)) <= 1
    assert ratio[2] == pytest.approx(2.0)  # first in the order is filled to C


# -- the audit -----------------------------------------------------------------------------------------------
def test_random_sample_has_no_violation() -> None:
    rng = np.random.default_rng(2024)
    results = [audit_instance(random_instance(rng)) for _ in range(60)]
    bad = [r.instance.describe() for r in results if r.verdict != "ok"]
    assert not bad, bad
    ratios = np.array([r.ratio for r in results])
    assert np.all(ratios < 1.0) and np.all(ratios > 0.0)
    for r in results:  # both directions of both theorems are audited, lower ≤ upper
        assert np.all(r.rdp_lower <= r.rdp_upper) and r.pure_lower <= r.pure_upper


def test_oracle_relaxation_runs_the_other_rule_on_d_prime() -> None:
    rng = np.random.default_rng(3)
    inst = random_instance(rng)
    while inst.c == inst.C or inst.rule.n_states == 1:
        inst = random_instance(rng)
    plain = audit_instance(inst)
    same = audit_instance(dataclasses.replace(inst, rule_prime=inst.rule))
    np.testing.assert_array_equal(plain.rdp_upper, same.rdp_upper)
    uniform = uniform_rule(inst.prior, inst.base.probs.size)
    oracle = audit_instance(dataclasses.replace(inst, rule_prime=uniform))
    law = output_distribution(inst.rule, inst.base.probs, inst.run_count)
    law_p = output_distribution(uniform, inst.base.probs_prime, inst.run_count)
    lower, upper = renyi_bounds(law, law_p, inst.orders)
    np.testing.assert_allclose(oracle.rdp_lower[0], lower, rtol=1e-12)
    np.testing.assert_allclose(oracle.rdp_upper[0], upper, rtol=1e-12)
    assert not np.allclose(oracle.rdp_upper, plain.rdp_upper)


def _flag_instance(up: np.ndarray, down: np.ndarray, C: float, c: float, *, validate: bool) -> AuditInstance:
    """A probe (randomized response, ε = 1) and two data-independent 'flags' that score top.

    The rule counts probe outputs (clipped to ±7) and, at count ≥ 6 / ≤ −6, switches to the densities ``up`` /
    ``down``; the released flag then tells which way the count went. Prior mass on the flags is 1e-4 each.
    """
    e = math.e
    probe = [[e / (1 + e), 1 / (1 + e)], [1 / (1 + e), e / (1 + e)]]
    flag = [1e-3, 1 - 1e-3]
    base = BaseMechanisms(np.array([probe[0], flag, flag]), np.array([probe[1], flag, flag]), "flag")
    prior = np.array([1 - 2e-4, 1e-4, 1e-4])

    def step(key: object, o: int) -> int:
        count = 0 if key == "start" else int(key)  # type: ignore[call-overload]
        return int(np.clip(count + (o == 0) - (o == 3), -7, 7))  # probe low score: D-like, high: D′-like

    def density(key: object) -> np.ndarray:
        if key == "start" or abs(int(key)) < 6:  # type: ignore[call-overload]
            return prior.copy()
        return up if int(key) > 0 else down  # type: ignore[call-overload]

    rule = automaton_rule("flag", "start", step, density, 6)
    return AuditInstance(prior, base, rule, logarithmic(0.01), C, c, validate_rule=validate)


def test_rule_outside_bounded_set_is_refused_and_flagged() -> None:
    up, down = np.array([0.0, 1.0, 0.0]), np.array([0.0, 0.0, 1.0])  # density ratio 10⁴ and 0: C′ ≫ C
    with pytest.raises(ValueError, match="leaves S_"):
        _flag_instance(up, down, 1.5, 1 / 1.5, validate=True)
    result = audit_instance(_flag_instance(up, down, 1.5, 1 / 1.5, validate=False))
    assert result.rdp_verdict == "violation" and result.pure_verdict == "violation"
    assert result.ratio_lower > 1.2


def test_bound_that_ignores_adaptivity_is_flagged() -> None:
    # A legitimate rule in S_{10, 0.1}: fine against Theorems 1/2 with (C, c), but the uniform (C = c = 1)
    # bound, i.e. one that forgets the log(C/c) terms, is exceeded.
    prior = np.array([1 - 2e-4, 1e-4, 1e-4])
    up = vertex_density(np.array([1, 0, 2]), prior, 10.0, 0.1)
    down = vertex_density(np.array([2, 0, 1]), prior, 10.0, 0.1)
    instance = _flag_instance(up, down, 10.0, 0.1, validate=True)
    assert audit_instance(instance).verdict == "ok"
    base = instance.base.rdp_curve(instance.orders)
    uniform = dphypo_theorem1(base, instance.run_count, 1.0, 1.0).curve.epsilons
    pure = dphypo_theorem2(float(base.pure_epsilon), instance.run_count.theta, 1.0, 1.0)
    flagged = audit_instance(instance, rdp_bound=uniform, pure_bound=pure)
    assert flagged.rdp_verdict == "violation" and flagged.pure_verdict == "violation"


def test_uniform_search_close_to_the_bound_and_a_smaller_bound_is_flagged() -> None:
    # Prop. 17's randomized response with T ~ TNB(−0.5, 0.05): Papernot–Steinke's bound is within ~20 %.
    eps = math.log(3.0)
    probs = np.array([[0.75, 0.25]])
    instance = AuditInstance(
        np.array([1.0]), BaseMechanisms(probs, probs[:, ::-1].copy(), "prop17"),
        uniform_rule(np.array([1.0]), 2), TruncatedNegativeBinomial(-0.5, 0.05), 1.0, 1.0,
    )
    result = audit_instance(instance)
    assert result.verdict == "ok" and 0.7 < result.ratio_lower <= result.ratio < 1.0
    assert result.pure_bound == pytest.approx(1.5 * eps)
    smaller = audit_instance(instance, rdp_bound=0.7 * result.rdp_bound, pure_bound=0.7 * result.pure_bound)
    assert smaller.rdp_verdict == "violation" and smaller.pure_verdict == "violation"


# -- the proof's Lemma A.5 -----------------------------------------------------------------------------------
def test_lemma_a5_first_display_is_false_but_corrected_bounds_hold() -> None:
    rule, probs, prior, C, c = lemma_a5_counterexample()
    target = LEMMA_A5_TARGET
    check = lemma_a5_check(rule, probs, prior, geometric(0.1), C, c)
    assert check.exact.lower[target] > check.paper_upper[target] * 1.1
    assert check.paper_refuted and check.corrected_holds


def test_lemma_a5_corrected_bounds_hold_on_random_rules() -> None:
    rng = np.random.default_rng(7)
    for _ in range(10):
        inst = random_instance(rng, max_outputs=12)
        check = lemma_a5_check(inst.rule, inst.base.probs, inst.prior, inst.run_count, inst.C, inst.c)
        assert check.corrected_holds, inst.describe()
