"""``dphypo.tune``: a private DP-SGD hyperparameter search with one honest (ε, δ), in one call.

The function builds the privacy configuration (run-count distribution, density bounds, per-run DP-SGD plan),
calibrates the noise multiplier so the *whole search* meets the budget (or accounts a given σ), and runs the
DP-HyPO loop. Your training function receives the calibrated plan through ``run``::

    def train(params, run):
        model, optimizer, loader = run.make_private(model, optimizer, loader, max_grad_norm=params["clip"])
        ...train with lr=params["lr"]...
        return noisy_validation_accuracy, model      # the score must be private too (see DPSGDPlan)

Calibration and the release use the minimum over every valid bound. For a uniform search (C = c = 1) the
privacy profile of one whole run (the DP-SGD PLD composed with the Gaussian PLD of the score noise,
:meth:`dphypo.train.DPSGDPlan.profile`) adds the Koskela-Redberg-Wang 2024 profile bounds to the RDP
accountant; adaptive searches (C > c) are accounted with RDP only (Theorem A of docs/proofs/adaptive.md: no
profile bound is proven for them).

With ``tune_fraction=q`` the search runs on a Poisson subsample X₁ only, and one final model is trained on X \\ X₁
(variant 1) or X (variant 2) with the transferred learning rate (Koskela & Kulkarni 2023, :func:`tune`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dphypo.privacy import (
    PrivacyConfig,
    PrivacyReport,
    RunCountDistribution,
    SearchPrivacy,
    calibrate_sigma,
    geometric,
)
from dphypo.space import SearchSpace
from dphypo.strategies import GPUCB, Direction, Strategy, Uniform
from dphypo.tuner import Objective, Release, Run, SearchResult, Tuner

if TYPE_CHECKING:
    from dphypo.privacy.subsampled import SubsampledTuningReport
    from dphypo.train.private import DPSGDPlan

__all__ = [
    "DEFAULT_RUNS",
    "PROFILE_DISCRETIZATION",
    "SubsampledSearchResult",
    "SubsampledTuning",
    "make_strategy",
    "subsampled_method",
    "tune",
]

#: Default run count: geometric with E[T] = 20 (a few minutes on a CPU for the digits demo).
DEFAULT_RUNS = geometric(0.05)

#: PLD discretisation of the per-run profile (as ``calibrate_dpsgd_sigma``: pessimistic, so still an upper bound;
#: 1e-3 costs ≈ +0.015 ε at 14k steps and keeps a calibration to seconds).
PROFILE_DISCRETIZATION = 1e-3

# Entropy tags that separate the subset and final-run streams from the Tuner's (which are SeedSequence(seed)
# spawns): SeedSequence([seed, tag]) has a different entropy pool, hence independent streams.
_SUBSET_TAG, _FINAL_RUN_TAG = 0x5B5E7, 0xF1A1


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
    seed: int | None = None,
    progress: Callable[[int], None] | None = None,
    tune_fraction: float | None = None,
    subsampled_variant: int = 1,
    executor: Any = None,
    journal: str | os.PathLike[str] | None = None,
    runs_per_update: int | None = None,
    max_lost: int = 0,
    secure_mode: bool = False,
) -> SearchResult:
    """Run a private hyperparameter search of DP-SGD candidates.

    **Subsampled tuning** (``tune_fraction=q``; Koskela & Kulkarni 2023, "KK", Sec. 3.1). X is the private data:
    the training split and the validation split. (1) Draw X₁ ⊂ X by Poisson subsampling with rate q from a seeded
    stream that depends only on the public split sizes (:class:`~dphypo.train.data.DataSubset`). (2) Run the whole
    private search (every run's DP-SGD training *and* its noisy validation score, the GP/uniform loop and the
    final argmax) on X₁ only: ``train_fn.with_subset(subset)`` must return an objective that reads nothing but
    X₁'s training and validation records (:class:`~dphypo.train.DPSGDObjective` does). (3) Transfer the best
    hyperparameters with :func:`~dphypo.privacy.subsampled.transfer_hyperparameters` (σ, γ, T, clip kept; SGD
    learning rate × n′/m with public nominal sizes m = q·n, n′ = (1−q)·n or n; Adam's unchanged). (4) Train once
    more with DP-SGD on X \\ X₁'s training records (variant 1) or all of them (variant 2), and release that final
    model, the transferred hyperparameters, the best tuning run's noisy score, and the total ε.

    Why the accounting covers the scores: each tuning run's output is (model, noisy count of correct predictions
    on X₁'s validation records + N(0, ``score_noise``²)), and its per-run RDP curve is
    :meth:`~dphypo.train.DPSGDPlan.rdp` (DP-SGD on X₁'s training records composed with the sensitivity-1
    Gaussian). So M_tune is a mechanism of X₁ alone, with the curve of Theorem A (C > c) / Papernot-Steinke
    (:func:`~dphypo.privacy.subsampled.tuning_curve`), exactly what KK Theorem 1 and the Zhu-Wang bound take. The
    final run is DP-SGD only (no score is released for it), accounted with its own plan's curve, which is
    data-independent, hence uniform over the transferred hyperparameters (KK App. C). Total ε: KK Theorem 1
    (variant 1) or Zhu-Wang subsampling of M_tune composed with the final run (variant 2), integer orders
    2..256, Canonne-Kamath-Steinke conversion. With ``epsilon`` one σ is calibrated for the tuning runs *and*
    the final run so that this total meets ``epsilon``. Out of scope (refused before any training): binomial T,
    and adaptive searches with Poisson T. The per-run score noise is in counts, so its privacy cost is the same
    as without subsampling, while the accuracy it perturbs is over about q·n_val records (relative noise × 1/q).

    Args:
        train_fn: ``train_fn(params, run) -> score`` or ``(score, artifact)``; it must train through
            ``run.make_private(...)`` so the planned σ and sampling rate are used and checked. With
            ``tune_fraction`` it must also have ``with_subset(DataSubset) -> Objective`` (see above).
        space: The grid (and prior) of hyperparameters (with ``tune_fraction``: must include ``"lr"``).
        n_train: Training-set size (fixes Opacus's sampling rate ``1/ceil(n_train/batch_size)``).
        batch_size: Expected batch size of Poisson sampling (with ``tune_fraction``: of the tuning runs; the
            final run's is ``batch_size·n′/m``, so the sampling ratio γ stays the same, KK Sec. 3.2).
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
        seed: Seed of the whole search: T, candidates, batches, DP-SGD noise, score noise, the tuning subset and the
            final run. ``None`` (default): 128 bits of fresh OS entropy, kept only in the curator-only history
            and journal. A given seed is a **curator secret** (anyone who knows it can recompute T and the noise):
            never a public value.
        progress: Called with the number of completed runs (never with scores).
        tune_fraction: Poisson rate q ∈ (0, 1) of the tuning subset X₁; ``None``: tune on all the data and release
            the best run (no final run).
        subsampled_variant: 1 (final run on X \\ X₁, KK Theorem 1) or 2 (final run on X, Zhu-Wang + composition).
        executor: Where runs execute: ``"sequential"`` (default), ``"process"``, ``"ray"`` or an
            :class:`~dphypo.executors.Executor` (see :class:`~dphypo.tuner.Tuner`).
        journal: Crash-safe journal file (curator only): a new search is sealed into it, an interrupted one
            resumes from it without redrawing T (see ``docs/parallel.md``). Not supported with ``tune_fraction``.
        runs_per_update: Candidates drawn from one projected density per update (default: one per worker).
        max_lost: Attempts the search may lose to a dead worker or process (kill -9, a lost Ray node) and still
            release; each is charged up front as one more released run, and ε and the calibrated σ include the
            charge whether or not it is used. One more loss stops the search without a release
            (docs/parallel.md). Default 0: any loss stops the search.
        secure_mode: Opacus's secure mode for every DP-SGD run (CSPRNG noise and batches; needs ``torchcsprng``,
            see :class:`~dphypo.train.DPSGDPlan`).

    Returns:
        The publishable ``release`` (best params, score, artifact, ε, δ, and the plan) and the curator-only
        ``history``; with ``tune_fraction`` a :class:`SubsampledSearchResult` whose release holds the final model
        and the transferred hyperparameters, and whose ``subsampling`` says how they were obtained.
    """
    from dphypo.train.private import DPSGDPlan

    if (epsilon is None) == (sigma is None):
        raise ValueError("give exactly one of epsilon (total budget to calibrate for) or sigma (fixed noise)")
    chosen = make_strategy(strategy, tau=tau, beta=beta, scale=scale)
    if isinstance(chosen, Uniform):
        C, c = 1.0, 1.0  # a uniform search never adapts; charging log(C/c) would waste budget
    search = SearchPrivacy(runs if runs is not None else DEFAULT_RUNS, C, c)
    if tune_fraction is not None:
        if journal is not None:
            raise ValueError("journal is not supported with tune_fraction yet: the final run on the rest of the data "
                             "would not be journaled, so a crash during it could not be charged")
        return _tune_subsampled(
            train_fn, space, search, chosen, n_train=n_train, n_val=n_val, batch_size=batch_size, epochs=epochs,
            epsilon=epsilon, sigma=sigma, delta=delta, score_noise=score_noise, tuning_rate=tune_fraction,
            variant=subsampled_variant, direction=direction, seed=seed, progress=progress, executor=executor,
            runs_per_update=runs_per_update, max_lost=max_lost, secure_mode=secure_mode,
        )

    def plan_for(s: float) -> DPSGDPlan:
        return DPSGDPlan(sigma=s, batch_size=batch_size, epochs=epochs, n_train=n_train, score_noise=score_noise,
                         n_val=n_val, secure_mode=secure_mode)

    def run_profile(s: float) -> Any:
        """The per-run PLD, or a ProfileSkipped the accountant reports when it would exceed its size cap."""
        from dphypo.privacy.profiles import ProfileSkipped, ProfileTooLargeError

        try:
            return plan_for(s).profile(PROFILE_DISCRETIZATION)
        except ProfileTooLargeError as exc:
            return ProfileSkipped(str(exc))

    # The profile bounds are proven for uniform searches only (KRW 2024 Sec. 4); adaptive ones stay RDP.
    profile_for = None if search.adaptive else run_profile
    if journal is not None:  # a changed resume is refused before σ is calibrated (the σ-dependent fields later)
        provisional = plan_for(1.0 if sigma is None else sigma)
        Tuner(train_fn, space, PrivacyConfig(search, provisional.rdp(), delta, max_lost=max_lost), strategy=chosen,
              direction=direction, seed=seed, plan=provisional, journal=journal, batch_size=runs_per_update
              ).check_journal(ignore=("privacy.base", "privacy.profile", "plan"))
    if epsilon is not None:
        plan_for(1.0)  # validate the plan's fields before calibrating
        sigma = calibrate_sigma(epsilon, delta, search, lambda s: plan_for(s).rdp(), profile_for_sigma=profile_for,
                                max_lost=max_lost).sigma
    plan = plan_for(sigma)  # type: ignore[arg-type]
    privacy = PrivacyConfig(search, plan.rdp(), delta, profile=None if profile_for is None else profile_for(plan.sigma),
                            max_lost=max_lost)
    tuner = Tuner(train_fn, space, privacy, strategy=chosen, direction=direction, seed=seed, plan=plan,
                  progress=progress, executor=executor, journal=journal, batch_size=runs_per_update)
    return tuner.run()


# -- subsampled tuning (Koskela & Kulkarni 2023) ---------------------------------------------------------------
def subsampled_method(variant: int) -> str:
    """The release's method name for a KK variant."""
    return {1: "koskela-kulkarni-thm1-variant1", 2: "koskela-kulkarni-zhu-wang-variant2"}[variant]


@dataclass(frozen=True)
class SubsampledTuning:
    """How a subsampled search's release was obtained (publishable: every field is covered by ε or public).

    Attributes:
        method: :func:`subsampled_method` of the variant.
        variant: 1 or 2.
        tuning_rate: q.
        tuned_params: Best hyperparameters found on X₁ (t₁; ``None`` if Poisson T = 0 and the prior mode was used).
        transferred_params: Hyperparameters of the final run (t₂).
        tuned_lr: t₁'s learning rate.
        transferred_lr: t₂'s learning rate.
        tuning_set_size: Nominal size round(q·n_train) of X₁'s training part (public).
        final_set_size: Nominal size of the final run's training set (public).
        tuning_plan: Plan of every tuning run.
        final_plan: Plan of the final run.
        report: The Koskela-Kulkarni accounting (total ε, tuning theorem, full-data and one-run ε).
        final_failed: The final run diverged (privacy rule 5: no model, not retried).
    """

    method: str
    variant: int
    tuning_rate: float
    tuned_params: dict[str, Any] | None
    transferred_params: dict[str, Any]
    tuned_lr: float
    transferred_lr: float
    tuning_set_size: int
    final_set_size: int
    tuning_plan: Any
    final_plan: Any
    report: SubsampledTuningReport
    final_failed: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        return {
            "method": self.method, "variant": self.variant, "tuning_fraction": self.tuning_rate,
            "tuned_params": self.tuned_params, "transferred_params": self.transferred_params,
            "tuned_lr": self.tuned_lr, "transferred_lr": self.transferred_lr,
            "tuning_set_size_nominal": self.tuning_set_size, "final_set_size_nominal": self.final_set_size,
            "tuning_batch_size": self.tuning_plan.batch_size, "final_batch_size": self.final_plan.batch_size,
            "tuning_theorem": self.report.tuning_theorem, "epsilon": self.report.epsilon,
            "full_data_search_epsilon": self.report.full_data_epsilon, "final_failed": self.final_failed,
        }


@dataclass(frozen=True)
class SubsampledSearchResult(SearchResult):
    """A subsampled search: ``release`` is the final model with the KK total ε; ``history`` (curator only) is the
    search on X₁; ``subsampling`` (publishable) says how the release was obtained."""

    subsampling: SubsampledTuning | None = None


def _tune_subsampled(
    train_fn: Objective, space: SearchSpace, search: SearchPrivacy, strategy: Strategy, *, n_train: int,
    n_val: int | None, batch_size: int, epochs: int, epsilon: float | None, sigma: float | None, delta: float,
    score_noise: float | None, tuning_rate: float, variant: int, direction: Direction, seed: int | None,
    progress: Callable[[int], None] | None, executor: Any = None, runs_per_update: int | None = None,
    max_lost: int = 0, secure_mode: bool = False,
) -> SubsampledSearchResult:
    from dphypo.privacy.subsampled import (
        accounting_orders,
        calibrate_subsampled_sigma,
        nominal_set_sizes,
        subsampled_tuning,
    )
    from dphypo.train.data import DataSubset
    from dphypo.train.private import DPSGDPlan

    if variant not in (1, 2):
        raise ValueError(f"subsampled_variant must be 1 or 2, got {variant!r}")
    nominal_set_sizes(float(n_train), tuning_rate, variant)  # type: ignore[arg-type]  # validates q
    with_subset = getattr(train_fn, "with_subset", None)
    if not callable(with_subset):
        raise TypeError(
            "tune_fraction needs a train_fn with a with_subset(DataSubset) method that restricts every run to the "
            "subset (DPSGDObjective has one): the search must see only the tuning set X1"
        )
    if "lr" not in space.names:
        raise ValueError(f"tune_fraction transfers the learning rate: space must have an 'lr' axis, got {space.names}")
    entropy = int(np.random.SeedSequence().entropy if seed is None else seed)  # type: ignore[arg-type]
    subset_seed = int(np.random.SeedSequence([entropy, _SUBSET_TAG]).generate_state(1)[0])
    tuning_part = DataSubset(tuning_rate, subset_seed, "tune")
    final_part = DataSubset(tuning_rate, subset_seed, "rest" if variant == 1 else "all")
    m, n_final = tuning_part.nominal_size(n_train), final_part.nominal_size(n_train)
    m_val = None if n_val is None else tuning_part.nominal_size(n_val)
    if not 1 <= batch_size <= m:
        raise ValueError(f"batch_size must be in [1, round(q*n_train)={m}] (the tuning-set size), got {batch_size!r}")
    final_batch = min(n_final, max(1, round(batch_size * n_final / m)))  # γ kept (KK Sec. 3.2)

    def tuning_plan(s: float) -> DPSGDPlan:
        return DPSGDPlan(sigma=s, batch_size=batch_size, epochs=epochs, n_train=m, n_val=m_val,
                         score_noise=score_noise, secure_mode=secure_mode)

    def final_plan(s: float) -> DPSGDPlan:
        return DPSGDPlan(sigma=s, batch_size=final_batch, epochs=epochs, n_train=n_final, secure_mode=secure_mode)

    orders = accounting_orders()

    def account_at(s: float, privacy: SearchPrivacy = search) -> SubsampledTuningReport:
        return subsampled_tuning(tuning_plan(s).rdp(orders), privacy, tuning_rate, variant, delta,  # type: ignore
                                 final=final_plan(s).training_rdp(orders), charged_runs=max_lost)

    account_at(1.0 if sigma is None else sigma)  # scope (binomial / adaptive Poisson T) and plans, before any data
    if epsilon is not None:
        sigma = calibrate_subsampled_sigma(
            epsilon, delta, search, tuning_rate, variant, lambda s: tuning_plan(s).rdp(orders),  # type: ignore
            lambda s: final_plan(s).training_rdp(orders), max_lost=max_lost,
        ).sigma
    assert sigma is not None
    kk = account_at(sigma)
    plan1, plan2 = tuning_plan(sigma), final_plan(sigma)
    # max_lost is charged up front in kk (above); the inner search stops once it would lose one more attempt.
    inner = Tuner(with_subset(tuning_part), space, PrivacyConfig(search, plan1.rdp(), delta, max_lost=max_lost),
                  strategy=strategy,
                  direction=direction, seed=entropy, plan=plan1, progress=progress, executor=executor,
                  batch_size=runs_per_update).run()
    tuned = inner.release.params
    # Poisson T = 0: a data-independent default (the prior mode, KK notes pitfall 11); the final run still happens.
    start = dict(tuned) if tuned is not None else space.params(int(np.argmax(space.prior)))
    transferred = _transfer(start, plan1, m, n_train, tuning_rate, variant, getattr(train_fn, "optimizer", "sgd"))
    artifact, failed = _final_run(with_subset(final_part), transferred, space.index(start), plan2, entropy)
    report = _kk_privacy_report(kk, account_at(sigma, search.uniform()) if search.adaptive else kk, search, plan1)
    info = SubsampledTuning(
        subsampled_method(variant), variant, float(tuning_rate), tuned, transferred, float(start["lr"]),
        float(transferred["lr"]), m, n_final, plan1, plan2, kk, failed,
    )
    release = Release(params=transferred, score=inner.release.score, artifact=artifact, epsilon=kk.epsilon,
                      delta=delta, privacy=report, plan=plan2)
    return SubsampledSearchResult(release, inner.history, info)


def _transfer(params: dict[str, Any], plan: DPSGDPlan, m: int, n_train: int, q: float, variant: int,
              optimizer: str) -> dict[str, Any]:
    """KK Sec. 3.2 transfer with public nominal sizes (m = q·n, n′ = (1−q)·n or n)."""
    from dphypo.privacy.subsampled import DpSgdHyperparameters, nominal_set_sizes, transfer_hyperparameters

    tuning_size, final_size = nominal_set_sizes(float(n_train), q, variant)  # type: ignore[arg-type]
    tuned = DpSgdHyperparameters(float(params["lr"]), plan.sigma, plan.sample_rate, plan.steps,
                                 float(params.get("clip", 1.0)))
    out = transfer_hyperparameters(tuned, tuning_set_size=tuning_size, final_set_size=final_size,
                                   optimizer="adam" if optimizer == "adam" else "sgd")
    return {**params, "lr": out.learning_rate}


def _final_run(objective: Objective, params: dict[str, Any], index: int, plan: DPSGDPlan, entropy: int
               ) -> tuple[Any, bool]:
    """M_base: one DP-SGD run under ``plan`` (``index``: grid index of t₁, a label only); the objective's score
    of the final model is discarded, never released (it is not accounted)."""
    seed = int(np.random.SeedSequence([entropy, _FINAL_RUN_TAG]).generate_state(1)[0])
    run = Run(number=0, seed=seed, privacy=None, grid_index=index, plan=plan)
    try:
        out = objective(params, run)
    except Exception:  # privacy rule 5: a final run that failed on the data releases no model, is not retried
        run.check_budget()
        return None, True
    run.check_budget()
    return (out[1] if isinstance(out, tuple) else None), False


def _kk_privacy_report(kk: SubsampledTuningReport, uniform: SubsampledTuningReport, search: SearchPrivacy,
                       plan: DPSGDPlan) -> PrivacyReport:
    """The release's report: the KK total with the usual breakdown (one run, + repetition, + adaptivity)."""
    method = subsampled_method(kk.variant)
    theorem = ("Koskela-Kulkarni 2023 Theorem 1 (variant 1)" if kk.variant == 1 else
               "Koskela-Kulkarni 2023 variant 2 (Zhu-Wang 2019 subsampling + composition)")
    return PrivacyReport(
        epsilon=kk.epsilon, delta=kk.delta, base_epsilon=kk.single_run_epsilon,
        repetition_epsilon=uniform.epsilon - kk.single_run_epsilon, adaptivity_epsilon=kk.epsilon - uniform.epsilon,
        order=kk.order, order_hat=math.nan, expected_runs=kk.expected_runs,
        theorem=f"{theorem}, q={kk.tuning_rate:g}, tuning on X1 by {kk.tuning_theorem}", search=search,
        base_label=plan.rdp().label, methods={method: kk.epsilon}, method=method,
    )
