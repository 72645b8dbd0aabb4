"""Assumption (N) of docs/proofs/split.md §5 on the training side: under a per-record split every quantity a run's
privacy rests on (sampling rate, steps, the normalisation of the noisy sum, the score's divisor) is a public nominal
value, never the realised, data-dependent size of a split; a count above the nominal n_val is clipped."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from dphypo.privacy.split import SplitRule
from dphypo.search.records import Run
from dphypo.train import DPSGD
from dphypo.train.data import PerRecordSplit, split_arrays
from dphypo.train.mechanism import DPSGDMechanism, private_accuracy
from dphypo.train.objective import DPSGDObjective, _PlannedBatches
from dphypo.train.vectorized import VectorizedDPSGD

RULE = PerRecordSplit("draw", val_fraction=0.25, test_fraction=0.0, seed=11)
POOL = 200  # the public pool size the nominal sizes come from


def _pool(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.random((n, 1, 8, 8), dtype=np.float32), rng.integers(0, 10, n)


def _splits(n: int):
    x, y = _pool(n)
    return split_arrays(x, y, RULE, public_size=POOL, num_classes=10)


def test_from_splits_takes_the_nominal_sizes_and_rule_whatever_the_realised_ones() -> None:
    small, large = _splits(POOL), _splits(POOL + 1)  # one record more in the pool
    assert len(large.y_train) + len(large.y_val) == len(small.y_train) + len(small.y_val) + 1
    for splits in (small, large):
        assert (len(splits.y_train), len(splits.y_val)) != (150, 50) or splits is small  # realised sizes vary
    mechanisms = [DPSGDMechanism.from_splits(s, sigma=1.0, batch_size=10, epochs=1, score_noise=3.0)
                  for s in (small, large)]
    assert mechanisms[0] == mechanisms[1]  # same q, steps, divisor: adding a record moves none of them
    m = mechanisms[0]
    assert (m.n_train, m.n_val) == (150, 50) and m.split_rule == RULE.rule
    assert m.expected_batch_size == int(150 * m.sample_rate)
    recipes = [DPSGD.from_splits(s, batch_size=10, epochs=1, score_noise=3.0) for s in (small, large)]
    assert recipes[0] == recipes[1] and recipes[0].split_rule == RULE.rule
    assert recipes[0].mechanism(1.0) == m
    assert m.describe()["split_rule"] == {"kind": "draw", "train": 0.75, "val": 0.25, "test": 0.0}
    plain = DPSGDMechanism(sigma=1.0, batch_size=10, epochs=1, n_train=150)
    assert "split_rule" not in plain.describe()  # a permutation split describes itself as before


@pytest.mark.parametrize("realised", [60, 150, 190])
def test_the_vectorised_engine_samples_and_normalises_with_the_nominal_n_train(realised: int) -> None:
    mechanism = DPSGDMechanism(sigma=1.0, batch_size=10, epochs=1, n_train=150, n_val=50, score_noise=3.0,
                               split_rule=RULE.rule)
    x, y = _pool(realised)
    engine = VectorizedDPSGD("digits-mlp", mechanism, x, y, x[:5], y[:5], nominal_n_train=True)
    assert engine.n == realised  # the Poisson masks run over the realised records ...
    assert engine.rate == 1 / mechanism.batches_per_epoch  # ... at the nominal rate
    assert engine.divisor == mechanism.expected_batch_size == int(150 * mechanism.sample_rate)  # nominal divisor


@pytest.mark.parametrize("realised", [60, 190])
def test_opacus_samples_and_normalises_with_the_nominal_n_train(realised: int) -> None:
    mechanism = DPSGDMechanism(sigma=1.0, batch_size=10, epochs=1, n_train=150, n_val=50, score_noise=3.0,
                               split_rule=RULE.rule)
    run = Run(0, 3, None, 0, mechanism).open()
    g = torch.Generator().manual_seed(0)
    dataset = TensorDataset(torch.randn(realised, 4, generator=g), torch.randint(0, 3, (realised,), generator=g))
    loader = DataLoader(dataset, batch_sampler=_PlannedBatches(realised, mechanism.batches_per_epoch))
    model = torch.nn.Linear(4, 3)
    _, optimizer, dp_loader = run.make_private(model, torch.optim.SGD(model.parameters(), lr=0.1), loader,
                                               max_grad_norm=1.0)
    assert optimizer.expected_batch_size == mechanism.expected_batch_size  # not int(realised * q)
    assert dp_loader.sample_rate == 1 / mechanism.batches_per_epoch and len(dp_loader) == mechanism.steps_per_epoch


def test_a_count_above_the_nominal_n_val_is_clipped_under_a_per_record_split() -> None:
    mechanism = DPSGDMechanism(sigma=1.0, batch_size=10, epochs=1, n_train=150, n_val=50, score_noise=3.0,
                               split_rule=RULE.rule)
    for count in (51, 80):
        clipped = private_accuracy(count, mechanism, np.random.default_rng(4))
        assert clipped == private_accuracy(50, mechanism, np.random.default_rng(4))
    with pytest.raises(ValueError, match=r"count in \[0, n_val=50\], got -1"):
        private_accuracy(-1, mechanism, np.random.default_rng(4))
    permutation = DPSGDMechanism(sigma=1.0, batch_size=10, epochs=1, n_train=150, n_val=50, score_noise=3.0)
    with pytest.raises(ValueError, match=r"count in \[0, n_val=50\], got 51"):  # a bug of the objective there
        private_accuracy(51, permutation, np.random.default_rng(4))


@pytest.mark.parametrize("engine", ["opacus", "vectorized"])
def test_a_digits_run_on_a_per_record_split_trains_at_the_nominal_rate(engine: str) -> None:
    split = PerRecordSplit("draw", val_fraction=0.2, test_fraction=0.2, seed=5)
    objective = DPSGDObjective("digits", "digits-mlp", device="cpu", split=split, engine=engine)
    splits = objective.splits()
    assert splits is objective.splits()  # one draw, cached for every run of the search
    assert splits.nominal_sizes == (1079, 359, 359) and len(splits.y_train) != 1079
    mechanism = DPSGDMechanism.from_splits(splits, sigma=1.0, batch_size=64, epochs=1, score_noise=2.0)
    run = Run(0, 7, None, 0, mechanism).open()
    params = {"lr": 1.0, "clip": 1.0}
    score, model = (objective(params, run) if engine == "opacus" else objective.train_pass([(params, run)])[0])
    run.check(finished=True)
    assert list(run.engines[0].accountant.history) == [(1.0, mechanism.sample_rate, mechanism.steps)]
    assert 0.3 < float(score) < 1.2
    assert model.metadata()["split_rule"] == split.rule.describe()  # the public rule, never the seed
    assert "seed" not in model.metadata()["split_rule"]
    with pytest.raises(ValueError, match="per-record split"):
        model.test_accuracy()
    wrong = DPSGDMechanism(sigma=1.0, batch_size=64, epochs=1, n_train=len(splits.y_train),
                           n_val=len(splits.y_val), score_noise=2.0, split_rule=split.rule)
    with pytest.raises(ValueError, match=r"split sizes \(1079, 359\)"):  # realised sizes refused
        objective(params, Run(0, 7, None, 0, wrong).open())



def test_a_dataset_with_an_official_test_set_refuses_a_test_fraction_eagerly() -> None:
    with pytest.raises(ValueError, match="test_fraction must be 0"):
        DPSGDObjective("mnist", split=PerRecordSplit("draw", val_fraction=0.2, test_fraction=0.1, seed=1))



def test_the_objective_clips_the_released_count_to_the_nominal_n_val_only_where_sizes_are_nominal() -> None:
    mechanism = DPSGDMechanism(sigma=1.0, batch_size=64, epochs=1, n_train=1079, n_val=359, score_noise=2.0,
                               split_rule=SplitRule("draw", 0.6, 0.2, 0.2))
    per_record = DPSGDObjective("digits", split=PerRecordSplit("draw", seed=5))
    assert per_record.released_count(400, mechanism) == 359 and per_record.released_count(12, mechanism) == 12
    assert DPSGDObjective("digits").released_count(400, mechanism) == 400  # split sizes: left to the refusal
