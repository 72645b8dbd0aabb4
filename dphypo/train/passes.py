"""The built-in recipe's runs trained in passes: :meth:`DPSGDObjective.train_pass` on the vectorised engine.

A search hands :class:`~dphypo.train.objective.DPSGDObjective` a batch of runs
(:class:`~dphypo.search.evaluation.PassObjective`); :func:`train_pass` trains them as candidates of one
:class:`~dphypo.train.vectorized.VectorizedDPSGD` pass and gives each run exactly what its own Opacus run would
have given it:

* the same streams: ``Candidate(lr, clip, seed=run.seed)`` derives initialisation, Poisson batches and noise from the
  run's secret seed as :meth:`DPSGDRun.make_private` does (privacy rule 6), so at a fixed search seed the pass and the
  Opacus path train the same models up to float round-off (different summation orders in the per-example gradients:
  about 1e-6 relative per step, which can flip a validation prediction near a decision boundary);
* its own booking (:meth:`DPSGDRun.book`), which the run's ``check`` compares with the mechanism
  (:func:`~dphypo.train.mechanism.check_budget`);
* its own released score: ``run.private_score(correct)`` from the run's secret score stream (privacy rule 4);
* its own failure: a candidate whose noisy update made its parameters non-finite is a
  :class:`~dphypo.search.records.DataFailure` of that run only (privacy rule 5: decided from the DP output, never
  from a loss); the others are unaffected.

The pass is padded with dummy candidates (fresh OS-entropy seeds; trained, then discarded unseen) up to the search's
pass size, so a pass takes as long whether it holds 1 or K real runs: a timing observer learns the number of passes,
``ceil(T / K)``, and nothing finer (the sequential Opacus loop reveals T itself through its duration).

Secure-mode mechanisms (Opacus's CSPRNG) have no vectorised counterpart: their runs train one by one through Opacus.
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Sequence
from typing import Any, Protocol

import torch

from dphypo.search.records import DataFailure, PrivateScore, RunContext, RunMisuse
from dphypo.train.data import DataSubset, Splits
from dphypo.train.mechanism import DPSGDMechanism, DPSGDRun
from dphypo.train.vectorized import Candidate, CandidateResult, EngineOptions, VectorizedDPSGD

__all__ = ["Recipe", "engine_for", "train_pass"]


class Recipe(Protocol):
    """What :func:`train_pass` needs of the built-in recipe (:class:`~dphypo.train.objective.DPSGDObjective`)."""

    @property
    def model(self) -> str | None: ...  # noqa: D102 - the recipe's fields

    @property
    def device(self) -> str | None: ...  # noqa: D102

    @property
    def mechanism(self) -> DPSGDMechanism | None: ...  # noqa: D102

    @property
    def subset(self) -> DataSubset | None: ...  # noqa: D102

    def __call__(self, params: dict[str, Any], run: RunContext) -> Any: ...  # noqa: D102 - one Opacus run

    def __hash__(self) -> int: ...  # the engine cache's key

    def training_splits(self) -> Splits: ...  # noqa: D102

    def _check_sizes(self, splits: Splits, mechanism: DPSGDMechanism) -> None: ...

    def hyperparameters(self, params: dict[str, Any]) -> tuple[float, float]: ...  # noqa: D102

    def released_count(self, correct: int, mechanism: DPSGDMechanism) -> int: ...  # noqa: D102

    def trained_model(self, params: dict[str, Any], state_dict: dict[str, torch.Tensor],  # noqa: D102
                      num_classes: int) -> Any: ...

#: The hyperparameters of a dummy candidate when a pass holds no real run (any value: results are discarded, and a
#: pass's duration does not depend on them).
_DUMMY_PARAMS = (0.1, 1.0)


@functools.lru_cache(maxsize=16)  # one engine per (batch size, epochs) setting of a search
def engine_for(objective: Recipe, mechanism: DPSGDMechanism) -> VectorizedDPSGD:
    """The vectorised engine of ``objective`` under ``mechanism`` (cached: data on the device, model compiled once).

    Raises:
        ValueError: The mechanism's sizes do not match the objective's splits (as the Opacus path refuses them).
    """
    splits = objective.training_splits()
    objective._check_sizes(splits, mechanism)
    return VectorizedDPSGD(str(objective.model), mechanism, splits.x_train, splits.y_train, splits.x_val,
                           splits.y_val, num_classes=splits.num_classes, options=EngineOptions(device=objective.device),
                           nominal_n_train=objective.subset is not None or splits.nominal_sizes is not None)


def train_pass(
    objective: Recipe, tasks: Sequence[tuple[dict[str, Any], RunContext]], pad_to: int = 0,
) -> list[Any]:
    """Train every ``(params, run)`` of ``tasks`` in one vectorised pass (see the module docstring).

    Args:
        objective: The built-in recipe (its model, splits, device).
        tasks: The runs, each with its opened :class:`~dphypo.train.mechanism.DPSGDRun`; all under one mechanism.
        pad_to: Candidates to train in all (dummies fill the pass; their results are discarded).

    Returns:
        One entry per task, in order: ``(score, TrainedModel)``, or the exception that run failed with
        (:class:`DataFailure`, a :class:`RunMisuse` for bad hyperparameters, a ``ValueError`` for a run without
        the objective's mechanism).
    """
    outs: list[Any] = [None] * len(tasks)
    ready: list[tuple[int, float, float, DPSGDRun]] = []
    for i, (params, run) in enumerate(tasks):
        try:
            own = run.training_params(params) if isinstance(run, DPSGDRun) else params  # privacy axes consumed
            lr, clip = objective.hyperparameters(own)  # the Opacus path's parsing
            ready.append((i, lr, clip, _dpsgd_run(objective, run)))
        except (RunMisuse, ValueError) as exc:
            outs[i] = exc
    if not ready:
        return outs
    # One engine pass per mechanism: a search over batch size or epochs trains each setting under its own
    # (σ_i, q_i, steps_i); the dummies pad the first group, so the pass trains pad_to candidates in all.
    groups: dict[DPSGDMechanism, list[tuple[int, float, float, DPSGDRun]]] = {}
    for entry in ready:
        groups.setdefault(entry[3].dpsgd, []).append(entry)
    padding = max(0, pad_to - len(ready))
    for mechanism, group in groups.items():
        if mechanism.secure_mode:  # no CSPRNG in the engine: Opacus, run by run
            for i, *_ in group:
                outs[i] = _opacus_run(objective, *tasks[i])
            continue
        engine = engine_for(objective, mechanism)
        candidates = [Candidate(lr=lr, clip=clip, seed=run.seed) for _, lr, clip, run in group]
        result = engine.run(candidates + _dummies(candidates, padding))
        padding = 0
        for (i, _, _, run), outcome in zip(group, result.results, strict=False):  # dummies dropped unseen
            outs[i] = _released(objective, run, tasks[i][0], outcome)
    return outs


def _dpsgd_run(objective: Recipe, run: RunContext) -> DPSGDRun:
    """The run's DP-SGD context, refused as the Opacus path refuses it."""
    if objective.mechanism is not None and run.mechanism != objective.mechanism:
        raise ValueError("run.mechanism must be the objective's mechanism: pass the same DPSGDMechanism to the "
                         "Tuner (mechanism=)")
    if not isinstance(run.mechanism, DPSGDMechanism) or not isinstance(run, DPSGDRun):
        raise ValueError("the run has no DPSGDMechanism: pass mechanism= to the Tuner (dphypo.tune does it for you)")
    return run


def _opacus_run(objective: Recipe, params: dict[str, Any], run: RunContext) -> Any:
    """The Opacus path of one run, its failure returned (not raised) as :func:`train_pass` reports it."""
    try:
        return objective(params, run)
    except Exception as exc:  # a RunMisuse too: evaluate_pass raises it
        return exc


def _dummies(real: list[Candidate], count: int) -> list[Candidate]:
    """``count`` dummy candidates: the real ones' hyperparameters (cyclically) with fresh OS-entropy seeds."""
    params = [(c.lr, c.clip) for c in real] or [_DUMMY_PARAMS]
    return [Candidate(lr=params[k % len(params)][0], clip=params[k % len(params)][1], seed=secrets.randbits(63))
            for k in range(max(0, count))]


def _released(objective: Recipe, run: DPSGDRun, params: dict[str, Any], outcome: CandidateResult) -> Any:
    """What the run's objective call returns: its booking registered, then ``(score, model)`` or its failure."""
    run.book(outcome.booked)  # the run's check() compares it with the mechanism
    if outcome.failed:
        return DataFailure(str(outcome.failure))
    mechanism = run.dpsgd
    splits = objective.training_splits()
    # The accounted Gaussian mechanism with noise from the run's secret stream (privacy rule 4); the exact
    # accuracy only when the mechanism treats the validation data as public.
    correct = objective.released_count(outcome.correct, mechanism)
    score: float | PrivateScore = (correct / (mechanism.n_val or len(splits.y_val))
                                   if mechanism.score_noise is None else run.private_score(correct))
    return score, objective.trained_model(params, dict(outcome.state_dict), splits.num_classes)
