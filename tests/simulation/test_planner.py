"""Tests for dphypo.simulation.planner: candidates at equal total ε on the shipped digits family."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats

from dphypo.privacy import Poisson, make_run_count
from dphypo.simulation.family import LandscapeFamily, load_family
from dphypo.simulation.planner import (
    DEFAULT_GPUCB_BOUNDS,
    ComputeBudget,
    PlanCandidate,
    PlanResult,
    PlanRow,
    compare_rows,
    default_candidates,
    family_run_seconds,
    plan_search,
    strategy_label,
    welch_ci95,
)
from dphypo.simulation.simulate import mean_ci95, simulate
from dphypo.simulation.studies import Setting, arm_epsilon
from dphypo.strategies import GPUCB, GPTopSet, Uniform

LANDSCAPES = Path(__file__).resolve().parents[2] / "landscapes"
SIGMAS = ("1.0", "1.2226", "1.45", "1.7673", "2.1", "2.9", "4.0")
MEMBERS = [str(LANDSCAPES / f"digits_mlp_sigma{s}.npz") for s in SIGMAS]
MEANS = (10.0, 20.0)
REPEATS = 8
DELTA = 1e-5


@pytest.fixture(scope="module")
def family() -> LandscapeFamily:
    return load_family(MEMBERS)


def _candidates(strategies: list, means: tuple[float, ...] = MEANS) -> list[PlanCandidate]:
    return [PlanCandidate(strategy_label(s), s, make_run_count("geometric", mean=m)) for m in means for s in strategies]


@pytest.fixture(scope="module")
def plan8(family: LandscapeFamily) -> tuple[PlanResult, list[PlanRow]]:
    """A plan at ε = 8: uniform, a narrow GP-UCB and a GP top-set, × E[T] ∈ {10, 20}, accounted with Theorem A, named
    (the family's members were chosen for Theorem A's σ; Theorem B's are smaller)."""
    strategies = [Uniform(), GPUCB(C=1.25, c=0.8), GPTopSet(C=2.0, top_mass=0.05)]
    seen: list[PlanRow] = []
    result = plan_search(family, 8.0, DELTA, _candidates(strategies), repeats=REPEATS, seed=3, workers=1,
                         progress=seen.append, adaptive_theorem="A")
    return result, seen


def test_default_candidates_sweep_strategies_bounds_and_means() -> None:
    candidates = default_candidates(MEANS)
    assert len(candidates) == 6 * len(MEANS)
    for k, m in enumerate(MEANS):
        block = candidates[6 * k: 6 * (k + 1)]
        assert all(x.run_count == make_run_count("geometric", mean=m) for x in block)  # the TNB with θ = 1
        assert all(getattr(x.run_count, "theta", None) == 1.0 for x in block)
        assert isinstance(block[0].strategy, Uniform) and block[0].bounds == (1.0, 1.0)
        assert [x.bounds for x in block[1:4]] == list(DEFAULT_GPUCB_BOUNDS)
        assert all(isinstance(x.strategy, GPUCB) for x in block[1:4])
        top = block[4:]
        assert [getattr(x.strategy, "top_mass", None) for x in top] == [0.05, 0.1]
        # c derived from C and the mass: (1 − C·p)/(1 − p)
        assert [x.bounds for x in top] == [(2.0, (1 - 2 * p) / (1 - p)) for p in (0.05, 0.1)]
    assert len({(x.label, x.expected_runs) for x in candidates}) == len(candidates)
    assert candidates[1].label == "gp-ucb C=2 c=0.75" and candidates[1].name == "gp-ucb C=2 c=0.75, E[T]=10"


@pytest.mark.parametrize(("means", "kind", "match"), [
    ((10,), "poisson", "adaptive theorem"),
    ((), "geometric", "at least one"),
    ((10, 10), "geometric", "distinct"),
])
def test_default_candidates_refuse_bad_input(means: tuple, kind: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        default_candidates(means, kind)


def test_a_candidate_needs_a_privacy_theorem() -> None:
    with pytest.raises(ValueError, match=r"(?i)poisson"):
        PlanCandidate("gp", GPUCB(), Poisson(10.0))
    PlanCandidate("uniform", Uniform(), Poisson(10.0))  # uniform search may use Poisson T


def test_every_row_spends_the_total_epsilon_with_its_own_bounds(
    plan8: tuple[PlanResult, list[PlanRow]], family: LandscapeFamily
) -> None:
    result, seen = plan8
    assert [r.candidate for r in seen] == [r.candidate for r in result.rows]  # progress: every row, in order
    low, high = family.sigma_range
    for row in result.rows:
        assert row.status == "ok" and row.reason == "" and row.repeats == REPEATS
        assert row.epsilon is not None and 8.0 - 0.05 <= row.epsilon <= 8.0
        assert row.sigma is not None and low <= row.sigma <= high
        C, c = row.candidate.bounds
        # The same ε from the accountant on the landscape the row ran on, with the strategy's own (C, c).
        setting = Setting("x", run_count=row.candidate.run_count)
        accounted, _ = arm_epsilon(family.at(row.sigma), setting, C, c, DELTA, adaptive_theorem="A")
        assert accounted is not None and math.isclose(accounted, row.epsilon, rel_tol=1e-9)
        assert row.method is not None
        assert row.method.startswith("profile") if not row.candidate.adaptive else row.method.startswith("rdp")
    by_name = {r.candidate.name: r for r in result.rows}
    # Paying for adaptivity costs noise: every adaptive row runs at a larger σ than uniform search at its E[T].
    for m in MEANS:
        uniform = by_name[f"uniform, E[T]={m:g}"]
        assert all(r.sigma > uniform.sigma for r in result.rows  # type: ignore[operator]
                   if r.candidate.adaptive and r.candidate.expected_runs == m)


def test_a_row_is_the_simulation_of_its_own_configuration(
    plan8: tuple[PlanResult, list[PlanRow]], family: LandscapeFamily
) -> None:
    result, _ = plan8
    row = next(r for r in result.rows if isinstance(r.candidate.strategy, GPTopSet) and r.candidate.expected_runs == 10)
    assert row.sigma is not None
    C, c = row.candidate.bounds
    assert (C, c) == (2.0, row.candidate.strategy.c)
    again = simulate(family.at(row.sigma), [row.candidate.strategy], repeats=REPEATS, run_count=row.candidate.run_count,
                     C=C, c=c, seed=3, workers=1, engine="batched")[0]
    np.testing.assert_allclose(row.values, again.values, rtol=0, atol=1e-12)
    assert row.mean == pytest.approx(again.mean) and row.ci95 == pytest.approx(again.ci95)


def test_best_runner_up_and_their_paired_difference(plan8: tuple[PlanResult, list[PlanRow]]) -> None:
    result, _ = plan8
    ranked = result.ranked
    assert len(ranked) == len(result.rows)
    means = [r.mean for r in ranked]
    assert means == sorted(means, reverse=True)  # type: ignore[type-var]
    best, second, diff = result.best, result.runner_up, result.difference
    assert best is ranked[0] and second is ranked[1] and diff is not None
    assert best.mean == max(r.mean for r in result.rows)  # type: ignore[type-var]
    assert diff.first is best and diff.second is second and diff.paired
    assert diff.same_runs == (best.candidate.run_count == second.candidate.run_count)
    expected = mean_ci95(best.values - second.values)
    assert diff.difference == pytest.approx(expected[0]) and diff.ci95 == pytest.approx(expected[1])
    assert diff.difference == pytest.approx(best.mean - second.mean)  # type: ignore[operator]
    assert result.significant == (diff.ci95[0] > 0)


def test_per_expected_runs_best_uniform_vs_best_adaptive(plan8: tuple[PlanResult, list[PlanRow]]) -> None:
    result, _ = plan8
    pairs = result.by_expected_runs()
    assert [m for m, *_ in pairs] == list(MEANS)
    for m, uniform, adaptive, cmp in pairs:
        assert uniform is not None and adaptive is not None and cmp is not None
        assert not uniform.candidate.adaptive and uniform.candidate.expected_runs == m
        rivals = [r for r in result.rows if r.candidate.adaptive and r.candidate.expected_runs == m]
        assert adaptive.mean == max(r.mean for r in rivals)  # type: ignore[type-var]
        assert cmp.first is adaptive and cmp.second is uniform and cmp.same_runs
        assert cmp.pairing == "paired, same T per repeat"
        expected = mean_ci95(adaptive.values - uniform.values)
        assert cmp.difference == pytest.approx(expected[0]) and cmp.ci95 == pytest.approx(expected[1])


def test_json_round_trip(plan8: tuple[PlanResult, list[PlanRow]]) -> None:
    result, _ = plan8
    payload = result.to_dict()
    assert json.loads(json.dumps(payload, allow_nan=False)) == payload
    assert payload["best"] == result.best.candidate.name  # type: ignore[union-attr]
    assert payload["runner_up"] == result.runner_up.candidate.name  # type: ignore[union-attr]
    assert payload["difference"]["significant"] == result.significant == payload["significant"]
    assert len(payload["rows"]) == len(result.rows)
    row = payload["rows"][0]
    assert row["status"] == "ok" and row["repeats"] == REPEATS and "values" not in row
    assert [e["expected_runs"] for e in payload["by_expected_runs"]] == list(MEANS)


def test_unreachable_and_outside_family_rows_are_reported_not_raised(family: LandscapeFamily) -> None:
    # ε = 2: GP-UCB (2, 0.75) costs more than 2 even with infinite noise; uniform search at E[T] = 20 needs
    # σ ≈ 4.02, just beyond the family's largest member (4.0).
    result = plan_search(family, 2.0, DELTA, _candidates([Uniform(), GPUCB(C=2.0, c=0.75)]), repeats=4, seed=0,
                         workers=1, adaptive_theorem="A")
    rows = {r.candidate.name: r for r in result.rows}
    ok = rows["uniform, E[T]=10"]
    assert ok.status == "ok" and ok.epsilon is not None and 1.95 <= ok.epsilon <= 2.0
    for m in MEANS:
        gp = rows[f"gp-ucb C=2 c=0.75, E[T]={m:g}"]
        assert gp.status == "unreachable" and "unreachable" in gp.reason and gp.sigma is None
        assert gp.mean is None and gp.repeats == 0
    outside = rows["uniform, E[T]=20"]
    assert outside.status == "outside family" and outside.sigma is not None and outside.sigma > family.sigma_range[1]
    assert "outside the family's range" in outside.reason and outside.mean is None
    assert outside.epsilon is not None and outside.epsilon <= 2.0  # calibrated, just not simulated
    assert result.best is ok and result.runner_up is None and result.difference is None and not result.significant
    payload = result.to_dict()
    assert json.loads(json.dumps(payload, allow_nan=False)) == payload
    assert payload["adaptive_theorem"] == "A"  # the accounting is recorded with the plan
    assert payload["by_expected_runs"][1] == {"expected_runs": 20.0, "best_uniform": None, "best_adaptive": None,
                                              "difference": None}


def test_rows_of_different_seeds_are_compared_with_welch() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.normal(0.8, 0.05, 30), rng.normal(0.78, 0.02, 12)
    cand = PlanCandidate("uniform", Uniform(), make_run_count("geometric", mean=10))
    first = PlanRow(cand, "ok", seed=0, mean=float(a.mean()), ci95=(0.0, 1.0), values=a)
    second = PlanRow(cand, "ok", seed=1, mean=float(b.mean()), ci95=(0.0, 1.0), values=b)
    cmp = compare_rows(first, second)
    reference = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert not cmp.paired and cmp.pairing == "unpaired, Welch"
    assert cmp.difference == pytest.approx(a.mean() - b.mean())
    assert cmp.ci95 == pytest.approx((reference.low, reference.high))
    assert welch_ci95(a, b) == (cmp.difference, cmp.ci95)
    same_seed = compare_rows(first, PlanRow(cand, "ok", seed=0, values=b))
    assert same_seed.paired and same_seed.ci95 == pytest.approx(mean_ci95(a[:12] - b)[1])
    with pytest.raises(ValueError, match="not simulated"):
        compare_rows(first, PlanRow(cand, "unreachable", reason="x"))


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"epsilon": 0.0}, "epsilon"),
    ({"delta": 1.0}, "delta"),
    ({"repeats": 0}, "repeats"),
    ({"seed": -1}, "seed"),
    ({"candidates": []}, "candidates"),
    ({"candidates": _candidates([Uniform(), Uniform()], (10.0,))}, "distinct"),
])
def test_plan_search_refuses_bad_arguments_before_any_work(family: LandscapeFamily, kwargs: dict, match: str) -> None:
    args: dict[str, Any] = {"epsilon": 8.0, "delta": DELTA, "candidates": _candidates([Uniform()], (10.0,)),
                            "repeats": 2, "seed": 0}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        plan_search(family, args["epsilon"], args["delta"], args["candidates"], repeats=args["repeats"],
                    seed=args["seed"], workers=1)


