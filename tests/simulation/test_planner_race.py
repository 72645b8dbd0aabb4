"""Tests for the planner's race (dphypo.simulation.planner.Race): costly rows stop once below the leader."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy import stats

from dphypo.privacy import make_run_count
from dphypo.privacy.two_stage import FinalRun, ProbeRelease, TwoStage
from dphypo.simulation.family import LandscapeFamily, load_family
from dphypo.simulation.planner import (
    RACE_FIRST_REPEATS,
    PlanCandidate,
    PlanRow,
    Race,
    TwoStageCandidate,
    _elimination,
    plan_search,
    strategy_label,
)
from dphypo.strategies import GPUCB, Uniform
from tests.simulation.test_planner import LANDSCAPES

FINAL = [str(LANDSCAPES / "vectorized" / f"digits_mlp_sigma{s}.npz") for s in ("0.7", "1.0", "1.2226", "1.45", "2.1")]
PROBES = [str(LANDSCAPES / "multifidelity" / f"digits_mlp_epochs2_sigma{s}.npz")
          for s in ("1.0", "1.45", "2.1", "2.9", "4.0")]


def test_race_rounds_double_from_the_first_and_bad_settings_are_refused() -> None:
    assert Race().first == RACE_FIRST_REPEATS == 50
    assert Race().schedule(200) == [50, 100, 200]
    assert Race(50).schedule(120) == [50, 100, 120]
    assert Race(50).schedule(50) == [50] and Race(50).schedule(10) == [10]  # no elimination round: no race
    assert Race(10).to_dict(40) == {"first": 10, "alpha": 0.01, "twin_factor": 10, "rounds": [10, 20, 40]}
    for kwargs, match in [({"first": 1}, "first repeats"), ({"first": 2.5}, "first repeats"),
                          ({"alpha": 0.0}, "alpha"), ({"alpha": 1.0}, "alpha"), ({"twin_factor": 0}, "twin_factor")]:
        with pytest.raises(ValueError, match=match):
            Race(**kwargs)


def _row(strategy: object, mean_runs: float, values: np.ndarray, seed: int = 0) -> PlanRow:
    candidate = PlanCandidate(strategy_label(strategy), strategy, make_run_count("geometric", mean=mean_runs))  # type: ignore[arg-type]
    return PlanRow(candidate, "ok", sigma=1.0, seed=seed, mean=float(values.mean()), values=values)


def _two_stage(values: np.ndarray) -> PlanRow:
    candidate = TwoStageCandidate(TwoStage(ProbeRelease(10), FinalRun(), 0.5))
    return PlanRow(candidate, "ok", sigma=1.0, probe_sigma=1.0, seed=0, mean=float(values.mean()), values=values)


def test_the_rule_eliminates_only_what_its_one_sided_bound_puts_below_the_leader() -> None:
    rng = np.random.default_rng(0)
    n = 50
    base = rng.uniform(0.5, 1.0, 200)  # a uniform row's values: T makes them spread widely
    uniform = _row(Uniform(), 10.0, base)
    # paired with the leader (same streams): the paired t bound decides; 3.2 standard errors below is not enough
    # at level 0.005 / 2 rounds ... but 5 are
    noise = rng.normal(0.0, 1.0, n)
    noise = (noise - noise.mean()) / noise.std(ddof=1)
    for k, expected in [(2.0, False), (5.0, True)]:
        gp = _row(GPUCB(C=2.0, c=0.75), 10.0, base[:n] - 0.02 * noise - k * 0.02 / math.sqrt(n))
        reason = _elimination(gp, [uniform, gp], 0.005, {})
        assert bool(reason) is expected, reason
        if expected:
            assert "eliminated after 50 repeats" in reason and "paired Student-t" in reason
            assert "uniform, E[T]=10" in reason
    # a two-stage leader (own streams): Welch directly, or through the uniform twin, whose precise paired difference
    # and many repeats detect what the row's own spread hides
    leader = _two_stage(rng.normal(0.80, 0.01, 200))
    gp = _row(GPUCB(C=2.0, c=0.75), 10.0, base[:n] - 0.001 + 0.002 * rng.standard_normal(n))
    other = _row(GPUCB(C=2.0, c=0.75), 20.0, gp.values)  # same values, but no twin: its law of T has no uniform row
    rows = [uniform, gp, leader, other]
    assert gp.mean is not None and gp.mean > 0.75 - 0.1  # its own first 50 repeats barely tell it from the leader
    twin_reason = _elimination(gp, rows, 0.005, {uniform.candidate.key: uniform})
    upper = _upper(gp, uniform, leader, 0.0025)
    assert bool(twin_reason) is (upper < 0) and "through uniform, E[T]=10" in twin_reason
    welch_reason = _elimination(other, rows, 0.005, {})
    assert ("Welch" in welch_reason) or not welch_reason
    assert gp.eliminated == "" and _elimination(leader, rows, 0.005, {}) == ""  # the leader never eliminates itself
    # an eliminated row is never a leader; nor is a row over the compute budget
    over = dataclasses.replace(_two_stage(np.full(200, 0.99)), budget_reason="over")
    gone = dataclasses.replace(_two_stage(np.full(200, 0.98)), eliminated="eliminated after 50 repeats")
    assert _elimination(uniform, [uniform, over, gone], 0.005, {}) == ""


def _upper(row: PlanRow, twin: PlanRow, leader: PlanRow, alpha: float) -> float:
    """The twin bound recomputed from its definition: paired t on row − twin, plus Welch on twin − leader."""
    d = row.values - twin.values[: row.repeats]
    first = d.mean() + stats.t.ppf(1 - alpha, d.size - 1) * d.std(ddof=1) / math.sqrt(d.size)
    a, b = twin.values, leader.values
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    df = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
    second = a.mean() - b.mean() + stats.t.ppf(1 - alpha, df) * math.sqrt(va + vb)
    return float(first + second)


def test_a_row_as_good_as_the_leader_is_eliminated_at_most_at_the_stated_rate() -> None:
    rng = np.random.default_rng(1)
    alpha, trials, n = 0.005, 4000, 50
    eliminated = 0
    for _ in range(trials):  # equal true means: the rate is at most alpha (up to the t approximation)
        base = rng.uniform(0.5, 1.0, 500)
        uniform = _row(Uniform(), 10.0, base)
        gp = _row(GPUCB(C=2.0, c=0.75), 10.0, base[:n] + rng.normal(0.0, 0.02, n))
        leader = _two_stage(rng.normal(0.75, 0.05, 200))
        eliminated += bool(_elimination(gp, [uniform, gp, leader], alpha, {uniform.candidate.key: uniform}))
    assert eliminated / trials <= alpha + 3 * math.sqrt(alpha / trials)


@pytest.fixture(scope="module")
def final() -> LandscapeFamily:
    return load_family(FINAL)


def test_a_race_stops_rows_below_the_leader_keeps_their_repeats_and_never_picks_them(final: LandscapeFamily) -> None:
    probes = load_family(PROBES)
    candidates = [PlanCandidate(strategy_label(s), s, make_run_count("geometric", mean=10.0))
                  for s in (Uniform(), GPUCB(C=1.25, c=0.8), GPUCB(C=2.0, c=0.75))]
    candidates.append(TwoStageCandidate(TwoStage(ProbeRelease(10), FinalRun(), 0.3), probes, 10))
    seen: list[PlanRow] = []
    raced = plan_search(final, 8.0, 1e-5, candidates, repeats=30, seed=3, workers=1, race=Race(10),
                        evaluate_repeats=4, progress=seen.append)
    full = plan_search(final, 8.0, 1e-5, candidates, repeats=30, seed=3, workers=1, evaluate_repeats=0)
    assert [r.candidate for r in seen] == list(candidates)  # progress: every row, in candidate order
    stopped = [row for row in raced.rows if row.eliminated]
    assert stopped, "the GP rows lie far below the two-stage design's on their twin's repeats: expected eliminations"
    for row, whole in zip(raced.rows, full.rows, strict=True):
        # the same repeats on the same streams: a row the race stopped has the first values of its full run
        assert np.array_equal(row.values, whole.values[: row.repeats])
        if row.eliminated:
            assert row.repeats in (10, 20) and isinstance(row.candidate, PlanCandidate) and row.candidate.adaptive
            assert row.eliminated.startswith(f"eliminated after {row.repeats} repeats") and "leader" in row.eliminated
        else:
            assert row.repeats == 30
    assert raced.best is not None and not raced.best.eliminated
    assert {id(row) for row in raced.ranked[-len(stopped):]} == {id(row) for row in stopped}  # they rank last
    assert raced.evaluation is not None and raced.evaluation.selected is raced.best
    payload = raced.to_dict()
    assert payload["race"] == {"first": 10, "alpha": 0.01, "twin_factor": 10, "rounds": [10, 20, 30]}
    assert payload["eliminated"] == [row.candidate.name for row in stopped]
    assert [r["eliminated"] for r in payload["rows"]] == [row.eliminated for row in raced.rows]
    assert [r["repeats"] for r in payload["rows"]] == [row.repeats for row in raced.rows]
    assert [name for name, _ in raced.phases][:2] == ["calibration", "selection repeats 0-9"]
    assert raced.phases[-1][0] == "evaluation" and full.to_dict()["race"] is None


def test_simulate_many_continues_a_simulation_where_it_stopped(final: LandscapeFamily) -> None:
    from dphypo.search.execution import SequentialExecutor
    from dphypo.simulation.batched import BatchedSimulation, simulate_batched, simulate_many

    landscape = final.at(1.2)
    run_count = make_run_count("geometric", mean=3.0)
    for strategy in (Uniform(), GPUCB(C=2.0, c=0.75)):
        whole = simulate_batched(landscape, strategy, repeats=8, run_count=run_count, seed=5, workers=1)
        parts = simulate_many([BatchedSimulation(landscape, strategy, run_count, 5, 0, 3),
                               BatchedSimulation(landscape, strategy, run_count, 5, 3, 8)],
                              executor=SequentialExecutor())
        assert np.array_equal(np.concatenate(parts), whole)  # repeats 0-2 then 3-7 are repeats 0-7
        assert np.array_equal(simulate_batched(landscape, strategy, repeats=5, run_count=run_count, seed=5,
                                               workers=1, start=3), whole[3:])
    with pytest.raises(ValueError, match="start < stop"):
        BatchedSimulation(landscape, Uniform(), run_count, 5, 3, 3)
    with pytest.raises(ValueError, match="start must be"):
        simulate_batched(landscape, Uniform(), repeats=2, run_count=run_count, start=-1, workers=1)
