"""The rejection coupling and the domination statements of docs/proofs/domination.md.

The coupled pair runs the real SearchLoop (GP-UCB, densities projected onto S_{C,c}) on a noise-free landscape,
each draw realised by rejection from the prior. Statistical checks use fixed seeds and tolerances at which the wrong
law (a wrong C, a wrong envelope, a uniform search) fails; the claims the proof document refutes are kept as strict
expected failures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pytest
from scipy import stats

from dphypo.privacy import Poisson, TruncatedNegativeBinomial, geometric
from dphypo.simulation.coupling import (
    CoupledSearches,
    adaptive_hit_bound,
    coupled_searches,
    geometric_runs_to_dominate,
    proposal_count_pmf,
    rejection_draw,
    thinned_searches,
    uniform_miss_probability,
)
from dphypo.simulation.landscapes import Landscape
from dphypo.simulation.synthetic import multimodal_landscape
from dphypo.space import SearchSpace
from dphypo.strategies import GPUCB, MemberSession
from dphypo.strategies.base import check_observations

C, c = 2.0, 0.75
Extremal = tuple[CoupledSearches, np.ndarray]  # the coupled pairs and the indicator of G
GAMMA = 0.2  # E[T] = 5: short searches, so many repeats fit in a test


def _landscape() -> Landscape:
    """A noise-free-scored 8 × 8 multimodal landscape (scores are the mean unless ``noisy``)."""
    axes = {"lr": np.linspace(0.0, 1.0, 8), "clip": np.linspace(0.0, 1.0, 8)}
    return multimodal_landscape(axes, {"lr": "linear", "clip": "linear"}, n_local=2, min_separation=0.3)


@dataclass(frozen=True)
class FixedDensity:
    """A test strategy whose every density is one fixed vector (an informed, data-independent sampler)."""

    density: tuple[float, ...]
    C: float = C
    c: float = c
    name: str = field(default="fixed", init=False)

    def start(self, space: SearchSpace, direction: str, seed: int) -> MemberSession:
        return MemberSession(self.start_batch(space, direction, [seed]))

    def start_batch(self, space: SearchSpace, direction: str, seeds: Sequence[int]) -> _FixedSession:
        return _FixedSession(np.asarray(self.density), len(seeds))


class _FixedSession:
    def __init__(self, density: np.ndarray, members: int) -> None:
        self._density, self.members = density, members
        self._given = np.zeros(members, dtype=bool)

    def observe(self, members, indices, scores) -> None:
        check_observations(members, indices, scores, self._density.size, self.members)

    def densities(self, members):
        members = np.asarray(members, dtype=np.int64)
        changed = ~self._given[members]
        self._given[members] = True
        return np.tile(self._density, (members.size, 1)), changed

    def member_events(self, member: int) -> list:
        return []


def _extremal(landscape: Landscape, top: int) -> tuple[FixedDensity, np.ndarray]:
    """The density C·π0 on the ``top`` best grid points (G), the rest of the mass spread by the prior off G."""
    prior = landscape.space.prior
    best = np.argsort(-landscape.mean.ravel(), kind="stable")[:top]
    on_g = np.zeros(prior.size, dtype=bool)
    on_g[best] = True
    q = float(prior[on_g].sum())
    density = np.where(on_g, C * prior, prior * (1.0 - C * q) / (1.0 - q))
    return FixedDensity(tuple(density.tolist())), on_g


def _gof_pvalue(sample: np.ndarray, pmf: np.ndarray) -> float:
    """Chi-square goodness of fit of counts in {1, ..., K} (+ a tail bin) to ``pmf`` on {1, ..., K}."""
    edges = int(np.searchsorted(np.cumsum(pmf), 1.0 - 5.0 / sample.size))  # tail bin expected ≥ 5
    probs = np.append(pmf[:edges], 1.0 - pmf[:edges].sum())
    observed = np.bincount(np.minimum(sample, edges + 1) - 1, minlength=edges + 1)
    return float(stats.chisquare(observed, sample.size * probs).pvalue)


def _mean_z(sample: np.ndarray, gamma: float) -> float:
    """z statistic of the sample mean against geometric(γ) on {1, 2, ...} (mean 1/γ, variance (1 − γ)/γ²)."""
    return float((sample.mean() - 1.0 / gamma) / np.sqrt((1.0 - gamma) / gamma**2 / sample.size))


def _pmf_on_1_to(k: int, gamma: float) -> np.ndarray:
    return geometric(gamma).pmf(np.arange(1, k + 1))


@pytest.fixture(scope="module")
def extremal_pairs() -> Extremal:
    """20,000 coupled searches whose every density is C·π0 on the 8 best points (G, prior mass 1/8)."""
    landscape = _landscape()
    strategy, on_g = _extremal(landscape, top=8)
    return coupled_searches(landscape, strategy, geometric(GAMMA), repeats=20000, seed=8), on_g


@pytest.fixture(scope="module")
def gp_pairs() -> CoupledSearches:
    """1,500 coupled GP-UCB searches (C = 2, c = 0.75), geometric T of mean 5, noise-free scores."""
    return coupled_searches(_landscape(), GPUCB(C=C, c=c), geometric(GAMMA), repeats=1500, seed=3)


# ------------------------------------------------------------------------------------ Lemma 1: the superset
def test_coupled_search_never_releases_worse_than_the_adaptive_one(gp_pairs: CoupledSearches) -> None:
    landscape = _landscape()
    adaptive, coupled = gp_pairs.released("adaptive"), gp_pairs.released("proposals")
    assert np.all(gp_pairs.run_counts >= 1)
    assert np.all(landscape.true_values(coupled) >= landscape.true_values(adaptive))
    # not vacuous: the extra proposals often find something better
    assert np.mean(landscape.true_values(coupled) > landscape.true_values(adaptive)) > 0.2


def test_adaptive_search_sees_exactly_T_accepted_candidates(gp_pairs: CoupledSearches) -> None:
    accepted = np.array([kept.sum() for kept in gp_pairs.accepted])
    np.testing.assert_array_equal(accepted, gp_pairs.run_counts)
    for kept, steps in zip(gp_pairs.accepted[:50], gp_pairs.steps[:50], strict=True):
        assert kept[-1] and np.all(np.diff(steps)[kept[:-1]] == 1)  # each step ends at its accepted proposal


def test_with_noisy_scores_only_the_best_true_value_is_dominated() -> None:
    landscape = _landscape().with_std(0.05)
    pairs = coupled_searches(landscape, GPUCB(C=C, c=c), geometric(GAMMA), repeats=300, seed=5, noisy=True)
    for indices, kept in zip(pairs.proposals, pairs.accepted, strict=True):
        assert landscape.true_values(indices).max() >= landscape.true_values(indices[kept]).max()
    # the release is by noisy score: the superset can release a worse point (the winner's curse)
    worse = landscape.true_values(pairs.released("proposals")) < landscape.true_values(pairs.released("adaptive"))
    assert worse.any()


# ------------------------------------------------------------------------------- Lemma 2: the run-count law
def test_proposal_count_is_geometric_gamma_over_C(gp_pairs: CoupledSearches) -> None:
    n = gp_pairs.proposal_counts
    assert _gof_pvalue(n, _pmf_on_1_to(400, GAMMA / C)) > 1e-3
    assert abs(_mean_z(n, GAMMA / C)) < 4.0
    # the mean test has the power to tell C = 2 from C = 2.5 on this sample
    assert abs(_mean_z(n, GAMMA / 2.5)) > 6.0


def test_negative_control_a_looser_envelope_breaks_the_law() -> None:
    pairs = coupled_searches(_landscape(), GPUCB(C=C, c=c), geometric(GAMMA), repeats=800, seed=4, envelope=2 * C)
    n = pairs.proposal_counts
    assert _gof_pvalue(n, _pmf_on_1_to(800, GAMMA / C)) < 1e-6
    assert abs(_mean_z(n, GAMMA / C)) > 6.0
    assert _gof_pvalue(n, _pmf_on_1_to(800, GAMMA / (2 * C))) > 1e-3  # it is geometric(γ/(2C)) instead


def test_pooled_proposals_follow_the_prior_but_accepted_ones_do_not() -> None:
    landscape = _landscape()
    strategy, _ = _extremal(landscape, top=8)
    pairs = coupled_searches(landscape, strategy, geometric(GAMMA), repeats=3000, seed=6)
    prior = landscape.space.prior
    proposals = np.concatenate(pairs.proposals)
    accepted = np.concatenate([p[k] for p, k in zip(pairs.proposals, pairs.accepted, strict=True)])
    counts = np.bincount(proposals, minlength=prior.size)
    assert stats.chisquare(counts, proposals.size * prior).pvalue > 1e-3  # Wald: E[count at λ] = E[N]·π0(λ)
    accepted_counts = np.bincount(accepted, minlength=prior.size)
    assert stats.chisquare(accepted_counts, accepted.size * prior).pvalue < 1e-6
    assert stats.chisquare(accepted_counts, accepted.size * np.asarray(strategy.density)).pvalue > 1e-3


def test_tnb_proposal_count_is_the_compound_law_not_tnb() -> None:
    landscape = _landscape()
    strategy, _ = _extremal(landscape, top=8)
    run_count = TruncatedNegativeBinomial(2.0, 0.3)
    n = coupled_searches(landscape, strategy, run_count, repeats=3000, seed=7).proposal_counts
    support = np.arange(1, 400)
    assert _gof_pvalue(n, proposal_count_pmf(run_count, C, support)) > 1e-3
    same_mean = TruncatedNegativeBinomial.from_mean(2.0, C * run_count.mean)
    assert _gof_pvalue(n, same_mean.pmf(support)) < 1e-6  # thinning does not keep θ


def test_proposal_count_pmf_matches_geometric_and_poisson_closed_forms() -> None:
    support = np.arange(0, 200)
    np.testing.assert_allclose(proposal_count_pmf(geometric(0.1), 3.0, support), geometric(0.1 / 3).pmf(support),
                               rtol=1e-12, atol=1e-300)
    compound = proposal_count_pmf(Poisson(4.0), 2.0, support)
    assert compound[0] == pytest.approx(np.exp(-4.0))
    assert np.sum(support * compound) == pytest.approx(8.0, rel=1e-9)


def test_rejection_draw_refuses_an_envelope_below_the_density_ratio() -> None:
    prior = np.full(4, 0.25)
    with pytest.raises(ValueError, match="envelope must be >= max density/prior"):
        rejection_draw(np.array([0.7, 0.1, 0.1, 0.1]), prior, 2.0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="envelope must be >= C"):
        coupled_searches(_landscape(), GPUCB(C=C, c=c), geometric(GAMMA), repeats=2, envelope=1.5)


# -------------------------------------------------------------------- Remark A: not a uniform search in law
@pytest.mark.xfail(strict=True, reason="docs/proofs/domination.md Remark A: the proposals stop at acceptances, so "
                   "the last proposal of each step has law π_j; the coupled set is not a uniform search in law")
def test_issue_claim_coupled_proposals_form_a_uniform_search(extremal_pairs: Extremal) -> None:
    landscape = _landscape()
    pairs, on_g = extremal_pairs
    missed = np.array([not on_g[p].any() for p in pairs.proposals])
    uniform = float(uniform_miss_probability(geometric(GAMMA / C), on_g @ landscape.space.prior))
    assert abs(missed.mean() - uniform) < 4.0 * np.sqrt(uniform * (1 - uniform) / missed.size)


def test_coupled_proposals_miss_like_the_adaptive_search_at_the_extremal_density(extremal_pairs: Extremal) -> None:
    landscape = _landscape()
    pairs, on_g = extremal_pairs
    missed = np.array([not on_g[p].any() for p in pairs.proposals])
    q = float(on_g @ landscape.space.prior)
    bound = float(geometric(GAMMA).pgf(1.0 - adaptive_hit_bound(q, C, c)))
    assert abs(missed.mean() - bound) < 4.0 * np.sqrt(bound * (1 - bound) / missed.size)


# ------------------------------------------------------------------------- Theorem 4: threshold domination
def test_gp_search_misses_every_top_set_at_least_as_often_as_the_bound(gp_pairs: CoupledSearches) -> None:
    landscape = _landscape()
    order = np.argsort(-landscape.mean.ravel(), kind="stable")
    prior = landscape.space.prior
    for top in (1, 4, 8, 16):
        on_g = np.zeros(prior.size, dtype=bool)
        on_g[order[:top]] = True
        adaptive = np.array([not on_g[p[k]].any() for p, k in zip(gp_pairs.proposals, gp_pairs.accepted,
                                                                   strict=True)])
        bound = float(geometric(GAMMA).pgf(1.0 - adaptive_hit_bound(float(prior[on_g].sum()), C, c)))
        assert adaptive.mean() >= bound - 4.0 * np.sqrt(bound * (1 - bound) / adaptive.size)


@pytest.mark.xfail(strict=True, reason="docs/proofs/domination.md Theorem 4: at prior mass q, uniform search needs "
                   "C·E[T]·(1 − q)/(1 − C·q) runs (up to (C/c)·E[T]), more than C·E[T], to match the best adaptive "
                   "search")
def test_issue_claim_uniform_with_C_times_the_runs_never_misses_more() -> None:
    q = np.linspace(0.01, 0.2, 20)
    adaptive_best = geometric(GAMMA).pgf(1.0 - adaptive_hit_bound(q, C, c))
    assert np.all(uniform_miss_probability(geometric(GAMMA / C), q) <= adaptive_best)


def test_geometric_runs_to_dominate_equalises_the_miss_probabilities() -> None:
    for q in (0.001, 0.05, 0.125, 0.2, 0.3):
        m_prime = geometric_runs_to_dominate(20.0, C, c, q)
        adaptive_best = float(geometric(1 / 20).pgf(1.0 - adaptive_hit_bound(q, C, c)))
        assert float(uniform_miss_probability(geometric(1 / m_prime), q)) == pytest.approx(adaptive_best, rel=1e-12)
        assert m_prime >= C * 20.0
    assert geometric_runs_to_dominate(20.0, C, c, 0.001) == pytest.approx(40.0, rel=2e-3)
    assert geometric_runs_to_dominate(20.0, C, 1e-9, 0.6) > 1e9  # h → 1: hits G at almost every step


def test_geometric_uniform_with_C_over_c_times_the_runs_dominates_at_every_level_and_no_fewer() -> None:
    q = np.linspace(1e-4, 1.0 - 1e-4, 4001)
    for bounds, mean in (((2.0, 0.75), 20.0), ((1.25, 0.8), 20.0), ((3.0, 0.5), 7.0)):
        adaptive_best = geometric(1 / mean).pgf(1.0 - adaptive_hit_bound(q, *bounds))
        enough = geometric(bounds[1] / (bounds[0] * mean))
        assert np.all(uniform_miss_probability(enough, q) <= adaptive_best * (1 + 1e-12))
        fewer = geometric(bounds[1] / (0.98 * bounds[0] * mean))
        assert np.any(uniform_miss_probability(fewer, q) > adaptive_best)
        worst = max(geometric_runs_to_dominate(mean, *bounds, float(x)) for x in q)
        assert worst == pytest.approx(bounds[0] / bounds[1] * mean, rel=1e-3)


def test_poisson_uniform_with_C_times_the_mean_dominates_at_every_level() -> None:
    q = np.linspace(0.0, 1.0, 201)
    adaptive_best = Poisson(10.0).pgf(1.0 - adaptive_hit_bound(q, C, c))
    assert np.all(uniform_miss_probability(Poisson(C * 10.0), q) <= adaptive_best + 1e-15)
    assert np.any(uniform_miss_probability(Poisson(C * 10.0 * 0.9), q) > adaptive_best)  # not with fewer runs


# ------------------------------------------------------------------ Theorem 3: the thinning coupling (Poisson)
MU = 3.0


@pytest.fixture(scope="module")
def thinned_gp() -> CoupledSearches:
    """2,000 uniform searches with Poisson(C·μ) runs, each containing a GP-UCB search by thinning."""
    return thinned_searches(_landscape(), GPUCB(C=C, c=c), Poisson(C * MU), repeats=2000, seed=9)


def test_thinning_poisson_gives_an_adaptive_search_with_poisson_mu_runs(thinned_gp: CoupledSearches) -> None:
    t = thinned_gp.run_counts
    support = np.arange(0, 13)
    expected = np.append(Poisson(MU).pmf(support), 1.0 - Poisson(MU).pmf(support).sum())
    observed = np.bincount(np.minimum(t, support.size), minlength=support.size + 1)
    assert stats.chisquare(observed, t.size * expected).pvalue > 1e-3
    wrong = np.append(Poisson(1.25 * MU).pmf(support), 1.0 - Poisson(1.25 * MU).pmf(support).sum())
    assert stats.chisquare(observed, t.size * wrong).pvalue < 1e-6  # power: a wrong mean fails


def test_thinning_uniform_search_contains_the_adaptive_one(thinned_gp: CoupledSearches) -> None:
    landscape = _landscape()
    ran = thinned_gp.run_counts > 0
    adaptive = landscape.true_values(thinned_gp.released("adaptive")[ran])
    assert np.all(landscape.true_values(thinned_gp.released("proposals")[ran]) >= adaptive)


def test_thinning_proposals_are_a_uniform_search_even_at_the_extremal_density() -> None:
    landscape = _landscape()
    strategy, on_g = _extremal(landscape, top=8)
    pairs = thinned_searches(landscape, strategy, Poisson(C * MU), repeats=20000, seed=10)
    q = float(on_g @ landscape.space.prior)
    missed = np.array([not on_g[p].any() for p in pairs.proposals])
    uniform = float(uniform_miss_probability(Poisson(C * MU), q))  # the check the stopping coupling fails
    assert abs(missed.mean() - uniform) < 4.0 * np.sqrt(uniform * (1 - uniform) / missed.size)
    adaptive_missed = np.array([not on_g[p[k]].any() for p, k in zip(pairs.proposals, pairs.accepted, strict=True)])
    bound = float(Poisson(MU).pgf(1.0 - adaptive_hit_bound(q, C, c)))  # tight: equal to the uniform's here
    assert abs(adaptive_missed.mean() - bound) < 4.0 * np.sqrt(bound * (1 - bound) / missed.size)


def test_thinning_a_geometric_count_leaves_an_atom_at_zero() -> None:
    landscape = _landscape()
    strategy, _ = _extremal(landscape, top=8)
    proposals = geometric(GAMMA / C)
    pairs = thinned_searches(landscape, strategy, proposals, repeats=8000, seed=11)
    atom = float(proposals.pgf(1.0 - 1.0 / C))  # every proposal rejected
    zero = np.mean(pairs.run_counts == 0)
    assert atom > 0.05 and abs(zero - atom) < 4.0 * np.sqrt(atom * (1 - atom) / pairs.run_counts.size)


@pytest.mark.parametrize(("theta", "gamma"), [(2.0, 0.3), (0.5, 0.1), (1.0, 0.2), (0.0, 0.2), (-0.5, 0.1)])
def test_thinned_tnb_is_tnb_given_one_run_with_an_atom_at_zero(theta: float, gamma: float) -> None:
    proposals, n, t = TruncatedNegativeBinomial(theta, gamma), np.arange(1, 3000), np.arange(0, 60)
    thinned = np.array([np.sum(proposals.pmf(n) * stats.binom.pmf(k, n, 1 / C)) for k in t])
    assert thinned[0] == pytest.approx(float(proposals.pgf(1 - 1 / C)), rel=1e-12)
    conditioned = TruncatedNegativeBinomial(theta, gamma / (gamma + (1 - gamma) / C))
    np.testing.assert_allclose(thinned[1:] / (1 - thinned[0]), conditioned.pmf(t[1:]), rtol=1e-9, atol=1e-15)