# ------------------------------------------------------------------------------------------ compute budgets
def test_family_run_seconds_is_the_mean_of_the_members_timings(family: LandscapeFamily) -> None:
    timings = [m.metadata["seconds_per_run_mean"] for m in family.members]
    assert family_run_seconds(family) == pytest.approx(float(np.mean(timings)))
    assert 0.1 < family_run_seconds(family) < 10.0  # digits MLP runs take about a second


def test_compute_budget_marks_rows_and_the_plan_picks_within_it(family: LandscapeFamily) -> None:
    candidates = _candidates([Uniform(), GPUCB(C=1.25, c=0.8)])
    result = plan_search(family, 8.0, DELTA, candidates, repeats=4, seed=3, workers=1,
                         compute=ComputeBudget(max_mean_runs=10.0))
    seconds = family_run_seconds(family)
    for row in result.rows:
        assert row.expected_compute == pytest.approx(row.candidate.expected_runs * seconds)
        assert row.within_budget == (row.candidate.expected_runs <= 10.0) and row.feasible  # simulated either way
        assert row.within_budget or row.budget_reason == "E[runs] = 20 > max mean runs 10"
    assert result.best is not None and result.best.candidate.expected_runs == 10.0
    assert result.best is max((r for r in result.rows if r.within_budget), key=lambda r: r.mean)
    assert result.runner_up is not None and result.runner_up.within_budget
    payload = result.to_dict()
    assert json.loads(json.dumps(payload, allow_nan=False)) == payload
    assert payload["compute"] == {"run_seconds": seconds, "budget_seconds": None, "max_mean_runs": 10.0,
                                  "source": "family metadata seconds_per_run_mean"}
    assert {r["design"] for r in payload["rows"]} == {"uniform", "dp-hypo"}
    assert [e["name"] for e in payload["pareto_front"]] == [r.candidate.name for r in result.pareto_front]


