"""``dphypo.tune``: a private DP-SGD hyperparameter search with one honest (ε, δ), in one call.

The function builds the privacy mechanism (run-count distribution, the strategy's density bounds, the per-run DP-SGD
mechanism), calibrates the noise multiplier so the *whole search* meets the budget (or accounts a given σ), and runs the
DP-HyPO loop. Your training function receives the calibrated mechanism through ``run``::

    def train(params, run):
        model, optimizer, loader = run.make_private(model, optimizer, loader, max_grad_norm=params["clip"])
        ...train with lr=params["lr"]...
        return run.private_score(correct), model      # the score must be private too (privacy rule 4)

Calibration and the release use the minimum over every valid bound. For a uniform search (C = c = 1) the
privacy profile of one whole run (the DP-SGD PLD composed with the Gaussian PLD of the score noise,
:meth:`dphypo.train.DPSGDMechanism.profile`) adds the Koskela-Redberg-Wang 2024 profile bounds to the RDP
accountant; adaptive searches (C > c) are accounted with RDP only (Theorem B of docs/proofs/adaptive.md: no
profile bound is proven for them).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Unpack

import numpy as np

from dphypo.api.calibration_cache import cached_calibration
from dphypo.privacy import PrivacyAccounting, RepeatAndSelect, RunCountDistribution, geometric
from dphypo.privacy.dpsgd_run import RUN_PROFILE_DISCRETIZATION, dpsgd_run_profile_or_skip
from dphypo.privacy.heterogeneous import calibrate_heterogeneous
from dphypo.privacy.profiles import PldProfile, ProfileSkipped
from dphypo.privacy.split_account import SplitParts, split_parts
from dphypo.search.evaluation import Objective, lost_pass_error, pass_objective
from dphypo.search.execution import Executor
from dphypo.search.options import SearchOptionFields, SearchOptions, resolve_options
from dphypo.search.recording import LostAttemptsExceeded
from dphypo.search.tuner import SearchResult, Tuner
from dphypo.space import SearchSpace
from dphypo.space.privacy_axes import candidate_runs
from dphypo.strategies import GPUCB, Strategy, Uniform
from dphypo.train.heterogeneous import HeterogeneousDPSGD
from dphypo.train.objective import check_dpsgd_space
from dphypo.train.recipe import DPSGD

if TYPE_CHECKING:
    from dphypo.train.mechanism import DPSGDMechanism

__all__ = ["DEFAULT_RUNS", "calibrated_sigma", "fresh_entropy", "pass_options", "plan_privacy_axes",
           "profile_or_skipped", "resolve_strategy", "split_parts_of", "tune"]

#: Default run count: geometric with E[T] = 20 (a few minutes on a CPU for the digits demo).
DEFAULT_RUNS = geometric(0.05)


def fresh_entropy() -> int:
    """128 bits of OS entropy, as ``SeedSequence()`` draws them: the secret seed of a search given none (rule 6)."""
    entropy = np.random.SeedSequence().entropy
    if not isinstance(entropy, int):  # SeedSequence() without entropy always draws an int; narrows the stub's union
        raise TypeError(f"SeedSequence().entropy must be an int, got {entropy!r}")
    return entropy


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


def accounted_search(strategy: Strategy, runs: RunCountDistribution | None) -> RepeatAndSelect:
    """The accounted search: T's distribution and the strategy's own density bounds (C, c)."""
    return RepeatAndSelect(runs if runs is not None else DEFAULT_RUNS, strategy.C, strategy.c)


def checked_search(
    space: SearchSpace, training: DPSGD, strategy: Strategy | str | None, runs: RunCountDistribution | None, *,
    epsilon: float | None, sigma: float | None,
) -> tuple[Strategy, RepeatAndSelect]:
    """The arguments :func:`tune` and :func:`~dphypo.api.tune_subsampled` share, checked; the strategy and search.

    Returns:
        The strategy ``strategy`` names (:func:`resolve_strategy`) and the search it is accounted with
        (:func:`accounted_search`).

    Raises:
        TypeError: ``training`` is not a :class:`~dphypo.train.DPSGD`, or ``strategy`` is no strategy.
        ValueError: A space DP-SGD cannot search, not exactly one of ``epsilon`` and ``sigma``, an unknown strategy
            name, or a search no theorem accounts.
    """
    if not isinstance(training, DPSGD):
        raise TypeError(f"training must be a dphypo.train.DPSGD, got {training!r}")
    check_dpsgd_space(space)
    if (epsilon is None) == (sigma is None):
        raise ValueError("give exactly one of epsilon (total budget to calibrate for) or sigma (fixed noise)")
    chosen = resolve_strategy(strategy)
    return chosen, accounted_search(chosen, runs)


def profile_or_skipped(mechanism: DPSGDMechanism) -> PldProfile | ProfileSkipped:
    """The per-run PLD, or a ProfileSkipped the accountant reports when it would exceed its size cap.

    The same construction as ``dphypo account`` and ``dphypo calibrate``
    (:func:`~dphypo.privacy.dpsgd_run.dpsgd_run_profile_or_skip`), so all three print the same ε.
    """
    return dpsgd_run_profile_or_skip(mechanism.sigma, mechanism.sample_rate, mechanism.steps,
                                     score_noise=mechanism.score_noise)


def split_parts_of(
    mechanism: DPSGDMechanism, *, profiles: bool, orders: Iterable[float] | None = None,
    discretization: float = RUN_PROFILE_DISCRETIZATION,
) -> SplitParts | None:
    """The run's two parts under its per-record split (``mechanism.split_rule``), or ``None`` (a permutation split).

    What the accountant takes to bound a search by Theorem S (docs/proofs/split.md; Corollary S1): the DP-SGD
    training alone and the score release alone, each with its PLD when ``profiles`` (a uniform search). Sizes are
    the mechanism's nominal ones (``DPSGDMechanism.from_splits``, §5).

    Raises:
        ValueError: A per-record split without a private score (no bound covers a validation record then).
    """
    if mechanism.split_rule is None:
        return None
    return split_parts(mechanism.sigma, mechanism.sample_rate, mechanism.steps, score_noise=mechanism.score_noise,
                       rule=mechanism.split_rule, orders=orders, profiles=profiles, discretization=discretization)


def pass_options(
    objective: Objective, options: SearchOptions, adaptive: bool, training: DPSGD, max_lost: int,
) -> tuple[SearchOptions, int]:
    """The options of a search whose objective trains in passes, and the most runs one pass holds in flight.

    A uniform search (whose density never changes) draws ``runs_per_update`` = the objective's pass size K at a
    time unless ``runs_per_update`` is given: one uniform per candidate either way, so the same grid points are
    drawn as run by run. K is ``objective.default_pass_size`` (its ``pass_size``, else 32 on a CPU and from free
    memory on CUDA); with ``max_lost > 0`` and no explicit ``pass_size``, K is capped at ``max_lost`` so that one
    kill -9 mid-pass stays covered. An adaptive search keeps its ``runs_per_update`` (each batch is one pass per
    worker). Nothing here reads the data.

    Args:
        objective: The search's objective (anything but a :class:`~dphypo.search.evaluation.PassObjective` that
            trains in passes is returned unchanged, with 1 run in flight).
        options: The search's options.
        adaptive: Whether the search's densities change (C > c, or any adaptive placement).
        training: The DP-SGD settings (public sizes, for the pass size on CUDA).
        max_lost: Lost attempts the search is accounted for.

    Returns:
        ``(options, k)``: the options to run with and the most runs one pass holds (lost together by a kill).

    Raises:
        ValueError: ``0 < max_lost <`` the pass size: a process killed mid-pass loses every run of the pass (each a
            lost attempt), which ``max_lost`` could never cover, so the search is refused before any data is read.
    """
    trainer = pass_objective(objective)
    if trainer is None:
        return options, 1
    k = options.runs_per_update
    if k is None and not adaptive and callable(getattr(trainer, "default_pass_size", None)):
        k = int(trainer.default_pass_size(training.mechanism(1.0)))  # type: ignore[attr-defined]  # σ-free
        if max_lost > 0 and getattr(trainer, "pass_size", None) is None:
            k = min(k, max_lost)
        options = dataclasses.replace(options, runs_per_update=k)
    workers = options.executor.workers if isinstance(options.executor, Executor) else 1
    per_pass = math.ceil((k or workers) / workers)  # the Tuner's default k: one candidate per worker
    if 0 < max_lost < per_pass:
        raise ValueError(
            f"max_lost must be ≥ the pass size {per_pass} (or 0): a process killed mid-pass loses all {per_pass} "
            f"runs of the pass, got max_lost={max_lost}; set --max-lost ≥ {per_pass}, or train in smaller passes "
            "(--pass-size, --runs-per-update)"
        )
    return options, per_pass


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
    max_lost: int = 0,
    options: SearchOptions | None = None,
    **option_fields: Unpack[SearchOptionFields],
) -> SearchResult:
    """Run a private hyperparameter search of DP-SGD candidates and release the best one with its total (ε, δ).

    The single-stage runner of :func:`dphypo.tune` (:func:`dphypo.api.runner.tune`), which calls it for a
    :class:`~dphypo.api.design.SingleStage` design and for its single-stage arguments (``strategy``, ``runs``, ...).

    Args:
        objective: ``objective(params, run) -> score`` or ``(score, artifact)``; it must train through
            ``run.make_private(...)`` (so the planned σ and sampling rate are used and checked) and return
            ``run.private_score(count)`` when ``training.score_noise`` is set. The built-in
            :class:`~dphypo.train.DPSGDObjective` trains in vectorised passes by default (its ``engine``): a uniform
            search in passes of its ``default_pass_size`` K (``runs_per_update`` = K unless given), an adaptive one
            a pass per batch of ``runs_per_update``; ``engine="opacus"`` trains run by run (see
            :func:`pass_options`, docs/parallel.md).
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
        max_lost: Attempts the search may lose to a dead worker or process (kill -9, a lost Ray node) and still
            release; each is charged up front as one more released run, and ε and the calibrated σ include the
            charge whether or not it is used. One more loss stops the search without a release
            (docs/parallel.md). Default 0: any loss stops the search. With passes, a kill loses every run of the
            pass in flight, so a positive ``max_lost`` below the pass size is refused up front.
        options: How the search runs (:class:`~dphypo.search.options.SearchOptions`): ``direction``, the secret
            ``seed`` (default: 128 bits of fresh OS entropy, kept only in the curator-only history and journal),
            ``executor`` (``"sequential"``, ``"process"``, ``"ray"`` or an Executor), ``journal`` (a crash-safe
            file: a new search is sealed into it, an interrupted one resumes without redrawing T),
            ``runs_per_update`` and ``progress`` (called with run counts, never scores).
        **option_fields: The same fields as keywords (e.g. ``seed=1, executor="process"``), replacing those of
            ``options``.

    Returns:
        The publishable ``release`` (best params, score, artifact, ε, δ, and the mechanism) and the curator-only
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
    run_options = resolve_options("tune", options, option_fields)
    chosen, search = checked_search(space, training, strategy, runs, epsilon=epsilon, sigma=sigma)
    if space.changes_privacy:  # batch size / epochs axes: one σ_i per setting under one reference (rule 8)
        candidates, privacy = plan_privacy_axes(space, training, search, epsilon=epsilon, delta=delta,
                                                max_lost=max_lost)
        largest = max(candidates.mechanisms, key=lambda m: m.batch_size)
        sizing = dataclasses.replace(training, batch_size=largest.batch_size, epochs=largest.epochs)
        run_options, in_flight = pass_options(objective, run_options, search.adaptive, sizing, max_lost)
        return _run_tuner(Tuner(objective, space, privacy, strategy=chosen, mechanism=candidates,
                                options=run_options), in_flight)
    run_options, in_flight = pass_options(objective, run_options, search.adaptive, training, max_lost)

    def tuner(mechanism: DPSGDMechanism, profiles: bool = False) -> Tuner:
        # The profile bounds are proven for uniform searches only (KRW 2024 Sec. 4); adaptive ones stay RDP. Under a
        # per-record split each part brings its own PLD (Theorem S), the run's summed PLD is not built.
        split = split_parts_of(mechanism, profiles=profiles)
        profile = profile_or_skipped(mechanism) if profiles and split is None else None
        privacy = PrivacyAccounting(search, mechanism.rdp(), delta, profile=profile, max_lost=max_lost, split=split)
        return Tuner(objective, space, privacy, strategy=chosen, mechanism=mechanism, options=run_options)

    # A changed resume is refused before σ is calibrated (the σ-dependent fields later).
    if run_options.journal is not None:
        tuner(training.mechanism(1.0 if sigma is None else sigma)).check_journal(
            ignore=("privacy.base", "privacy.profile", "mechanism"))
    if epsilon is not None:
        sigma = calibrated_sigma(search, training, epsilon=epsilon, delta=delta, max_lost=max_lost)
    assert sigma is not None
    mechanism = training.mechanism(sigma)
    return _run_tuner(tuner(mechanism, profiles=not search.adaptive), in_flight)


