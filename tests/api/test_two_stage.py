"""``dphypo.tune_two_stage`` end to end on digits (tiny settings): what is trained, released and accounted."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dphypo import FinalRun, FinalSelection, ProbeRelease, ProbeSelection, RepeatAndSelect, TwoStage, tune_two_stage
from dphypo.api.two_stage import charged_mechanisms, default_probe_epochs, two_stage_mechanisms
from dphypo.privacy import geometric
from dphypo.privacy.two_stage import TwoStageDesignError, account_two_stage
from dphypo.search.recording import LostAttemptsExceeded
from dphypo.search.storage import JournalMismatch, SQLiteJournal
from dphypo.space import Grid, IntGrid, SearchSpace
from dphypo.strategies.gp import placement as placement_module
from dphypo.strategies.gp.placement import ProbePlacement
from dphypo.strategies.recommend import Recommendation, recommend
from dphypo.strategies.released import ReleasedProbes, released_probes
from dphypo.train import DPSGD, DPSGDObjective, load_dataset

SPLITS = load_dataset("digits")
TRAINING = DPSGD.from_splits(SPLITS, batch_size=64, epochs=2, score_noise=0.02 * len(SPLITS.y_val))
SPACE = SearchSpace({"lr": Grid((0.1, 0.5, 2.0), scale="log"), "clip": Grid((0.5, 2.0), scale="linear")})
SIGMAS = (3.0, 1.5)


class Recording:
    """A DP-SGD objective (run by run) that records each run's mechanism (epochs, σ); sequential executor."""

    def __init__(self) -> None:
        self.inner = DPSGDObjective("digits", engine="opacus")
        self.seen: list[tuple[int, float]] = []

    def __call__(self, params, run):
        self.seen.append((run.mechanism.epochs, run.mechanism.sigma))
        return self.inner(params, run)


def test_released_probes_then_one_final_run_release_what_each_stage_trained_and_its_epsilon() -> None:
    design = TwoStage(ProbeRelease(4), FinalRun(), split=0.5)
    objective = Recording()
    result = tune_two_stage(objective, SPACE, TRAINING, design, probe_epochs=1, sigmas=SIGMAS, seed=7)
    outcome, release = result.two_stage, result.release
    # stage 1: four probes at 1 epoch and the probe σ; stage 2: one run at 2 epochs and the final σ
    assert objective.seen == [(1, 3.0)] * 4 + [(2, 1.5)]
    assert len(outcome.probes) == 4 and all(p.score is None or 0.0 <= p.score <= 1.2 for p in outcome.probes)
    best_probe = max((p for p in outcome.probes if p.score is not None), key=lambda p: p.score)
    assert outcome.finalists == (best_probe.params,) and release.params == best_probe.params
    assert release.artifact is not None and not outcome.final_failed and math.isfinite(release.score)
    # a reader recomputes the total from the two mechanisms and the design
    recomputed = account_two_stage(outcome.probe_mechanism.rdp(), outcome.final_mechanism.rdp(), design.stage1,
                                   design.stage2, 1e-5)
    assert release.epsilon <= recomputed.epsilon + 1e-12 and release.privacy.methods["rdp"] == recomputed.epsilon
    assert release.privacy.method == min(release.privacy.methods, key=release.privacy.methods.get)
    assert result.history.run_count == 4 and result.final_history.run_count == 1  # curator-only counts
    # today's design: the strategy places the probes, the best probe is committed, and the release says so
    assert outcome.placement == {"via": "strategy", "name": "uniform"}
    assert outcome.to_dict()["recommendation"] == {"rule": "best-probe", "fell_back": False}


def test_a_secret_seed_repeats_the_release_and_fresh_entropy_does_not() -> None:
    design = TwoStage(ProbeRelease(3))
    objective = DPSGDObjective("digits")
    first = tune_two_stage(objective, SPACE, TRAINING, design, probe_epochs=1, sigmas=SIGMAS, seed=11)
    again = tune_two_stage(objective, SPACE, TRAINING, design, probe_epochs=1, sigmas=SIGMAS, seed=11)
    assert first.release.score == again.release.score and first.two_stage.probes == again.two_stage.probes
    fresh = [tune_two_stage(objective, SPACE, TRAINING, design, probe_epochs=1, sigmas=SIGMAS).release.score
             for _ in range(2)]
    assert fresh[0] != fresh[1]


