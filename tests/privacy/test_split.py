"""Theorem S (docs/proofs/split.md): a record is in training or in validation, never both.

Exact checks on small discrete instances: a few records valued 0/1, a "model" that is the noisy sum of the training
values on a cycle Z_K, a score that counts validation records the model gets right, released with noise on Z_K (or
binomial noise, for infinite privacy loss), composed over runs or selected best-of-runs. The split mechanism's true
profile and Rényi divergences are computed by enumerating every side assignment and every noise value, and never
exceed the bound, which is attained where it should be. dp_accounting composes the two parts for the realistic
numbers of the default two-stage design (issue #32).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable

import numpy as np
import pytest

from dphypo.privacy import DEFAULT_ORDERS, dpsgd_rdp, gaussian_rdp
from dphypo.privacy.dpsgd_run import (
    RunGroup,
    dpsgd_run_profile,
    dpsgd_run_rdp,
    dpsgd_run_split_profile,
    dpsgd_run_split_profile_or_skip,
    dpsgd_run_split_rdp,
    runs_split_profile,
    runs_split_rdp,
    score_release_profile,
)
from dphypo.privacy.profiles import GaussianProfile, PrivacyProfile, ProfileSkipped, dpsgd_profile, hockey_stick
from dphypo.privacy.rdp import RdpCurve, compose
from dphypo.privacy.run_counts import TruncatedNegativeBinomial
from dphypo.privacy.search_rdp import tuning_rdp
from dphypo.privacy.spec import RepeatAndSelect
from dphypo.privacy.split import SplitProfile, SplitRule, split_epsilon, split_rdp
from dphypo.privacy.split_search import account_two_stage_split, split_tuning_rdp
from dphypo.privacy.two_stage import FinalRun, ProbeRelease, ProbeSelection, account_two_stage

EPS = np.linspace(-0.5, 6.0, 66)
ALPHAS = (1.5, 2.0, 4.0, 8.0, 16.0, 64.0, 256.0)
TRAIN, VAL, TEST = range(3)

# ---------------------------------------------------------------------------------------------------------------------
# A tiny search. Output laws are dicts {output tuple: probability}.

K = 4  # outputs live on the cycle Z_4


def _cyclic(weights: Iterable[float]) -> np.ndarray:
    w = np.asarray(list(weights), dtype=np.float64)
    return w / w.sum()


TRAIN_NOISE = _cyclic([8.0, 2.0, 1.0, 2.0])  # sharp: training leaks much
SCORE_NOISE = _cyclic([3.0, 2.0, 1.5, 2.0])  # flat: a score leaks little


def _add(law: dict, key: tuple, p: float) -> None:
    law[key] = law.get(key, 0.0) + p


def _run(train: tuple[int, ...], val: tuple[int, ...], train_noise: np.ndarray, score_noise: np.ndarray) -> dict:
    """One run: model m = (Σ train + Z₁) mod K; score = (#{v ∈ val: right(m, v)} + Z₂) mod K; releases (m, score)."""
    law: dict = {}
    for z1, p1 in enumerate(train_noise):
        m = (sum(train) + z1) % K
        count = sum(1 if v == 1 else int(m % 2 == 0) for v in val)  # a 1 is always "right": shift exactly 1
        for z2, p2 in enumerate(score_noise):
            _add(law, (m, (count + z2) % K), p1 * p2)
    return law


def _composed(train: tuple[int, ...], val: tuple[int, ...], runs: int, select: bool = False,
              noises: tuple[np.ndarray, np.ndarray] = (TRAIN_NOISE, SCORE_NOISE)) -> dict:
    """``runs`` independent runs, every output released (composition) or only the best-scoring run's (selection)."""
    one = _run(train, val, *noises)
    law: dict = {(): 1.0}
    for _ in range(runs):
        law = {a + b: pa * pb for a, pa in law.items() for b, pb in one.items()}
    if not select:
        return law
    best: dict = {}
    for outcome, p in law.items():
        pairs = [outcome[2 * i: 2 * i + 2] for i in range(runs)]
        _add(best, max(pairs, key=lambda pair: pair[1]), p)  # ties: the first best
    return best


def _split_law(records: tuple[tuple[int, int], ...], search: Callable[[tuple, tuple], dict],
               side_law: Callable[[tuple[int, int]], np.ndarray]) -> dict:
    """Output law of the search under a per-record split: each record's side drawn from ``side_law(record)``."""
    law: dict = {}
    for sides in itertools.product(range(3), repeat=len(records)):
        weight = math.prod(float(side_law(r)[s]) for r, s in zip(records, sides, strict=True))
        if weight == 0.0:
            continue
        train = tuple(r[1] for r, s in zip(records, sides, strict=True) if s == TRAIN)
        val = tuple(r[1] for r, s in zip(records, sides, strict=True) if s == VAL)
        for key, p in search(train, val).items():
            _add(law, key, weight * p)
    return law


def _vectors(p: dict, q: dict) -> tuple[np.ndarray, np.ndarray]:
    keys = sorted(set(p) | set(q))
    return np.array([p.get(k, 0.0) for k in keys]), np.array([q.get(k, 0.0) for k in keys])


def _hockey(p: dict, q: dict) -> tuple[np.ndarray, np.ndarray]:
    """H_{e^ε}(P‖Q) and H_{e^ε}(Q‖P) on EPS."""
    a, b = _vectors(p, q)
    return hockey_stick(a, b, EPS), hockey_stick(b, a, EPS)


def _renyi(p: dict, q: dict, alpha: float) -> float:
    a, b = _vectors(p, q)
    assert np.all(b > 0) and np.all(a > 0)
    return float(np.logaddexp.reduce(alpha * np.log(a) + (1.0 - alpha) * np.log(b)) / (alpha - 1.0))


def _multisets(max_size: int) -> list[tuple[int, ...]]:
    return [c for n in range(max_size + 1) for c in itertools.combinations_with_replacement((0, 1), n)]


def _side_bounds(search: Callable[[tuple, tuple], dict], max_others: int, *, rdp_too: bool = True) -> dict:
    """Exact worst cases over (train, val) with the record x fixed on one side and no split randomness.

    ``{side: (δ(ε) on EPS, {α: ε(α)})}``, the sup over every train and validation multiset with at most
    ``max_others`` records in all, x ∈ {0, 1}, both directions.
    """
    out = {}
    for side in (TRAIN, VAL):
        delta = np.zeros_like(EPS)
        rdp = dict.fromkeys(ALPHAS, 0.0)
        for train, val, x in itertools.product(_multisets(max_others), _multisets(max_others), (0, 1)):
            if len(train) + len(val) > max_others:
                continue
            without = search(train, val)
            with_x = search((*train, x), val) if side == TRAIN else search(train, (*val, x))
            h1, h2 = _hockey(with_x, without)
            delta = np.maximum(delta, np.maximum(h1, h2))
            for alpha in ALPHAS if rdp_too else ():
                rdp[alpha] = max(rdp[alpha], _renyi(with_x, without, alpha), _renyi(without, with_x, alpha))
        out[side] = (delta, rdp)
    return out


def _curve(rdp: dict) -> RdpCurve:
    return RdpCurve(np.array(ALPHAS), np.array([rdp[a] for a in ALPHAS]))


def _neighbours(max_others: int, ids: tuple[int, ...]) -> Iterable[tuple[tuple, tuple]]:
    """(D, x) for every multiset D of at most ``max_others`` records (id, value) and every record x."""
    universe = [(i, v) for i in ids for v in (0, 1)]
    for n in range(max_others + 1):
        for others in itertools.combinations_with_replacement(universe, n):
            for x in universe:
                yield others, x


# ---------------------------------------------------------------------------------------------------------------------
# Exact checks


@pytest.mark.parametrize("select", [False, True], ids=["composition", "best-of-2 selection"])
def test_a_secret_per_record_draw_never_exceeds_the_mixture_of_the_two_sides_and_the_mixture_beats_the_max(
    select: bool,
) -> None:
    def search(train: tuple, val: tuple) -> dict:
        return _composed(train, val, runs=2, select=select)

    rule = SplitRule("draw", 0.5, 0.3, 0.2)
    probabilities = np.array([rule.train, rule.val, rule.test])
    bounds = _side_bounds(search, max_others=2)
    d_train, d_val = bounds[TRAIN][0], bounds[VAL][0]
    # the test side's pair is (M(D), M(D)), whose H_{e^ε} is (1 − e^ε)₊: zero at ε ≥ 0
    mixture = rule.train * d_train + rule.val * d_val + rule.test * np.maximum(0.0, -np.expm1(EPS))
    worst = np.zeros_like(EPS)
    worst_rdp = dict.fromkeys(ALPHAS, 0.0)
    for others, x in _neighbours(max_others=2, ids=(0,)):  # two other records at most: 3³ side assignments
        without = _split_law(others, search, lambda r: probabilities)
        with_x = _split_law((*others, x), search, lambda r: probabilities)
        add, remove = _hockey(with_x, without)
        assert np.all(add <= mixture + 1e-12) and np.all(remove <= mixture + 1e-12)  # both directions
        worst = np.maximum(worst, np.maximum(add, remove))
        for alpha in ALPHAS:
            worst_rdp[alpha] = max(worst_rdp[alpha], _renyi(with_x, without, alpha), _renyi(without, with_x, alpha))
    # the mixture is strictly better than the max where the sides matter, and never worse
    assert np.all(mixture <= np.maximum(d_train, d_val) + 1e-15)
    assert np.any(mixture < np.maximum(d_train, d_val) - 1e-3)
    # the profile object evaluates exactly this
    profile = SplitProfile(_Tabulated(d_train), _Tabulated(d_val), rule, "mixture")
    np.testing.assert_allclose(profile.delta(EPS), mixture, rtol=1e-12, atol=1e-15)
    # RDP: the true divergence never exceeds split_rdp's mixture (nor its max)
    train_curve, val_curve = _curve(bounds[TRAIN][1]), _curve(bounds[VAL][1])
    for bound in ("mixture", "max"):
        curve = split_rdp(train_curve, val_curve, rule, bound=bound)
        true = np.array([worst_rdp[a] for a in ALPHAS])
        assert np.all(true <= curve.epsilons + 1e-12), (bound, true, curve.epsilons)


def test_a_deterministic_rule_is_bounded_by_the_max_and_attains_it() -> None:
    """Side = a fixed function of the record (a keyed hash of its id): the adversary may know it; max is exact."""

    def search(train: tuple, val: tuple) -> dict:
        return _composed(train, val, runs=2)

    def side_of(record: tuple[int, int]) -> np.ndarray:  # the record's id decides its side
        return np.eye(3)[record[0]]

    bounds = _side_bounds(search, max_others=2)
    worst_case = np.maximum(bounds[TRAIN][0], bounds[VAL][0])
    rule = SplitRule("hash", 0.5, 0.3, 0.2)
    worst = np.zeros_like(EPS)
    for others, x in _neighbours(max_others=2, ids=(TRAIN, VAL, TEST)):
        add, remove = _hockey(_split_law((*others, x), search, side_of), _split_law(others, search, side_of))
        assert np.all(add <= worst_case + 1e-12) and np.all(remove <= worst_case + 1e-12)
        worst = np.maximum(worst, np.maximum(add, remove))
        if x[0] == TEST:  # nothing computed on the test split is released: the record in test costs nothing
            np.testing.assert_allclose(add, np.maximum(0.0, -np.expm1(EPS)), atol=1e-15)  # H(P‖P) = (1 − e^ε)₊
    np.testing.assert_allclose(worst, worst_case, rtol=1e-12, atol=1e-15)  # tight: the max is attained
    assert np.any(worst < bounds[TRAIN][0] + bounds[VAL][0] - 1e-3)  # the sum the accountant charges is loose
    with pytest.raises(ValueError, match="mixture bound needs a secret independent draw"):
        SplitProfile(_Tabulated(bounds[TRAIN][0]), _Tabulated(bounds[VAL][0]), rule, "mixture")


def _binomial_run(train: tuple, val: tuple) -> dict:
    """Binomial mechanisms (infinite privacy loss at the edges): m = Σ train + B(2, ½), score = #val ones + B(1, ½)."""
    law: dict = {}
    for z1, p1 in ((0, 0.25), (1, 0.5), (2, 0.25)):
        m = sum(train) + z1
        for z2, p2 in ((0, 0.5), (1, 0.5)):
            _add(law, (m, sum(val) + z2), p1 * p2)
    return law


def test_the_mixture_is_attained_where_the_privacy_loss_is_infinite() -> None:
    rule = SplitRule("draw", 0.5, 0.3, 0.2)
    probabilities = np.array([rule.train, rule.val, rule.test])
    bounds = _side_bounds(_binomial_run, max_others=1, rdp_too=False)
    mixture = rule.train * bounds[TRAIN][0] + rule.val * bounds[VAL][0] + rule.test * np.maximum(0.0, -np.expm1(EPS))
    add, remove = _hockey(_split_law(((0, 1),), _binomial_run, lambda r: probabilities),
                          _split_law((), _binomial_run, lambda r: probabilities))
    assert np.all(add <= mixture + 1e-12) and np.all(remove <= mixture + 1e-12)
    large = math.log(6.0) < EPS  # past every finite loss only the infinite-loss mass counts, and adds up exactly
    np.testing.assert_allclose(add[large], mixture[large], rtol=1e-12)
    np.testing.assert_allclose(mixture[large], 0.5 * 0.25 + 0.3 * 0.5)


def _product(p: dict, q: dict) -> dict:
    return {a + b: pa * qb for a, pa in p.items() for b, qb in q.items()}


def test_a_per_run_mixture_composed_over_runs_is_not_a_bound() -> None:
    """One split serves every run: the side is shared, so the mixture must be taken over the whole search.

    Any bound obtained by composing a per-run bound of the one-run split mechanism (the record's side redrawn per
    run) must cover the product of two one-run split laws; the true two-run law (one side for both runs) exceeds
    that product's divergence, so no such bound is valid. The whole-search mixture and the per-run max are.
    """
    rule = SplitRule("draw", 0.5, 0.3, 0.2)
    probabilities = np.array([rule.train, rule.val, rule.test])

    def one(train: tuple, val: tuple) -> dict:
        return _composed(train, val, runs=1)

    def two(train: tuple, val: tuple) -> dict:
        return _composed(train, val, runs=2)

    x, nobody = ((0, 1),), ()
    shared = _hockey(_split_law(x, two, lambda r: probabilities), _split_law(nobody, two, lambda r: probabilities))
    p1, q1 = _split_law(x, one, lambda r: probabilities), _split_law(nobody, one, lambda r: probabilities)
    redrawn = _hockey(_product(p1, p1), _product(q1, q1))
    assert np.any(shared[0] > redrawn[0] + 1e-3), (shared[0], redrawn[0])
    # ... while the whole-search mixture and the max of the per-run maxima composed (RDP) are bounds
    whole = _side_bounds(two, max_others=0)
    mixture = rule.train * whole[TRAIN][0] + rule.val * whole[VAL][0]
    assert np.all(np.maximum(*shared)[EPS >= 0] <= mixture[EPS >= 0] + 1e-12)
    per_run = _side_bounds(one, max_others=0)
    per_run_max = split_rdp(_curve(per_run[TRAIN][1]), _curve(per_run[VAL][1]), rule, bound="max")
    with_x, without = _split_law(x, two, lambda r: probabilities), _split_law(nobody, two, lambda r: probabilities)
    true = np.array([max(_renyi(with_x, without, a), _renyi(without, with_x, a)) for a in ALPHAS])
    assert np.all(true <= 2.0 * per_run_max.epsilons + 1e-12)


class _Tabulated(PrivacyProfile):
    """A profile given by its values on EPS (exact there)."""

    def __init__(self, values: np.ndarray) -> None:
        self._values = np.asarray(values, dtype=np.float64)

    @property
    def label(self) -> str:
        return "tabulated"

    def delta(self, epsilon: np.ndarray | float) -> np.ndarray:
        eps = np.asarray(epsilon, dtype=np.float64)
        if eps.shape == EPS.shape and np.array_equal(eps, EPS):
            return self._values
        return np.interp(eps, EPS, self._values)  # only used off the grid by epsilon(); not in these checks


# ---------------------------------------------------------------------------------------------------------------------
# The bound's own algebra


def test_split_rdp_max_and_mixture_formulas() -> None:
    train = gaussian_rdp(1.0, orders=DEFAULT_ORDERS)
    val = gaussian_rdp(3.0, orders=DEFAULT_ORDERS)
    np.testing.assert_array_equal(split_rdp(train, val, SplitRule("hash", 0.6, 0.2, 0.2)).epsilons,
                                  np.maximum(train.epsilons, val.epsilons))
    rule = SplitRule("draw", 0.6, 0.2, 0.2)
    mix = split_rdp(train, val, rule, bound="mixture")
    a, small = DEFAULT_ORDERS, DEFAULT_ORDERS <= 20  # where the plain formula does not overflow
    with np.errstate(over="ignore"):
        expected = np.log(0.6 * np.exp((a - 1) * train.epsilons) + 0.2 * np.exp((a - 1) * val.epsilons) + 0.2) / (a - 1)
    np.testing.assert_allclose(mix.epsilons[small], expected[small], rtol=1e-12)
    assert np.all(mix.epsilons < train.epsilons)  # strictly better than the max here
    assert mix.event is None and split_rdp(train, val, rule).event is None  # no DpEvent is a max of two


def test_the_per_run_split_bound_is_the_max_of_the_parts_and_never_above_the_sum() -> None:
    rule = SplitRule("hash", 0.6, 0.2, 0.2)
    curve = dpsgd_run_split_rdp(1.1, 0.05, 40, score_noise=5.0, rule=rule)
    training, score = dpsgd_rdp(1.1, 0.05, 40), gaussian_rdp(5.0, sensitivity=1.0)
    np.testing.assert_array_equal(curve.epsilons, np.maximum(training.epsilons, score.epsilons))
    assert np.all(curve.epsilons < dpsgd_run_rdp(1.1, 0.05, 40, score_noise=5.0).epsilons)
    profile = dpsgd_run_split_profile(1.1, 0.05, 40, score_noise=5.0, rule=rule, discretization=1e-3)
    summed = dpsgd_run_profile(1.1, 0.05, 40, score_noise=5.0, discretization=1e-3)
    assert profile.epsilon(1e-5) < summed.epsilon(1e-5)
    assert profile.epsilon(1e-5) == max(profile.train.epsilon(1e-5), profile.val.epsilon(1e-5))
    skipped = dpsgd_run_split_profile_or_skip(1e-3, 256 / 60_000, 2344, score_noise=5.0, rule=rule)  # too large a PLD
    assert isinstance(skipped, ProfileSkipped)


def test_a_selection_is_bounded_side_by_side_which_beats_the_selection_of_the_summed_run() -> None:
    """Single-stage search: the selection theorem applied to each side's per-run mechanism, then the max."""
    rule = SplitRule("hash", 0.6, 0.2, 0.2)
    runs = TruncatedNegativeBinomial.from_mean(1.0, 10.0)
    training, score = dpsgd_rdp(1.5, 0.06, 100), gaussian_rdp(7.0, sensitivity=1.0)
    sides = split_tuning_rdp(training, score, runs, rule=rule)
    np.testing.assert_array_equal(
        sides.epsilons, np.maximum(tuning_rdp(training, runs).curve.epsilons, tuning_rdp(score, runs).curve.epsilons))
    mixture = split_tuning_rdp(training, score, runs, rule=SplitRule("draw", 0.6, 0.2, 0.2), bound="mixture")
    assert np.all(mixture.epsilons <= sides.epsilons)
    with pytest.raises(ValueError, match="mixture bound needs"):
        split_tuning_rdp(training, score, runs, rule=rule, bound="mixture")
    per_run_max = tuning_rdp(split_rdp(training, score, rule), runs).curve
    summed = tuning_rdp(compose(training, score), runs).curve
    assert np.all(sides.epsilons <= per_run_max.epsilons + 1e-12)
    assert np.all(per_run_max.epsilons <= summed.epsilons + 1e-12)
    assert np.all(sides.epsilons < summed.epsilons)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"kind": "permutation", "train": 0.6, "val": 0.2, "test": 0.2}, "kind must be one of draw, hash"),
        ({"kind": "draw", "train": 0.0, "val": 0.8, "test": 0.2}, "train must be in \\(0, 1\\)"),
        ({"kind": "draw", "train": 0.6, "val": 0.2, "test": -0.1}, "test must be in \\[0, 1\\)"),
        ({"kind": "draw", "train": 0.6, "val": 0.3, "test": 0.2}, "train \\+ val \\+ test must be 1"),
        ({"kind": "draw", "train": "0.6", "val": 0.2, "test": 0.2}, "train must be a number"),
    ],
)
def test_bad_split_rules_are_refused_eagerly(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SplitRule(**kwargs)


def test_bad_split_bounds_are_refused_eagerly() -> None:
    rule = SplitRule("draw", 0.6, 0.2, 0.2)
    g = GaussianProfile(1.0)
    with pytest.raises(ValueError, match="bound must be one of max, mixture"):
        SplitProfile(g, g, rule, "sum")
    with pytest.raises(ValueError, match="rule must be a SplitRule"):
        SplitProfile(g, g, "draw", "max")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="val must be a PrivacyProfile"):
        SplitProfile(g, 1.0, rule)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="same orders"):
        split_rdp(gaussian_rdp(1.0, orders=[2, 3]), gaussian_rdp(1.0, orders=[2, 4]), rule)
    with pytest.raises(ValueError, match="needs a private score"):
        dpsgd_run_split_rdp(1.0, 0.1, 10, score_noise=None, rule=rule)
    with pytest.raises(ValueError, match="score_noise"):
        RunGroup(1.0, 0.1, 10, score_noise=-1.0)
    with pytest.raises(ValueError, match="mixture bound needs"):
        runs_split_rdp([RunGroup(1.0, 0.1, 10, 5.0)], SplitRule("hash", 0.6, 0.2, 0.2), bound="mixture")


