"""``dphypo.tune``: a private DP-SGD hyperparameter search with one honest (ε, δ), in one call.

The function builds the privacy configuration (run-count distribution, density bounds, per-run DP-SGD plan),
calibrates the noise multiplier so the *whole search* meets the budget (or accounts a given σ), and runs the
DP-HyPO loop. Your training function receives the calibrated plan through ``run``::

    def train(params, run):
        model, optimizer, loader = run.make_private(model, optimizer, loader, max_grad_norm=params["clip"])
        ...train with lr=params["lr"]...
        return noisy_validation_accuracy, model      # the score must be private too (see DPSGDPlan)
"""

from __future__ import annotations

from collections.abc import Callable

from dphypo.privacy import (
    PrivacyConfig,
    RunCountDistribution,
    SearchPrivacy,
    calibrate_sigma,
    geometric,
)
from dphypo.space import SearchSpace
from dphypo.strategies import GPUCB, Direction, Strategy, Uniform
from dphypo.tuner import Objective, SearchResult, Tuner

__all__ = ["DEFAULT_RUNS", "make_strategy", "tune"]

#: Default run count: geometric with E[T] = 20 (a few minutes on a CPU for the digits demo).
DEFAULT_RUNS = geometric(0.05)


def make_strategy(strategy: str | Strategy, *, tau: float = 0.1, beta: float = 1.0, scale: str = "standardized"
                  ) -> Strategy:
    """``"gp"`` → :class:`~dphypo.strategies.GPUCB`, ``"uniform"`` → :class:`~dphypo.strategies.Uniform`, or a
    strategy object as is."""
    if not isinstance(strategy, str):
        return strategy
    if strategy == "uniform":
        return Uniform()
    if strategy == "gp":
        return GPUCB(tau=tau, beta=beta, scale=scale)  # type: ignore[arg-type]
    raise ValueError(f"strategy must be 'gp' or 'uniform' (or a Strategy object), got {strategy!r}")


def tune(
    train_fn: Objective,
    space: SearchSpace,
    *,
    n_train: int,
    batch_size: int,
    epochs: int,
    epsilon: float | None = None,
    sigma: float | None = None,
    delta: float = 1e-5,
    score_noise: float | None = None,
    n_val: int | None = None,
    runs: RunCountDistribution | None = None,
    strategy: str | Strategy = "gp",
    C: float = 2.0,
    c: float = 0.75,
    tau: float = 0.1,
    beta: float = 1.0,
    scale: str = "standardized",
    direction: Direction = "maximize",
    seed: int | None = 0,
    progress: Callable[[int], None] | None = None,
) -> SearchResult:
    """Run a private hyperparameter search of DP-SGD candidates.

    Args:
        train_fn: ``train_fn(params, run) -> score`` or ``(score, artifact)``; it must train through
            ``run.make_private(...)`` so the planned σ and sampling rate are used and checked.
        space: The grid (and prior) of hyperparameters.
        n_train: Training-set size (fixes Opacus's sampling rate ``1/ceil(n_train/batch_size)``).
        batch_size: Expected batch size of Poisson sampling.
        epochs: Epochs per candidate.
        epsilon: Total ε of the whole search; σ is calibrated to meet it. Give this or ``sigma``.
        sigma: A fixed noise multiplier (the total ε is then reported, not targeted).
        delta: δ of the guarantee.
        score_noise: Std of the Gaussian noise on the count of correct validation predictions that makes each
            score private (its RDP is composed into every run). ``None``: the score is not privatised, which is
            only correct when the validation data is public.
        n_val: Nominal (public) validation-set size used to turn the noisy count into an accuracy.
        runs: Distribution of the number of runs T (default: geometric, E[T] = 20).
        strategy: ``"gp"`` (DP-HyPO Algorithm 3), ``"uniform"`` (Algorithm 2) or a Strategy.
        C: Upper density-ratio bound (ignored for ``"uniform"``, which never adapts: C = c = 1).
        c: Lower density-ratio bound (ignored for ``"uniform"``).
        tau: GP-UCB exploration weight.
        beta: Softmax inverse temperature.
        scale: GP score scale before the softmax (see :class:`~dphypo.strategies.GPUCB`).
        direction: ``"maximize"`` or ``"minimize"`` the score.
        seed: Seed of the whole search (``None``: fresh entropy, recorded in the curator history).
        progress: Called with the number of completed runs (never with scores).

    Returns:
        The publishable ``release`` (best params, score, artifact, ε, δ, and the plan) and the curator-only
        ``history``.
    """
    from dphypo.train.private import DPSGDPlan

    if (epsilon is None) == (sigma is None):
        raise ValueError("give exactly one of epsilon (total budget to calibrate for) or sigma (fixed noise)")
    chosen = make_strategy(strategy, tau=tau, beta=beta, scale=scale)
    if isinstance(chosen, Uniform):
        C, c = 1.0, 1.0  # a uniform search never adapts; charging log(C/c) would waste budget
    search = SearchPrivacy(runs if runs is not None else DEFAULT_RUNS, C, c)

    def plan_for(s: float) -> DPSGDPlan:
        return DPSGDPlan(sigma=s, batch_size=batch_size, epochs=epochs, n_train=n_train, score_noise=score_noise,
                         n_val=n_val)

    if epsilon is not None:
        plan_for(1.0)  # validate the plan's fields before calibrating
        sigma = calibrate_sigma(epsilon, delta, search, lambda s: plan_for(s).rdp()).sigma
    plan = plan_for(sigma)  # type: ignore[arg-type]
    privacy = PrivacyConfig(search, plan.rdp(), delta)
    tuner = Tuner(train_fn, space, privacy, strategy=chosen, direction=direction, seed=seed, plan=plan,
                  progress=progress)
    return tuner.run()

