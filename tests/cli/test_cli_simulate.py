from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import pytest

from dphypo.cli import run
from dphypo.density import lower_bound_for_top_mass
from dphypo.privacy import RepeatAndSelect, account, geometric, make_run_count
from dphypo.simulation.equal_epsilon import arm_calibration, metadata_mechanism
from dphypo.simulation.family import load_family
from dphypo.simulation.landscapes import load_landscape
from dphypo.simulation.simulate import simulate
from dphypo.simulation.studies import FIXED_T_NOTE, TABLE1_GAMMAS, TABLE2_UPPER_BOUNDS, Setting, arm_epsilon
from dphypo.simulation.synthetic import synthetic_landscape
from dphypo.strategies import GPTopSet

LANDSCAPES = Path(__file__).resolve().parents[2] / "landscapes"
DIGITS_UNIFORM = str(LANDSCAPES / "digits_mlp_sigma1.2226.npz")
DIGITS_GP = str(LANDSCAPES / "digits_mlp_sigma1.7673.npz")
DIGITS_LOW = str(LANDSCAPES / "digits_mlp_sigma0.7.npz")
MNIST = str(LANDSCAPES / "mnist_subset_cnn_sigma1.3716.npz")


def _json(capsys, argv: str) -> dict:
    assert run(argv.split()) == 0
    return json.loads(capsys.readouterr().out)


def test_table1_sweep_is_one_command(capsys) -> None:
    payload = _json(
        capsys,
        "simulate --landscape synthetic:ridge --strategy uniform --sweep table1 --repeats 5 "
        "--workers 1 --json",
    )
    cells = payload["results"]
    assert [c["setting"] for c in cells] == [f"γ={g:g}" for g in TABLE1_GAMMAS]
    for cell, gamma in zip(cells, TABLE1_GAMMAS, strict=True):
        assert f"gamma={gamma}" in cell["run_count"] and cell["T"] is None and cell["repeats"] == 5
        assert cell["epsilon"] is None and "synthetic" in cell["epsilon_note"]  # no mechanism: no made-up ε
        assert (cell["C"], cell["c"]) == (1.0, 1.0)
    assert payload["study"]["settings"][0]["runs"].startswith("geometric")


def test_fixed_T_range_feeds_the_accuracy_plot(capsys, tmp_path) -> None:
    payload = _json(
        capsys,
        "simulate --landscape synthetic:smooth --strategy uniform --strategy gp --fixed-T 1..4 "
        "--repeats 3 --workers 1 --json",
    )
    assert [(c["strategy"], c["T"]) for c in payload["results"]] == [
        (s, T) for T in (1, 2, 3, 4) for s in ("uniform", "gp-ucb")
    ]
    assert all(c["epsilon"] is None and c["epsilon_note"] == FIXED_T_NOTE for c in payload["results"])
    path = tmp_path / "fig1.json"
    path.write_text(json.dumps(payload))
    assert run(["plot", "accuracy", "--from", str(path), "--out", str(tmp_path / "fig1.png")]) == 0
    assert (tmp_path / "fig1.png").stat().st_size > 0