# ---------------------------------------------------------------------------------------------------------------------
# Realistic numbers: the default two-stage design on digits at ε = 8, δ = 1e-5 (issue #32), dp_accounting as oracle

Q_DIGITS = 1.0 / 17.0  # 64 / 1079 training records: ceil(1079 / 64) = 17 batches (dphypo tune --dry-run --json)
PROBE_SIGMA, FINAL_SIGMA = 2.003319373201579, 0.9168356030647883
SCORE_COUNTS = 0.02 * 359  # --score-noise-accuracy 0.02 × n_val = 7.18 counts
DESIGN = [RunGroup(PROBE_SIGMA, Q_DIGITS, 34, SCORE_COUNTS, 20), RunGroup(FINAL_SIGMA, Q_DIGITS, 170, SCORE_COUNTS, 1)]


def _oracle(events: list) -> float:
    from dp_accounting import dp_event
    from dp_accounting.pld import pld_privacy_accountant

    accountant = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-3)
    accountant.compose(dp_event.ComposedDpEvent(events))
    return float(accountant.get_epsilon(1e-5))


@pytest.mark.slow  # ≈ 10 s: the 170-step PLD at the default discretisation, as dphypo tune builds it
def test_the_default_design_is_bounded_by_its_dpsgd_parts_alone_as_dp_accounting_composes_them() -> None:
    from dp_accounting import dp_event

    def dpsgd(sigma: float, steps: int) -> object:
        return dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(Q_DIGITS, dp_event.GaussianDpEvent(sigma)),
                                            steps)

    oracle_train = _oracle([dp_event.SelfComposedDpEvent(dpsgd(PROBE_SIGMA, 34), 20), dpsgd(FINAL_SIGMA, 170)])
    oracle_val = _oracle([dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(SCORE_COUNTS), 21)])
    rule = SplitRule("hash", 0.6, 0.2, 0.2)
    profile = runs_split_profile(DESIGN, rule)  # default discretisation 1e-4, as dphypo tune
    train_eps, val_eps = profile.train.epsilon(1e-5), profile.val.epsilon(1e-5)
    assert round(train_eps, 3) == 7.353 and round(val_eps, 3) == 2.621  # the numbers
    assert train_eps <= oracle_train <= train_eps + 1e-3 and val_eps <= oracle_val <= val_eps + 1e-3
    assert profile.epsilon(1e-5) == train_eps == split_epsilon(profile.train, profile.val, rule, 1e-5)
    # what the sum charges today: everything composed, 7.995 (README), so ≈ 0.64 of ε = 8 is spent on nothing
    everything = profile.train.compose(profile.val).epsilon(1e-5)
    assert round(everything, 3) == 7.995
    # a secret per-record draw with digits' shares (0.6 / 0.2 / 0.2) gives more, by the mixture
    mixture = SplitProfile(profile.train, profile.val, SplitRule("draw", 0.6, 0.2, 0.2), "mixture").epsilon(1e-5)
    assert 7.0 < mixture < train_eps
    assert float(profile.train.delta(mixture)) * 0.6 + float(profile.val.delta(mixture)) * 0.2 <= 1e-5
    # the same through the two-stage accountant, side by side (Corollary S3): 7.353 where the sum spends 7.995
    probe_t, final_t = dpsgd_rdp(PROBE_SIGMA, Q_DIGITS, 34), dpsgd_rdp(FINAL_SIGMA, Q_DIGITS, 170)
    score = gaussian_rdp(SCORE_COUNTS, sensitivity=1.0)
    probe_pld, final_pld = (dpsgd_profile(g.sigma, g.sample_rate, g.steps) for g in DESIGN)  # cached, one run each
    score_pld = score_release_profile(SCORE_COUNTS)
    report = account_two_stage_split(probe_t, score, final_t, score, ProbeRelease(20), FinalRun(), 1e-5, rule,
                                     probe_profiles=(probe_pld, score_pld), final_profiles=(final_pld, score_pld))
    assert round(report.epsilon, 3) == 7.353 and report.train.method == "pld" and "training" in report.bound
    assert abs(report.val.epsilon - val_eps) < 1e-9
    summed = account_two_stage(dpsgd_run_rdp(PROBE_SIGMA, Q_DIGITS, 34, score_noise=SCORE_COUNTS),
                               dpsgd_run_rdp(FINAL_SIGMA, Q_DIGITS, 170, score_noise=SCORE_COUNTS),
                               ProbeRelease(20), FinalRun(), 1e-5, probe_profile=probe_pld.compose(score_pld),
                               final_profile=final_pld.compose(score_pld))
    assert round(summed.epsilon, 3) == 7.995  # what dphypo tune --dry-run --json prints today
    # the RDP route agrees in order: max of the parts' compositions, below the summed RDP (8.833)
    rdp = runs_split_rdp(DESIGN, rule)
    summed = compose(*(dpsgd_run_rdp(g.sigma, g.sample_rate, g.steps, score_noise=g.score_noise).repeated(g.count)
                       for g in DESIGN))
    assert np.all(rdp.epsilons <= summed.epsilons) and np.any(rdp.epsilons < summed.epsilons)


