"""The CLI forms the accounting issue promises, their JSON, and one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

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
    # C > c: the proven Theorem A (docs/proofs/adaptive.md), 10.929; the published Theorem 1 (11.151) is opt-in.
    assert adaptive["epsilon"] == pytest.approx(10.929, abs=0.01)
    assert adaptive["method"] == "rdp-theorem-a" and set(adaptive["methods"]) == {"rdp-theorem-a"}  # no profile
    assert adaptive["theorem"].startswith("Theorem A (docs/proofs/adaptive.md")
    assert adaptive["breakdown"]["adaptivity"] > 0
    # RDP values match dp_accounting's RepeatAndSelectDpEvent; the reported ε is the smallest valid bound.
    assert tnb["methods"]["rdp"] == pytest.approx(2.5436, rel=1e-3)
    assert poisson["methods"]["rdp"] == pytest.approx(2.7507, rel=1e-3)
    for payload in (tnb, poisson):
        assert payload["epsilon"] == min(payload["methods"].values())
        assert payload["methods"][payload["method"]] == payload["epsilon"]
    assert tnb["method"] == "profile-tnb" and tnb["epsilon"] < tnb["methods"]["rdp"]
    # Theorem A-infinity: 1 + log(C/c) + 1.5 log((γ + (1−γ)C)/(γ + (1−γ)c/e)) = 3.8765 (published Thm 2: 4.0715)
    assert pure["epsilon"] == pytest.approx(3.876461770178514, rel=1e-9)
    assert pure["delta"] == 0.0 and pure["theorem"].startswith("Theorem A-infinity")
    assert pure["method"] == "pure-dp-theorem-a" and pure["methods"] == {"pure-dp-theorem-a": pure["epsilon"]}


def test_account_published_theorem_is_opt_in(capsys) -> None:
    adaptive = _json(capsys, ACCOUNT_FORMS[0] + " --adaptive-theorem published")
    assert adaptive["epsilon"] == pytest.approx(11.15, abs=0.01)  # DP-HyPO Theorem 1 as printed
    assert adaptive["method"] == "rdp-published-thm1" and "known gap" in adaptive["theorem"]
    pure = _json(capsys, ACCOUNT_FORMS[3] + " --adaptive-theorem published")
    assert pure["epsilon"] == pytest.approx(2.5 * (1 + 0.6286086594223742), rel=1e-9)
    sharper = _json(capsys, ACCOUNT_FORMS[0] + " --adaptive-theorem B")  # proven numerical sharpening, opt-in
    assert sharper["method"] == "rdp-theorem-b" and sharper["epsilon"] == pytest.approx(9.298, abs=0.01)
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
    assert payload["sigma"] == pytest.approx(0.8506, rel=1e-3)  # Theorem A (published Theorem 1: 0.8606)
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
    argv = "account --sigma 0.71 --sample-rate 0.0042667 --steps 2344 --runs geometric --gamma 0.01"
    proc = subprocess.run([sys.executable, "-m", "dphypo", *argv.split()], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": ""})
    assert proc.returncode == 0, proc.stderr
    assert "…" not in proc.stdout and "C = 2, c = 0.75" in proc.stdout


def test_account_and_calibrate_default_to_the_gp_search_bounds(capsys) -> None:
    # tune/simulate/plot run C = 2, c = 0.75 by default; account/calibrate describe that same search.
    base = "--sigma 1 --sample-rate 0.0042667 --steps 2340"
    default = _json(capsys, f"account {base} --runs geometric --mean 10")
    assert (default["C"], default["c"]) == (2.0, 0.75)
    explicit = _json(capsys, f"account {base} --runs geometric --mean 10 --C 2 --c 0.75")
    assert default["epsilon"] == explicit["epsilon"]
    # Poisson and binomial T: only a uniform search may use them, so that is their default.
    poisson = _json(capsys, f"account {base} --runs poisson --mean 10")
    assert (poisson["C"], poisson["c"]) == (1.0, 1.0)
    calibrated = _json(capsys, "calibrate --epsilon 8 --sample-rate 0.0042667 --steps 2344 --runs geometric "
                               "--gamma 0.01")
    assert (calibrated["C"], calibrated["c"]) == (2.0, 0.75)
    assert calibrated["sigma"] == _json(capsys, CALIBRATE)["sigma"]


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