def test_black_box_table2_prints_epsilon_beside_utility(capsys, tmp_path) -> None:
    prefix = tmp_path / "t2"
    payload = _json(
        capsys,
        f"simulate --landscape {DIGITS_UNIFORM} --strategy uniform --strategy gp --runs geometric "
        f"--gamma 0.5 --sweep table2 --repeats 3 --workers 1 --table-out {prefix} --json",
    )
    land = load_landscape(DIGITS_UNIFORM)
    gp = [c for c in payload["results"] if c["arm"] == "gp"]
    uniform = [c for c in payload["results"] if c["arm"] == "uniform"]
    assert [(c["C"], c["c"]) for c in gp] == [(C, 1 / C) for C in TABLE2_UPPER_BOUNDS]
    assert gp[0]["c"] == 0.8
    setting = Setting("x", run_count=geometric(0.5))
    eps_uniform = arm_epsilon(land, setting, 1.0, 1.0, 1e-5)[0]
    assert all(c["epsilon"] == eps_uniform for c in uniform)
    for cell in gp:
        assert cell["epsilon"] == arm_epsilon(land, setting, cell["C"], cell["c"], 1e-5)[0] > eps_uniform
    assert gp[0]["epsilon"] < gp[1]["epsilon"] < gp[2]["epsilon"]  # larger log(C/c), larger ε
    rows = list(csv.DictReader(Path(f"{prefix}.csv").read_text().splitlines()))
    assert [float(r["gp_epsilon"]) for r in rows] == [c["epsilon"] for c in gp]
    assert [float(r["gp_mean"]) for r in rows] == [c["mean"] for c in gp]
    assert "| setting |" in Path(f"{prefix}.md").read_text()


def test_white_box_pair_costs_at_most_the_budget(capsys) -> None:
    argv = (
        f"simulate --landscape {DIGITS_UNIFORM} --gp-landscape {DIGITS_GP} --strategy uniform --strategy gp "
        "--runs geometric --gamma 0.05 --repeats 2 --workers 1 --json --adaptive-theorem A"
    )
    payload = _json(capsys, argv)
    uniform, gp = payload["results"]
    assert uniform["landscape"] == DIGITS_UNIFORM and gp["landscape"] == DIGITS_GP
    assert (uniform["C"], uniform["c"], gp["C"], gp["c"]) == (1.0, 1.0, 2.0, 0.75)
    assert (uniform["sigma"], gp["sigma"]) == (1.2226, 1.7673)
    # The pair was calibrated to ε = 8 with RDP alone (uniform) and the published Theorem 1 (GP). The uniform arm
    # is accounted with the tighter privacy-profile bounds too (6.966), the GP arm with the proven Theorem A (7.815):
    # neither arm is cheaper to run than the budget says (`--epsilon` with a family gives both exactly ε = 8).
    assert uniform["epsilon"] == pytest.approx(6.9655, abs=2e-3) and gp["epsilon"] == pytest.approx(7.8151, abs=2e-3)
    assert payload["study"]["name"] == "white-box" and payload["delta"] == 1e-5


def test_grid_table_and_skipped_rows(capsys) -> None:
    argv = (
        "simulate --landscape synthetic:smooth --strategy uniform --strategy gp --runs geometric --gamma 0.3 "
        "--gamma 0.5 --gp-repeats 0.3=0 --repeats 3 --workers 1 --table"
    )
    assert run(argv.split()) == 0
    out = capsys.readouterr().out
    assert "not run" in out and "γ=0.5" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ("--sweep table1 --gamma 0.1", "sweep table1 sets"),
        ("--sweep table3 --runs geometric --gamma 0.1", "sweep must be"),
        ("--runs geometric --gamma 0.1 --bounds 2", "bounds must look like"),
        ("--fixed-T 3..1", "--fixed-T values"),
        ("--fixed-T 3 --bounds 2:0.75 --bounds 1.5:0.6", "one pair of bounds"),
        ("--runs geometric --gamma 0.1 --gp-repeats 0.1", "gp-repeats must look like"),
        ("--runs poisson --mean 5", "Poisson"),
    ],
)
def test_cli_rejects_bad_study_options(capsys, argv: str, message: str) -> None:
    base = "simulate --landscape synthetic:smooth --strategy uniform --strategy gp --repeats 2 --workers 1 "
    assert run((base + argv).split()) == 2
    assert message.lower() in capsys.readouterr().err.lower()