def test_a_final_selection_trains_only_the_stage1_top_k_and_a_probe_selection_releases_its_best_probe() -> None:
    objective = DPSGDObjective("digits")
    top3 = TwoStage(ProbeRelease(6, top_k=3), FinalSelection(RepeatAndSelect(geometric(1 / 3))))
    result = tune_two_stage(objective, SPACE, TRAINING, top3, probe_epochs=1, sigmas=SIGMAS, seed=2)
    finalists = result.two_stage.finalists
    assert 1 <= len(finalists) <= 3 and len({tuple(f.values()) for f in finalists}) == len(finalists)
    assert all(t.params in finalists for t in result.final_history.trials)
    assert result.release.params in finalists

    selection = TwoStage(ProbeSelection(RepeatAndSelect(geometric(1 / 4))))
    result = tune_two_stage(objective, SPACE, TRAINING, selection, probe_epochs=1, sigmas=SIGMAS, seed=3)
    trials = result.history.trials
    assert len(result.two_stage.probes) == 1  # a selection releases its best probe only
    assert result.two_stage.probes[0].params == trials[result.history.best_number].params
    assert result.release.params == result.two_stage.finalists[0] == result.two_stage.probes[0].params


def test_a_calibrated_design_meets_epsilon_and_spends_the_pld_slack_on_less_noise() -> None:
    design = TwoStage(ProbeRelease(5))
    probe, final, report = two_stage_mechanisms(TRAINING, design, probe_epochs=1, epsilon=4.0, delta=1e-5)
    assert report.epsilon <= 4.0 and report.epsilon == pytest.approx(4.0, rel=5e-3)
    assert set(report.methods) == {"rdp", "pld"} and report.method == "pld"
    assert report.methods["rdp"] > 4.0  # at these σ RDP alone would not meet the target: the PLD bound is used
    assert probe.epochs == 1 and final.epochs == 2 and probe.sigma > final.sigma


class Untouchable:
    """An objective that must never be called: every refusal happens before any data is read."""

    optimizer = "sgd"

    def __call__(self, params, run):
        raise AssertionError("trained although the search should have been refused")


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"probe_epochs": 3}, TwoStageDesignError, "probe fidelity above the final one"),
        ({"probe_epochs": 0}, ValueError, "probe_epochs must be"),
        ({"sigmas": SIGMAS, "epsilon": 4.0}, ValueError, "exactly one of epsilon"),
        ({"journal": "missing/x.db"}, ValueError, "journal"),
        ({"max_lost": -1}, ValueError, "max_lost must be"),
        ({"strategy": "gp", "design": TwoStage(ProbeSelection(RepeatAndSelect(geometric(0.2))))},
         TwoStageDesignError, "accounted with C=1, c=1"),
        ({"design": TwoStage(ProbeSelection(RepeatAndSelect(geometric(1e-9))))}, ValueError,
         "probes must be at most 1,000,000 expected runs"),
        ({"placement": ProbePlacement(), "design": TwoStage(ProbeSelection(RepeatAndSelect(geometric(0.2))))},
         TwoStageDesignError, "a probe placement needs released probes"),
        ({"recommend": "gp-mean", "design": TwoStage(ProbeSelection(RepeatAndSelect(geometric(0.2))))},
         TwoStageDesignError, "a probe selection releases its best probe only"),
        ({"recommend": "gp-max"}, ValueError, "recommend must be one of"),
        ({"strategy": "gp", "placement": ProbePlacement()}, TwoStageDesignError, "replaces the strategy"),
    ],
)
def test_bad_input_fails_in_one_line_before_any_data(kwargs, error, match, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    kwargs = {"sigmas": SIGMAS, **kwargs} if "epsilon" not in kwargs else kwargs
    with pytest.raises(error, match=match):
        tune_two_stage(Untouchable(), SPACE, TRAINING, **kwargs)


def test_split_and_top_k_are_checked_by_the_design_and_privacy_axes_are_refused() -> None:
    with pytest.raises(TwoStageDesignError, match="split must be in"):
        TwoStage(ProbeRelease(4), split=1.0)
    with pytest.raises(TwoStageDesignError, match="top_k must be at most"):
        ProbeRelease(2, top_k=3)
    axes = SearchSpace({"lr": Grid((0.1, 1.0), scale="log"), "batch_size": IntGrid((32, 64))},
                       privacy_roles={"batch_size": "batch_size"})
    with pytest.raises(ValueError, match=r"needs dphypo\.tune"):
        tune_two_stage(Untouchable(), axes, TRAINING, sigmas=SIGMAS)
    assert default_probe_epochs(10) == 2 and default_probe_epochs(2) == 1


# -- issue #30 item 5: the two-stage search is journaled and survives kill -9 ----------------------------------------
CHILD = Path(__file__).with_name("_two_stage_child.py")
ROOT = Path(__file__).resolve().parents[2]


def _child(journal: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHILD), str(journal), *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})