def _row(name: str, runs: float, mean: float) -> PlanRow:
    cand = PlanCandidate(name, Uniform(), make_run_count("geometric", mean=runs))
    return PlanRow(cand, "ok", mean=mean, values=np.full(2, mean))


def test_pareto_front_is_exactly_the_undominated_rows() -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        runs = rng.choice([2.0, 5.0, 10.0, 20.0, 50.0], size=8)
        means = rng.choice([0.5, 0.6, 0.7, 0.8], size=8)
        rows = tuple(_row(f"r{k}", float(m), float(v)) for k, (m, v) in enumerate(zip(runs, means, strict=True)))
        result = PlanResult(8.0, DELTA, 2, 0, (1.0,), 1.0, rows)
        dominated = {k for k in range(8) for j in range(8)
                     if j != k and runs[j] <= runs[k] and means[j] >= means[k]
                     and (runs[j] < runs[k] or means[j] > means[k] or j < k)}
        assert {r.candidate.label for r in result.pareto_front} == {f"r{k}" for k in range(8) if k not in dominated}
        front = result.pareto_front
        assert all(a.candidate.expected_runs < b.candidate.expected_runs and a.mean < b.mean  # type: ignore[operator]
                   for a, b in itertools.pairwise(front))


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"run_seconds": -1.0}, "run_seconds must be"),
    ({"run_seconds": 1.0, "budget_seconds": 0.0}, "budget_seconds must be"),
    ({"max_mean_runs": 0.5}, "max_mean_runs must be a finite number >= 1"),
    ({"budget_seconds": 10.0}, "budget_seconds needs run_seconds"),
])
def test_compute_budget_refuses_bad_values(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ComputeBudget(**kwargs)


def test_a_budget_no_candidate_meets_fails_before_any_work(family: LandscapeFamily) -> None:
    seen: list[PlanRow] = []
    with pytest.raises(ValueError, match=r"no candidate meets the compute budget: the cheapest, uniform, E\[T\]=10, "
                                         r"has expected compute 20 s > budget 5 s"):
        plan_search(family, 8.0, DELTA, _candidates([Uniform()]), repeats=2, workers=1, progress=seen.append,
                    compute=ComputeBudget(run_seconds=2.0, budget_seconds=5.0))
    assert seen == []


def test_a_two_stage_row_is_its_design_simulated_at_its_calibrated_sigmas_and_compared_unpaired() -> None:
    from dphypo.privacy.two_stage import FinalRun, ProbeRelease, TwoStage
    from dphypo.simulation.planner import TwoStageCandidate, default_two_stage_candidates
    from dphypo.simulation.two_stage import calibrate_design, two_stage_values

    family = load_family(MEMBERS)
    design = TwoStage(ProbeRelease(20), FinalRun(), split=0.7)
    candidates = (PlanCandidate("uniform", Uniform(), make_run_count("geometric", mean=20)),
                  TwoStageCandidate(design))
    result = plan_search(family, 8.0, DELTA, candidates, repeats=50, seed=3, workers=1)
    uniform, staged = result.rows
    calibration = calibrate_design(design, 8.0, DELTA, family.mechanism_metadata)
    assert (staged.probe_sigma, staged.sigma) == (calibration.probe_sigma, calibration.final_sigma)
    # the row's values are the design's simulation at those σ, from the two-stage streams of the plan's seed
    rng = np.random.default_rng([3, 2_024])
    expected = two_stage_values(design, family.at(calibration.probe_sigma), family.at(calibration.final_sigma), 50,
                                rng)
    np.testing.assert_array_equal(staged.values, expected)
    comparison = compare_rows(staged, uniform)
    assert not comparison.paired and comparison.pairing == "unpaired, Welch"
    evaluation = result.evaluation  # the pick on fresh repeats: its own streams of the evaluation seed
    assert evaluation is not None
    fresh = evaluation.pick
    if fresh.candidate is staged.candidate:
        rng = np.random.default_rng([3 + 2**32, 2_024])
        np.testing.assert_array_equal(fresh.values, two_stage_values(
            design, family.at(calibration.probe_sigma), family.at(calibration.final_sigma), 50, rng))
        # no uniform row with its 21 expected runs: uniform search at E[T] = 21, unpaired with a two-stage design
        assert evaluation.comparator is not None and evaluation.comparator.candidate.name == "uniform, E[T]=21"
        assert evaluation.comparison is not None and evaluation.comparison.pairing == "unpaired, Welch"
    else:
        assert evaluation.comparator is None and "most expected runs" in evaluation.reason
    assert staged.candidate.expected_runs == 21.0 and staged.candidate.design == "two-stage"
    # default grid: selected probes at every split, released probes only for integer counts
    names = [c.name for c in default_two_stage_candidates([20, 12.5])]
    assert len(names) == 9 and sum("release" in n for n in names) == 3


def test_cheap_probes_count_their_share_of_a_run_and_the_final_epochs_must_be_the_familys() -> None:
    from dphypo.privacy.two_stage import FinalRun, ProbeRelease, TwoStage
    from dphypo.simulation.planner import TwoStageCandidate

    family = load_family(MEMBERS)
    probes = load_family(sorted((LANDSCAPES / "multifidelity").glob("digits_mlp_epochs5_sigma*.npz")))
    design = TwoStage(ProbeRelease(10), FinalRun(), split=0.7)
    cheap = TwoStageCandidate(design, probes)
    assert cheap.expected_runs == pytest.approx(10 * 5 / 10 + 1) and cheap.label.endswith("5-epoch probes")
    assert TwoStageCandidate(design).expected_runs == 11.0
    with pytest.raises(ValueError, match="relative to the family's 10 epochs"):
        plan_search(family, 8.0, DELTA, [TwoStageCandidate(design, probes, final_epochs=20)], repeats=2, workers=1)


def test_the_pick_is_reported_on_fresh_repeats_against_the_best_uniform_search_of_at_least_its_compute(
    plan8: tuple[PlanResult, list[PlanRow]], family: LandscapeFamily
) -> None:
    from dphypo.simulation.planner import EVALUATION_SEED_OFFSET

    result, _ = plan8
    evaluation = result.evaluation
    assert evaluation is not None and result.best is not None
    assert evaluation.selected is result.best and evaluation.pick.candidate is result.best.candidate
    assert evaluation.seed == 3 + EVALUATION_SEED_OFFSET and evaluation.repeats == REPEATS
    pick = evaluation.pick
    C, c = pick.candidate.bounds
    fresh = simulate(family.at(pick.sigma), [pick.candidate.strategy], repeats=REPEATS,  # type: ignore[arg-type]
                     run_count=pick.candidate.run_count, C=C, c=c, seed=evaluation.seed, workers=1)[0]
    np.testing.assert_allclose(pick.values, fresh.values, rtol=0, atol=1e-12)  # the fresh streams, not the selection's
    assert not np.array_equal(pick.values, result.best.values)
    assert pick.sigma == result.best.sigma and pick.mean == pytest.approx(fresh.mean)
    # the comparators: every uniform row with at least the pick's expected runs (but the pick), best fresh mean first
    pool = [r for r in result.rows if r is not result.best and r.candidate.design == "uniform"
            and r.candidate.expected_runs >= result.best.candidate.expected_runs]
    assert sorted(r.candidate.name for r in evaluation.uniform) == sorted(r.candidate.name for r in pool)
    if pool:
        comparator, cmp = evaluation.comparator, evaluation.comparison
        assert comparator is not None and cmp is not None and comparator.seed == evaluation.seed
        assert comparator.mean == max(r.mean for r in evaluation.uniform)  # type: ignore[type-var]
        assert cmp.paired and cmp.first is pick and cmp.second is comparator  # common streams on the fresh repeats
        expected = mean_ci95(pick.values - comparator.values)
        assert cmp.difference == pytest.approx(expected[0]) and cmp.ci95 == pytest.approx(expected[1])
    else:
        assert evaluation.comparison is None and evaluation.reason
    payload = json.loads(json.dumps(result.to_dict(), allow_nan=False))["evaluation"]
    assert payload["pick"]["name"] == result.best.candidate.name and payload["seed"] == evaluation.seed
    assert payload["pick"]["mean"] == pytest.approx(pick.mean) and payload["selection_mean"] == pytest.approx(
        result.best.mean)
    assert len(payload["pick"]["ci95"]) == 2 and ("difference_vs_uniform" in payload)


def test_changing_only_the_selection_seed_leaves_the_fresh_repeats_alone(family: LandscapeFamily) -> None:
    candidates = _candidates([Uniform(), GPUCB(C=1.25, c=0.8)], means=(10.0,))
    runs = [plan_search(family, 8.0, DELTA, candidates, repeats=REPEATS, seed=seed, workers=1, adaptive_theorem="A",
                        evaluate_repeats=6, evaluate_seed=77) for seed in (3, 4)]
    for first, second in zip(runs[0].rows, runs[1].rows, strict=True):
        assert first.sigma == second.sigma and not np.array_equal(first.values, second.values)  # other selections
    for result in runs:
        evaluation = result.evaluation
        assert evaluation is not None and evaluation.seed == 77 and evaluation.pick.repeats == 6
        pick = evaluation.pick
        C, c = pick.candidate.bounds
        # the reported value is the fresh simulation at the evaluation seed, whatever the selection seed was
        again = simulate(family.at(pick.sigma), [pick.candidate.strategy], repeats=6,  # type: ignore[arg-type]
                         run_count=pick.candidate.run_count, C=C, c=c, seed=77, workers=1)[0]
        np.testing.assert_allclose(pick.values, again.values, rtol=0, atol=1e-12)
        assert pick.mean != evaluation.selected.mean
    assert plan_search(family, 8.0, DELTA, candidates, repeats=2, workers=1, adaptive_theorem="A",
                       evaluate_repeats=0).evaluation is None
    with pytest.raises(ValueError, match="evaluate_seed must differ from seed"):
        plan_search(family, 8.0, DELTA, candidates, repeats=2, seed=5, evaluate_seed=5, workers=1)
    with pytest.raises(ValueError, match="evaluate_repeats must be"):
        plan_search(family, 8.0, DELTA, candidates, repeats=2, evaluate_repeats=-1, workers=1)


def test_a_pick_with_no_uniform_row_of_its_compute_is_compared_with_uniform_search_at_its_expected_runs(
    family: LandscapeFamily,
) -> None:
    candidates = _candidates([GPUCB(C=1.25, c=0.8)], means=(10.0,))
    result = plan_search(family, 8.0, DELTA, candidates, repeats=4, seed=3, workers=1, adaptive_theorem="A")
    evaluation = result.evaluation
    assert evaluation is not None and evaluation.comparator is not None and evaluation.comparison is not None
    comparator = evaluation.comparator
    assert comparator.candidate.name == "uniform, E[T]=10" and comparator.status == "ok"
    assert comparator.candidate.run_count == candidates[0].run_count  # the plan's law of T: paired, same T
    assert evaluation.comparison.pairing == "paired, same T per repeat" and comparator.repeats == 4
    assert 8.0 - 0.05 <= comparator.epsilon <= 8.0  # type: ignore[operator]  # calibrated like every row


class _RecordingExecutor:
    """Runs items in this process, recording every batch it was handed (an Executor with 2 workers)."""

    workers = 2

    def __init__(self) -> None:
        self.batches: list[tuple[str, int]] = []

    def run(self, fn, items, **_: Any):  # type: ignore[no-untyped-def]
        self.batches.append((fn.__name__, len(items)))
        return [fn(item) for item in items]

    def close(self) -> None:
        pass

    def __enter__(self) -> _RecordingExecutor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        pass


def test_the_calibrations_of_a_plan_go_to_the_executor_at_once(family: LandscapeFamily) -> None:
    from dphypo.simulation.planner import Executor

    pool = _RecordingExecutor()
    assert isinstance(pool, Executor)
    candidates = _candidates([Uniform()])  # E[T] = 10 and 20: no GP to fit, only the calibrations matter here
    result = plan_search(family, 8.0, DELTA, candidates, repeats=4, seed=3, adaptive_theorem="A", executor=pool,
                         evaluate_repeats=0)
    assert pool.batches[0] == ("_calibrate", 2)  # every candidate's σ in one batch of the executor's workers
    again = plan_search(family, 8.0, DELTA, candidates, repeats=4, seed=3, adaptive_theorem="A", workers=1,
                        evaluate_repeats=0)
    assert [r.sigma for r in result.rows] == [r.sigma for r in again.rows]  # the same σ in and out of workers
    np.testing.assert_array_equal(result.rows[1].values, again.rows[1].values)
