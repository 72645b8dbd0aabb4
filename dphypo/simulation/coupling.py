r"""The rejection coupling of a DP-HyPO search with its prior proposals (``docs/proofs/domination.md``).

An adaptive search (DP-HyPO Framework 1, Wang et al. 2023) draws candidate j from a density π_j ≤ C·π0. Realise
that draw by rejection from the prior: propose λ ~ π0, accept with probability π_j(λ)/(E·π0(λ)) for an envelope
E ≥ C, and repeat until one is accepted. Every proposal is "trained" (scored on a landscape); the adaptive search
sees only the accepted ones, so it is exactly the search :class:`~dphypo.search.loop.SearchLoop` runs. The proposals
form a second candidate set that contains the adaptive one (Lemma 1 of the proof document), and their number N is
exactly ``f_T(g(x))``-distributed with g the pgf of Geometric(1/E) on {1, 2, ...}: geometric(γ/E) for geometric T
(Lemma 2). What the proposals are **not** is a uniform search: the last proposal of every step is the accepted one,
distributed as π_j, so the proposal set depends on the adaptive densities (Remark A of the document, checked as an
expected failure in ``tests/simulation/test_domination.py``).

The threshold bounds below replace the coupling's false corollary with a true one (Theorem 4): a set G of prior
mass q is hit by one adaptive candidate with probability at most h = min(C·q, 1 − c·(1 − q)), so the adaptive search
misses G with probability at least f_T(1 − h), while a uniform search with run count N misses it with probability
exactly f_N(1 − q). For geometric T, a geometric uniform search with (C/c)·E[T] runs (not C·E[T]) dominates at every
level, and no smaller factor does.

This module is simulation only: landscapes are public, so its random streams are seeded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special

from dphypo.density import draw
from dphypo.privacy import RunCountDistribution
from dphypo.privacy.tuning import check_density_bounds
from dphypo.privacy.validation import check_non_negative_int, check_positive_int, check_probability
from dphypo.search.loop import SearchLoop
from dphypo.simulation.landscapes import Landscape
from dphypo.strategies import Strategy, best_runs, density_bounds
from dphypo.strategies.base import check_strategy

__all__ = [
    "CoupledSearches",
    "adaptive_hit_bound",
    "coupled_searches",
    "geometric_runs_to_dominate",
    "proposal_count_pmf",
    "rejection_draw",
    "thinned_searches",
    "uniform_miss_probability",
]

# Stream ids inside a repeat's SeedSequence.
_RUN_COUNT, _PROPOSALS, _NOISE, _STRATEGY = range(4)
# An envelope below max π_j/π0 by more than this relative slack is refused (projection rounding is ~1e-15).
_ENVELOPE_SLACK = 1e-9


@dataclass(frozen=True)
class CoupledSearches:
    """The coupled pairs of ``repeats`` simulated searches (one entry per repeat in every list).

    Attributes:
        run_counts: T of each adaptive search, shape ``(repeats,)``.
        proposals: Per repeat, the grid index of every proposal in order, shape ``(N_r,)``.
        accepted: Per repeat, whether each proposal was accepted (an adaptive candidate), shape ``(N_r,)``.
        steps: Per repeat, the adaptive step (0-based) each proposal served, shape ``(N_r,)``.
        scores: Per repeat, the score each proposal got (its one training run), shape ``(N_r,)``.
        direction: ``"maximize"`` or ``"minimize"`` (the landscape's).
    """

    run_counts: np.ndarray
    proposals: list[np.ndarray]
    accepted: list[np.ndarray]
    steps: list[np.ndarray]
    scores: list[np.ndarray]
    direction: str

    @property
    def proposal_counts(self) -> np.ndarray:
        """N of each repeat (the coupled search's number of runs), int64 shape ``(repeats,)``."""
        return np.array([p.size for p in self.proposals], dtype=np.int64)

    def released(self, which: str) -> np.ndarray:
        """Grid index each repeat releases (best score, ties to the smaller index; -1 for a search with no run).

        Args:
            which: ``"adaptive"`` (the accepted proposals) or ``"proposals"`` (all of them).

        Returns:
            int64 shape ``(repeats,)``.
        """
        if which not in ("adaptive", "proposals"):
            raise ValueError(f"which must be 'adaptive' or 'proposals', got {which!r}")
        out = np.full(len(self.proposals), -1, dtype=np.int64)
        for r, (indices, scores, kept) in enumerate(zip(self.proposals, self.scores, self.accepted, strict=True)):
            if which == "adaptive":
                indices, scores = indices[kept], scores[kept]
            if indices.size:
                out[r] = indices[int(best_runs(indices, scores, self.direction))]  # type: ignore[arg-type]
        return out


def rejection_draw(
    density: np.ndarray, prior: np.ndarray, envelope: float, rng: np.random.Generator
) -> np.ndarray:
    """Draw one candidate from ``density`` by rejection from ``prior``; return every proposal, the last accepted.

    Each proposal λ ~ π0 is accepted with probability π(λ)/(E·π0(λ)), so one proposal is accepted with probability
    Σ π0·π/(E·π0) = 1/E whatever π is, the number of proposals is Geometric(1/E) on {1, 2, ...}, and the accepted
    λ has law π (von Neumann's rejection sampling; ``docs/proofs/domination.md``, Lemma 2).

    Args:
        density: π, shape ``(n,)``, with π ≤ E·π0 (a density in S_{C,c} and E ≥ C).
        prior: π0, shape ``(n,)``, positive.
        envelope: E ≥ max π/π0.
        rng: Stream of the proposals and acceptance coins (two uniforms per proposal).

    Returns:
        int64 grid indices of the proposals, shape ``(G,)``, G ≥ 1; only the last was accepted.

    Raises:
        ValueError: If ``density > envelope·prior`` somewhere (beyond rounding): not a valid envelope.
    """
    ratio = np.asarray(density, dtype=np.float64) / (envelope * np.asarray(prior, dtype=np.float64))
    if float(ratio.max()) > 1.0 + _ENVELOPE_SLACK:
        raise ValueError(f"envelope must be >= max density/prior = {float(ratio.max()) * envelope!r}, "
                         f"got {envelope!r}")
    accept = np.minimum(ratio, 1.0)  # a density on the bound C·π0 may exceed it by an ulp after projection
    block = max(1, math.ceil(2.0 * envelope))  # proposals drawn per round: one round succeeds w.p. ≥ 1 − e^{-2}
    proposed: list[np.ndarray] = []
    while True:
        indices = draw(prior, rng.random(block))
        hits = np.flatnonzero(rng.random(block) < accept[indices])
        if hits.size:
            proposed.append(indices[: hits[0] + 1])
            return np.concatenate(proposed)
        proposed.append(indices)


def coupled_searches(
    landscape: Landscape,
    strategy: Strategy,
    run_count: RunCountDistribution,
    *,
    repeats: int,
    seed: int = 0,
    noisy: bool = False,
    envelope: float | None = None,
) -> CoupledSearches:
    """Run ``repeats`` adaptive searches through the real :class:`SearchLoop`, each draw realised by rejection.

    The loop projects and verifies every density (privacy rule 3) and records it; the candidate is then drawn from
    that projected density by :func:`rejection_draw`, every proposal is scored once, and the loop observes only the
    accepted one. T is drawn once per repeat before anything else, as a real search does.

    Args:
        landscape: The landscape (scores: its mean, or a draw from N(mean, std) with ``noisy``).
        strategy: The adaptive strategy (e.g. :class:`~dphypo.strategies.GPUCB`); its C and c bound the densities.
        run_count: Law of T (any family; a repeat with T = 0 makes no proposal).
        repeats: Number of independent coupled pairs, ≥ 1.
        seed: Study seed (landscapes are public: simulations are seeded).
        noisy: Score each proposal with landscape noise (one draw per proposal, seen by both searches).
        envelope: Rejection envelope E ≥ C (default C). A larger E is still an exact sampler of π_j but makes
            N ~ f_T(Geometric(1/E)): the negative control of the run-count law.

    Returns:
        The coupled pairs.
    """
    check_positive_int("repeats", repeats)
    check_non_negative_int("seed", seed)
    check_strategy(strategy)
    C, c = density_bounds(strategy)
    check_density_bounds(C, c)
    envelope = C if envelope is None else float(envelope)
    if not envelope >= C:
        raise ValueError(f"envelope must be >= C = {C!r} (otherwise π_j/(E·π0) can exceed 1), got {envelope!r}")
    streams = [[np.random.SeedSequence(seed, spawn_key=(r, k)) for k in range(4)] for r in range(repeats)]
    lengths = np.array([run_count.sample(np.random.default_rng(s[_RUN_COUNT])) for s in streams], dtype=np.int64)
    proposal_rngs = [np.random.default_rng(s[_PROPOSALS]) for s in streams]
    noise_rngs = [np.random.default_rng(s[_NOISE]) for s in streams]
    loop = SearchLoop(landscape.space, strategy, landscape.direction, (C, c),  # type: ignore[arg-type]
                      strategy_seeds=[int(s[_STRATEGY].generate_state(1)[0]) for s in streams],
                      sampling=proposal_rngs, record_densities=True)
    prior, mean, std = landscape.space.prior, landscape.mean.ravel(), landscape.std.ravel()
    parts: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(repeats)]
    members = np.arange(repeats)
    for t in range(int(lengths.max(initial=0))):
        active = members[lengths > t]
        loop.draw(active, 0)  # zero inverse-CDF draws: the loop only projects, verifies and records the density
        chosen, chosen_scores = [], []
        for m in active:
            indices = rejection_draw(loop.densities[m][-1], prior, envelope, proposal_rngs[m])
            scores = noise_rngs[m].normal(mean[indices], std[indices]) if noisy else mean[indices]
            parts[m].append((indices, scores))
            chosen.append(indices[-1])
            chosen_scores.append(scores[-1])
        loop.observe(active, chosen, chosen_scores)
    return _collect(parts, lengths, landscape.direction)


def thinned_searches(
    landscape: Landscape,
    strategy: Strategy,
    proposal_count: RunCountDistribution,
    *,
    repeats: int,
    seed: int = 0,
    noisy: bool = False,
) -> CoupledSearches:
    """The thinning coupling (``docs/proofs/domination.md``, Theorem 3): a uniform search containing an adaptive one.

    N ~ ``proposal_count`` is drawn first and N proposals i.i.d. π0, independent of N: a uniform search. They are
    processed in order; proposal i is accepted with probability π_j(λ_i)/(C·π0(λ_i)), π_j the adaptive search's
    current projected density (from :class:`SearchLoop`, which observes only accepted proposals). Each acceptance
    coin is Bernoulli(1/C) given the whole past, so the accepted count T is N thinned by 1/C, independent of the
    adaptive path: Poisson(C·μ) proposals give an adaptive search with T ~ Poisson(μ) exactly. A TNB N gives a T
    with an atom at 0 (no proposal accepted), which no TNB search has.

    Args:
        landscape: The landscape (scores: its mean, or a draw from N(mean, std) with ``noisy``).
        strategy: The adaptive strategy; its C is the acceptance envelope, its (C, c) bound the densities.
        proposal_count: Law of N, the uniform search's run count.
        repeats: Number of independent coupled pairs, ≥ 1.
        seed: Study seed.
        noisy: Score each proposal with landscape noise (one draw per proposal, seen by both searches).

    Returns:
        The coupled pairs; ``run_counts`` holds the realised T (accepted proposals), ``steps`` the adaptive step
        each proposal was offered to.
    """
    check_positive_int("repeats", repeats)
    check_non_negative_int("seed", seed)
    check_strategy(strategy)
    C, c = density_bounds(strategy)
    check_density_bounds(C, c)
    streams = [[np.random.SeedSequence(seed, spawn_key=(r, k)) for k in range(4)] for r in range(repeats)]
    counts = np.array([proposal_count.sample(np.random.default_rng(s[_RUN_COUNT])) for s in streams], dtype=np.int64)
    proposal_rngs = [np.random.default_rng(s[_PROPOSALS]) for s in streams]
    loop = SearchLoop(landscape.space, strategy, landscape.direction, (C, c),  # type: ignore[arg-type]
                      strategy_seeds=[int(s[_STRATEGY].generate_state(1)[0]) for s in streams],
                      sampling=proposal_rngs, record_densities=True)
    prior, mean, std = landscape.space.prior, landscape.mean.ravel(), landscape.std.ravel()
    proposals = [draw(prior, rng.random(int(n))) for rng, n in zip(proposal_rngs, counts, strict=True)]
    scores = [rng.normal(mean[i], std[i]) if noisy else mean[i]
              for rng, i in zip((np.random.default_rng(s[_NOISE]) for s in streams), proposals, strict=True)]
    accepted = [np.zeros(int(n), dtype=bool) for n in counts]
    steps = [np.zeros(int(n), dtype=np.int64) for n in counts]
    members = np.arange(repeats)
    for i in range(int(counts.max(initial=0))):
        active = members[counts > i]
        loop.draw(active, 0)  # zero inverse-CDF draws: the loop only projects, verifies and records the density
        for m in active:
            steps[m][i] = int(accepted[m][:i].sum())
            ratio = loop.densities[m][-1][proposals[m][i]] / (C * prior[proposals[m][i]])
            accepted[m][i] = proposal_rngs[m].random() < min(ratio, 1.0)
        taken = [m for m in active if accepted[m][i]]
        if taken:
            loop.observe(taken, [proposals[m][i] for m in taken], [scores[m][i] for m in taken])
    run_counts = np.array([a.sum() for a in accepted], dtype=np.int64)
    return CoupledSearches(run_counts, proposals, accepted, steps, scores, landscape.direction)


def _collect(parts: list[list[tuple[np.ndarray, np.ndarray]]], lengths: np.ndarray, direction: str,
             ) -> CoupledSearches:
    """Flatten each repeat's per-step proposals into the arrays of :class:`CoupledSearches`."""
    proposals, accepted, steps, scores = [], [], [], []
    for steps_of_repeat in parts:
        sizes = [indices.size for indices, _ in steps_of_repeat]
        proposals.append(np.concatenate([i for i, _ in steps_of_repeat] or [np.empty(0, np.int64)]))
        scores.append(np.concatenate([s for _, s in steps_of_repeat] or [np.empty(0)]))
        steps.append(np.repeat(np.arange(len(sizes)), sizes).astype(np.int64))
        last = np.zeros(sum(sizes), dtype=bool)
        last[np.cumsum(sizes, dtype=np.int64) - 1] = True
        accepted.append(last)
    return CoupledSearches(lengths, proposals, accepted, steps, scores, direction)


def proposal_count_pmf(run_count: RunCountDistribution, envelope: float, counts: np.ndarray) -> np.ndarray:
    """P(N = n) for the number of proposals N = G_1 + … + G_T, G_j i.i.d. Geometric(1/E) on {1, 2, ...} (Lemma 2).

    Given T = t, N − t is negative binomial: P(N = n | T = t) = binom(n − 1, t − 1)·E^{−t}·(1 − 1/E)^{n − t}; the sum
    over t ≤ n is exact (T = 0 gives N = 0). Its pgf is f_T(g(x)) with g(x) = (x/E)/(1 − (1 − 1/E)x), which is
    geometric(γ/E) when T is geometric(γ) and no TNB law otherwise (``docs/proofs/domination.md``, Lemma 2).

    Args:
        run_count: Law of T.
        envelope: E ≥ 1.
        counts: n, non-negative integers, shape ``(k,)``.

    Returns:
        P(N = n), shape ``(k,)``.
    """
    if not envelope >= 1.0:
        raise ValueError(f"envelope must be >= 1, got {envelope!r}")
    counts = np.asarray(counts, dtype=np.int64)
    out = np.zeros(counts.shape)
    p = 1.0 / envelope
    for i, n in enumerate(counts.tolist()):
        if n == 0:
            out[i] = float(run_count.pmf(0))
            continue
        t = np.arange(1, n + 1)
        log_binom = special.gammaln(n) - special.gammaln(t) - special.gammaln(n - t + 1)
        tail = (n - t) * math.log1p(-p) if p < 1.0 else np.where(t == n, 0.0, -np.inf)
        out[i] = float(np.sum(run_count.pmf(t) * np.exp(log_binom + t * math.log(p) + tail)))
    return out


# ----------------------------------------------------------------------------------- threshold bounds (Thm 4)
def adaptive_hit_bound(prior_mass: float | np.ndarray, C: float, c: float) -> np.ndarray:
    """Largest probability that one candidate drawn from a density in S_{C,c}(π0) lands in a set of prior mass q.

    h(q) = min(C·q, 1 − c·(1 − q)) (``docs/proofs/domination.md``, Theorem 4): π ≤ C·π0 on G and π ≥ c·π0 off G.
    Attained by the density C·π0 on G (or as much of it as the lower bound leaves), so the bound is tight.

    Args:
        prior_mass: q ∈ [0, 1], any shape.
        C: Upper density-ratio bound, ≥ 1.
        c: Lower density-ratio bound, in (0, 1].

    Returns:
        h(q), the shape of ``prior_mass``.
    """
    check_density_bounds(C, c)
    q = np.asarray(prior_mass, dtype=np.float64)
    if np.any(~((q >= 0.0) & (q <= 1.0))):
        raise ValueError(f"prior_mass must lie in [0, 1], got {prior_mass!r}")
    return np.minimum(C * q, 1.0 - c * (1.0 - q))


def uniform_miss_probability(run_count: RunCountDistribution, prior_mass: float | np.ndarray) -> np.ndarray:
    """Probability that a uniform search with run count N misses a set of prior mass q: f_N(1 − q), exactly.

    Args:
        run_count: Law of N.
        prior_mass: q ∈ [0, 1], any shape.

    Returns:
        f_N(1 − q), the shape of ``prior_mass``.
    """
    return run_count.pgf(1.0 - np.asarray(prior_mass, dtype=np.float64))


def geometric_runs_to_dominate(mean_runs: float, C: float, c: float, prior_mass: float) -> float:
    """Smallest mean m′ of a geometric uniform search that misses a set G as rarely as a DP-HyPO search can at best.

    Theorem 4 of ``docs/proofs/domination.md``, geometric case: every DP-HyPO search with geometric T of mean m and
    bounds (C, c) misses a set of prior mass q at least as often as a geometric uniform search of mean m′.

    Geometric T of mean m whose candidates each hit G with probability at most h (given the past) misses G with
    probability at least f_T(1 − h) = (1 − h)/(1 + (m − 1)·h), whose odds 1/miss − 1 are at most m·h/(1 − h); a uniform
    search of mean m′ has odds exactly m′·q/(1 − q). Hence m′ = m·h·(1 − q)/(q·(1 − h)), which is
    C·m·(1 − q)/(1 − C·q) while h = C·q (every q ≤ (1 − c)/(C − c)) and (1 + (1 − c)/(c·q))·m above. Its largest value
    over q is (C/c)·m, at q = (1 − c)/(C − c): uniform search with (C/c)·E[T] runs dominates at every level.

    Args:
        mean_runs: m = E[T] ≥ 1 of the adaptive search.
        C: Upper density-ratio bound, ≥ 1.
        c: Lower density-ratio bound, in (0, 1].
        prior_mass: q ∈ (0, 1).

    Returns:
        m′; it grows without bound as c → 0 at q > 1/C (the adaptive search then hits G at almost every step).
    """
    check_probability("prior_mass", prior_mass)
    if not (math.isfinite(mean_runs) and mean_runs >= 1.0):
        raise ValueError(f"mean_runs must be a finite number >= 1, got {mean_runs!r}")
    h = float(adaptive_hit_bound(prior_mass, C, c))
    q = float(prior_mass)  # h < 1 because c > 0 and q < 1
    return mean_runs * h * (1.0 - q) / (q * (1.0 - h))