def test_kill_9_in_stage_1_between_the_stages_and_in_stage_2_resumes_to_the_uninterrupted_release(tmp_path) -> None:
    from tests.api._two_stage_child import DESIGN, search, summary

    expected = summary(search(None, "", 1, str(tmp_path / "never")))  # the same search, uninterrupted
    journal = tmp_path / "j.db"
    for kill in ("probe:1", "between", "final:0"):  # one process dies at each point, the next one resumes
        died = _child(journal, "--kill", kill)
        assert died.returncode == -signal.SIGKILL, died.stderr
    released = summary(search(str(journal), "", 1, str(tmp_path / "never")))  # the last resume, in this process
    assert released.pop("lost") == [1, 1]  # the probe and the final run killed in flight, one charged per stage
    assert released == {k: v for k, v in expected.items() if k != "lost"}  # same probes, model, score and ε
    with SQLiteJournal.open(journal, read_only=True) as opened:
        sealed, attempts = opened.sealed(), opened.attempts()
        assert sealed.config["run_counts"] == {"probes": 3, "finals": 1} and sealed.run_count == 4
        assert sealed.config["probe_mechanism"]["sigma"] == 3.0 and sealed.config["final_mechanism"]["sigma"] == 1.5
        assert sealed.config["design"]["label"] == DESIGN.label() and sealed.config["max_lost"] == 1
        assert [(a["number"], a["status"]) for a in attempts if a["status"] != "done"] == [(1, "lost"), (3, "lost")]
        assert sorted(a["number"] for a in attempts if a["status"] == "done") == [0, 1, 2, 3]
        published = opened.release()
    assert published["params"] == released["params"] and published["epsilon"] == released["epsilon"]
    assert [p["score"] for p in published["two_stage"]["released_probes"]] == [p[1] for p in released["probes"]]
    assert published["max_lost"] == 1 and "charged" in published["privacy"]["stage2_theorem"]


def test_a_stage_that_lost_more_than_max_lost_releases_nothing_and_refuses_the_resume(tmp_path) -> None:
    from tests.api._two_stage_child import search

    journal = tmp_path / "j.db"
    died = _child(journal, "--kill", "final:0", "--max-lost", "0")
    assert died.returncode == -signal.SIGKILL
    with pytest.raises(LostAttemptsExceeded, match="max_lost=0"):
        search(str(journal), "", 0, str(tmp_path / "never"))
    with SQLiteJournal.open(journal, read_only=True) as opened:
        assert opened.release() is None and opened.charged_attempts() == 1
        assert [a["status"] for a in opened.attempts()] == ["done"] * 3 + ["lost"]  # nothing trained on resume


