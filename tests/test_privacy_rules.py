"""Each privacy rule of docs/privacy.md has a test here (or is pointed to from there) that fails when it is broken.

The rules on randomness (no public seed on the private path) are checked by recording every seed that reaches a
random generator during two default searches: a constant seed would appear in both.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import dphypo
from dphypo.cli import run as cli
from dphypo.privacy import PrivacyAccounting, RepeatAndSelect, gaussian_rdp, geometric
from dphypo.search.records import PrivateScore, RunMisuse
from dphypo.search.storage import SQLiteJournal
from dphypo.search.tuner import Tuner
from dphypo.space import Grid, SearchSpace
from dphypo.train import DPSGDObjective
from dphypo.train.mechanism import DPSGDMechanism
from tests._private import train_privately

TINY_SPACE = SearchSpace({"lr": Grid([0.3, 1.0], scale="log"), "clip": Grid([0.5, 2.0])})
TINY_CLI = "tune --epochs 1 --lr-grid 0.3,1 --clip-grid 0.5,2 --runs geometric --mean 2 --epsilon 8".split()


def _digits_training() -> dphypo.DPSGD:
    splits = DPSGDObjective("digits").splits()
    return dphypo.DPSGD(n_train=len(splits.y_train), n_val=len(splits.y_val), batch_size=64, epochs=1,
                        score_noise=20.0)


class _SeedLog:
    """Records every seed handed to numpy's and torch's generators (``None`` = fresh OS entropy)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seeds: list[Any] = []
        log = self.seeds
        real_default_rng, real_seed_sequence = np.random.default_rng, np.random.SeedSequence

        class RecordingSeedSequence(real_seed_sequence):  # type: ignore[misc, valid-type]
            def __init__(self, entropy: Any = None, *args: Any, **kwargs: Any) -> None:
                super().__init__(entropy, *args, **kwargs)
                if entropy is not None:
                    log.append(("SeedSequence", str(entropy), tuple(kwargs.get("spawn_key", ()))))

        def default_rng(seed: Any = None) -> np.random.Generator:
            if isinstance(seed, (int, np.integer)):
                log.append(("default_rng", int(seed)))
            return real_default_rng(seed)

        class RecordingGenerator(torch.Generator):
            def manual_seed(self, seed: int) -> torch.Generator:
                log.append(("torch.Generator", int(seed)))
                return super().manual_seed(seed)

        real_manual_seed = torch.manual_seed

        def manual_seed(seed: int) -> Any:
            log.append(("torch.manual_seed", int(seed)))
            return real_manual_seed(seed)

        monkeypatch.setattr(np.random, "default_rng", default_rng)
        monkeypatch.setattr(np.random, "SeedSequence", RecordingSeedSequence)
        monkeypatch.setattr(torch, "Generator", RecordingGenerator)
        monkeypatch.setattr(torch, "manual_seed", manual_seed)

    def take(self) -> set[Any]:
        out = set(self.seeds)
        self.seeds.clear()
        return out


def _default_search() -> dphypo.SearchResult:
    return dphypo.tune(DPSGDObjective("digits"), TINY_SPACE, _digits_training(), epsilon=8.0,
                       runs=geometric(0.5))


# -- rule 6: nothing on the private path is seeded from a public value -------------------------------------------
def test_no_generator_on_the_private_path_is_seeded_from_a_constant(monkeypatch: pytest.MonkeyPatch) -> None:
    _digits_training()  # the public train/val/test split is cached before recording (docs/privacy.md)
    log = _SeedLog(monkeypatch)
    first = _default_search()
    seeds_first = log.take()
    second = _default_search()
    seeds_second = log.take()
    kinds = {s[0] for s in seeds_first}
    assert {"torch.Generator", "SeedSequence", "default_rng"} <= kinds, kinds  # the recorder saw the private path
    shared = seeds_first & seeds_second
    assert not shared, f"generators seeded with the same value in two default searches: {sorted(shared)[:5]}"
    assert first.history.seed != second.history.seed


