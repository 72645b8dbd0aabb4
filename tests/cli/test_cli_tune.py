"""`dphypo tune` end to end on the embedded digits data (tiny settings), and release-mode privacy of the output."""

from __future__ import annotations

import inspect
import json
import re
import typing

import pytest

from dphypo.api import SingleStage, TwoStageSearch, design_from_dict
from dphypo.cli import run
from dphypo.cli.search import tune_command
from dphypo.cli.tune import TuneArgs, search_options
from dphypo.privacy import geometric
from dphypo.privacy.two_stage import ProbeRelease, TwoStage
from dphypo.search.execution import Executor, make_executor
from dphypo.search.options import SearchOptions
from dphypo.strategies import GPUCB
from dphypo.train import load_dataset

TINY = (
    "tune --epochs 2 --lr-grid 0.3,1,3 --clip-grid 0.5,1,2 --runs geometric --mean 4 --seed 3 --epsilon 8 "
    "--strategy gp"
).split()


def test_tune_releases_a_model_with_the_accountants_epsilon(tmp_path, capsys) -> None:
    assert run([*TINY, "--out", str(tmp_path), "--json"]) == 0
    captured = capsys.readouterr()
    payload = json.loads(captured.out)
    release, privacy = payload["release"], payload["privacy"]
    assert privacy["epsilon"] <= 8.0 and privacy["epsilon"] == pytest.approx(8.0, rel=1e-3)
    assert privacy["bound"].startswith("Theorem S")  # tune's default: a per-record split
    assert set(release["params"]) == {"lr", "clip"}
    # digits' test records are drawn from the protected pool: their accuracy is the curator's, not released, and
    # not even printed in release mode (only --show-trials shows what is not private)
    assert release["test_accuracy"] is None and "exact test accuracy" not in captured.err + captured.out
    assert (tmp_path / "released_model.pt").exists() and (tmp_path / "release.json").exists()
    assert "NOT_PRIVATE_curator_only" not in payload and "run_count" not in json.dumps(payload)
    saved = json.loads((tmp_path / "release.json").read_text())
    assert saved["privacy"]["epsilon"] == privacy["epsilon"]


def test_release_mode_never_shows_other_runs_or_T(tmp_path, capsys) -> None:
    curator = tmp_path / "curator"
    assert run([*TINY, "--out", str(curator), "--show-trials", "--json"]) == 0
    full = json.loads(capsys.readouterr().out)
    trials = full["NOT_PRIVATE_curator_only"]["trials"]
    T = full["NOT_PRIVATE_curator_only"]["run_count"]
    released = full["release"]["score"]
    assert T == len(trials) >= 1
    others = {f"{t['score']:.4f}" for t in trials if t["score"] is not None} - {f"{released:.4f}"}

    assert run([*TINY, "--out", str(tmp_path / "public")]) == 0  # same seed, release mode, table output
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert f"{released:.4f}" in text
    assert not any(s in text for s in others), "a non-released run's score leaked into release mode"
    assert not re.search(r"T = \d", text) and "NOT PRIVATE" not in text


def test_show_trials_is_labelled_not_private(tmp_path, capsys) -> None:
    assert run([*TINY, "--out", str(tmp_path), "--show-trials"]) == 0
    out = capsys.readouterr().out
    assert "NOT PRIVATE" in out and re.search(r"T = \d+ runs", out)


def test_tune_rejects_bad_options(tmp_path, capsys) -> None:
    assert run([*TINY, "--out", str(tmp_path), "--score-noise-accuracy", "-1"]) == 2
    assert "--score-noise-accuracy must be" in capsys.readouterr().err
    assert run([*TINY, "--out", str(tmp_path), "--score-noise", "0.02"]) == 2  # the old name: one line, new name
    assert "renamed --score-noise-accuracy" in capsys.readouterr().err
    assert run(["tune", "--dataset", "imagenet", "--out", str(tmp_path)]) == 2
    assert "imagenet" in capsys.readouterr().err


SUBSAMPLED = (
    "tune --epochs 1 --lr-grid 0.3,1,3 --clip-grid 0.5,1 --runs geometric --mean 3 --seed 3 --epsilon 8 "
    "--strategy uniform --batch-size 32 --tune-fraction 0.25"
).split()