def test_searches_on_ray_give_the_same_numbers_as_a_local_run(capsys) -> None:
    pytest.importorskip("ray")
    argv = ("simulate --landscape synthetic:ridge --strategy uniform --strategy gp --fixed-T 4 --repeats 6 "
            "--C 2 --c 0.75 --json")
    local = _json(capsys, f"{argv} --executor sequential")
    on_ray = _json(capsys, f"{argv} --executor ray --workers 2")
    assert on_ray["executor"] == "ray" and local["executor"] == "sequential"
    assert [c["mean"] for c in on_ray["results"]] == [c["mean"] for c in local["results"]]
    assert run([*argv.split(), "--address", "127.0.0.1:1"]) == 2  # --address without --executor ray
    assert "--address needs --executor ray" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ equal ε
# The documented equal-ε values (README, docs/studies.md) were computed with Theorem A; these tests name it.
EQUAL = ("--epsilon 8 --strategy uniform --strategy gp --runs geometric --gamma 0.05 --workers 1 --adaptive-theorem A "
         "--data-split permutation")  # the sum: the shipped studies and their numbers


def test_equal_epsilon_on_the_shipped_family(capsys) -> None:
    """ε = 8, E[T] = 20 on the digits family: every arm at its own σ, accounted at most 8."""
    family = f"--landscape {DIGITS_GP} --landscape {DIGITS_LOW} --landscape {DIGITS_UNIFORM}"  # any order
    payload = _json(capsys, f"simulate {family} {EQUAL} --repeats 3 --json")
    uniform, gp = payload["results"]
    assert payload["study"]["name"] == "equal-epsilon" and payload["epsilon_target"] == 8.0
    assert payload["family_sigmas"] == [0.7, 1.2226, 1.7673]
    assert uniform["landscape"] == gp["landscape"] == [DIGITS_GP, DIGITS_LOW, DIGITS_UNIFORM]
    # uniform counts the privacy-profile bounds, the GP arm pays log(C/c) with more noise
    assert uniform["sigma"] == pytest.approx(1.1143, abs=2e-4) and gp["sigma"] == pytest.approx(1.7128, abs=2e-4)
    for cell in (uniform, gp):
        assert cell["epsilon_target"] == 8.0 and 8.0 - 2e-3 <= cell["epsilon"] <= 8.0  # the uniform arm too
        assert cell["sigma_tolerance"] == pytest.approx(1e-4 * cell["sigma"])
        low, high = cell["ci95"]
        assert cell["repeats"] == 3 and low <= cell["mean"] <= high
    assert uniform["difference_vs_uniform"] is None
    diff = gp["difference_vs_uniform"]
    assert diff["ci95"][0] <= diff["mean"] <= diff["ci95"][1]
    assert diff["mean"] == pytest.approx(gp["mean"] - uniform["mean"], abs=1e-12)  # paired: same repeats
    # the table: σ, ε, mean [CI] and the paired difference per arm
    assert run(f"simulate {family} {EQUAL} --repeats 3".split()) == 0
    out = capsys.readouterr().out
    assert "Equal-ε searches (total ε = 8" in out and f"{uniform['sigma']:.4f}" in out and f"{gp['sigma']:.4f}" in out
    assert f"{diff['mean']:+.4f}" in out
    assert run(f"simulate {family} {EQUAL} --repeats 3 --table".split()) == 0
    out = capsys.readouterr().out
    assert "uniform σ" in out and f"{gp['sigma']:.4f}" in out


