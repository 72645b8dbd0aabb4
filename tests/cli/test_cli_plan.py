"""``dphypo plan``: the equal-ε planner on the shipped digits family, from the command line."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from dphypo.cli import run

LANDSCAPES = Path(__file__).resolve().parents[2] / "landscapes"
SIGMAS = ("1.0", "1.2226", "1.45", "1.7673", "2.1", "2.9", "4.0")
FAMILY = [arg for s in SIGMAS for arg in ("--landscape", str(LANDSCAPES / f"digits_mlp_sigma{s}.npz"))]
#: Small enough for seconds: one E[T], 4 searches per candidate, this process only.
SMALL = ["--mean", "10", "--repeats", "4", "--seed", "1", "--workers", "1"]


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    assert run(argv) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1  # exactly one JSON object
    return json.loads(out)


def test_plan_table_marks_the_best_configuration_and_json_agrees(capsys: pytest.CaptureFixture[str]) -> None:
    budget = ["--run-seconds", "2", "--compute-budget", "100"]  # every E[T] = 10 row costs 20 s: all within
    payload = _json(capsys, ["plan", *FAMILY, "--epsilon", "8", *SMALL, *budget, "--json"])
    rows = payload["rows"]
    assert len(rows) == 6 and all(r["status"] == "ok" for r in rows)  # uniform, 3 GP-UCB, 2 top-set at E[T] = 10
    assert all(7.95 <= r["epsilon"] <= 8.0 and r["repeats"] == 4 for r in rows)
    best = max(rows, key=lambda r: r["mean"])
    assert payload["best"] == best["name"]
    assert payload["runner_up"] == sorted(rows, key=lambda r: -r["mean"])[1]["name"]
    assert payload["difference"]["first"] == best["name"] and payload["difference"]["pairing"].startswith("paired")
    assert payload["verdict"].startswith(f"Best: {best['name']}")
    assert payload["family_sigmas"] == [float(s) for s in SIGMAS] and payload["runs"] == "geometric"
    assert payload["compute"] == {"run_seconds": 2.0, "budget_seconds": 100.0, "max_mean_runs": None,
                                  "source": "--run-seconds"}
    assert all(r["expected_compute"] == pytest.approx(20.0) and r["within_budget"] for r in rows)
    assert [e["name"] for e in payload["pareto_front"]] == [best["name"]]  # one E[T]: only the best is on the front
    # the pick on 4 fresh searches (as many as --repeats), against the best uniform search with its compute
    evaluation = payload["evaluation"]
    assert evaluation["repeats"] == 4 and evaluation["seed"] == 1 + 2**32 and evaluation["selection_seed"] == 1
    assert evaluation["pick"]["name"] == best["name"] and evaluation["selection_mean"] == best["mean"]
    assert len(evaluation["pick"]["ci95"]) == 2 and evaluation["pick"]["sigma"] == best["sigma"]
    if best["design"] == "uniform":  # the only uniform row at E[T] = 10: nothing with its compute to compare with
        assert evaluation["uniform_comparator"] is None and "most expected runs" in evaluation["reason"]
    else:
        assert evaluation["uniform_comparator"]["name"] == "uniform, E[T]=10"
        assert evaluation["difference_vs_uniform"]["pairing"] == "paired, same T per repeat"
        assert "pick − uniform" in payload["verdict"]
    assert f"On 4 fresh searches (seed {1 + 2**32}, not the selection's) the pick releases" in payload["verdict"]

    assert run(["plan", *FAMILY, "--epsilon", "8", *SMALL]) == 0
    out = capsys.readouterr().out
    best_line = next(line for line in out.splitlines() if "★ best" in line)
    assert best["label"] in best_line and f"{best['mean']:.4f}" in best_line
    assert "runner-up" in out and f"Best: {best['name']}" in out
    assert "Best − runner-up" in out and "E[T] = 10: best uniform" in out
    assert "not from the private data" in out
    assert "Pareto front at total ε = 8" in out and "E[compute]" in out
    assert "expected compute 9." in out  # the family's metadata: about a second per digits run


def test_plan_lists_unreachable_and_outside_family_candidates(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", *FAMILY, "--epsilon", "2", "--mean", "10", "--mean", "20", "--repeats", "3", "--workers", "1",
            "--adaptive-theorem", "A", "--data-split", "permutation"]  # the family's σ range: Theorem A, the sum
    assert run(argv) == 0
    out = capsys.readouterr().out
    unreachable = [line for line in out.splitlines() if "unreachable: target epsilon=2" in line]
    assert len(unreachable) == 10  # every adaptive candidate at both E[T]
    assert any("narrow [c, C]" in line for line in unreachable)  # brackets printed, not eaten as markup
    assert "outside family: needs sigma=" in out  # uniform search at E[T] = 20 needs σ above the largest member
    assert "No runner-up" in out


@pytest.mark.parametrize(("extra", "message"), [
    (["--runs", "poisson"], "--runs must be one of"),
    (["--mean", "0.5"], "--mean must be"),
    (["--epsilon", "-1"], "--epsilon must be a finite number > 0"),
    (["--repeats", "0"], "--repeats must be a positive integer"),
    (["--compute-budget", "-1"], "--compute-budget must be"),
    (["--run-seconds", "0"], "--run-seconds must be"),
    (["--max-mean-runs", "0.5"], "--max-mean-runs must be"),
    (["--max-mean-runs", "5"], "no candidate meets the compute budget: the cheapest, uniform, E[T]=10, has E[runs]"),
    (["--run-seconds", "3", "--compute-budget", "20"], "has expected compute 30 s > budget 20 s"),
    (["--evaluate-repeats", "-1"], "--evaluate-repeats must be"),
    (["--evaluate-seed", "0"], "--evaluate-seed must differ from --seed"),
    (["--split", "0.5"], "--split is the budget split of a two-stage design: add --design two-stage"),
    (["--design", "two-stage", "--split", "1.5"], "--split must be in (0, 1)"),
    (["--design", "two-stage", "--split", "0.5", "--split", "0.5"], "--split must be distinct values"),
    (["--race-repeats", "1"], "--race-repeats must be an integer >= 2"),
])
def test_plan_bad_options_are_one_line_errors(capsys: pytest.CaptureFixture[str], extra: list[str],
                                              message: str) -> None:
    argv = ["plan", *FAMILY, "--epsilon", "8", *extra]
    assert run(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_plan_needs_a_family(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["plan", "--landscape", str(LANDSCAPES / "digits_mlp_sigma1.0.npz"), "--epsilon", "8"]) == 2
    assert "at least 2 members" in capsys.readouterr().err
    mixed = ["--landscape", str(LANDSCAPES / "digits_mlp_sigma1.0.npz"),
             "--landscape", str(LANDSCAPES / "mnist_subset_cnn_sigma1.3716.npz")]
    assert run(["plan", *mixed, "--epsilon", "8"]) == 2
    assert "mnist_subset_cnn_sigma1.3716.npz" in capsys.readouterr().err


def test_plan_help_says_the_plan_uses_no_private_data(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["plan", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "not from the private data of the search it plans" in out and "<bool>" not in out


def test_plan_compares_two_stage_designs_at_equal_epsilon(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", *FAMILY, "--epsilon", "8", "--mean", "20", "--repeats", "40", "--seed", "1", "--workers", "1",
            "--design", "uniform", "--design", "two-stage", "--split", "0.3", "--split", "0.7",
            "--evaluate-repeats", "0", "--json"]
    payload = _json(capsys, argv)
    rows = payload["rows"]
    assert {r["design"] for r in rows} == {"uniform", "two-stage"}  # no DP-HyPO row: it was not asked for
    staged = [r for r in rows if r["design"] == "two-stage"]
    assert len(staged) == 4  # selected and released probes at the two --split values
    assert sorted(r["two_stage"]["split"] for r in staged) == [0.3, 0.3, 0.7, 0.7]
    assert payload["evaluation"] is None and "fresh searches" not in payload["verdict"]  # --evaluate-repeats 0
    ran = [r for r in staged if r["status"] == "ok"]
    assert ran and all(7.95 <= r["epsilon"] <= 8.0 and r["probe_sigma"] > r["sigma"] * 0.5 for r in ran)
    assert all(r["two_stage"]["expected_final_runs"] == 1.0 and r["expected_runs"] == 21.0 for r in staged)
    # the released probes' score releases alone exceed 30 % of ε = 8: that row says so, in one line
    floor = next(r for r in staged if r["label"].endswith("release 20 probes -> 1 final run, split 0.3"))
    assert floor["status"] == "unreachable" and "alone costs at least epsilon=2.766" in floor["reason"]
    assert "At most 21 expected runs: best two-stage" in payload["verdict"]
    assert "(unpaired, Welch)" in payload["verdict"]  # two-stage rows have their own streams
    assert "no adaptive candidate" not in payload["verdict"]


def test_plan_refuses_an_unknown_design_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["plan", *FAMILY, "--epsilon", "8", "--design", "bayes"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --design must be distinct values among uniform, dp-hypo, two-stage") and \
        err.count("\n") == 1


def test_plan_gives_two_stage_probes_a_cheaper_family(capsys: pytest.CaptureFixture[str]) -> None:
    probes = [arg for path in sorted((LANDSCAPES / "multifidelity").glob("digits_mlp_epochs2_sigma*.npz"))
              for arg in ("--probe-landscape", str(path))]
    argv = ["plan", *FAMILY, *probes, "--epsilon", "8", "--mean", "10", "--repeats", "20", "--seed", "1",
            "--workers", "1", "--design", "uniform", "--design", "two-stage", "--split", "0.7", "--json"]
    payload = _json(capsys, argv)
    staged = [r for r in payload["rows"] if r["design"] == "two-stage"]
    assert staged and all(r["label"].endswith("2-epoch probes") and r["two_stage"]["probe_epochs"] == 2
                          for r in staged)
    # a 2-epoch probe counts as a fifth of a 10-epoch run in E[runs] (and compute)
    assert all(r["expected_runs"] == pytest.approx(10 * 0.2 + 1) for r in staged)
    released = next(r for r in staged if r["label"].startswith("two-stage: release 10 probes") and r["status"] == "ok")
    assert 7.95 <= released["epsilon"] <= 8.0 and released["probe_sigma"] > 0
    # the pick on fresh searches against the uniform search with at least its expected runs (uniform E[T] = 10)
    evaluation = payload["evaluation"]
    assert evaluation["pick"]["name"] == payload["best"] and evaluation["repeats"] == 20
    if evaluation["pick"]["design"] == "two-stage":
        assert evaluation["uniform_comparator"]["name"] == "uniform, E[T]=10"
        assert evaluation["difference_vs_uniform"]["pairing"] == "unpaired, Welch"
    assert run(["plan", *FAMILY, *probes, "--epsilon", "8"]) == 2  # no two-stage design asked for
    assert "--probe-landscape is the probes' family of a two-stage design" in capsys.readouterr().err


def test_plan_races_dp_hypo_rows_and_says_which_it_stopped(capsys: pytest.CaptureFixture[str]) -> None:
    from dphypo.cli.plan import RACE_FIRST_REPEATS
    from dphypo.simulation import planner

    assert RACE_FIRST_REPEATS == planner.RACE_FIRST_REPEATS  # the CLI's default is the library's
    final = [arg for s in ("0.7", "1.0", "1.2226", "1.45", "2.1")
             for arg in ("--landscape", str(LANDSCAPES / "vectorized" / f"digits_mlp_sigma{s}.npz"))]
    probes = [arg for s in ("1.0", "1.45", "2.1", "2.9", "4.0")
              for arg in ("--probe-landscape", str(LANDSCAPES / "multifidelity" / f"digits_mlp_epochs2_sigma{s}.npz"))]
    argv = ["plan", *final, *probes, "--epsilon", "8", "--mean", "10", "--repeats", "30", "--race-repeats", "10",
            "--seed", "3", "--workers", "1", "--design", "uniform", "--design", "dp-hypo", "--design", "two-stage",
            "--split", "0.3", "--evaluate-repeats", "4"]
    payload = _json(capsys, [*argv, "--json"])
    assert payload["race"] == {"first": 10, "alpha": 0.01, "twin_factor": 10, "rounds": [10, 20, 30]}
    stopped = [r for r in payload["rows"] if r["eliminated"]]
    assert stopped and payload["eliminated"] == [r["name"] for r in stopped]
    assert all(r["design"] == "dp-hypo" and r["repeats"] in (10, 20) and r["status"] == "ok" for r in stopped)
    assert all(r["repeats"] == 30 for r in payload["rows"] if r["status"] == "ok" and not r["eliminated"])
    assert payload["best"] not in payload["eliminated"] and payload["evaluation"]["pick"]["name"] == payload["best"]
    assert f"Race: {len(stopped)} DP-HyPO row(s) stopped early" in payload["verdict"]
    # --no-race (here without DP-HyPO rows, to stay cheap: the library's test compares a plan with and without it)
    at = argv.index("dp-hypo")
    single = argv[: at - 1] + argv[at + 1 :]  # without "--design dp-hypo"
    payload = _json(capsys, [*single, "--no-race", "--json"])
    assert payload["race"] is None and payload["eliminated"] == [] and "Race" not in payload["verdict"]
    assert all(r["repeats"] == 30 for r in payload["rows"] if r["status"] == "ok")


def test_the_table_and_verdict_say_which_rows_the_race_stopped() -> None:
    import numpy as np
    from rich.console import Console

    from dphypo.cli.plan import _table, verdict
    from dphypo.privacy import make_run_count
    from dphypo.simulation.planner import PlanCandidate, PlanResult, PlanRow, Race, strategy_label
    from dphypo.strategies import GPUCB, Uniform

    rng = np.random.default_rng(0)

    def row(strategy: object, values: np.ndarray, eliminated: str = "") -> PlanRow:
        candidate = PlanCandidate(strategy_label(strategy), strategy,  # type: ignore[arg-type]
                                  make_run_count("geometric", mean=10.0))
        return PlanRow(candidate, "ok", sigma=1.0, epsilon=8.0, method="m", mean=float(values.mean()),
                       ci95=(0.0, 1.0), values=values, eliminated=eliminated)

    reason = "eliminated after 10 repeats: mean − leader's estimated -0.0500 (leader uniform, E[T]=10)"
    uniform = row(Uniform(), rng.uniform(0.8, 0.9, 30))
    stopped = row(GPUCB(C=2.0, c=0.75), np.full(10, 0.95), reason)  # its 10 searches look best: never picked
    result = PlanResult(8.0, 1e-5, 30, 0, (1.0, 2.0), 1.0, (uniform, stopped), race=Race(10))
    assert result.best is uniform and result.ranked == (uniform, stopped)
    console = Console(width=600, record=True)
    console.print(_table(result))
    out = " ".join(console.export_text().split())
    assert "race over rounds of 10, 20, 30 searches: 1 DP-HyPO row(s) eliminated" in out
    assert f"{reason} (not picked)" in out and "★ best" in out.split("gp-ucb")[0]
    assert ("Race: 1 DP-HyPO row(s) stopped early as significantly below the leader (one-sided bounds, error at most "
            "0.01 per row and leader over all rounds), after 10 searches instead of 30; never picked."
            ) in verdict(result)
    assert "Race" not in verdict(dataclasses.replace(result, race=None))
