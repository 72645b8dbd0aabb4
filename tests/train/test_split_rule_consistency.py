"""The accountant reads ``mechanism.split_rule`` to choose Theorem S's bound (docs/proofs/split.md): the built-in
objective must refuse a mechanism that claims a per-record split while the objective splits by a seeded permutation
(where adding one record moves many others, so Theorem S does not apply), not only the converse."""

from __future__ import annotations

import pytest

from dphypo.privacy.split import SplitRule
from dphypo.search.records import Run
from dphypo.train.mechanism import DPSGDMechanism
from dphypo.train.objective import DPSGDObjective


def test_a_per_record_rule_on_a_permutation_split_objective_is_refused() -> None:
    objective = DPSGDObjective("digits", "digits-mlp", device="cpu")  # seeded permutation split: 1079 / 359
    claimed = DPSGDMechanism(sigma=1.0, batch_size=64, epochs=1, n_train=1079, n_val=359, score_noise=2.0,
                             split_rule=SplitRule("draw", 0.6, 0.2, 0.2))
    with pytest.raises(ValueError, match="split_rule"):
        objective({"lr": 1.0, "clip": 1.0}, Run(0, 7, None, 0, claimed).open())