@pytest.mark.parametrize(
    ("landscapes", "extra", "message"),
    [
        # the uniform arm needs σ 1.1143 < 1.2226: never extrapolated
        ((DIGITS_UNIFORM, DIGITS_GP), "", "arm 'uniform' in setting 'E[T]=20'"),
        ((DIGITS_UNIFORM, MNIST), "", "has a different axis_lr"),  # not one family
        ((DIGITS_UNIFORM,), "", "--epsilon needs a landscape family"),
        ((DIGITS_LOW, DIGITS_GP), f"--gp-landscape {DIGITS_GP}", "drop --gp-landscape"),
        ((DIGITS_LOW, DIGITS_GP), "--fixed-T 5", "fixed T (--fixed-T) has no privacy claim"),
        ((DIGITS_LOW, DIGITS_GP), "--epsilon -1", "--epsilon must be a finite number > 0"),
        ((DIGITS_LOW, DIGITS_GP), "--epsilon 0.5", "unreachable"),
    ],
)
def test_equal_epsilon_refusals_are_one_line(capsys, landscapes: tuple[str, ...], extra: str, message: str) -> None:
    argv = "simulate " + " ".join(f"--landscape {p}" for p in landscapes) + f" {EQUAL} --repeats 2 {extra}"
    if "--fixed-T" in extra:
        argv = argv.replace("--runs geometric --gamma 0.05 ", "")
    assert run(argv.split()) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err, err
    if message.startswith("arm 'uniform'"):
        assert "needs sigma=1.1142" in err and "outside the family's range [1.2226, 1.7673]" in err
    if "axis_lr" in message:
        assert "(members 0: " in err and "mnist_subset" in err


def test_several_landscapes_without_epsilon_are_refused(capsys) -> None:
    argv = f"simulate --landscape {DIGITS_LOW} --landscape {DIGITS_GP} --strategy uniform --runs geometric --gamma 0.05"
    assert run(argv.split()) == 2
    assert "add --epsilon E, or give one --landscape" in capsys.readouterr().err