def test_a_journaled_search_replays_without_training_and_refuses_another_search(tmp_path, monkeypatch) -> None:
    journal = tmp_path / "j.db"
    design = TwoStage(ProbeRelease(2))
    objective = Recording()
    first = tune_two_stage(objective, SPACE, TRAINING, design, probe_epochs=1, sigmas=SIGMAS, journal=journal)
    assert len(objective.seen) == 3
    again = tune_two_stage(objective, SPACE, TRAINING, design, probe_epochs=1, sigmas=SIGMAS, journal=journal)
    assert len(objective.seen) == 3  # a finished search replays from its journal: nothing trains again
    assert again.release.params == first.release.params and again.release.score == first.release.score
    assert again.release.artifact is not None and again.two_stage.probes == first.two_stage.probes
    assert again.history.seed == first.history.seed  # fresh entropy, read back from the journal

    def no_calibration(*args, **kwargs):
        raise AssertionError("sigma was calibrated before the seal was checked")

    monkeypatch.setattr("dphypo.api.two_stage.two_stage_mechanisms", no_calibration)
    with pytest.raises(JournalMismatch, match=r"design\.expected_probes.*probe_epochs"):
        tune_two_stage(objective, SPACE, TRAINING, TwoStage(ProbeRelease(3)), probe_epochs=2, epsilon=4.0,
                       journal=journal)
    single = tmp_path / "single.db"
    with SQLiteJournal.open(single) as opened:
        opened.seal({"seed": 1}, 4)
    with pytest.raises(JournalMismatch, match="holds a single-stage search"):
        tune_two_stage(objective, SPACE, TRAINING, design, probe_epochs=1, sigmas=SIGMAS, journal=single)
    assert len(objective.seen) == 3


def test_lost_attempts_are_charged_up_front_in_both_stages() -> None:
    design = TwoStage(ProbeRelease(4))
    _, _, plain = charged_mechanisms(TRAINING, design, probe_epochs=1, epsilon=None, delta=1e-5, sigmas=SIGMAS)
    probe, final, charged = charged_mechanisms(TRAINING, design, probe_epochs=1, epsilon=None, delta=1e-5,
                                               sigmas=SIGMAS, max_lost=2)
    recomputed = account_two_stage(probe.rdp(), final.rdp(), design.stage1, design.stage2, 1e-5, charged_probes=2,
                                   charged_finals=2)
    assert charged.methods["rdp"] == recomputed.epsilon and charged.epsilon > plain.epsilon
    assert "2 charged" in charged.stage1_theorem and "2 charged" in charged.stage2_theorem
    # calibrated (a design accounted in RDP, fast): the same total with more noise in both stages, the split kept
    selection = TwoStage(ProbeRelease(4, top_k=2), FinalSelection(RepeatAndSelect(geometric(0.5))))
    p1, f1, report = charged_mechanisms(TRAINING, selection, probe_epochs=1, epsilon=6.0, delta=1e-5, max_lost=1)
    assert report.epsilon <= 6.0 and report.epsilon == pytest.approx(6.0, rel=1e-2)
    assert "1 charged" in report.stage1_theorem and "1 charged" in report.stage2_theorem
    uncharged = account_two_stage(p1.rdp(), f1.rdp(), selection.stage1, selection.stage2, 1e-5)
    assert uncharged.epsilon < 0.9 * report.epsilon  # the charge is paid for with noise: without it ε is lower


# -- issue #31 items 1-2: GP placement and recommendation in tune, from released values only --------------------------
GP_PLACEMENT = ProbePlacement("gp", "ucb", batch=2, start=2, mc_samples=32)