def test_two_default_searches_draw_different_T_and_noise() -> None:
    privacy = PrivacyAccounting(RepeatAndSelect(geometric(0.05)), gaussian_rdp(4.0), 1e-5)
    space = SearchSpace({"x": Grid([i / 9 for i in range(10)])})
    tuners = [Tuner(lambda p, r: float(r.rng.normal()), space, privacy) for _ in range(2)]
    assert tuners[0].seed != tuners[1].seed
    # T's stream: 20 draws from each search's T stream (geometric, E[T] = 20) coincide only by a constant seed
    t_draws = [[Tuner(lambda p, r: 0.0, space, privacy).draw_run_count() for _ in range(20)] for _ in range(2)]
    assert t_draws[0] != t_draws[1]
    results = [t.run() for t in tuners]
    noise = [[trial.score for trial in r.history.trials] for r in results]
    shortest = min(map(len, noise))
    assert noise[0][:shortest] != noise[1][:shortest]


def test_two_default_cli_searches_release_different_models(tmp_path, capsys) -> None:
    digests = []
    for name in ("a", "b"):
        assert cli([*TINY_CLI, "--out", str(tmp_path / name), "--json"]) == 0
        payload = json.loads(capsys.readouterr().out)
        digest = hashlib.sha256((tmp_path / name / "released_model.pt").read_bytes()).hexdigest()
        assert payload["release"]["model_sha256"] == digest
        digests.append(digest)
    assert digests[0] != digests[1]


