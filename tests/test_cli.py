"""The CLI forms the accounting issue promises, their JSON, and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dphypo.cli import run

ACCOUNT_FORMS = [
    "account --sigma 0.71 --sample-rate 0.0042667 --steps 2344 --runs geometric --gamma 0.01 --C 2 --c 0.75 "
    "--delta 1e-5",
    "account --sigma 1.0 --sample-rate 0.0042667 --steps 2340 --runs negbin --theta 0.5 --mean 10 --delta 1e-5",
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
    assert adaptive["epsilon"] == pytest.approx(11.15, abs=0.01)
    assert adaptive["method"] == "rdp" and set(adaptive["methods"]) == {"rdp"}  # no profile bound when adaptive
    assert adaptive["breakdown"]["adaptivity"] > 0
    # RDP values match dp_accounting's RepeatAndSelectDpEvent; the reported ε is the smallest valid bound.
    assert tnb["methods"]["rdp"] == pytest.approx(2.5436, rel=1e-3)
    assert poisson["methods"]["rdp"] == pytest.approx(2.7507, rel=1e-3)
    for payload in (tnb, poisson):
        assert payload["epsilon"] == min(payload["methods"].values())
        assert payload["methods"][payload["method"]] == payload["epsilon"]
    assert tnb["method"] == "profile-tnb" and tnb["epsilon"] < tnb["methods"]["rdp"]
    assert pure["epsilon"] == pytest.approx(2.5 * (1 + 0.6286086594223742), rel=1e-9)
    assert pure["delta"] == 0.0 and pure["theorem"].startswith("DP-HyPO Theorem 2")
    assert pure["method"] == "pure-dp" and pure["methods"] == {"pure-dp": pure["epsilon"]}


def test_binomial_runs_are_uniform_only(capsys) -> None:
    argv = "account --sigma 1 --sample-rate 0.0042667 --steps 2340 --runs binomial --max-runs 20 --mean 10"
    payload = _json(capsys, argv)
    assert payload["method"] == "profile-binomial" and payload["n"] == 20
    assert run([*argv.split(), "--C", "2", "--c", "0.75"]) == 2
    assert "binomial" in capsys.readouterr().err


def test_calibrate(capsys) -> None:
    payload = _json(capsys, CALIBRATE)
    assert payload["epsilon"] <= 8.0
    assert payload["sigma"] == pytest.approx(0.8606, rel=1e-3)
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
        ("account --sigma 1 --sample-rate 1.5 --steps 10 --runs geometric --gamma 0.1", "sample_rate"),
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
