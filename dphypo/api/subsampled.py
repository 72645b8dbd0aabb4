r"""``dphypo.tune_subsampled``: tune on a Poisson subsample, then train one final model (Koskela & Kulkarni 2023).

The whole private search runs on a subsample X₁ of rate q only, and one final model is trained on X \ X₁
(variant 1) or X (variant 2) with the transferred learning rate; the release is that final model with the
Koskela-Kulkarni total ε.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dphypo.api.search import check_removed_arguments, resolve_strategy, search_spec
from dphypo.privacy import PrivacyPlan, PrivacyReport, RunCountDistribution, SearchSpec
from dphypo.privacy.subsampled import (
    DpSgdHyperparameters,
    SubsampledTuningReport,
    accounting_orders,
    calibrate_subsampled_sigma,
    nominal_set_sizes,
    subsampled_tuning,
    transfer_hyperparameters,
)
from dphypo.privacy.transfer import Variant
from dphypo.search.records import RunMisuse
from dphypo.search.tuner import Objective, Release, Run, SearchResult, Tuner
from dphypo.space import SearchSpace
from dphypo.strategies import Direction, Strategy
from dphypo.train.objective import check_dpsgd_space
from dphypo.train.recipe import DPSGD

if TYPE_CHECKING:
    from dphypo.search.execution import Executor
    from dphypo.train.plan import DPSGDPlan

__all__ = ["SubsampledSearchResult", "SubsampledTuning", "subsampled_method", "tune_subsampled"]

# Entropy tags that separate the subset and final-run streams from the Tuner's (which are SeedSequence(seed)
# spawns): SeedSequence([seed, tag]) has a different entropy pool, hence independent streams.
_SUBSET_TAG, _FINAL_RUN_TAG = 0x5B5E7, 0xF1A1


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
    tuning_plan: DPSGDPlan
    final_plan: DPSGDPlan
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
    """A subsampled search: ``release`` is the final model with the KK total ε.

    ``history`` (curator only) is the search on X₁; ``subsampling`` (publishable) says how the release was
    obtained.
    """

    subsampling: SubsampledTuning | None = None


def tune_subsampled(
    objective: Objective,
    space: SearchSpace,
    training: DPSGD,
    *,
    fraction: float,
    variant: Variant = 1,
    epsilon: float | None = None,
    sigma: float | None = None,
    delta: float = 1e-5,
    strategy: Strategy | str | None = None,
    runs: RunCountDistribution | None = None,
    direction: Direction = "maximize",
    seed: int | None = None,
    executor: Executor | str | None = None,
    runs_per_update: int | None = None,
    max_lost: int = 0,
    progress: Callable[[int], None] | None = None,
    **removed: Any,
) -> SubsampledSearchResult:
    r"""Tune on a Poisson subsample X₁ of rate ``fraction``, train one final model, release it with the total ε.

    **Subsampled tuning** (``fraction=q``; Koskela & Kulkarni 2023, "KK", Sec. 3.1). X is the private data:
    the training split and the validation split. (1) Draw X₁ ⊂ X by Poisson subsampling with rate q from a seeded
    stream that depends only on the public split sizes (:class:`~dphypo.train.data.DataSubset`). (2) Run the whole
    private search (every run's DP-SGD training *and* its noisy validation score, the GP/uniform loop and the
    final argmax) on X₁ only: ``train_fn.with_subset(subset)`` must return an objective that reads nothing but
    X₁'s training and validation records (:class:`~dphypo.train.DPSGDObjective` does). (3) Transfer the best
    hyperparameters with :func:`~dphypo.privacy.subsampled.transfer_hyperparameters` (σ, γ, T, clip kept; SGD
    learning rate × n′/m with public nominal sizes m = q·n, n′ = (1−q)·n or n; Adam's unchanged). (4) Train once
    more with DP-SGD on X \ X₁'s training records (variant 1) or all of them (variant 2), and release that final
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
        objective: As for :func:`~dphypo.api.tune`, and with ``with_subset(DataSubset) -> Objective`` that
            restricts every run to the subset (:class:`~dphypo.train.DPSGDObjective` has one).
        space: The grid (and prior) of hyperparameters; must include ``"lr"`` (it is transferred).
        training: How every run trains (:class:`~dphypo.train.DPSGD`); ``batch_size`` is that of the tuning runs,
            the final run's is ``batch_size·n′/m``, so the sampling ratio γ stays the same (KK Sec. 3.2).
        fraction: Poisson rate q ∈ (0, 1) of the tuning subset X₁.
        variant: 1 (final run on X \ X₁, KK Theorem 1) or 2 (final run on X, Zhu-Wang + composition).
        epsilon: Total ε (tuning and final run); one σ is calibrated for both. Give this or ``sigma``.
        sigma: A fixed noise multiplier (the total ε is then reported).
        delta: δ of the guarantee.
        strategy: As for :func:`~dphypo.api.tune`.
        runs: Distribution of T (default: geometric, E[T] = 20).
        direction: ``"maximize"`` or ``"minimize"``.
        seed: Curator secret seeding the subset, the search and the final run (``None``: fresh OS entropy).
        executor: Where the tuning runs execute.
        runs_per_update: Candidates drawn per projected density.
        max_lost: Lost attempts charged up front (as for :func:`~dphypo.api.tune`).
        progress: Called with the number of completed tuning runs (never with scores).
        **removed: Arguments of the earlier signature are refused with one line naming their replacement.

    Returns:
        A :class:`SubsampledSearchResult` whose release holds the final model and the transferred hyperparameters,
        and whose ``subsampling`` says how they were obtained.
    """
    check_removed_arguments("tune_subsampled", removed)
    if not isinstance(training, DPSGD):
        raise TypeError(f"training must be a dphypo.train.DPSGD, got {training!r}")
    check_dpsgd_space(space)
    if (epsilon is None) == (sigma is None):
        raise ValueError("give exactly one of epsilon (total budget to calibrate for) or sigma (fixed noise)")
    chosen = resolve_strategy(strategy)
    search = search_spec(chosen, runs)
    n_train, n_val, batch_size = training.n_train, training.n_val, training.batch_size
    if variant not in (1, 2):
        raise ValueError(f"variant must be 1 or 2, got {variant!r}")
    nominal_set_sizes(float(n_train), fraction, variant)  # validates q
    with_subset = getattr(objective, "with_subset", None)
    if not callable(with_subset):
        raise TypeError(
            "tune_subsampled needs an objective with a with_subset(DataSubset) method that restricts every run to "
            "the subset (DPSGDObjective has one): the search must see only the tuning set X1"
        )
    if "lr" not in space.names:
        raise ValueError(f"tune_subsampled transfers the learning rate: space must have an 'lr' axis, got "
                         f"{space.names}")
    from dphypo.train.data import DataSubset

    entropy = _fresh_entropy() if seed is None else int(seed)
    subset_seed = int(np.random.SeedSequence([entropy, _SUBSET_TAG]).generate_state(1)[0])
    tuning_part = DataSubset(fraction, subset_seed, "tune")
    final_part = DataSubset(fraction, subset_seed, "rest" if variant == 1 else "all")
    m, n_final = tuning_part.nominal_size(n_train), final_part.nominal_size(n_train)
    m_val = None if n_val is None else tuning_part.nominal_size(n_val)
    if not 1 <= batch_size <= m:
        raise ValueError(f"batch_size must be in [1, round(q*n_train)={m}] (the tuning-set size), got {batch_size!r}")
    final_batch = min(n_final, max(1, round(batch_size * n_final / m)))  # γ kept (KK Sec. 3.2)
    tuning_training = DPSGD(batch_size=batch_size, epochs=training.epochs, n_train=m, n_val=m_val,
                            score_noise=training.score_noise, secure_mode=training.secure_mode)
    final_training = DPSGD(batch_size=final_batch, epochs=training.epochs, n_train=n_final,
                           secure_mode=training.secure_mode)
    orders = accounting_orders()

    def account_at(s: float, privacy: SearchSpec = search) -> SubsampledTuningReport:
        return subsampled_tuning(tuning_training.plan(s).rdp(orders), privacy, fraction, variant, delta,
                                 final=final_training.plan(s).training_rdp(orders), charged_runs=max_lost)

    account_at(1.0 if sigma is None else sigma)  # scope (binomial / adaptive Poisson T) and plans, before any data
    if epsilon is not None:
        sigma = calibrate_subsampled_sigma(
            epsilon, delta, search, fraction, variant, lambda s: tuning_training.plan(s).rdp(orders),
            lambda s: final_training.plan(s).training_rdp(orders), max_lost=max_lost,
        ).sigma
    assert sigma is not None
    kk = account_at(sigma)
    plan1, plan2 = tuning_training.plan(sigma), final_training.plan(sigma)
    # max_lost is charged up front in kk (above); the inner search stops once it would lose one more attempt.
    inner = Tuner(with_subset(tuning_part), space, PrivacyPlan(search, plan1.rdp(), delta, max_lost=max_lost),
                  strategy=chosen, direction=direction, seed=entropy, plan=plan1, progress=progress,
                  executor=executor, runs_per_update=runs_per_update).run()
    tuned = inner.release.params
    # Poisson T = 0: a data-independent default (the prior mode, KK notes pitfall 11); the final run still happens.
    start = dict(tuned) if tuned is not None else space.params(int(np.argmax(space.prior)))
    transferred = _transfer(start, plan1, m, n_train, fraction, variant, getattr(objective, "optimizer", "sgd"))
    artifact, failed = _final_run(with_subset(final_part), transferred, space.index(start), plan2, entropy)
    report = _kk_privacy_report(kk, account_at(sigma, search.uniform()) if search.adaptive else kk, search, plan1)
    info = SubsampledTuning(
        subsampled_method(variant), variant, float(fraction), tuned, transferred, float(start["lr"]),
        float(transferred["lr"]), m, n_final, plan1, plan2, kk, failed,
    )
    release = Release(params=transferred, score=inner.release.score, artifact=artifact, epsilon=kk.epsilon,
                      delta=delta, privacy=report, plan=plan2)
    return SubsampledSearchResult(release, inner.history, info)


def _fresh_entropy() -> int:
    """128 bits of OS entropy, as ``SeedSequence()`` draws them (the seed of a search given none)."""
    entropy = np.random.SeedSequence().entropy
    if not isinstance(entropy, int):  # SeedSequence() without entropy always draws an int; narrows the stub's union
        raise TypeError(f"SeedSequence().entropy must be an int, got {entropy!r}")
    return entropy


def _transfer(params: dict[str, Any], plan: DPSGDPlan, m: int, n_train: int, q: float, variant: Variant,
              optimizer: str) -> dict[str, Any]:
    """KK Sec. 3.2 transfer with public nominal sizes (m = q·n, n′ = (1−q)·n or n)."""
    tuning_size, final_size = nominal_set_sizes(float(n_train), q, variant)
    tuned = DpSgdHyperparameters(float(params["lr"]), plan.sigma, plan.sample_rate, plan.steps,
                                 float(params.get("clip", 1.0)))
    out = transfer_hyperparameters(tuned, tuning_set_size=tuning_size, final_set_size=final_size,
                                   optimizer="adam" if optimizer == "adam" else "sgd")
    return {**params, "lr": out.learning_rate}


def _final_run(objective: Objective, params: dict[str, Any], index: int, plan: DPSGDPlan, entropy: int
               ) -> tuple[Any, bool]:
    """M_base: one DP-SGD run under ``plan`` (``index``: grid index of t₁, a label only).

    The objective's score of the final model is discarded, never released (it is not accounted).
    """
    seed = int(np.random.SeedSequence([entropy, _FINAL_RUN_TAG]).generate_state(1)[0])
    run = Run(number=0, seed=seed, privacy=None, grid_index=index, plan=plan)
    try:
        out = objective(params, run)
    except RunMisuse:  # a bug of the objective against the plan: stop, loudly
        raise
    except Exception:  # privacy rule 5: a final run that failed on the data releases no model, is not retried
        run.check_budget()
        return None, True
    run.check_budget(finished=True)
    return (out[1] if isinstance(out, tuple) else None), False


def _kk_privacy_report(kk: SubsampledTuningReport, uniform: SubsampledTuningReport, search: SearchSpec,
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
