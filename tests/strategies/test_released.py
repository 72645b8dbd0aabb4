"""Released probes are the only input of probe placement and of the recommendation (privacy rule 3, released)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from dphypo.api.two_stage import ReleasedProbe
from dphypo.search.records import Trial
from dphypo.space import SearchSpace
from dphypo.strategies.gp.placement import ProbePlacement, place_batch
from dphypo.strategies.recommend import Recommendation, recommend
from dphypo.strategies.released import CuratorOnlyError, ReleasedProbes, gp_targets, released_probes

SPACE = SearchSpace.from_grid({"lr": [0.01, 0.1, 1.0], "clip": [0.5, 1.0]}, {"lr": "log", "clip": "linear"})


def test_released_probes_are_read_from_what_stage_1_releases() -> None:
    probes = [ReleasedProbe({"lr": 0.1, "clip": 1.0}, 0.7), {"params": {"lr": 1.0, "clip": 0.5}, "score": None}]
    released = released_probes(probes, SPACE)
    assert released.indices.tolist() == [[3, 4]]
    assert released.scores[0, 0] == 0.7 and np.isnan(released.scores[0, 1])
    assert released_probes(released, SPACE) is released


@dataclass(frozen=True)
class _History:
    run_count: int
    trials: tuple[Trial, ...]


def test_a_placement_given_anything_curator_only_is_refused_in_one_line() -> None:
    trial = Trial(0, 3, {"lr": 0.1, "clip": 1.0}, 0.7, False, 12.5)
    refused = [
        ([trial], "curator-only field(s) error, failed, grid_index, number, seconds"),
        ([{"params": {"lr": 0.1, "clip": 1.0}, "score": 0.7, "seconds": 3.0}], "curator-only field(s) seconds"),
        (_History(7, (trial,)), "got _History"),
        ([_History(7, (trial,))], "curator-only field(s) run_count, trials"),
    ]
    for given, message in refused:
        with pytest.raises(CuratorOnlyError) as caught:
            released_probes(given, SPACE)
        assert message in str(caught.value) and "\n" not in str(caught.value)
    rng = np.random.default_rng(0)
    for call in (lambda: place_batch(ProbePlacement(), SPACE, [trial], 2, rng, "maximize"),  # type: ignore[arg-type]
                 lambda: recommend(Recommendation("gp-mean"), SPACE, [trial], "maximize", seed=0)):  # type: ignore[arg-type]
        with pytest.raises(CuratorOnlyError, match="ReleasedProbes only") as caught:
            call()
        assert "\n" not in str(caught.value)


def test_gp_targets_orient_and_score_a_failed_probe_worst() -> None:
    released = ReleasedProbes(np.array([[0, 1, 2], [0, 1, 2]]), np.array([[0.3, np.nan, 0.5], [np.nan] * 3]))
    targets, usable = gp_targets(released, "minimize")
    assert targets[0].tolist() == [-0.3, -0.5, -0.5] and usable.tolist() == [True, False]
    with pytest.raises(ValueError, match="one shape"):
        ReleasedProbes(np.zeros((2, 3), dtype=int), np.zeros((2, 2)))