def test_landscape_build_family_then_equal_epsilon(tmp_path, capsys) -> None:
    """`landscape build --sigma A --sigma B --out ...{sigma}...` writes one member per σ; they form a family."""
    pattern = str(tmp_path / "tiny_sigma{sigma}.npz")
    argv = ["landscape", "build", "--sigma", "0.6", "--sigma", "1", "--out", pattern, "--lr-grid", "0.1,1",
            "--clip-grid", "1,2", "--seeds", "1", "--epochs", "1", "--score-noise", "0.02", "--workers", "1"]
    assert run(argv) == 0
    members = [tmp_path / "tiny_sigma0.6.npz", tmp_path / "tiny_sigma1.0.npz"]
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == [f"wrote {m}" for m in members]
    family = load_family(members)
    assert family.sigmas == (0.6, 1.0) and family.mechanism_metadata["epochs"] == 1
    # E[T] = 5, one epoch: uniform needs σ 0.649, GP (C = 2, c = 0.75) 0.915, both inside [0.6, 1]
    payload = _json(capsys, f"simulate --landscape {members[0]} --landscape {members[1]} --epsilon 8 --strategy "
                            "uniform --strategy gp --runs geometric --gamma 0.2 --repeats 2 --workers 1 --json "
                            "--adaptive-theorem A --data-split permutation")
    assert [round(c["sigma"], 3) for c in payload["results"]] == [0.649, 0.915]
    assert all(7.99 <= c["epsilon"] <= 8.0 for c in payload["results"])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("--sigma 1 --sigma 2 --out x.npz", "--out must hold {sigma} when several --sigma"),
        ("--sigma 1 --sigma 1 --out x{sigma}.npz", "--sigma values must be distinct"),
        ("--sigma 1 --sigma nan --out x{sigma}.npz", "--sigma must be a finite number > 0"),
        ("--sigma 1 --sigma 2 --out x{sigma}.txt", "ending in .npz"),
        ("--sigma 1 --sigma 2 --out adir/x{sigma}.npz --model foo", "--model"),
    ],
)
def test_landscape_build_family_checks_every_member_before_training(tmp_path, monkeypatch, capsys, extra: str,
                                                                    message: str) -> None:
    monkeypatch.chdir(tmp_path)
    assert run(["landscape", "build", *extra.split()]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert list(tmp_path.iterdir()) == []  # nothing written: no checkpoint, no member


# ------------------------------------------------------------------------------------------------ top-set
TOP_C = GPTopSet(C=2.0, top_mass=0.05).c  # c = (1 − C·p)/(1 − p) = 0.947…
FAMILY = [str(LANDSCAPES / f"digits_mlp_sigma{s}.npz") for s in ("1.45", "1.7673", "2.1")]


def test_top_set_arm_on_a_synthetic_landscape_fixed_T(capsys) -> None:
    argv = ("simulate --landscape synthetic:smooth --strategy uniform --strategy top-set --fixed-T 3 --repeats 3 "
            "--workers 1 --json")
    payload = _json(capsys, argv)
    uniform, top = payload["results"]
    assert (top["arm"], top["strategy"]) == ("top-set", "gp-top-set")
    assert (uniform["C"], uniform["c"], top["C"], top["c"]) == (1.0, 1.0, 2.0, TOP_C)
    assert (payload["C"], payload["c"], payload["top_mass"], payload["tolerance"]) == (2.0, TOP_C, 0.05, 0.5)
    assert top["epsilon"] is None and top["epsilon_note"] == FIXED_T_NOTE
    # the cell is the simulation of exactly that strategy object, projected onto exactly its bounds
    direct = simulate(synthetic_landscape("smooth"), [GPTopSet(C=2.0, top_mass=0.05, tolerance=0.5)], repeats=3,
                      T=3, C=2.0, c=TOP_C, seed=0, workers=1)[0]
    assert top["mean"] == direct.mean
    # --C, --top-mass and --tolerance reach the rule; c follows from them
    payload = _json(capsys, argv.replace("--fixed-T 3", "--fixed-T 3 --C 1.5 --top-mass 0.1 --tolerance 0.2"))
    top = payload["results"][1]
    assert (top["C"], top["c"]) == (1.5, lower_bound_for_top_mass(1.5, 0.1))
    config = payload["study"]["arms"][1]["config"]
    assert (config["C"], config["top_mass"], config["tolerance"]) == (1.5, 0.1, 0.2)


def test_top_set_and_gp_rows_of_the_table2_sweep(capsys) -> None:
    """Each row gives its C to both adaptive arms: gp takes c = 1/C, top-set derives its own c from C."""
    payload = _json(capsys, f"simulate --landscape {DIGITS_UNIFORM} --strategy gp --strategy top-set --runs geometric "
                            "--gamma 0.5 --sweep table2 --repeats 2 --workers 1 --json")
    land = load_landscape(DIGITS_UNIFORM)
    setting = Setting("x", run_count=geometric(0.5))
    gp = [c for c in payload["results"] if c["arm"] == "gp"]
    top = [c for c in payload["results"] if c["arm"] == "top-set"]
    assert [(c["C"], c["c"]) for c in gp] == [(C, 1 / C) for C in TABLE2_UPPER_BOUNDS]
    assert [(c["C"], c["c"]) for c in top] == [(C, lower_bound_for_top_mass(C, 0.05)) for C in TABLE2_UPPER_BOUNDS]
    for cell in gp + top:
        assert cell["epsilon"] == arm_epsilon(land, setting, cell["C"], cell["c"], 1e-5)[0]
    assert all(t["epsilon"] < g["epsilon"] for t, g in zip(top, gp, strict=True))  # smaller log(C/c)
    # with only top-set arms the rows carry C alone (no c to mislabel them)
    payload = _json(capsys, "simulate --landscape synthetic:smooth --strategy top-set --runs geometric --gamma 0.5 "
                            "--bounds 1.5 --bounds 4 --top-mass 0.2 --repeats 2 --workers 1 --json")
    assert [(c["setting"], c["C"], c["c"]) for c in payload["results"]] == [
        ("C=1.5", 1.5, lower_bound_for_top_mass(1.5, 0.2)), ("C=4", 4.0, lower_bound_for_top_mass(4.0, 0.2))]
    assert (payload["C"], payload["c"]) == (None, None)


def test_top_set_at_equal_epsilon_on_the_digits_family(capsys) -> None:
    """ε = 8, E[T] = 20: the top-set arm is calibrated, simulated and accounted with C = 2 and its derived c."""
    members = " ".join(f"--landscape {p}" for p in FAMILY)
    payload = _json(capsys, f"simulate {members} --epsilon 8 --mean 20 --runs geometric --strategy gp "
                            "--strategy top-set --repeats 2 --workers 1 --json --adaptive-theorem A "
                            "--data-split permutation")
    gp, top = payload["results"]
    assert (gp["C"], gp["c"], top["C"], top["c"]) == (2.0, 0.75, 2.0, TOP_C)
    family = load_family(FAMILY)
    runs = make_run_count("geometric", mean=20.0)
    mechanism = dataclasses.replace(metadata_mechanism(family.mechanism_metadata), sigma=top["sigma"])
    expected = account(mechanism.rdp(), RepeatAndSelect(runs, 2.0, TOP_C), 1e-5, adaptive_theorem="A").epsilon
    assert top["epsilon"] == pytest.approx(expected, abs=1e-9) and 8.0 - 2e-3 <= top["epsilon"] <= 8.0
    assert top["sigma"] == arm_calibration(8.0, 1e-5, runs, 2.0, TOP_C, family.mechanism_metadata,
                                           adaptive_theorem="A").sigma
    assert top["sigma"] == pytest.approx(1.5678, abs=2e-4) and top["sigma"] < gp["sigma"]  # derived c: less noise


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ("--strategy uniform --strategy top-set --c 0.8", "--c is not used by --strategy top-set"),
        ("--strategy top-set --bounds 1.5:0.6", "--bounds takes C alone for --strategy top-set"),
        ("--strategy top-set --strategy gp --bounds 1.5", "bounds must look like C:c"),
        ("--strategy top-set --C 25", "--top-mass must be in (0, 1/C) = (0, 0.04), got 0.05"),
        ("--strategy top-set --bounds 1.5 --bounds 30", "arm 'top-set' (gp-top-set) in setting 'C=30'"),
        ("--strategy top-set --tolerance -1", "--tolerance must be a finite number >= 0"),
        ("--strategy tpe", "--strategy must be one of 'uniform', 'gp', 'top-set'"),
    ],
)
def test_top_set_refusals_are_one_line(capsys, argv: str, message: str) -> None:
    base = "simulate --landscape synthetic:smooth --runs geometric --gamma 0.5 --repeats 2 --workers 1 "
    assert run((base + argv).split()) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_gp_with_top_set_keeps_the_explicit_c(capsys) -> None:
    payload = _json(capsys, "simulate --landscape synthetic:smooth --strategy gp --strategy top-set --fixed-T 2 "
                            "--c 0.8 --repeats 2 --workers 1 --json")
    assert [(c["C"], c["c"]) for c in payload["results"]] == [(2.0, 0.8), (2.0, TOP_C)]