@pytest.mark.parametrize("variant", ["1", "2"])
def test_subsampled_tune_releases_the_final_model_with_the_kk_epsilon(tmp_path, capsys, variant: str) -> None:
    assert run([*SUBSAMPLED, "--variant", variant, "--out", str(tmp_path), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    privacy, sub = payload["privacy"], payload["subsampled"]
    method = "koskela-kulkarni-thm1-variant1" if variant == "1" else "koskela-kulkarni-zhu-wang-variant2"
    assert privacy["method"] == sub["method"] == method and privacy["methods"] == {method: privacy["epsilon"]}
    assert privacy["epsilon"] <= 8.0 and privacy["epsilon"] == pytest.approx(8.0, rel=1e-3)
    assert sub["tuning_fraction"] == 0.25 and sub["epsilon"] == privacy["epsilon"]
    factor = 3.0 if variant == "1" else 4.0  # (1 − q)/q or 1/q
    assert sub["transferred_lr"] == pytest.approx(factor * sub["tuned_lr"])
    assert payload["release"]["params"]["lr"] == sub["transferred_lr"]
    n_train = len(load_dataset("digits").y_train)
    assert sub["tuning_set_size_nominal"] == round(0.25 * n_train)
    assert sub["final_set_size_nominal"] == (n_train - round(0.25 * n_train) if variant == "1" else n_train)
    if variant == "1":  # same σ, whole search on all data
        assert sub["full_data_search_epsilon"] > privacy["epsilon"]
    # Variant 2 adds a final run on all the data: with Theorem B at C = c = 1 (a tighter uniform RDP bound) the plain
    # search on all data at the same σ is already cheaper here (7.69 < 8.00), so variant 2 buys nothing at this size.
    assert 0 < sub["full_data_search_epsilon"] < 2 * privacy["epsilon"]
    assert (tmp_path / "released_model.pt").exists() and "run_count" not in json.dumps(payload)


def test_subsampled_tune_table_names_the_method(tmp_path, capsys) -> None:
    assert run([*SUBSAMPLED, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "koskela-kulkarni-thm1-variant1" in out and "tuning fraction q" in out and "X1: 270" in out


def test_subsampled_tune_refusals_are_one_line_errors(tmp_path, capsys) -> None:
    poisson_gp = ["tune", "--runs", "poisson", "--mean", "3", "--strategy", "gp", "--tune-fraction", "0.25"]
    assert run([*poisson_gp, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()  # (a blank line may precede it: the cleared progress display)
    assert err.startswith("error:") and "Poisson T" in err and "\n" not in err
    assert run(["tune", "--variant", "2", "--out", str(tmp_path)]) == 2
    assert "--variant needs --tune-fraction" in capsys.readouterr().err
    assert run([*SUBSAMPLED, "--variant", "3", "--out", str(tmp_path)]) == 2
    assert "variant" in capsys.readouterr().err


# -- a release describes the files it points at; bad options and paths fail before any data is touched ----------
def test_a_release_refuses_a_model_file_that_was_overwritten(tmp_path, capsys) -> None:
    journal, out = tmp_path / "a.db", tmp_path / "a"
    assert run([*TINY, "--out", str(out), "--journal", str(journal)]) == 0
    assert run(["release", str(journal), "--json"]) == 0
    released = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert released["model_sha256"] and released["model_path"] == str(out / "released_model.pt")
    (out / "released_model.pt").write_bytes(b"another search's model")
    assert run(["release", str(journal)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not the released model" in err[0]


def test_a_search_never_overwrites_another_searchs_release(tmp_path, capsys) -> None:
    out = tmp_path / "out"
    assert run([*TINY, "--out", str(out)]) == 0
    before = (out / "released_model.pt").read_bytes()
    capsys.readouterr()
    assert run([*TINY, "--out", str(out)]) == 2
    assert "already holds the release" in capsys.readouterr().err
    assert (out / "released_model.pt").read_bytes() == before


def test_a_finished_journaled_search_may_rewrite_its_own_release(tmp_path, capsys) -> None:
    journal, out = tmp_path / "j.db", tmp_path / "out"
    assert run([*TINY, "--out", str(out), "--journal", str(journal)]) == 0
    assert run([*TINY, "--out", str(out), "--journal", str(journal)]) == 0  # replays, same model bytes


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--runs-per-update", "0"], "--runs-per-update must be a positive integer"),
        (["--workers", "0"], "--workers must be a positive integer"),
        (["--max-lost", "-1"], "--max-lost must be a non-negative integer"),
        (["--runs", "binomial"], "binomial is for `dphypo account`"),
        (["--secure-mode"], "secure_mode needs Opacus's CSPRNG package torchcsprng"),
        (["--strategy", "uniform", "--C", "2"], "--strategy uniform never adapts"),
        (["--tune-fraction", "0.25", "--variant", "3"], "--variant must be 1 or 2, got 3"),
        (["--engine", "jax"], "--engine must be one of vectorized, opacus"),
        (["--engine", "opacus", "--pass-size", "4"], "--pass-size is for --engine vectorized only"),
        (["--pass-size", "0"], "--pass-size must be a positive integer"),
        (["--secure-mode", "--engine", "vectorized"], "--secure-mode needs --engine opacus"),
    ],
)
def test_bad_tune_options_fail_in_one_line_before_any_data(tmp_path, capsys, monkeypatch, extra, message) -> None:
    import dphypo.train.data as data

    def no_data(*args, **kwargs):
        raise AssertionError("the data was read before the options were checked")

    monkeypatch.setattr(data, "load_dataset", no_data)
    monkeypatch.setattr("dphypo.train.load_dataset", no_data)
    assert run([*TINY, "--out", str(tmp_path / "o"), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_unusable_output_paths_fail_before_any_data(tmp_path, capsys) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert run([*TINY, "--out", str(a_file)]) == 2
    assert "--out must be a directory" in capsys.readouterr().err
    assert run([*TINY, "--out", str(tmp_path / "o"), "--journal", str(tmp_path)]) == 2
    assert "--journal must be a file" in capsys.readouterr().err


def test_an_empty_grid_is_refused_naming_the_option(tmp_path, capsys) -> None:
    assert run([*TINY, "--out", str(tmp_path), "--lr-grid", ""]) == 2
    assert "--lr-grid" in capsys.readouterr().err


def test_piped_release_tables_are_not_cut(tmp_path, capsys) -> None:
    out = tmp_path / ("a-long-directory-name-" * 4)
    assert run([*TINY, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert str(out / "released_model.pt") in text and "…" not in text


# -- the parameter objects: the flags become one TuneArgs, and the search one SearchOptions --------------------------
class _Stop(Exception):
    """Raised by a stand-in for the search once it has seen its arguments (nothing is trained)."""


def _recording(seen: dict) -> object:
    def search(objective, space, training, **kwargs):
        seen.update(kwargs)
        raise _Stop

    return search


def test_tune_hands_the_search_one_search_options_built_from_its_flags(tmp_path, monkeypatch) -> None:
    seen: dict = {}
    monkeypatch.setattr("dphypo.api.tune", _recording(seen))
    journal = tmp_path / "j.db"
    with pytest.raises(_Stop):
        run([*TINY, "--out", str(tmp_path / "o"), "--journal", str(journal), "--runs-per-update", "2"])
    options = seen.pop("options")
    assert isinstance(options, SearchOptions)
    assert (options.direction, options.seed, options.journal, options.runs_per_update) == (
        "maximize", 3, str(journal), 2)
    assert isinstance(options.executor, Executor) and callable(options.progress)
    # the search options travel in that one object only; the rest are the accounting's own arguments
    assert set(seen) == {"epsilon", "sigma", "delta", "runs", "strategy", "max_lost"}
    assert (seen["epsilon"], seen["sigma"], seen["delta"], seen["max_lost"]) == (8.0, None, 1e-5, 0)


def test_subsampled_tune_gets_the_same_kind_of_options_without_a_journal(tmp_path, monkeypatch) -> None:
    seen: dict = {}
    monkeypatch.setattr("dphypo.api.tune_subsampled", _recording(seen))
    with pytest.raises(_Stop):
        run([*SUBSAMPLED, "--variant", "2", "--out", str(tmp_path / "o")])
    options = seen["options"]
    assert (options.seed, options.journal, options.runs_per_update) == (3, None, None)
    assert (seen["fraction"], seen["variant"]) == (0.25, 2)


def _tune_args(**changes: object) -> TuneArgs:
    """``dphypo tune``'s options at their defaults (read from the command), with ``changes``."""
    defaults = {name: p.default for name, p in inspect.signature(tune_command).parameters.items()}
    return TuneArgs(**{**defaults, **changes})


def test_search_options_takes_the_secret_seed_the_journal_and_the_batching() -> None:
    def progress(done: int) -> None:
        pass

    with make_executor("sequential") as pool:
        options = search_options(_tune_args(seed=5, journal="j.db", runs_per_update=3), executor=pool,
                                 progress=progress)
        assert options == SearchOptions("maximize", 5, pool, "j.db", 3, progress)
        assert search_options(_tune_args(), executor=pool, progress=progress) == SearchOptions(
            executor=pool, progress=progress)  # no --seed: fresh OS entropy, drawn by the search


def _objective_of(tmp_path, monkeypatch, *extra: str) -> object:
    seen: dict = {}

    def search(objective, space, training, **kwargs):
        seen["objective"] = objective
        raise _Stop

    monkeypatch.setattr("dphypo.api.tune", search)
    with pytest.raises(_Stop):
        run([*TINY, "--out", str(tmp_path / "o"), *extra])
    return seen["objective"]


def test_tune_trains_built_in_recipes_in_vectorised_passes_unless_told_otherwise(tmp_path, monkeypatch) -> None:
    default = _objective_of(tmp_path, monkeypatch)
    assert default.engine == "vectorized" and default.trains_in_passes and default.pass_size is None
    sized = _objective_of(tmp_path, monkeypatch, "--pass-size", "4")
    assert sized.pass_size == 4
    opacus = _objective_of(tmp_path, monkeypatch, "--engine", "opacus")
    assert opacus.engine == "opacus" and not opacus.trains_in_passes


def test_tune_with_either_engine_releases_the_same_at_a_fixed_seed(tmp_path, capsys) -> None:
    released = {}
    for engine in ("vectorized", "opacus"):
        assert run([*TINY, "--json", "--engine", engine, "--out", str(tmp_path / engine)]) == 0
        released[engine] = json.loads(capsys.readouterr().out)
    vec, opa = released["vectorized"], released["opacus"]
    assert vec["release"]["params"] == opa["release"]["params"]
    assert vec["release"]["score"] == pytest.approx(opa["release"]["score"], abs=1.5 / 359)
    assert vec["privacy"]["epsilon"] == opa["privacy"]["epsilon"]


def test_a_dry_run_prints_every_candidates_sigma_and_the_reference_without_training(capsys, tmp_path) -> None:
    argv = ["tune", "--batch-size-grid", "32,128", "--epochs-grid", "5,10", "--out", str(tmp_path / "o"),
            "--dry-run", "--json"]
    assert run(argv) == 0
    payload = json.loads(capsys.readouterr().out)
    rows = payload["candidates"]
    assert [(r["batch_size"], r["epochs"]) for r in rows] == [(32, 5), (32, 10), (128, 5), (128, 10)]
    reference = payload["reference"]
    assert reference["sigma"] == max(r["sigma"] for r in rows if r["batch_size"] == 128)  # the costliest setting
    assert 7.99 <= payload["epsilon"] <= 8.0 and payload["dry_run"] is True
    assert not (tmp_path / "o").exists()  # nothing trained, nothing saved
    assert run(argv[:-1]) == 0
    out = capsys.readouterr().out
    assert "reference run (every candidate dominated by it)" in out and "nothing trained" in out


@pytest.mark.parametrize(("extra", "message"), [
    (["--batch-size-grid", "0,32"], "--batch-size-grid values must be ≥ 1, got 0"),
    (["--batch-size-grid", "32"], "--batch-size-grid must list at least 2 distinct values"),
    (["--epochs-grid", "5,x"], "--epochs-grid must be a comma-separated list of integers"),
    (["--batch-size-grid", "32,64", "--tune-fraction", "0.5"], "cannot be combined with --batch-size-grid"),
    (["--batch-size-grid", "32,5000"], "batch"),
    (["--batch-size-grid", "32,64", "--sigma", "1.0"], "needs epsilon"),
])
def test_privacy_axis_options_are_refused_in_one_line(capsys, tmp_path, extra: list[str], message: str) -> None:
    assert run(["tune", *extra, "--out", str(tmp_path / "o"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_search_over_batch_size_releases_the_candidates_own_sigma_q_and_steps(capsys, tmp_path) -> None:
    argv = ["tune", "--batch-size-grid", "32,128", "--epochs", "1", "--lr-grid", "0.1,0.5", "--clip-grid", "1,3",
            "--mean", "4", "--seed", "2", "--out", str(tmp_path / "o"), "--json"]
    assert run(argv) == 0
    payload = json.loads(capsys.readouterr().out)
    privacy, params = payload["privacy"], payload["release"]["params"]
    assert privacy["epsilon"] <= 8.0 and params["batch_size"] in (32, 128)
    # the released candidate's own σ, q and steps are the ones the dry run plans for its setting
    assert run([*argv, "--dry-run"]) == 0  # the same --out, now holding the release: a dry run writes nothing
    planned = json.loads(capsys.readouterr().out)
    own = next(r for r in planned["candidates"] if r["batch_size"] == params["batch_size"])
    assert (privacy["sigma"], privacy["sample_rate"], privacy["steps"]) == (own["sigma"], own["sample_rate"],
                                                                             own["steps"])
    assert privacy["reference"] == planned["reference"]


def test_a_dry_run_accounts_as_the_search_does_profile_bounds_included(capsys, tmp_path) -> None:
    # Poisson T, uniform: σ is calibrated with the profile bound, so the dry run must account with it too
    # (it printed the RDP-only ε 9.75 for an ε = 8 search before)
    assert run(["tune", "--runs", "poisson", "--mean", "10", "--out", str(tmp_path / "o"), "--dry-run", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert 7.99 <= payload["epsilon"] <= 8.0 and payload["method"] == "train:rdp-poisson-pld"  # Theorem S side


# -- two-stage designs (issue #24): the default of `dphypo tune` ------------------------------------------------------
TWO_STAGE = "tune --epochs 2 --lr-grid 0.3,1,3 --clip-grid 0.5,2 --probes 4 --seed 3 --epsilon 6".split()


def test_tune_defaults_to_two_stage_and_single_stage_options_select_a_single_search(tmp_path, capsys) -> None:
    assert run(["tune", "--out", str(tmp_path), "--dry-run", "--json"]) == 0
    default = json.loads(capsys.readouterr().out)
    assert default["design"]["label"] == ("release 20 probes -> 1 final run, split 0.5 (probes placed by gp-log-nei) "
                                           "(committed by gp-mean)")
    assert [(row["stage"], row["epochs"]) for row in default["candidates"]] == [("probes", 2), ("final", 10)]
    assert default["epsilon"] <= 8.0
    assert default["design"]["kind"] == "two-stage" and default["design_reason"].startswith("auto at epsilon = 8")
    for single in (["--mean", "10"], ["--strategy", "gp"], ["--design", "single"]):
        assert run(["tune", *single, "--out", str(tmp_path), "--dry-run", "--json"]) == 0
        payload = json.loads(capsys.readouterr().out)
        assert payload["design"]["kind"] == "single-stage" and "stage" not in payload["candidates"][0], single


@pytest.mark.parametrize(("extra", "message"), [
    (["--design", "two-stage", "--mean", "5"], "--design two-stage does not take --mean"),
    (["--design", "single", "--probes", "5"], "--probes set a two-stage search"),
    (["--probe-epochs", "5"], "--probe-epochs must be at most --epochs (2)"),
    (["--split", "1"], "split must be in (0, 1)"),
    (["--top-k", "9"], "--top-k must be at most the number of probes (4)"),
    (["--probe-mode", "select", "--top-k", "2"], "--top-k needs --probe-mode release"),
    (["--final-mean", "3"], "--final-mean needs --top-k >= 2"),
    (["--design", "staged"], "--design must be one of"),
])
def test_two_stage_bad_input_fails_in_one_line_before_any_data(extra, message, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("dphypo.train.load_dataset", lambda *a, **k: pytest.fail("data read before the refusal"))
    assert run([*TWO_STAGE, *extra, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_two_stage_tune_releases_the_final_model_and_every_probe_score_with_the_total_epsilon(tmp_path, capsys) -> None:
    assert run([*TWO_STAGE, "--out", str(tmp_path), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    staged, privacy = payload["two_stage"], payload["privacy"]
    assert payload["design"]["kind"] == "two-stage" and privacy["epsilon"] <= 6.0
    assert payload["design_reason"] == "the two-stage options given (--probes)"
    # Theorem S: the worse side's best bound
    sides = {side: min(v for k, v in privacy["methods"].items() if k.startswith(side)) for side in ("train:", "val:")}
    assert privacy["epsilon"] == max(sides.values())
    assert len(staged["released_probes"]) == 4 and staged["probe_mechanism"]["epochs"] == 1
    assert staged["final_mechanism"]["epochs"] == 2 and privacy["sigma"] == staged["final_mechanism"]["sigma"]
    assert payload["release"]["params"] == staged["finalists"][0]
    assert (tmp_path / "released_model.pt").exists()
    written = json.loads((tmp_path / "release.json").read_text())
    assert written["two_stage"] == staged  # stage 1 is released
    # the release names its design as a value: it runs again as it is
    assert design_from_dict(written) == TwoStageSearch(TwoStage(ProbeRelease(4)))
    assert run([*TWO_STAGE, "--out", str(tmp_path / "table")]) == 0
    text = capsys.readouterr().out
    assert "Release of the two-stage private search" in text and "released by stage 1" in text
    assert "why this design" in text and "the two-stage options given (--probes)" in text


@pytest.mark.parametrize("extra", [[], ["--batch-size-grid", "32,128", "--epochs-grid", "5,10"],
                                   ["--design", "single"]])
def test_a_dry_run_reads_no_data(extra, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr("dphypo.train.load_dataset", lambda *a, **k: pytest.fail("a dry run read the data"))
    assert run(["tune", *extra, "--out", str(tmp_path), "--dry-run", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["epsilon"] <= 8.0


# -- the default runs at every ε, and a design runs from a file (issue #30 items 3 and 4) ------------------------------
def test_the_default_runs_at_epsilon_4_and_says_which_design_and_why(tmp_path, capsys) -> None:
    # before: 20 released probes' score releases alone cost ε ≥ 2.77 > their share 2.0, and the command exited 2
    assert run(["tune", "--epsilon", "4", "--epochs", "2", "--out", str(tmp_path), "--dry-run", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    # 10 probes' scores would starve their training (1.88 of 2.0): 20 probes at twice the score noise (issue #31.3)
    assert payload["design"]["label"] == ("release 20 probes -> 1 final run, split 0.5 (probes placed by gp-log-nei) "
                                           "(committed by gp-mean), probe score noise x2")
    assert payload["epsilon"] <= 4.0 and payload["design"]["probe_score_noise_factor"] == 2.0
    probes, final = payload["candidates"]
    assert probes["score_noise"] == pytest.approx(2 * final["score_noise"])
    assert payload["design_reason"].startswith("auto at epsilon = 4: 10 probes' score releases leave their training")


def test_probe_score_noise_accuracy_sets_the_probes_noise_and_is_refused_in_one_line(tmp_path, capsys) -> None:
    assert run(["tune", "--probe-score-noise-accuracy", "0.03", "--probes", "5", "--epsilon", "4", "--epochs", "2",
                "--out", str(tmp_path), "--dry-run", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["design"]["probe_score_noise_factor"] == pytest.approx(1.5) and payload["epsilon"] <= 4.0
    for extra, message in ((["--probe-score-noise-accuracy", "0"], "--probe-score-noise-accuracy must be"),
                           (["--probe-score-noise-accuracy", "0.03", "--score-noise-accuracy", "0"],
                            "--probe-score-noise-accuracy needs a private score release")):
        assert run(["tune", *extra, "--out", str(tmp_path), "--dry-run"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err


def test_options_of_both_designs_are_refused_naming_them_not_a_design_the_user_never_wrote(tmp_path, capsys) -> None:
    assert run(["tune", "--probes", "3", "--mean", "5", "--out", str(tmp_path), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--probes select a two-stage search but --mean a single-stage one" in err[0], err
    assert "--design two-stage does not take" not in err[0]


def test_design_from_runs_a_plans_pick_as_it_is(tmp_path, capsys) -> None:
    pick = SingleStage(GPUCB(C=1.5, c=2 / 3), geometric(0.25))
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"best": pick.label(), "pick": pick.describe()}))
    assert run(["tune", "--design-from", str(plan), "--sigma", "1.5", "--out", str(tmp_path), "--dry-run",
                "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert design_from_dict(payload["design"]) == pick and payload["expected_runs"] == pytest.approx(4.0)
    assert "by Theorem B" in payload["theorem"] and payload["design_reason"].startswith("read from --design-from")
    for extra, named in ((["--probes", "4"], "--probes"), (["--strategy", "gp"], "--strategy"),
                         (["--mean", "3"], "--runs/--theta/--gamma/--mean")):
        assert run(["tune", "--design-from", str(plan), *extra, "--out", str(tmp_path), "--dry-run"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"--design-from sets the design: drop {named}" in err[0], err


def test_help_says_which_options_select_which_design() -> None:
    hints = typing.get_type_hints(tune_command, include_extras=True)
    helps = {name: option.help for name, hint in hints.items() for option in getattr(hint, "__metadata__", ())
             if hasattr(option, "help")}
    assert "with a two-stage option (--probes, ...) or --design two-stage it places the probes by GP-UCB" in helps[
        "strategy"]
    assert "--strategy gp alone selects single-stage" in helps["design"] and "--design-from" not in helps["design"]


# -- issue #31 items 1-2: GP placement and recommendation of released probes in `dphypo tune` ------------------------
def test_tune_places_probes_by_a_gp_and_commits_the_gp_mean_and_the_release_names_both(tmp_path, capsys) -> None:
    from dphypo.strategies.gp.placement import ProbePlacement

    # TWO_STAGE's design (4 probes at ε = 6): its calibration is cached; GP batches are tested in tests/api
    command = [*TWO_STAGE, "--probe-placement", "gp-ucb", "--recommend", "gp-mean"]
    assert run([*command, "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "probes placed by" in text and "gp-ucb (BoTorch acquisition" in text
    assert "committed point chosen by" in text and "gp-mean" in text
    written = json.loads((tmp_path / "release.json").read_text())
    assert written["probe_placement"] == "gp-ucb" and written["recommend"] == "gp-mean"
    staged = written["two_stage"]
    assert staged["placement"]["acquisition"] == "ucb" and staged["recommendation"]["rule"] == "gp-mean"
    assert len(staged["released_probes"]) == 4 and written["release"]["params"] == staged["finalists"][0]
    assert written["design_reason"] == "the two-stage options given (--probes, --probe-placement, --recommend)"
    assert design_from_dict(written) == TwoStageSearch(TwoStage(ProbeRelease(4)), placement=ProbePlacement("gp", "ucb"),
                                                       recommend="gp-mean")


def test_placement_options_select_a_two_stage_design_and_keep_the_default_otherwise(tmp_path, capsys) -> None:
    assert run(["tune", "--probe-placement", "gp-log-nei", "--out", str(tmp_path), "--dry-run", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["design"]["kind"] == "two-stage" and payload["design"]["placement"]["acquisition"] == "log-nei"
    design = payload["design"]
    assert design["recommend"] == "best-probe" and "probes placed by gp-log-nei" in design["label"]
    assert run(["tune", "--probe-placement", "uniform", "--out", str(tmp_path), "--dry-run", "--json"]) == 0
    uniform = json.loads(capsys.readouterr().out)["design"]
    assert uniform["placement"] is None and uniform["label"] == "release 20 probes -> 1 final run, split 0.5"


@pytest.mark.parametrize(("extra", "message"), [
    (["--probe-placement", "gp"], "--probe-placement must be one of uniform, gp-ucb, gp-log-nei"),
    (["--recommend", "gp-max"], "--recommend must be one of best-probe, gp-mean"),
    (["--probe-mode", "select", "--probe-placement", "gp-ucb"], "--probe-placement reads every released probe: it "
     "needs --probe-mode release"),
    (["--probe-mode", "select", "--recommend", "gp-mean"], "--recommend reads every released probe"),
    (["--strategy", "gp", "--probe-placement", "gp-ucb"], "--probe-placement gp-ucb places the probes: drop "
     "--strategy gp"),
    (["--recommend", "gp-mean", "--mean", "5"], "--probes, --recommend select a two-stage search but --mean"),
])
def test_placement_options_are_refused_in_one_line_before_any_data(extra, message, tmp_path, capsys,
                                                                     monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("dphypo.train.load_dataset", lambda *a, **k: pytest.fail("data read before the refusal"))
    assert run([*TWO_STAGE, *extra, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_help_says_how_strategy_gp_relates_to_the_probe_placement() -> None:
    hints = typing.get_type_hints(tune_command, include_extras=True)
    helps = {name: option.help for name, hint in hints.items() for option in getattr(hint, "__metadata__", ())
             if hasattr(option, "help")}
    assert "--probe-placement gp-ucb is BoTorch's qUCB instead" in helps["strategy"]
    assert "gp-log-nei" in helps["probe_placement"] and "gp-mean-grid" in helps["recommend"]