def calibrated_sigma(
    search: RepeatAndSelect, training: DPSGD, *, epsilon: float, delta: float, max_lost: int = 0
) -> float:
    """The smallest σ whose whole search meets (ε, δ): every valid bound, the profile ones for a uniform search.

    What :func:`tune` trains with (and ``dphypo tune --dry-run`` prints) for a space whose axes do not change a run's
    privacy; :func:`~dphypo.privacy.calibrate_sigma` on ``training``'s per-run curve and, for a uniform search, its
    PLD (the profile bounds are proven for uniform searches only, KRW 2024 Sec. 4). Coarse to fine and cached on disk
    (:func:`~dphypo.api.calibration_cache.cached_calibration`; a cached σ is re-certified at full precision). Under a
    per-record split (``training.split_rule``) every evaluation is Theorem S's bound (docs/proofs/split.md, Corollary
    S1: each part, training and score, by every valid bound, the worse side) and the cache key names the rule.
    """
    return cached_calibration(epsilon, delta, search, training.mechanism(1.0), profiles=not search.adaptive,
                              max_lost=max_lost, profile_for=profile_or_skipped).sigma


def _run_tuner(tuner: Tuner, in_flight: int) -> SearchResult:
    """``tuner.run()``, a lost pass explained (``in_flight`` runs are lost together when a process dies mid-pass)."""
    try:
        return tuner.run()
    except LostAttemptsExceeded as exc:  # e.g. a resume that found a pass's runs lost: say why and what to set
        if in_flight > 1 and "passes of" not in str(exc):
            raise lost_pass_error(exc, in_flight) from exc
        raise


