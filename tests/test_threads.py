"""dphypo's own torch work runs with a limited thread count that is restored afterwards (dphypo._threads)."""

from __future__ import annotations

import pytest
import torch

from dphypo._threads import default_threads, torch_threads
from dphypo.search.records import DataFailure, Run
from dphypo.train.data import load_dataset
from dphypo.train.mechanism import DPSGDMechanism
from dphypo.train.objective import DPSGDObjective

SPLITS = load_dataset("digits")
PLAN = DPSGDMechanism.from_splits(SPLITS, sigma=1.0, batch_size=256, epochs=1, score_noise=2.0)
OBJECTIVE = DPSGDObjective("digits", "digits-mlp", PLAN, device="cpu")


@pytest.fixture
def three_threads():
    """The user's own setting, which dphypo must hand back unchanged."""
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    yield 3
    torch.set_num_threads(before)


def test_a_training_runs_limited_and_restores_the_callers_count(three_threads, monkeypatch) -> None:
    seen = []
    original = torch.optim.SGD.step

    def step(self, *args, **kwargs):  # what the count is while dphypo trains
        seen.append(torch.get_num_threads())
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.SGD, "step", step)
    score, _ = OBJECTIVE({"lr": 1.0, "clip": 1.0}, Run(0, 7, None, 0, PLAN).open())
    assert 0.0 < score < 1.5
    assert seen and set(seen) == {default_threads()}
    assert torch.get_num_threads() == three_threads


def test_a_training_that_fails_restores_the_callers_count(three_threads) -> None:
    with pytest.raises(DataFailure, match="non-finite"):
        OBJECTIVE({"lr": 1e12, "clip": 1e30}, Run(0, 7, None, 0, PLAN).open())  # its first noisy update overflows
    assert torch.get_num_threads() == three_threads


def test_torch_threads_nests_and_restores_after_an_exception(three_threads) -> None:
    with torch_threads(1) as outer:
        assert outer == 1 and torch.get_num_threads() == 1
        with pytest.raises(RuntimeError, match="boom"), torch_threads(2):
            assert torch.get_num_threads() == 2
            raise RuntimeError("boom")
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == three_threads


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_torch_threads_refuses_a_bad_count(bad) -> None:
    with pytest.raises(ValueError, match="n must be a positive integer"), torch_threads(bad):
        pass


def test_default_threads_reads_the_environment(monkeypatch) -> None:
    monkeypatch.delenv("DPHYPO_TORCH_THREADS", raising=False)
    assert default_threads() == 1
    monkeypatch.setenv("DPHYPO_TORCH_THREADS", "2")
    assert default_threads() == 2
    monkeypatch.setenv("DPHYPO_TORCH_THREADS", "zero")
    with pytest.raises(ValueError, match="DPHYPO_TORCH_THREADS must be a positive integer, got 'zero'"):
        default_threads()
