"""``dphypo.tune``: a private DP-SGD hyperparameter search with one honest (ε, δ), in one call.

The function builds the privacy plan (run-count distribution, the strategy's density bounds, the per-run DP-SGD
plan), calibrates the noise multiplier so the *whole search* meets the budget (or accounts a given σ), and runs the
DP-HyPO loop. Your training function receives the calibrated plan through ``run``::

    def train(params, run):
        model, optimizer, loader = run.make_private(model, optimizer, loader, max_grad_norm=params["clip"])
        ...train with lr=params["lr"]...
        return run.private_score(correct), model      # the score must be private too (privacy rule 4)

Calibration and the release use the minimum over every valid bound. For a uniform search (C = c = 1) the
privacy profile of one whole run (the DP-SGD PLD composed with the Gaussian PLD of the score noise,
:meth:`dphypo.train.DPSGDPlan.profile`) adds the Koskela-Redberg-Wang 2024 profile bounds to the RDP
accountant; adaptive searches (C > c) are accounted with RDP only (Theorem B of docs/proofs/adaptive.md: no
profile bound is proven for them).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from dphypo.privacy import PrivacyPlan, RunCountDistribution, SearchSpec, calibrate_sigma, geometric
from dphypo.privacy.dpsgd_run import dpsgd_run_profile_or_skip
from dphypo.privacy.profiles import PldProfile, ProfileSkipped
from dphypo.search.tuner import Objective, SearchResult, Tuner
from dphypo.space import SearchSpace
from dphypo.strategies import GPUCB, Direction, Strategy, Uniform
from dphypo.train.objective import check_dpsgd_space
from dphypo.train.recipe import DPSGD

if TYPE_CHECKING:
    from dphypo.search.execution import Executor
    from dphypo.train.plan import DPSGDPlan

__all__ = ["DEFAULT_RUNS", "check_removed_arguments", "profile_or_skipped", "resolve_strategy", "tune"]

#: Default run count: geometric with E[T] = 20 (a few minutes on a CPU for the digits demo).
DEFAULT_RUNS = geometric(0.05)


_TRAINING = "training=DPSGD(batch_size=..., epochs=..., n_train=..., n_val=..., score_noise=..., secure_mode=...)"
_STRATEGY = "strategy=GPUCB(C=..., c=..., tau=..., beta=..., scale=...)"
_SUBSAMPLED = "dphypo.tune_subsampled(..., fraction=..., variant=...)"
#: Arguments of the 0.1 ``tune`` that moved, and where they went (a user who typed one gets one line naming it).
REMOVED_ARGUMENTS: dict[str, str] = {
    **dict.fromkeys(("n_train", "batch_size", "epochs", "n_val", "score_noise", "secure_mode"), _TRAINING),
    **dict.fromkeys(("C", "c", "tau", "beta", "scale"), _STRATEGY),
    "tune_fraction": _SUBSAMPLED,
    "subsampled_variant": _SUBSAMPLED,
    "train_fn": "the first positional argument (objective)",
}


def check_removed_arguments(function: str, given: Mapping[str, Any]) -> None:
    """Refuse arguments of an earlier signature with one line naming their replacement.

    Raises:
        TypeError: ``given`` is not empty.
    """
    for name in given:
        where = REMOVED_ARGUMENTS.get(name)
        if where is None:
            raise TypeError(f"{function}() got an unexpected keyword argument {name!r}")
        raise TypeError(f"{function}() no longer takes {name}=; pass {where}")


def resolve_strategy(strategy: Strategy | str | None) -> Strategy:
    """The strategy a ``strategy=`` argument names.

    ``None``/``"uniform"`` → :class:`~dphypo.strategies.Uniform`, ``"gp"`` → :class:`~dphypo.strategies.GPUCB`
    (C = 2, c = 0.75), a strategy object as is. Uniform is the default because the project's equal-ε studies
    favour it at the default budget (ε = 8, E[T] = 20 on digits: GP-UCB −0.021 [−0.023, −0.019] paired,
    ``docs/studies.md``).

    Raises:
        ValueError: An unknown name.
    """
    if strategy is None or strategy == "uniform":
        return Uniform()
    if strategy == "gp":
        return GPUCB()
    if isinstance(strategy, str):
        raise ValueError(f"strategy must be 'gp', 'uniform' or a Strategy object, got {strategy!r}")
    if not callable(getattr(strategy, "start", None)):  # what the search calls of a strategy
        raise TypeError(f"strategy must be 'gp', 'uniform' or a Strategy (e.g. dphypo.GPUCB(C=2, c=0.75)), got "
                        f"{type(strategy).__name__}")
    return strategy


def search_spec(strategy: Strategy, runs: RunCountDistribution | None) -> SearchSpec:
    """The accounted search: T's distribution and the strategy's own density bounds (C, c)."""
    return SearchSpec(runs if runs is not None else DEFAULT_RUNS, strategy.C, strategy.c)


def profile_or_skipped(plan: DPSGDPlan) -> PldProfile | ProfileSkipped:
    """The per-run PLD, or a ProfileSkipped the accountant reports when it would exceed its size cap.

    The same construction as ``dphypo account`` and ``dphypo calibrate``
    (:func:`~dphypo.privacy.dpsgd_run.dpsgd_run_profile_or_skip`), so all three print the same ε.
    """
    return dpsgd_run_profile_or_skip(plan.sigma, plan.sample_rate, plan.steps, score_noise=plan.score_noise)


def tune(
    objective: Objective,
    space: SearchSpace,
    training: DPSGD,
    *,
    epsilon: float | None = None,
    sigma: float | None = None,
    delta: float = 1e-5,
    strategy: Strategy | str | None = None,
    runs: RunCountDistribution | None = None,
    direction: Direction = "maximize",
    seed: int | None = None,
    executor: Executor | str | None = None,
    journal: str | os.PathLike[str] | None = None,
    runs_per_update: int | None = None,
    max_lost: int = 0,
    progress: Callable[[int], None] | None = None,
    **removed: Any,
) -> SearchResult:
    """Run a private hyperparameter search of DP-SGD candidates and release the best one with its total (ε, δ).

    Args:
        objective: ``objective(params, run) -> score`` or ``(score, artifact)``; it must train through
            ``run.make_private(...)`` (so the planned σ and sampling rate are used and checked) and return
            ``run.private_score(count)`` when ``training.score_noise`` is set.
        space: The grid (and prior) of hyperparameters.
        training: How every candidate trains (:class:`~dphypo.train.DPSGD`: batch size, epochs, public set sizes,
            score noise); σ is added by the search.
        epsilon: Total ε of the whole search; σ is calibrated to meet it. Give this or ``sigma``.
        sigma: A fixed noise multiplier (the total ε is then reported, not targeted).
        delta: δ of the guarantee.
        strategy: :class:`~dphypo.strategies.Uniform` (default; Algorithm 2, C = c = 1),
            :class:`~dphypo.strategies.GPUCB` (e.g. ``GPUCB(C=2, c=0.75)``: DP-HyPO Algorithm 3) or any Strategy; its
            ``C`` and ``c`` are the accounted density bounds. ``"uniform"``/``"gp"`` name those two with their
            defaults. Uniform is the default because the equal-ε studies favour it at ε = 8, E[T] = 20.
        runs: Distribution of the number of runs T (default: geometric, E[T] = 20).
        direction: ``"maximize"`` or ``"minimize"`` the score.
        seed: Seed of the whole search (T, candidates, batches, DP-SGD noise, score noise). ``None`` (default):
            128 bits of fresh OS entropy, kept only in the curator-only history and journal. A given seed is a
            **curator secret** (anyone who knows it can recompute T and the noise): never a public value.
        executor: Where runs execute: ``"sequential"`` (default), ``"process"``, ``"ray"`` or an
            :class:`~dphypo.search.execution.Executor` (see :class:`~dphypo.search.tuner.Tuner`).
        journal: Crash-safe journal file (curator only): a new search is sealed into it, an interrupted one
            resumes from it without redrawing T (see ``docs/parallel.md``).
        runs_per_update: Candidates drawn from one projected density per update (default: one per worker).
        max_lost: Attempts the search may lose to a dead worker or process (kill -9, a lost Ray node) and still
            release; each is charged up front as one more released run, and ε and the calibrated σ include the
            charge whether or not it is used. One more loss stops the search without a release
            (docs/parallel.md). Default 0: any loss stops the search.
        progress: Called with the number of completed runs (never with scores).
        **removed: Arguments of the earlier signature are refused with one line naming their replacement.

    Returns:
        The publishable ``release`` (best params, score, artifact, ε, δ, and the plan) and the curator-only
        ``history``.

    Example:
        A logistic regression on 1,000 synthetic points, tuned over four learning rates at total ε = 4:

        >>> import torch
        >>> from torch import nn
        >>> from dphypo import DPSGD, LogFloat, SearchSpace, Uniform, tune
        >>> x, y = torch.randn(1000, 4, generator=torch.Generator().manual_seed(0)), torch.zeros(1000).long()
        >>> def objective(params, run):
        ...     model = nn.Linear(4, 2)
        ...     loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=50)
        ...     optimizer = torch.optim.SGD(model.parameters(), lr=params["lr"])
        ...     model, optimizer, loader = run.make_private(model, optimizer, loader, max_grad_norm=1.0)
        ...     for xb, yb in loader:
        ...         optimizer.zero_grad()
        ...         nn.functional.cross_entropy(model(xb), yb).backward()
        ...         optimizer.step()
        ...     return run.private_score(int((model(x[:300]).argmax(1) == y[:300]).sum()))  # a stand-in validation
        >>> space = SearchSpace({"lr": LogFloat(1e-3, 1.0, 4)})
        >>> training = DPSGD(batch_size=50, epochs=1, n_train=1000, n_val=300, score_noise=5.0)
        >>> result = tune(objective, space, training, epsilon=4.0, strategy=Uniform(), seed=1)
        >>> result.release.epsilon <= 4.0, result.release.params["lr"] in space.axes["lr"].values
        (True, True)
    """
    check_removed_arguments("tune", removed)
    if not isinstance(training, DPSGD):
        raise TypeError(f"training must be a dphypo.train.DPSGD, got {training!r}")
    check_dpsgd_space(space)
    if (epsilon is None) == (sigma is None):
        raise ValueError("give exactly one of epsilon (total budget to calibrate for) or sigma (fixed noise)")
    chosen = resolve_strategy(strategy)
    search = search_spec(chosen, runs)
    # The profile bounds are proven for uniform searches only (KRW 2024 Sec. 4); adaptive ones stay RDP.
    profile_for: Callable[[float], PldProfile | ProfileSkipped] | None = None
    if not search.adaptive:
        def profile_for(s: float) -> PldProfile | ProfileSkipped:
            return profile_or_skipped(training.plan(s))

    def tuner(plan: DPSGDPlan, profile: PldProfile | ProfileSkipped | None = None) -> Tuner:
        privacy = PrivacyPlan(search, plan.rdp(), delta, profile=profile, max_lost=max_lost)
        return Tuner(objective, space, privacy, strategy=chosen, direction=direction, seed=seed, plan=plan,
                     progress=progress, executor=executor, journal=journal, runs_per_update=runs_per_update)

    if journal is not None:  # a changed resume is refused before σ is calibrated (the σ-dependent fields later)
        tuner(training.plan(1.0 if sigma is None else sigma)).check_journal(
            ignore=("privacy.base", "privacy.profile", "plan"))
    if epsilon is not None:
        sigma = calibrate_sigma(epsilon, delta, search, lambda s: training.plan(s).rdp(),
                                profile_for_sigma=profile_for, max_lost=max_lost).sigma
    assert sigma is not None
    plan = training.plan(sigma)
    return tuner(plan, None if profile_for is None else profile_for(sigma)).run()