def test_equal_epsilon_accounts_with_theorem_b_by_default(capsys) -> None:
    """Without --adaptive-theorem every arm is calibrated under Theorem B (the library default), and says so."""
    family = f"--landscape {DIGITS_LOW} --landscape {DIGITS_UNIFORM} --landscape {DIGITS_GP}"
    default = EQUAL.replace(" --adaptive-theorem A", "")
    payload = _json(capsys, f"simulate {family} {default} --repeats 2 --json")
    uniform, gp = payload["results"]
    assert payload["study"]["adaptive_theorem"] == "B"
    # B at C = c = 1 is a tighter uniform RDP bound than Papernot-Steinke's, and B beats A for C > c: less noise
    assert uniform["sigma"] == pytest.approx(1.0888, abs=2e-4) and gp["sigma"] == pytest.approx(1.3947, abs=2e-4)
    assert all(8.0 - 2e-3 <= cell["epsilon"] <= 8.0 for cell in (uniform, gp))


def test_equal_epsilon_calibrates_as_tune_does_per_record_by_default(capsys) -> None:
    """Without --data-split every arm is calibrated as ``dphypo tune`` runs it (a per-record split: Theorem S)."""
    family = f"--landscape {DIGITS_LOW} --landscape {DIGITS_UNIFORM} --landscape {DIGITS_GP}"
    default = EQUAL.replace(" --adaptive-theorem A", "").replace(" --data-split permutation", "")
    payload = _json(capsys, f"simulate {family} {default} --repeats 2 --json")
    summed = _json(capsys, f"simulate {family} {default} --data-split permutation --repeats 2 --json")
    assert payload["study"]["data_split"] == "per-record" and summed["study"]["data_split"] == "permutation"
    for split, sum_ in zip(payload["results"], summed["results"], strict=True):
        assert split["sigma"] < sum_["sigma"] and 8.0 - 2e-3 <= split["epsilon"] <= 8.0  # accounted by Theorem S
    assert run(["simulate", "--landscape", "synthetic:smooth", "--strategy", "uniform", "--fixed-T", "2",
                "--data-split", "per-record"]) == 2
    assert "--data-split sets how σ is calibrated: it needs --epsilon" in capsys.readouterr().err


