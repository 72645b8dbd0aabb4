"""The on-disk calibration cache (issue #30 item 6): keyed by the description, atomic, never trusted."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dphypo.api import calibration_cache
from dphypo.api.calibration_cache import cache_dir, cache_key, cached_calibration, cached_sigmas, read_entry
from dphypo.privacy import Poisson, RepeatAndSelect
from dphypo.train.mechanism import DPSGDMechanism


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DPHYPO_CACHE_DIR", str(tmp_path))
    return tmp_path / "calibration"


def test_the_test_suite_never_writes_to_the_users_cache() -> None:
    """tests/conftest.py points the cache at a session folder before anything runs."""
    folder = cache_dir()
    assert folder is not None and os.environ["DPHYPO_CACHE_DIR"]
    assert not folder.resolve().is_relative_to((Path.home() / ".cache").resolve())


def test_cache_folder_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DPHYPO_CACHE_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "explicit" / "calibration"
    monkeypatch.delenv("DPHYPO_CACHE_DIR")
    assert cache_dir() == tmp_path / "xdg" / "dphypo" / "calibration"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "dphypo" / "calibration"
    monkeypatch.setenv("DPHYPO_CACHE_DIR", "off")
    assert cache_dir() is None


def test_the_key_is_canonical_and_covers_every_field() -> None:
    one = {"epsilon": 8.0, "delta": 1e-5, "mechanism": {"steps": 34, "sample_rate": 1 / 17}}
    assert cache_key(one) == cache_key(dict(reversed(list(one.items()))))
    assert cache_key(one) != cache_key({**one, "epsilon": 8.000000001})
    assert cache_key(one) != cache_key({**one, "mechanism": {"steps": 35, "sample_rate": 1 / 17}})
    with pytest.raises(ValueError, match="JSON"):
        cache_key({"epsilon": float("nan")})


class Calls:
    def __init__(self, sigmas: tuple[float, ...], target: float = 1.0) -> None:
        self.sigmas, self.target, self.computed, self.certified = sigmas, target, 0, 0

    def compute(self) -> tuple[tuple[float, ...], str]:
        self.computed += 1
        return self.sigmas, "computed"

    def certify(self, sigmas: tuple[float, ...]) -> str | None:
        self.certified += 1
        return "certified" if min(sigmas) >= self.target else None  # ε(σ) ≤ target iff σ ≥ target here


def test_a_hit_is_certified_once_and_not_recomputed(cache: Path) -> None:
    calls = Calls((1.5, 2.5))
    assert cached_sigmas({"x": 1}, calls.compute, calls.certify) == ((1.5, 2.5), "computed")
    assert cached_sigmas({"x": 1}, calls.compute, calls.certify) == ((1.5, 2.5), "certified")
    assert (calls.computed, calls.certified) == (1, 1)
    assert [p.name for p in cache.iterdir()] == [f"{cache_key({'x': 1})}.json"]  # no temporary file left behind


@pytest.mark.parametrize("content", ["{not json", '{"key": "other", "sigmas": [2.0]}', '{"sigmas": [2.0]}',
                                     "KEY[-1.0]", "KEY[NaN]", "KEY[]", "KEY\"text\""])
def test_a_corrupt_entry_is_ignored_and_recomputed(cache: Path, content: str) -> None:
    key = cache_key({"x": 2})
    cache.mkdir(parents=True)
    if content.startswith("KEY"):
        content = f'{{"key": "{key}", "sigmas": {content[3:]}}}'
    (cache / f"{key}.json").write_text(content)
    calls = Calls((3.0,))
    assert cached_sigmas({"x": 2}, calls.compute, calls.certify) == ((3.0,), "computed")
    assert read_entry(key) == (3.0,)  # rewritten


def test_an_entry_that_fails_certification_is_never_used(cache: Path) -> None:
    """A tampered (too small) σ fails the full-precision check: recomputed, never returned."""
    key = cache_key({"x": 3})
    cache.mkdir(parents=True)
    (cache / f"{key}.json").write_text(json.dumps({"key": key, "sigmas": [0.5]}))
    calls = Calls((2.0,))
    assert cached_sigmas({"x": 3}, calls.compute, calls.certify) == ((2.0,), "computed")
    assert calls.certified == 1 and read_entry(key) == (2.0,)


def test_an_unwritable_cache_folder_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("DPHYPO_CACHE_DIR", str(blocker))  # a file: its "calibration" folder cannot be made
    calls = Calls((2.0,))
    assert cached_sigmas({"x": 4}, calls.compute, calls.certify) == ((2.0,), "computed")


def test_a_dpsgd_calibration_is_cached_and_a_tampered_entry_cannot_print_a_wrong_epsilon(cache: Path) -> None:
    mechanism = DPSGDMechanism(sigma=1.0, batch_size=50, epochs=1, n_train=1000, n_val=200, score_noise=5.0)
    search = RepeatAndSelect(Poisson(10.0))  # RDP only (no PLD): fast
    first = cached_calibration(6.0, 1e-5, search, mechanism, profiles=False)
    again = cached_calibration(6.0, 1e-5, search, mechanism, profiles=False)
    assert again.sigma == first.sigma and again.evaluations == 1 and again.report.epsilon <= 6.0
    (entry,) = cache.iterdir()
    stored = json.loads(entry.read_text())
    entry.write_text(json.dumps({**stored, "sigmas": [first.sigma * 0.9]}))  # tampered: too little noise
    tampered = cached_calibration(6.0, 1e-5, search, mechanism, profiles=False)
    assert tampered.sigma == pytest.approx(first.sigma, rel=1e-12) and tampered.report.epsilon <= 6.0
    assert calibration_cache.read_entry(entry.stem) == (first.sigma,)  # repaired
