"""Evaluating runs in passes (issue #22): the PassObjective protocol in run_batch, without torch.

A fake pass objective records how it was called; the tests check what the core promises any pass objective: one
padded pass per worker per batch, every run journaled, a failure of one run failing that run only, a whole-pass
failure failing every run of it without retry, a misuse stopping the search, and a pass lost with its worker charged
as one lost attempt per run with an error that names the pass size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pytest

from dphypo.search.evaluation import PassObjective, pass_groups, pass_objective, pass_pads, run_batch
from dphypo.search.execution import SequentialExecutor
from dphypo.search.recording import LostAttemptsExceeded, Recorder
from dphypo.search.records import DataFailure, Run, RunMisuse
from dphypo.space import Grid, SearchSpace

SPACE = SearchSpace({"x": Grid([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])})


@dataclass
class FakePasses:
    """Scores ``x`` per run; fails the runs named in ``fail``; records every call."""

    trains_in_passes: bool = True
    fail: set[int] = field(default_factory=set)
    misuse: set[int] = field(default_factory=set)
    raise_pass: bool = False
    passes: list[tuple[list[int], int]] = field(default_factory=list)
    single: list[int] = field(default_factory=list)

    def __call__(self, params: dict[str, Any], run: Any) -> float:
        self.single.append(run.number)
        return float(params["x"])

    def train_pass(self, tasks: Any, *, pad_to: int = 0) -> list[Any]:
        self.passes.append(([run.number for _, run in tasks], pad_to))
        if self.raise_pass:
            raise MemoryError("the whole pass failed")
        outs: list[Any] = []
        for params, run in tasks:
            if run.number in self.fail:
                outs.append(DataFailure("non-finite training loss"))
            elif run.number in self.misuse:
                outs.append(RunMisuse("params must contain x"))
            else:
                outs.append(float(params["x"]))
        return outs


class LosingExecutor(SequentialExecutor):
    """Loses the first attempt of every item (as a worker killed mid-item), then runs it."""

    def run(self, fn, items, *, on_result=None, on_lost=None, max_attempts=3, on_start=None):  # type: ignore[override]
        results = []
        for index, item in enumerate(items):
            on_start(index, 1)
            on_lost(index, 1)
            on_start(index, 2)
            results.append(fn(item))
            on_result(index, results[-1])
        return results


def _runs(count: int) -> list[Run]:
    return [Run(number, 1000 + number, None, number % 6) for number in range(count)]


def _batch(objective: Any, runs: list[Run], *, pass_size: int | None = None, executor: Any = None,
           max_lost: int = 0) -> tuple[dict, Recorder]:
    recorder = Recorder("maximize", max_lost=max_lost)
    done = run_batch(objective, SPACE, runs, executor or SequentialExecutor(), recorder, None, completed=0,
                     pass_size=pass_size)
    return done, recorder


def test_a_pass_objective_trains_a_batch_in_one_pass_padded_to_the_pass_size() -> None:
    objective = FakePasses()
    assert isinstance(objective, PassObjective) and pass_objective(objective) is objective
    done, recorder = _batch(objective, _runs(3), pass_size=8)
    assert objective.passes == [([0, 1, 2], 8)] and not objective.single
    assert [done[n][0].score for n in range(3)] == [0.1, 0.2, 0.3]
    assert sorted(recorder.journal.finished_runs()) == [0, 1, 2]


def test_an_objective_that_does_not_train_in_passes_is_called_run_by_run() -> None:
    objective = FakePasses(trains_in_passes=False)
    assert pass_objective(objective) is None
    done, _ = _batch(objective, _runs(3), pass_size=8)
    assert objective.single == [0, 1, 2] and not objective.passes
    assert [done[n][0].score for n in range(3)] == [0.1, 0.2, 0.3]


def test_a_failed_run_of_a_pass_scores_worst_and_changes_nothing_for_the_others() -> None:
    done, recorder = _batch(FakePasses(fail={1}), _runs(3))
    assert math.isnan(done[1][0].score) and done[1][0].failed and "DataFailure" in str(done[1][0].error)
    assert [done[n][0].score for n in (0, 2)] == [0.1, 0.3]
    assert recorder.journal.finished_runs()[1].failed  # journaled as a data failure, never retried


def test_a_pass_that_raises_fails_every_run_of_it_once() -> None:
    objective = FakePasses(raise_pass=True)
    done, recorder = _batch(objective, _runs(3))
    assert len(objective.passes) == 1  # not retried (privacy rule 5)
    assert all(done[n][0].failed and "MemoryError" in str(done[n][0].error) for n in range(3))
    assert recorder.lost_attempts == 0


def test_a_misuse_inside_a_pass_stops_the_search() -> None:
    with pytest.raises(RunMisuse, match="params must contain"):
        _batch(FakePasses(misuse={2}), _runs(3))


def test_a_pass_lost_with_its_worker_charges_every_run_and_names_the_pass_size() -> None:
    with pytest.raises(LostAttemptsExceeded, match=r"passes of 3 lose all 3.*--max-lost \(max_lost\) ≥ 3"):
        _batch(FakePasses(), _runs(3), executor=LosingExecutor(), max_lost=2)
    done, recorder = _batch(FakePasses(), _runs(3), executor=LosingExecutor(), max_lost=3)
    assert recorder.lost_attempts == 3 and [done[n][0].score for n in range(3)] == [0.1, 0.2, 0.3]


def test_a_run_by_run_loss_keeps_the_plain_lost_attempts_message() -> None:
    with pytest.raises(LostAttemptsExceeded) as info:
        _batch(FakePasses(trains_in_passes=False), _runs(2), executor=LosingExecutor(), max_lost=1)
    assert "passes of" not in str(info.value)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_the_passes_of_a_batch_do_not_depend_on_how_many_runs_it_holds(workers: int) -> None:
    # Privacy rule 1 / T secret: the last batch of a search is partial; its passes (count and padded sizes) must be
    # those of a full batch, so their number and duration reveal nothing about T beyond the number of batches.
    shapes = set()
    for pending in range(0, 9):
        groups = pass_groups(pending, 8, workers)
        assert [j for g in groups for j in g] == list(range(pending))  # every run once, in order
        shapes.add((len(groups), tuple(pass_pads(groups, 8))))
    assert len(shapes) == 1
    (count, pads), = shapes
    assert count == workers and sum(pads) >= 8