def test_a_two_stage_design_with_a_probe_selection_is_accounted_side_by_side_in_rdp() -> None:
    rule = SplitRule("hash", 0.6, 0.2, 0.2)
    selection = ProbeSelection(RepeatAndSelect(TruncatedNegativeBinomial.from_mean(1.0, 10.0)))
    probe, final = dpsgd_rdp(2.0, 0.06, 30), dpsgd_rdp(1.0, 0.06, 150)
    score = gaussian_rdp(7.0, sensitivity=1.0)
    report = account_two_stage_split(probe, score, final, score, selection, FinalRun(), 1e-5, rule)
    train = account_two_stage(probe, final, selection, FinalRun(), 1e-5)
    val = account_two_stage(score, score, selection, FinalRun(), 1e-5)
    assert report.epsilon == max(train.epsilon, val.epsilon) and report.train.method == "rdp"
    summed = account_two_stage(compose(probe, score), compose(final, score), selection, FinalRun(), 1e-5)
    assert report.epsilon < summed.epsilon
    assert report.to_dict()["rule"] == {"kind": "hash", "train": 0.6, "val": 0.2, "test": 0.2}
    with pytest.raises(ValueError, match="rule must be a SplitRule"):
        account_two_stage_split(probe, score, final, score, selection, FinalRun(), 1e-5, "hash")  # type: ignore[arg-type]