def _simulate_args(**changes: object):
    """``dphypo simulate``'s options at their defaults (read from the command), with ``changes``."""
    import inspect

    from dphypo.cli.simulate import SimulateArgs, simulate_command

    defaults = {name: p.default for name, p in inspect.signature(simulate_command).parameters.items()}
    return SimulateArgs(**{**defaults, **changes})


def test_simulate_builds_the_study_config_its_options_describe() -> None:
    from dphypo.cli.simulate import build_study

    args = _simulate_args(landscape=["synthetic:smooth"], strategy=["uniform", "gp"], runs="geometric",
                          gamma=[0.1, 0.2], bounds=["1.5:0.6667"], repeats=8, seed=4, tau=0.2, workers=1)
    study = build_study(args)
    config = study.config
    assert (config.name, config.repeats, config.seed, config.delta, config.engine, config.epsilon) == (
        "black-box", 8, 4, 1e-5, "batched", None)
    assert [arm.label for arm in config.arms] == ["uniform", "gp"]
    assert config.arms[1].strategy.tau == 0.2 and config.arms[1].landscape_name == "synthetic:smooth"
    assert [setting.label for setting in config.settings] == ["γ=0.1", "γ=0.2"]
    assert {(s.C, s.c) for s in config.settings} == {(1.5, 0.6667)}
    assert study.pairs == [(1.5, 0.6667)] and study.family is None and study.landscapes is None


def test_simulate_refuses_bad_options_before_reading_a_landscape(tmp_path) -> None:
    from dphypo.cli.simulate import build_study

    missing = str(tmp_path / "missing.npz")
    with pytest.raises(ValueError, match="seed must be a non-negative integer, got -1"):
        build_study(_simulate_args(landscape=[missing], strategy=["uniform"], fixed_T="5", seed=-1))
    with pytest.raises(ValueError, match="strategy must be one of"):
        build_study(_simulate_args(landscape=[missing], strategy=["uniform", "bayes"], fixed_T="5"))
    with pytest.raises(ValueError, match=r"missing\.npz"):  # the options are fine: now the file is read
        build_study(_simulate_args(landscape=[missing], strategy=["uniform"], fixed_T="5"))


