"""Random audit instances and base-mechanism constructions (pure numpy, no I/O).

:func:`random_instance` draws sizes, a base construction (random tilt, k-ary randomized response, or
Papernot & Steinke 2022 Proposition 17's two constructions), (C, c), TNB(θ, γ) and a rule family from
:mod:`dphypo.testing.audit.rules`.
"""

from __future__ import annotations

import numpy as np

from dphypo.privacy.run_counts import TruncatedNegativeBinomial
from dphypo.testing.audit._instance import AuditInstance, BaseMechanisms
from dphypo.testing.audit.rules import (
    adversarial_rule,
    history_rule,
    lookup_table_rule,
    softmax_projected_rule,
    uniform_rule,
)


# -- random instances ----------------------------------------------------------------------------------------
def _random_base(
    rng: np.random.Generator, n_cand: int, n_scores: int, kind: str, mean_t: float
) -> BaseMechanisms:
    """Candidates' laws of one of the audit's families.

    ``"random"`` (bounded log-ratio tilt), ``"rr"`` (k-ary randomized response, the pure-DP worst case),
    ``"prop17"`` / ``"prop17b"`` (Papernot & Steinke 2022, Proposition 17's two constructions, one ε per
    candidate).
    """
    eps = np.exp(rng.uniform(np.log(0.05), np.log(2.0), size=n_cand))
    eps[rng.random(n_cand) < 0.2] = 0.0  # some candidates do not look at the data (not all of them)
    eps[rng.integers(n_cand)] = max(eps.max(), 0.05)
    if kind == "random":
        p = rng.dirichlet(np.ones(n_scores), size=n_cand) + 1e-3
        p /= p.sum(axis=1, keepdims=True)
        q = p * np.exp(eps[:, None] * rng.uniform(-1, 1, size=p.shape))
    elif kind == "rr":
        favoured = np.full(n_cand, n_scores - 1) if rng.random() < 0.5 else rng.integers(0, n_scores, n_cand)
        other = (favoured + rng.integers(1, n_scores, n_cand)) % n_scores
        p, q = np.ones((n_cand, n_scores)), np.ones((n_cand, n_scores))
        p[np.arange(n_cand), favoured] = np.exp(eps)
        q[np.arange(n_cand), other] = np.exp(eps)
    elif kind == "prop17":  # D: good score w.p. 1/(1+e^ε); D′: w.p. e^ε/(1+e^ε)
        p = np.stack([np.exp(eps), np.ones(n_cand)], axis=1)
        q = p[:, ::-1].copy()
    else:  # prop17b: bad score w.p. e^{−1/k} on D and e^{−ε−1/k} on D′, k ≈ E[T]
        k = max(1.0, round(mean_t))
        bad, bad_p = np.full(n_cand, np.exp(-1 / k)), np.exp(-eps - 1 / k)
        p, q = np.stack([bad, 1 - bad], axis=1), np.stack([bad_p, 1 - bad_p], axis=1)
    p, q = p / p.sum(axis=1, keepdims=True), q / q.sum(axis=1, keepdims=True)
    return BaseMechanisms(p, q, kind) if rng.random() < 0.5 else BaseMechanisms(q, p, kind + "-swapped")


def _random_run_count(rng: np.random.Generator) -> TruncatedNegativeBinomial:
    theta = float(rng.choice([-0.5, 0.0, 0.5, 1.0, 2.0, rng.uniform(-0.95, 3.0)]))
    gamma = float(np.exp(rng.uniform(np.log(0.05), np.log(0.6))))
    return TruncatedNegativeBinomial(theta, gamma)


def _random_bounds(rng: np.random.Generator) -> tuple[float, float]:
    if rng.random() < 0.15:
        return 1.0, 1.0
    C = float(rng.choice([1.25, 1.5, 2.0, 3.0, rng.uniform(1.0, 4.0)]))
    c = float(rng.choice([1.0 / C, 0.75, 0.5, 1.0, rng.uniform(0.25, 1.0)]))
    return C, c


def random_instance(
    rng: np.random.Generator, *, max_candidates: int = 4, max_scores: int = 5, max_outputs: int = 16
) -> AuditInstance:
    """A random audit instance (sizes, base construction, (C, c), TNB(θ, γ), rule family).

    Args:
        rng: Source of every random choice.
        max_candidates: Largest |Λ| (≥ 2).
        max_scores: Largest |Y| (≥ 2).
        max_outputs: Largest K = |Λ|·|Y|.

    Returns:
        The instance.
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    kind = str(rng.choice(["random", "rr", "prop17", "prop17b"], p=[0.4, 0.3, 0.15, 0.15]))
    n_cand = int(rng.integers(2, max_candidates + 1))
    top_scores = max(2, min(max_scores, max_outputs // n_cand))
    n_scores = 2 if kind.startswith("prop17") else int(rng.integers(2, top_scores + 1))
    n_out = n_cand * n_scores
    run_count = _random_run_count(rng)
    base = _random_base(rng, n_cand, n_scores, kind, run_count.mean)
    prior = np.full(n_cand, 1.0 / n_cand) if rng.random() < 0.5 else rng.dirichlet(np.full(n_cand, 3.0))
    C, c = _random_bounds(rng)
    families = ["uniform", "table", "adversarial", "history", "softmax"]
    family = str(rng.choice(families, p=[0.05, 0.3, 0.35, 0.15, 0.15]))
    if family == "uniform":
        rule = uniform_rule(prior, n_out)
    elif family == "table":
        memory = [("best", "last", "step"), ("best",), ("last",), ("best", "step"), ("last", "step")]
        rule = lookup_table_rule(
            rng, prior, C, c, n_scores, memory=memory[rng.integers(len(memory))],
            horizon=int(rng.integers(1, 4)), kind=str(rng.choice(["vertex", "interior", "mixed"])),
        )
    elif family == "adversarial":
        rule = adversarial_rule(
            prior, C, c, base, trigger=str(rng.choice(["best", "last", "llr"])),
            threshold=int(rng.integers(0, n_scores)), direction=int(rng.choice([-1, 1])),
            score=int(rng.integers(0, n_scores)) if rng.random() < 0.3 else n_scores - 1,
            otherwise=str(rng.choice(["prior", "opposite"])),
        )
    elif family == "history":
        depth = 3 if n_out <= 6 else (2 if n_out <= 16 else 1)
        rule = history_rule(rng, prior, C, c, n_out, depth=depth, kind=str(rng.choice(["vertex", "mixed"])))
    else:
        rule = softmax_projected_rule(
            prior, C, c, n_scores, beta=float(np.exp(rng.uniform(0.0, np.log(50.0)))),
            optimism=float(rng.random()),
        )
    return AuditInstance(prior, base, rule, run_count, C, c)