def test_a_seeded_cli_search_warns_once_and_the_release_has_no_seed(tmp_path, capsys) -> None:
    assert cli([*TINY_CLI, "--seed", "5", "--out", str(tmp_path), "--json"]) == 0
    captured = capsys.readouterr()
    warnings = [line for line in captured.err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "--seed 5" in warnings[0] and "recompute T" in warnings[0]
    release = json.loads((tmp_path / "release.json").read_text())
    assert not [key for key in _keys(release) if "seed" in key.lower()]


def _keys(tree: Any) -> list[str]:
    if isinstance(tree, dict):
        return [*map(str, tree), *(k for v in tree.values() for k in _keys(v))]
    if isinstance(tree, list):
        return [k for v in tree for k in _keys(v)]
    return []


# -- rule 1: progress displays show no counts in release mode -----------------------------------------------------
def test_the_release_mode_progress_label_has_no_run_count() -> None:
    from dphypo.cli.tune import progress_label

    assert "{task.completed}" not in progress_label(show_trials=False)
    assert "{task.completed}" in progress_label(show_trials=True) and "curator-only" in progress_label(True)


# -- rule 4: a score must be privatised by the accounted mechanism ------------------------------------------------
def _plan() -> DPSGDMechanism:
    return DPSGDMechanism(sigma=1.0, batch_size=10, epochs=1, n_train=100, n_val=50, score_noise=5.0)


def _privacy_for(mechanism: DPSGDMechanism) -> PrivacyAccounting:
    return PrivacyAccounting(RepeatAndSelect(geometric(0.5)), mechanism.rdp(), 1e-5)


def test_a_bare_score_is_refused_when_the_mechanism_releases_a_noisy_score() -> None:
    mechanism = _plan()

    def objective(params: dict, run) -> float:
        train_privately(run)
        return 0.9

    with pytest.raises(TypeError, match=r"run.private_score\(count\)"):
        Tuner(objective, TINY_SPACE, _privacy_for(mechanism), mechanism=mechanism, seed=1).run()


def test_private_score_adds_the_planned_noise_to_a_count_in_range() -> None:
    mechanism = _plan()
    seen: list[PrivateScore] = []

    def objective(params: dict, run) -> PrivateScore:
        train_privately(run)
        score = run.private_score(40)
        seen.append(score)
        return score

    result = Tuner(objective, TINY_SPACE, _privacy_for(mechanism), mechanism=mechanism, seed=1).run()
    values = np.array([s.value for s in seen])
    assert result.release.score in values
    assert np.all(values != 40 / 50) and np.std(values * 50) > 0  # noisy, and noise differs per run


@pytest.mark.parametrize(
    ("misuse", "message"),
    [
        ("second score", "one released score per run"),
        ("count above n_val", r"integer count in \[0, n_val=50\], got 1000000"),
        ("negative count", r"integer count in \[0, n_val=50\], got -1"),
        ("no private training", "without training through run.make_private"),
        ("clip 0", "max_grad_norm must be a finite number > 0"),
    ],
)
def test_a_misuse_of_the_run_stops_the_search_loudly_even_if_the_objective_catches_it(
    tmp_path, misuse: str, message: str
) -> None:
    # Each would release something the accounted epsilon does not cover (a second noisy view, a score scaled
    # past 1, a model trained without DP-SGD, a clip of 0): a bug of the objective, never a "data failure".
    mechanism = _plan()

    def objective(params: dict, run) -> PrivateScore:
        if misuse != "no private training":
            with contextlib.suppress(Exception):  # a broad except in user code must not hide the misuse
                train_privately(run, clip=0.0 if misuse == "clip 0" else 1.0)
        if misuse == "second score":
            run.private_score(40)
        count = {"count above n_val": 10**6, "negative count": -1}.get(misuse, 40)
        try:
            return run.private_score(count)
        except Exception:
            return run.private_score(40) if not run.scores else run.scores[0]

    tuner = Tuner(objective, TINY_SPACE, _privacy_for(mechanism), mechanism=mechanism, seed=1,
                  journal=tmp_path / "j.db")
    with pytest.raises(RunMisuse, match=message):
        tuner.run()
    with SQLiteJournal.open(tmp_path / "j.db", read_only=True) as journal:
        assert journal.release() is None  # nothing released
        assert not any(a["status"] == "data_failure" for a in journal.attempts())


def test_an_api_search_refuses_non_positive_learning_rates_and_clipping_norms_before_any_run() -> None:
    calls: list[int] = []

    def objective(params: dict, run) -> float:
        calls.append(run.number)
        return 0.0

    training = dphypo.DPSGD(n_train=100, n_val=50, batch_size=10, epochs=1, score_noise=5.0)
    for axis, values in (("clip", (-1.0, 0.0)), ("lr", (0.0, 1.0))):
        space = SearchSpace({"lr": Grid([0.1, 1.0]), "clip": Grid([0.5, 1.0]), axis: Grid(values)})
        with pytest.raises(ValueError, match=f"space axis '{axis}'.* must hold finite numbers > 0"):
            dphypo.tune(objective, space, training, sigma=1.0)
    with pytest.raises(TypeError, match=r"strategy must be .* got object"):
        dphypo.tune(objective, TINY_SPACE, training, sigma=1.0, strategy=object())
    assert calls == []


def test_a_score_made_by_another_run_is_refused() -> None:
    mechanism = _plan()
    stolen: list[PrivateScore] = []

    def objective(params: dict, run) -> PrivateScore:
        train_privately(run)
        if not stolen:
            stolen.append(run.private_score(10))
        return stolen[0]

    with pytest.raises(TypeError, match="made by run 0"):
        Tuner(objective, TINY_SPACE, _privacy_for(mechanism), mechanism=mechanism, seed=1, runs_per_update=1).run()


def test_the_released_model_is_the_plain_module_not_opacus_wrapper() -> None:
    splits = DPSGDObjective("digits").splits()

    def train(params: dict, run) -> tuple[PrivateScore, nn.Module]:
        model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
        optimizer = torch.optim.SGD(model.parameters(), lr=params["lr"])
        data = torch.utils.data.TensorDataset(torch.from_numpy(splits.x_train.copy()),
                                              torch.from_numpy(splits.y_train.copy()))
        loader = torch.utils.data.DataLoader(data, batch_size=64)
        wrapped, optimizer, loader = run.make_private(model, optimizer, loader, max_grad_norm=params["clip"])
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(wrapped(x), y).backward()
            optimizer.step()
        return run.private_score(0), wrapped

    result = dphypo.tune(train, TINY_SPACE, _digits_training(), sigma=2.0, runs=geometric(0.5))
    assert type(result.release.artifact) is nn.Sequential


def test_a_search_through_the_api_does_not_repeat_torchs_backward_hook_warning(recwarn) -> None:
    test_the_released_model_is_the_plain_module_not_opacus_wrapper()
    assert not [w for w in recwarn if "Full backward hook" in str(w.message)]


def test_a_misconfigured_objective_fails_every_run_and_the_curator_is_told() -> None:
    privacy = PrivacyAccounting(RepeatAndSelect(geometric(0.3)), gaussian_rdp(4.0), 1e-5)

    def broken(params: dict, run) -> float:
        raise KeyError("learning_rate")  # a bug, not the data: still scored worst (it cannot be told apart)

    with pytest.warns(RuntimeWarning, match="every run of the search failed"):
        result = Tuner(broken, TINY_SPACE, privacy).run()
    assert all(t.error == "KeyError: 'learning_rate'" for t in result.history.trials)
