"""What a journal seals: canonical descriptions, equal in every process, never a repr with an address (issue #20)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from dphypo.privacy import PrivacyAccounting, RepeatAndSelect, geometric
from dphypo.privacy.dpsgd_run import dpsgd_run_profile, dpsgd_run_rdp
from dphypo.search.storage.describe import describe
from dphypo.search.tuner import Tuner
from dphypo.space import Grid, SearchSpace
from dphypo.strategies import GPTopSet, Uniform

ROOT = Path(__file__).resolve().parents[3]
ADDRESS = re.compile(r"0x[0-9a-f]{6,}|object at")

SCRIPT = """
import json
from dphypo.privacy import PrivacyAccounting, RepeatAndSelect, geometric
from dphypo.privacy.dpsgd_run import dpsgd_run_profile, dpsgd_run_rdp
from dphypo.search.tuner import Tuner
from dphypo.space import Grid, SearchSpace
from dphypo.train import DPSGD, DPSGDObjective
mechanism = DPSGD(batch_size=64, epochs=1, n_train=1079, n_val=359, score_noise=7.18).mechanism(0.9)
privacy = PrivacyAccounting(RepeatAndSelect(geometric(0.2)), mechanism.rdp(), 1e-5, profile=mechanism.profile())
space = SearchSpace({"lr": Grid((0.1, 0.3, 1.0, 3.0, 10.0), scale="log"), "clip": Grid((0.5, 1.0))})
print(json.dumps(Tuner(DPSGDObjective("digits"), space, privacy, mechanism=mechanism, seed=3).sealed_config(1)))
"""


def _sealed_in_a_new_process() -> dict:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_sealed_configuration_of_a_uniform_dpsgd_search_is_the_same_in_every_process() -> None:
    # The regression: the PLD profile was sealed as its repr, "<... object at 0x7f...>", so no resume matched.
    first, second = _sealed_in_a_new_process(), _sealed_in_a_new_process()
    assert first == second
    text = json.dumps(first)
    assert not ADDRESS.search(text)
    assert first["privacy"]["profile"]["sha256"] and first["privacy"]["profile"]["event"]
    assert first["objective"]["dataset"] == "digits" and first["objective"]["type"].endswith("DPSGDObjective")
    assert first["space"]["axes"]["lr"]["values"] == [0.1, 0.3, 1.0, 3.0, 10.0]  # every value, nothing abridged


def test_a_different_profile_or_space_changes_the_description() -> None:
    def profile(sigma: float) -> object:
        return describe(dpsgd_run_profile(sigma, 0.1, 10, score_noise=5.0))

    assert profile(1.0) == profile(1.0) and profile(1.0) != profile(1.01)
    five = SearchSpace({"x": Grid([0.1, 0.2, 0.3, 0.4, 0.5])})
    changed = SearchSpace({"x": Grid([0.1, 0.2, 0.3, 0.45, 0.5])})
    assert repr(five) == repr(changed)  # the repr abridges the middle values: it cannot be what is sealed
    assert describe(five) != describe(changed)


def test_describe_takes_dataclasses_arrays_and_paths_and_refuses_the_rest() -> None:
    @dataclass(frozen=True)
    class Settings:
        rate: float
        name: str
        weights: np.ndarray

    described = describe({"a": Settings(0.5, "x", np.arange(3.0)), "b": (1, np.int64(2)), "c": Path("a/b")})
    assert described["a"]["rate"] == 0.5 and described["a"]["type"].endswith("Settings")
    assert described["a"]["weights"]["shape"] == [3] and len(described["a"]["weights"]["sha256"]) == 64
    assert described["b"] == [1, 2] and described["c"] == "a/b"
    assert describe(float("nan")) == "nan"  # JSON has no NaN; the string keeps the value distinct

    class Plain:
        def __init__(self) -> None:
            self.rate = 0.1

    assert describe(Plain())["rate"] == 0.1  # a plain object: its type and attributes, no address
    holder = Plain()
    holder.lock = threading.Lock()  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match=r"config\.model\.lock \(lock\) has no exact description"):
        describe({"model": holder}, "config")


def test_every_strategy_and_a_profile_seal_without_reprs() -> None:
    curve = dpsgd_run_rdp(1.0, 0.1, 10, score_noise=5.0)
    space = SearchSpace({"x": Grid([0.1, 0.2, 0.3])})
    for strategy, search in ((Uniform(), RepeatAndSelect(geometric(0.2))),
                             (GPTopSet(C=2.0), RepeatAndSelect(geometric(0.2), 2.0, GPTopSet(C=2.0).c))):
        profile = dpsgd_run_profile(1.0, 0.1, 10, score_noise=5.0) if not search.adaptive else None
        privacy = PrivacyAccounting(search, curve, 1e-5, profile=profile)
        config = Tuner(lambda params, run: 0.0, space, privacy, strategy=strategy, seed=1).sealed_config(1)
        assert not ADDRESS.search(json.dumps(config))
        assert config["strategy"]["type"].endswith(type(strategy).__name__)
