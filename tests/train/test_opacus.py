"""The Opacus glue of a run (dphypo/train/opacus.py): seeded generators, and the CSPRNG of secure mode."""

from __future__ import annotations

import pytest
import torch

from dphypo.search.records import Run
from tests.train._helpers import _mechanism, _train


def test_same_run_seed_same_training_and_global_rng_untouched() -> None:
    state = torch.random.get_rng_state()
    a = _train(Run(0, 11, None, 0, _mechanism()).open(), epochs=2)
    assert torch.equal(state, torch.random.get_rng_state())  # noise and Poisson sampling use the run's generators
    b = _train(Run(0, 11, None, 0, _mechanism()).open(), epochs=2)
    c = _train(Run(0, 12, None, 0, _mechanism()).open(), epochs=2)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(torch.equal(x, y) for x, y in zip(a, c, strict=True))


# -- Opacus's secure mode ----------------------------------------------------------------------------------------
def test_secure_mode_without_torchcsprng_fails_in_one_line_before_training(monkeypatch) -> None:
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "torchcsprng" else real_find_spec(name, *a))
    run = Run(0, 5, None, 0, _mechanism(secure_mode=True)).open()
    with pytest.raises(ValueError, match="secure_mode needs Opacus's CSPRNG package torchcsprng") as caught:
        _train(run, epochs=1)
    assert "\n" not in str(caught.value) and not run.engines


def test_secure_mode_uses_opacus_csprng_for_noise_and_batches(monkeypatch) -> None:
    import importlib.machinery
    import os
    import sys
    import types

    made: list[torch.Generator] = []

    def create_random_device_generator(path: str) -> torch.Generator:  # stands in for torchcsprng's /dev/urandom
        generator = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little"))
        made.append(generator)
        return generator

    fake = types.ModuleType("torchcsprng")
    fake.__spec__ = importlib.machinery.ModuleSpec("torchcsprng", None)
    fake.create_random_device_generator = create_random_device_generator
    monkeypatch.setitem(sys.modules, "torchcsprng", fake)
    run = Run(0, 5, None, 0, _mechanism(secure_mode=True)).open()
    first = _train(run, epochs=1)
    engine = run.engines[0]
    assert engine.secure_mode and made and engine.secure_rng is made[0]
    again = _train(Run(0, 5, None, 0, _mechanism(secure_mode=True)).open(), epochs=1)
    assert any(not torch.equal(a, b) for a, b in zip(first, again, strict=True))  # nothing seeded from run.seed