def plan_privacy_axes(
    space: SearchSpace, training: DPSGD, search: RepeatAndSelect, *, epsilon: float | None, delta: float,
    max_lost: int = 0,
) -> tuple[HeterogeneousDPSGD, PrivacyAccounting]:
    """Every candidate's σ_i for a space with privacy-affecting axes, and the search's accounting; no data read.

    Total ε → σ_ref of the reference run → the smallest σ_i of each (batch size, epochs) setting whose per-run
    mechanism the reference dominates (:func:`~dphypo.privacy.heterogeneous.calibrate_heterogeneous`,
    docs/proofs/heterogeneous.md); the accountant charges every run as the reference.

    Args:
        space: The grid with ``privacy_roles`` (batch size and/or epochs).
        training: The DP-SGD settings the candidates share (sizes, score noise; batch size and epochs where no axis
            plays that role).
        search: T's law and the density bounds.
        epsilon: Total ε (required: σ_i are calibrated from it).
        delta: δ.
        max_lost: Lost attempts charged up front.

    Returns:
        The per-candidate mechanism (:class:`~dphypo.train.heterogeneous.HeterogeneousDPSGD`) and the accounting.

    Raises:
        ValueError: No ``epsilon``, a ``noise_multiplier`` axis (not trained yet), or a batch size above the
            training set.
        dphypo.privacy.heterogeneous.DominanceError: A candidate whose σ_i would exceed the cap (named).
        dphypo.privacy.CalibrationError: An unreachable ε.
    """
    if epsilon is None:
        raise ValueError("a search over batch size or epochs needs epsilon: each candidate's sigma is calibrated "
                         "from the total budget (one fixed sigma cannot fit candidates with different privacy costs)")
    if "noise_multiplier" in space.privacy_roles.values():
        raise ValueError("privacy_roles 'noise_multiplier' is not trained by dphypo.tune yet: search batch size and "
                         "epochs, and let each candidate's sigma follow from epsilon")
    settings, _ = space.privacy_settings()
    candidates = candidate_runs(settings, training.n_train, batch_size=training.batch_size, epochs=training.epochs)
    calibration = calibrate_heterogeneous(epsilon, delta, search, candidates, score_noise=training.score_noise,
                                          max_lost=max_lost, split_rule=training.split_rule)
    mechanism = HeterogeneousDPSGD.from_plan(calibration.plan, space, training)
    return mechanism, calibration.plan.accounting(search, delta, max_lost=max_lost)