def test_gp_placement_and_a_gp_rule_place_every_probe_from_released_values_and_the_release_names_them(
        tmp_path, monkeypatch) -> None:
    seen: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    original = placement_module.place_batch

    def recording(placement, space, released, count, rng, direction):
        assert type(released) is ReleasedProbes  # nothing but released (grid point, noisy score) pairs
        placed = original(placement, space, released, count, rng, direction)
        seen.append((released.indices.copy(), released.scores.copy(), placed.copy()))
        return placed

    monkeypatch.setattr(placement_module, "place_batch", recording)
    design = TwoStage(ProbeRelease(6))
    journal = tmp_path / "j.db"
    result = tune_two_stage(DPSGDObjective("digits"), SPACE, TRAINING, design, probe_epochs=1, sigmas=SIGMAS,
                            seed=5, placement=GP_PLACEMENT, recommend="gp-mean", journal=journal, objective_id="t")
    outcome = result.two_stage
    probes = released_probes(outcome.probes, SPACE)
    # batches of 2, 2, 2: each placed from exactly the probes released before it (their points and noisy scores)
    assert [len(placed[0]) for _, _, placed in seen] == [2, 2, 2]
    for indices, scores, _ in seen:
        assert np.array_equal(indices, probes.indices[:, :indices.shape[1]])
        assert np.array_equal(scores, probes.scores[:, :scores.shape[1]], equal_nan=True)
    assert np.array_equal(np.concatenate([placed for _, _, placed in seen], axis=1), probes.indices)
    assert [t.grid_index for t in result.history.trials] == list(probes.indices[0])
    # the committed point is the rule applied to stage 1's release, and the release names both
    chosen = recommend(Recommendation("gp-mean"), SPACE, probes, "maximize", seed=0)
    assert outcome.finalists == (SPACE.params(int(chosen.indices[0, 0])),) == (result.release.params,)
    described = outcome.to_dict()
    assert described["placement"]["name"] == "gp-ucb" and described["placement"]["via"] == "place_probes"
    assert described["recommendation"] == {"rule": "gp-mean", "fell_back": False}
    assert result.release.artifact is not None and math.isfinite(result.release.score)
    # a journaled resume places the same probes: replayed from the journal, nothing trains (a diverging
    # placement would be refused by the journal's replay check)
    again = tune_two_stage(Untouchable(), SPACE, TRAINING, design, probe_epochs=1, sigmas=SIGMAS,
                           placement=GP_PLACEMENT, recommend="gp-mean", journal=journal, objective_id="t")
    assert again.two_stage.probes == outcome.probes and again.release.params == result.release.params
    with pytest.raises(JournalMismatch, match="placement"):  # the placement is sealed
        tune_two_stage(Untouchable(), SPACE, TRAINING, design, probe_epochs=1, sigmas=SIGMAS, recommend="gp-mean",
                       journal=journal, objective_id="t")



def test_probes_with_noisier_scores_release_at_that_noise_and_seal_it(tmp_path) -> None:
    class Noise(Recording):
        def __call__(self, params, run):
            self.seen.append((run.mechanism.epochs, run.mechanism.score_noise))
            return self.inner(params, run)

    design, objective, journal = TwoStage(ProbeRelease(3)), Noise(), tmp_path / "j.db"
    result = tune_two_stage(objective, SPACE, TRAINING, design, probe_epochs=1, sigmas=SIGMAS, seed=5,
                            probe_score_noise_factor=2.0, journal=journal)
    noise = TRAINING.score_noise
    assert objective.seen == [(1, 2 * noise)] * 3 + [(2, noise)]  # each probe's score released at twice the noise
    outcome = result.two_stage
    assert outcome.probe_mechanism.score_noise == 2 * noise and outcome.final_mechanism.score_noise == noise
    recomputed = account_two_stage(outcome.probe_mechanism.rdp(), outcome.final_mechanism.rdp(), design.stage1,
                                   design.stage2, 1e-5)
    assert result.release.privacy.methods["rdp"] == recomputed.epsilon
    # cheaper than the same probes at the final run's score noise (their scores cost a quarter in RDP)
    _, _, today = two_stage_mechanisms(TRAINING, design, probe_epochs=1, epsilon=None, delta=1e-5, sigmas=SIGMAS)
    assert result.release.epsilon < today.epsilon
    with pytest.raises(JournalMismatch, match="probe_score_noise_factor"):  # a resume at another noise: refused
        tune_two_stage(objective, SPACE, TRAINING, design, probe_epochs=1, sigmas=SIGMAS, seed=5, journal=journal)
    with pytest.raises(ValueError, match="the training releases no noisy score"):
        two_stage_mechanisms(DPSGD(batch_size=64, epochs=2, n_train=1000), design, probe_epochs=1, epsilon=None,
                             delta=1e-5, sigmas=SIGMAS, probe_score_noise_factor=2.0)
