"""The CLI forms the accounting issue promises, their JSON, and one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dphypo.cli import run

ACCOUNT_FORMS = [
    "account --sigma 0.71 --sample-rate 0.0042667 --steps 2344 --runs geometric --gamma 0.01 --C 2 --c 0.75 "
    "--delta 1e-5",
    "account --sigma 1.0 --sample-rate 0.0042667 --steps 2340 --runs negbin --theta 0.5 --mean 10 --C 1 --c 1 "
    "--delta 1e-5",
    "account --sigma 1.0 --sample-rate 0.0042667 --steps 2340 --runs poisson --mean 10 --delta 1e-5",
    "account --pure-epsilon 1.0 --runs negbin --theta 0.5 --gamma 0.05 --C 1.5 --c 0.8",
]
CALIBRATE = (
    "calibrate --epsilon 8 --delta 1e-5 --sample-rate 0.0042667 --steps 2344 --runs geometric --gamma 0.01 "
    "--C 2 --c 0.75"
)


def _json(capsys, argv: str) -> dict:
    assert run([*argv.split(), "--json"]) == 0
    out = capsys.readouterr().out
    return json.loads(out)


@pytest.mark.parametrize("argv", ACCOUNT_FORMS)
def test_account_forms_print_a_table_and_json(capsys, argv: str) -> None:
    assert run(argv.split()) == 0
    table = capsys.readouterr().out
    assert "total ε" in table and "theorem" in table
    payload = _json(capsys, argv)
    for key in ("epsilon", "delta", "base_epsilon", "order", "order_hat", "expected_runs"):
        assert key in payload
    assert payload["epsilon"] > payload["base_epsilon"] > 0


def test_account_values(capsys) -> None:
    adaptive, tnb, poisson, pure = (_json(capsys, a) for a in ACCOUNT_FORMS)
    # C > c: the proven Theorem B (docs/proofs/adaptive.md, default), 9.275; Theorem A (10.929) and the published
    # Theorem 1 (11.151) are opt-in.
    assert adaptive["epsilon"] == pytest.approx(9.2747, abs=1e-3)
    assert adaptive["method"] == "rdp-theorem-b" and set(adaptive["methods"]) == {"rdp-theorem-b"}  # no profile
    assert adaptive["theorem"].startswith("Theorem B (docs/proofs/adaptive.md")
    assert adaptive["breakdown"]["adaptivity"] > 0
    # RDP values match dp_accounting's RepeatAndSelectDpEvent; the reported ε is the smallest valid bound.
    assert tnb["methods"]["rdp"] == pytest.approx(2.5436, rel=1e-3)
    assert poisson["methods"]["rdp"] == pytest.approx(2.7507, rel=1e-3)
    for payload in (tnb, poisson):
        assert payload["epsilon"] == min(payload["methods"].values())
        assert payload["methods"][payload["method"]] == payload["epsilon"]
    # TNB: Theorem B at C = c = 1 (2.012) beats the profile bound (2.032) and Papernot-Steinke (2.544) here
    assert tnb["method"] == "rdp-theorem-b" and tnb["epsilon"] < tnb["methods"]["profile-tnb"] < tnb["methods"]["rdp"]
    assert "rdp-theorem-b" not in poisson["methods"]  # Theorem B is proven for TNB T only
    # Theorem A-infinity: 1 + log(C/c) + 1.5 log((γ + (1−γ)C)/(γ + (1−γ)c/e)) = 3.8765 (published Thm 2: 4.0715)
    assert pure["epsilon"] == pytest.approx(3.876461770178514, rel=1e-9)
    assert pure["delta"] == 0.0 and pure["theorem"].startswith("Theorem A-infinity")
    assert pure["method"] == "pure-dp-theorem-a" and pure["methods"] == {"pure-dp-theorem-a": pure["epsilon"]}


def test_account_theorem_a_and_the_published_theorem_are_opt_in(capsys) -> None:
    adaptive = _json(capsys, ACCOUNT_FORMS[0] + " --adaptive-theorem published")
    assert adaptive["epsilon"] == pytest.approx(11.15, abs=0.01)  # DP-HyPO Theorem 1 as printed
    assert adaptive["method"] == "rdp-published-thm1" and "known gap" in adaptive["theorem"]
    pure = _json(capsys, ACCOUNT_FORMS[3] + " --adaptive-theorem published")
    assert pure["epsilon"] == pytest.approx(2.5 * (1 + 0.6286086594223742), rel=1e-9)
    closed_form = _json(capsys, ACCOUNT_FORMS[0] + " --adaptive-theorem A")
    assert closed_form["method"] == "rdp-theorem-a" and closed_form["epsilon"] == pytest.approx(10.929, abs=0.01)
    assert run([*ACCOUNT_FORMS[0].split(), "--adaptive-theorem", "paper"]) == 2
    assert "--adaptive-theorem must be one of" in capsys.readouterr().err


def test_binomial_runs_are_uniform_only(capsys) -> None:
    argv = "account --sigma 1 --sample-rate 0.0042667 --steps 2340 --runs binomial --max-runs 20 --mean 10"
    payload = _json(capsys, argv)
    assert payload["method"] == "profile-binomial" and payload["n"] == 20
    assert run([*argv.split(), "--C", "2", "--c", "0.75"]) == 2
    assert "binomial" in capsys.readouterr().err


def test_calibrate(capsys) -> None:
    payload = _json(capsys, CALIBRATE)
    assert payload["epsilon"] <= 8.0
    assert payload["sigma"] == pytest.approx(0.7658, rel=1e-3)  # Theorem B (Theorem A: 0.8506, published: 0.8606)
    assert run(CALIBRATE.split()) == 0
    assert "σ" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        ("account --pure-epsilon 1 --runs geometric --gamma 0.1 --c 1.5", "c"),
        ("account --pure-epsilon 1 --runs geometric --gamma 0.1 --C 0.5", "C"),
        ("account --pure-epsilon 1 --runs geometric --gamma 0.1 --c 0", "c"),
        ("account --pure-epsilon 1 --runs geometric --gamma 1.2", "gamma"),
        ("account --pure-epsilon 1 --runs negbin --theta -1 --gamma 0.1", "theta"),
        ("account --pure-epsilon 1 --runs negbin --theta 0.5 --mean 0.5", "mean"),
        ("account --sigma 1 --sample-rate 0.01 --steps 10 --runs geometric --gamma 0.1 --delta 2", "delta"),
        ("account --sigma 0 --sample-rate 0.01 --steps 10 --runs geometric --gamma 0.1", "sigma"),
        ("account --sigma 1 --sample-rate 1.5 --steps 10 --runs geometric --gamma 0.1", "--sample-rate"),
        ("account --sigma 1 --sample-rate 0.01 --steps 0 --runs geometric --gamma 0.1", "steps"),
        (
            "account --sigma 1 --sample-rate 0.01 --steps 10 --runs poisson --mean 10 --C 2 --c 0.75",
            "Poisson",
        ),
        (
            "calibrate --epsilon 0.5 --sample-rate 0.0042667 --steps 2344 --runs geometric --gamma 0.01 --C 2 --c 0.75",
            "unreachable",
        ),
        ("account --sigma 1 --runs geometric --gamma 0.1", "--sample-rate"),
    ],
)
def test_invalid_input_is_one_line_naming_the_parameter(capsys, argv: str, name: str) -> None:
    assert run(argv.split()) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err
    assert name in err
    assert "Traceback" not in err


def test_console_entry_point_has_no_traceback() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "dphypo",
            "account",
            "--runs",
            "poisson",
            "--mean",
            "10",
            "--C",
            "2",
            "--c",
            "0.5",
            "--pure-epsilon",
            "1",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


# ----------------------------------------------------------------------------------- issue #12: new-user defects
def test_dphypo_alone_prints_the_help_cleanly(capsys) -> None:
    assert run([]) == 0
    captured = capsys.readouterr()
    assert "Usage: dphypo" in captured.out and "error" not in captured.err


def test_help_lists_commands_in_workflow_order_without_bool_placeholders(capsys) -> None:
    assert run(["--help"]) == 0
    out = capsys.readouterr().out
    order = ["tune", "release", "account", "calibrate", "landscape", "simulate", "plot"]
    positions = [out.index(f"│ {name} ") for name in order]
    assert positions == sorted(positions)
    for command in ([], ["tune"], ["account"], ["simulate"], ["landscape"]):
        assert run([*command, "--help"]) == 0
        assert "<bool>" not in capsys.readouterr().out


def test_piped_tables_are_never_cut(capsys) -> None:
    # Not a terminal (capsys, a pipe): every cell in full, however long, no "…".
    argv = "account --sigma 0.71 --sample-rate 0.0042667 --steps 2344 --runs geometric --gamma 0.01 --C 2 --c 0.75"
    assert run(argv.split()) == 0
    out = capsys.readouterr().out
    assert "…" not in out and "DP-SGD(sigma=0.71, q=0.0042667, steps=2344)" in out
    argv = "simulate --landscape synthetic:ridge --strategy uniform --fixed-T 2 --repeats 4 --executor sequential"
    assert run(argv.split()) == 0
    out = capsys.readouterr().out
    assert "…" not in out and "synthetic:ridge" in out and "uniform" in out


def test_piped_subprocess_output_is_not_cut() -> None:
    argv = "account --sigma 0.71 --sample-rate 0.0042667 --steps 2344 --runs geometric --gamma 0.01 --C 2 --c 0.75"
    proc = subprocess.run([sys.executable, "-m", "dphypo", *argv.split()], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": ""})
    assert proc.returncode == 0, proc.stderr
    assert "…" not in proc.stdout and "C = 2, c = 0.75" in proc.stdout


def test_account_and_calibrate_default_to_tunes_uniform_search(capsys) -> None:
    # dphypo tune searches uniformly by default; account/calibrate describe that same search unless told --C/--c.
    base = "--sigma 1 --sample-rate 0.0042667 --steps 2340"
    default = _json(capsys, f"account {base} --runs geometric --mean 10")
    assert (default["C"], default["c"]) == (1.0, 1.0)
    assert default["epsilon"] == _json(capsys, f"account {base} --runs geometric --mean 10 --C 1 --c 1")["epsilon"]
    calibrated = _json(capsys, "calibrate --epsilon 8 --sample-rate 0.0042667 --steps 2344 --runs geometric "
                               "--gamma 0.01")
    assert (calibrated["C"], calibrated["c"]) == (1.0, 1.0)
    assert calibrated["sigma"] < _json(capsys, CALIBRATE)["sigma"]  # the adaptive search needs more noise


def test_tune_account_and_calibrate_print_one_number(tmp_path, capsys) -> None:
    # tune releases each run's score through a Gaussian: account and calibrate account the same run when told
    # the score noise, so all three agree to the last digit (they used to print 7.925 beside tune's 7.999).
    argv = "tune --epochs 2 --lr-grid 0.3,1 --clip-grid 1,2 --mean 3 --seed 1 --json --out".split()
    assert run([*argv, str(tmp_path)]) == 0
    tuned = json.loads(capsys.readouterr().out)["privacy"]
    run_args = f"--sample-rate {tuned['sample_rate']!r} --steps {tuned['steps']} --runs geometric --mean 3"
    # tune's default split is per-record (Theorem S): account and calibrate are told so (their default is the sum)
    score = "--score-noise-accuracy 0.02 --n-val 359 --data-split per-record"
    calibrated = _json(capsys, f"calibrate --epsilon 8 {run_args} {score}")
    assert calibrated["sigma"] == tuned["sigma"] and calibrated["epsilon"] == tuned["epsilon"]
    accounted = _json(capsys, f"account --sigma {tuned['sigma']!r} {run_args} {score}")
    assert accounted["epsilon"] == tuned["epsilon"] and accounted["method"] == tuned["method"]
    counts = _json(capsys, f"account --sigma {tuned['sigma']!r} {run_args} --score-noise {0.02 * 359!r} "
                           "--data-split per-record")
    assert counts["epsilon"] == tuned["epsilon"]
    without = _json(capsys, f"account --sigma {tuned['sigma']!r} {run_args}")
    summed = _json(capsys, f"account --sigma {tuned['sigma']!r} {run_args} --score-noise {0.02 * 359!r}")
    assert without["epsilon"] < summed["epsilon"]  # charged as a sum, the score release costs something ...
    assert without["epsilon"] == tuned["epsilon"]  # ... under Theorem S the training side is the worse one here


def test_calibrate_takes_the_adaptive_theorem_and_max_lost_like_account(capsys) -> None:
    args = "--sample-rate 0.0042667 --steps 2344 --runs geometric --gamma 0.01 --C 2 --c 0.75"
    for theorem in ("A", "published"):
        calibrated = _json(capsys, f"calibrate --epsilon 10 {args} --adaptive-theorem {theorem}")
        accounted = _json(capsys, f"account --sigma {calibrated['sigma']!r} {args} --adaptive-theorem {theorem}")
        assert accounted["epsilon"] == calibrated["epsilon"] <= 10
        assert accounted["method"] == calibrated["method"]
    charged = _json(capsys, f"calibrate --epsilon 10 {args} --max-lost 1")
    assert charged["charged_runs"] == 1 and charged["sigma"] > _json(capsys, f"calibrate --epsilon 10 {args}")["sigma"]


def test_a_charged_release_names_and_breaks_down_the_bound_it_used(capsys) -> None:
    # With --max-lost 1 the bound used may be RDP while the uncharged search's best was a profile: the report must
    # name the one used, and its breakdown must add up to its total (it used to subtract two different bounds).
    for sigma in ("0.9", "3"):
        payload = _json(capsys, f"account --sigma {sigma} --sample-rate 0.0588 --steps 17 --runs geometric --mean 20 "
                                "--score-noise 7.18 --max-lost 1")
        parts = payload["breakdown"]
        total = parts["one_run"] + parts["repetition"] + parts["adaptivity"] + parts["charged_runs"]
        assert total == pytest.approx(payload["epsilon"], rel=1e-12)
        assert payload["method"] == min(payload["methods"], key=payload["methods"].get)
        if payload["method"].startswith("rdp"):
            assert payload["theorem"].startswith(("Theorem B", "Papernot-Steinke", "DP-HyPO Theorem 1"))
            assert "composed in RDP" in payload["theorem"]
        else:
            assert payload["method"].endswith("+basic") and "basic composition" in payload["theorem"]


def test_account_builds_no_privacy_profile_for_an_adaptive_search(capsys, monkeypatch) -> None:
    def no_profile(*args, **kwargs):
        raise AssertionError("a PLD was built for an adaptive search, where no profile bound is proven")

    monkeypatch.setattr("dphypo.cli.privacy.dpsgd_run_profile_or_skip", no_profile)
    payload = _json(capsys, "account --sigma 0.71 --sample-rate 0.0042667 --steps 2344 --runs geometric --gamma 0.01 "
                            "--C 2 --c 0.75")
    assert payload["epsilon"] > 0


def test_empty_landscape_file_is_an_error_not_an_abort(tmp_path, capsys) -> None:
    empty = tmp_path / "empty.npz"
    empty.write_bytes(b"")
    argv = ["simulate", "--landscape", str(empty), "--strategy", "uniform", "--fixed-T", "2"]
    assert run(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "empty" in err and "aborted" not in err and err.count("\n") == 1


def test_option_names_translate_only_clause_subjects() -> None:
    from dphypo.cli.common import _rename

    names = {"n": "--max-runs", "gamma": "--gamma", "mean": "--mean", "C": "--C", "c": "--c"}
    assert _rename("n must be an integer >= 1, got 0", names) == "--max-runs must be an integer >= 1, got 0"
    assert _rename("give exactly one of gamma or mean for geometric runs", names) == (
        "give exactly one of --gamma or --mean for geometric runs"
    )
    assert _rename("an adaptive search (C=2 > c=1)", names) == "an adaptive search (--C=2 > --c=1)"
    for untouched in ("batch_size must be <= n_train=5", "S_C,c is empty", "got 'n'", "mean true value"):
        assert _rename(untouched, names) == untouched


def test_landscape_build_writes_the_npz_and_keeps_stdout_for_the_result(tmp_path, capsys) -> None:
    out = tmp_path / "tiny.npz"
    argv = ["landscape", "build", "--out", str(out), "--lr-grid", "0.1,1", "--clip-grid", "1,2", "--seeds", "1",
            "--epochs", "1", "--workers", "1"]
    assert run(argv) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith(f"wrote {out}") and captured.out.count("\n") == 1
    assert out.is_file() and not (tmp_path / "tiny.npz.partial.jsonl").exists()


def test_an_eof_inside_a_command_is_not_reported_as_ctrl_c(monkeypatch, capsys) -> None:
    # click turns any EOFError raised inside a command into Abort, like Ctrl-C; only a real interrupt is "aborted".
    import dphypo.simulation.synthetic

    def truncated(spec):
        raise EOFError("No data left in file")

    monkeypatch.setattr(dphypo.simulation.synthetic, "resolve_landscape", truncated)
    argv = "simulate --landscape x.npz --strategy uniform --fixed-T 2 --executor sequential"
    assert run(argv.split()) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unexpected end of input") and "aborted" not in err and err.count("\n") == 1


# -- issue #20: what a user sees -----------------------------------------------------------------------------------
def test_usage_lines_name_arguments_plainly_and_help_has_no_docstring_markup(capsys) -> None:
    for command, argument in (("release", "JOURNAL"), ("plot", "KIND"), ("landscape", "ACTION")):
        assert run([command, "--help"]) == 0
        text = capsys.readouterr().out
        assert f"[OPTIONS] {argument}" in text and "{" + argument not in text
        assert ":mod:" not in text and ":func:" not in text and "``" not in text


def test_plan_exits_non_zero_when_no_candidate_can_run(capsys) -> None:
    root = Path(__file__).resolve().parents[2] / "landscapes"
    family = [f"--landscape={root / name}" for name in ("digits_mlp_sigma1.0.npz", "digits_mlp_sigma1.7673.npz")]
    # one E[T] (default 10, 20 and 50): every candidate is calibrated at ε = 0.01 before it is refused
    status = run(["plan", *family, "--epsilon", "0.01", "--mean", "10", "--repeats", "2", "--workers", "1"])
    assert status == 2  # one line, no table of unreachable rows (issue #30 item 7)
    captured = capsys.readouterr()
    assert "no design reaches total ε = 0.01" in captured.err and "No candidate can run" not in captured.out


def test_an_interrupted_search_says_what_was_charged_and_how_to_resume(tmp_path) -> None:
    from dphypo.cli.tune import interrupted_message
    from dphypo.search.storage import SQLiteJournal

    assert "no --journal" in interrupted_message(None, 0)
    path = tmp_path / "j.db"
    with SQLiteJournal.open(path) as journal:
        journal.seal({"seed": 1}, 5)
        journal.start_attempt(0, 0, {})  # in flight when Ctrl-C arrived: the loop charges it as an error
        journal.finish_attempt(1, "error", note="stopped: KeyboardInterrupt")
    covered = interrupted_message(str(path), 1)
    assert "1 lost attempt(s)" in covered and f"--journal {path}" in covered and "resume" in covered
    refused = interrupted_message(str(path), 0)
    assert "cannot be resumed" in refused and "new journal" in refused


def test_ctrl_c_during_tune_exits_130_with_the_explanation(tmp_path, capsys, monkeypatch) -> None:
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("dphypo.api.tune", interrupted)
    monkeypatch.setattr("dphypo.api.tune_two_stage", interrupted)  # the default design
    assert run(["tune", "--epochs", "1", "--out", str(tmp_path / "out")]) == 130
    assert run(["tune", "--design", "single", "--epochs", "1", "--out", str(tmp_path / "out")]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("interrupted:") and "no --journal" in err[-1]


def test_landscape_build_defaults_to_tunes_score_noise_and_replaces_a_file_only_with_force(tmp_path, capsys,
                                                                                         monkeypatch) -> None:
    from dphypo.simulation.synthetic import synthetic_landscape

    built: list = []

    def fake_build(spec, path, **kwargs):
        built.append(spec)
        return synthetic_landscape("smooth")

    monkeypatch.setattr("dphypo.simulation.builder.build_landscape", fake_build)
    out = tmp_path / "member.npz"
    assert run(["landscape", "build", "--out", str(out)]) == 0
    # tune's --score-noise-accuracy default: a family built with the defaults is one `simulate --epsilon` can use
    assert built[-1].score_noise == 0.02
    out.write_bytes(b"an earlier build")
    assert run(["landscape", "build", "--out", str(out)]) == 2
    assert "--force" in capsys.readouterr().err and out.read_bytes() == b"an earlier build"
    assert run(["landscape", "build", "--out", str(out), "--force"]) == 0 and len(built) == 2


def test_simulated_search_counts_add_up_to_the_progress_total() -> None:
    from dphypo.simulation.studies import ArmSpec, StudyConfig, fixed_T_settings, run_study, study_searches
    from dphypo.strategies import GPUCB, Uniform

    arms = (ArmSpec("uniform", Uniform(), "synthetic:smooth"), ArmSpec("gp", GPUCB(), "synthetic:smooth"))
    config = StudyConfig(name="fixed-T", settings=fixed_T_settings((2, 3), 2.0, 0.75), arms=arms, repeats=6,
                         seed=0, workers=1)
    counts: list[int] = []
    run_study(config, executor="sequential", searches_done=counts.append)
    assert sum(counts) == study_searches(config) == 24 and all(n > 0 for n in counts)


# -- parameter objects: each command collects its options into one frozen dataclass ---------------------------------
def test_every_commands_parsed_options_mirror_its_parameters() -> None:
    import dataclasses
    import inspect

    from dphypo.cli.plot import PlotArgs, plot_command
    from dphypo.cli.search import tune_command
    from dphypo.cli.simulate import SimulateArgs, simulate_command
    from dphypo.cli.tune import TuneArgs

    for parsed, command in ((TuneArgs, tune_command), (SimulateArgs, simulate_command), (PlotArgs, plot_command)):
        assert [f.name for f in dataclasses.fields(parsed)] == list(inspect.signature(command).parameters)
        assert parsed.__dataclass_params__.frozen


def test_landscape_build_checks_one_spec_per_sigma_before_any_training(tmp_path) -> None:
    import dataclasses

    from dphypo.cli.search import LandscapeArgs, landscape_specs
    from dphypo.train.models import default_model

    pattern = str(tmp_path / "digits_sigma{sigma}.npz")
    args = LandscapeArgs(dataset="digits", data_dir=None, model=None, lr_grid="0.3,1", clip_grid="0.5,1",
                         sigmas=(1.0, 2.5), epochs=1, batch_size=32, seeds=2, score_noise=0.02, workers=1,
                         out=pattern, force=False)
    specs = landscape_specs(args)
    assert [(spec.sigma, path) for spec, path in specs] == [
        (1.0, str(tmp_path / "digits_sigma1.0.npz")), (2.5, str(tmp_path / "digits_sigma2.5.npz"))]
    assert {(spec.model, spec.lr_grid, spec.clip_grid, spec.seeds) for spec, _ in specs} == {
        (default_model("digits"), (0.3, 1.0), (0.5, 1.0), 2)}
    assert list(tmp_path.iterdir()) == []  # checked, nothing written
    (tmp_path / "digits_sigma2.5.npz").write_bytes(b"an earlier member")
    with pytest.raises(ValueError, match=r"digits_sigma2\.5\.npz' already exists; pass --force"):
        landscape_specs(args)
    with pytest.raises(ValueError, match="--sigma values must be distinct"):
        landscape_specs(dataclasses.replace(args, sigmas=(1.0, 1.0)))