def test_simulate_one_two_stage_design_at_equal_epsilon(capsys) -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "landscapes"
    family = [arg for s in ("1.0", "1.2226", "1.45", "1.7673", "2.1", "2.9")
              for arg in ("--landscape", str(root / f"digits_mlp_sigma{s}.npz"))]
    argv = ["simulate", *family, "--epsilon", "8", "--design", "two-stage", "--probes", "10", "--probe-mode",
            "release", "--split", "0.7", "--repeats", "50", "--json"]
    assert run(argv) == 0
    payload = json.loads(capsys.readouterr().out)
    # tune's calibration (issue #31), under tune's default per-record split (Theorem S, issue #32)
    assert 7.99 <= payload["epsilon"] <= 8.0 and payload["method"] == "train:pld"
    assert payload["bound"].startswith("Theorem S")
    assert payload["probe_sigma"] > payload["final_sigma"] and payload["expected_runs"] == [10.0, 1.0]
    assert payload["design"]["label"] == "release 10 probes -> 1 final run, split 0.7"
    assert payload["ci95"][0] <= payload["mean"] <= payload["ci95"][1]
    for extra, message in ((["--strategy", "gp"], "--strategy is for --design single"),
                           (["--probe-mode", "select", "--top-k", "3"], "--top-k needs --probe-mode release"),
                           (["--split", "1"], "leaves a stage nothing"),
                           (["--probe-mode", "mixed"], "--probe-mode must be one of select, release"),
                           (["--probe-score-noise-accuracy", "0"], "--probe-score-noise-accuracy must be > 0")):
        assert run([*argv, *extra]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1
    assert run(["simulate", *family, "--design", "two-stage"]) == 2
    assert "needs --epsilon" in capsys.readouterr().err
    assert run(["simulate", *family, "--strategy", "uniform", "--epsilon", "8", "--probes", "5"]) == 2
    assert "--probes is for --design two-stage" in capsys.readouterr().err
    assert run(["simulate", *family, "--epsilon", "8"]) == 2
    assert "--strategy is required with --design single" in capsys.readouterr().err


def test_simulate_two_stage_arms_with_cheap_probes_report_paired_differences_against_uniform(capsys) -> None:
    root = Path(__file__).resolve().parents[2] / "landscapes"
    family = [arg for s in ("0.7", "1.0", "1.45") for arg in ("--landscape", str(root / f"digits_mlp_sigma{s}.npz"))]
    probes = [arg for s in ("1.0", "1.45", "2.1") for arg in
              ("--probe-landscape", str(root / "multifidelity" / f"digits_mlp_epochs2_sigma{s}.npz"))]
    argv = ["simulate", *family, *probes, "--epsilon", "8", "--design", "two-stage", "--probes", "10",
            "--probe-strategy", "gp", "--recommend", "gp-mean", "--repeats", "8", "--json"]
    assert run(argv) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["design"]["probe_mode"] == "release"  # what dphypo tune runs
    assert payload["probe_landscape"] == probes[1::2] and payload["baseline"] == "uniform + best-probe"
    assert [arm["label"] for arm in payload["arms"]] == ["uniform + best-probe", "gp-log-nei + gp-mean"]
    base, gp = payload["arms"]
    assert base["difference_vs_uniform"] is None and base["mean"] == payload["mean"]
    difference = gp["difference_vs_uniform"]
    assert difference["ci95"][0] <= difference["mean"] <= difference["ci95"][1]
    assert gp["placement"]["acquisition"] == "log-nei" and gp["recommendation"] == {"rule": "gp-mean"}
    # 2-epoch probes are cheaper than 10-epoch ones at the same total: their σ is below a full-fidelity probe's
    assert payload["probe_sigma"] < 2.5
    for extra, message in ((["--probe-strategy", "tpe"], "--probe-strategy must be one of uniform, gp"),
                           (["--recommend", "median"], "--recommend must be one of best-probe, gp-mean"),
                           (["--runs", "negbin"], "--runs must be geometric with --design two-stage"),
                           (["--probe-mode", "select"], "--probe-strategy and --recommend need --probe-mode release")):
        assert run([*argv, *extra]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1
    assert run(["simulate", *family, "--epsilon", "8", "--strategy", "uniform", "--recommend", "gp-mean"]) == 2
    assert "--recommend is for --design two-stage" in capsys.readouterr().err
