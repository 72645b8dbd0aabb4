r"""``dphypo.tune_subsampled``: tune on a Poisson subsample, then train one final model (Koskela & Kulkarni 2023).

The whole private search runs on a subsample X₁ of rate q only, and one final model is trained on X \ X₁
(variant 1) or X (variant 2) with the transferred learning rate; the release is that final model with the
Koskela-Kulkarni total ε.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, Unpack, runtime_checkable

import numpy as np

from dphypo.api.calibration_cache import cached_sigmas
from dphypo.api.search import checked_search, fresh_entropy
from dphypo.privacy import PrivacyAccounting, PrivacyReport, RepeatAndSelect, RunCountDistribution
from dphypo.privacy.subsampled import (
    DpSgdHyperparameters,
    SubsampledTuningReport,
    accounting_orders,
    calibrate_subsampled_sigma,
    nominal_set_sizes,
    subsampled_tuning,
    transfer_hyperparameters,
)
from dphypo.privacy.transfer import Variant, check_variant
from dphypo.search.evaluation import Objective
from dphypo.search.options import SearchOptionFields, SearchOptions, resolve_options
from dphypo.search.records import Run, RunContext, RunMisuse
from dphypo.search.tuner import Release, SearchResult, Tuner
from dphypo.space import SearchSpace
from dphypo.strategies import Strategy
from dphypo.train.data import DataSubset
from dphypo.train.recipe import DPSGD

if TYPE_CHECKING:
    from dphypo.train.mechanism import DPSGDMechanism

__all__ = [
    "SubsampledSearchResult",
    "SubsampledTuning",
    "SubsetObjective",
    "subsampled_method",
    "tune_subsampled",
]

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
        tuning_mechanism: Mechanism of every tuning run.
        final_mechanism: Mechanism of the final run.
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
    tuning_mechanism: DPSGDMechanism
    final_mechanism: DPSGDMechanism
    report: SubsampledTuningReport
    final_failed: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        return {
            "method": self.method, "variant": self.variant, "tuning_fraction": self.tuning_rate,
            "tuned_params": self.tuned_params, "transferred_params": self.transferred_params,
            "tuned_lr": self.tuned_lr, "transferred_lr": self.transferred_lr,
            "tuning_set_size_nominal": self.tuning_set_size, "final_set_size_nominal": self.final_set_size,
            "tuning_batch_size": self.tuning_mechanism.batch_size, "final_batch_size": self.final_mechanism.batch_size,
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


@runtime_checkable
class SubsetObjective(Protocol):
    """What :func:`tune_subsampled` needs of its objective (:class:`~dphypo.train.DPSGDObjective` is one).

    Attributes:
        optimizer: ``"sgd"`` or ``"adam"``: how the tuned learning rate transfers to the final run (KK Sec. 3.2).
    """

    @property
    def optimizer(self) -> str:
        """The optimiser of every run."""
        ...

    def with_subset(self, subset: DataSubset) -> Objective:
        """The same objective with every run restricted to ``subset`` of the training and validation data."""
        ...

    def __call__(self, params: dict[str, Any], run: RunContext) -> Any:
        """One run."""
        ...


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
    max_lost: int = 0,
    options: SearchOptions | None = None,
    **option_fields: Unpack[SearchOptionFields],
) -> SubsampledSearchResult:
    r"""Tune on a Poisson subsample X₁ of rate ``fraction``, train one final model, release it with the total ε.

    The runner of ``dphypo.tune(..., design=dphypo.Subsampled(fraction, variant, strategy, runs))``.

    The parameters are :func:`~dphypo.api.tune`'s plus ``fraction`` and ``variant``: a flat list on purpose (each is
    a choice of the caller, kept parallel to ``tune``'s), while how the search runs is already one parameter object,
    ``options``.

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
    :meth:`~dphypo.train.DPSGDMechanism.rdp` (DP-SGD on X₁'s training records composed with the sensitivity-1
    Gaussian). So M_tune is a mechanism of X₁ alone, with the curve of Theorem A (C > c) / Papernot-Steinke
    (:func:`~dphypo.privacy.subsampled.tuning_curve`), exactly what KK Theorem 1 and the Zhu-Wang bound take. The
    final run is DP-SGD only (no score is released for it), accounted with its own mechanism's curve, which is
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
        max_lost: Lost attempts charged up front (as for :func:`~dphypo.api.tune`).
        options: How the tuning search runs (:class:`~dphypo.search.options.SearchOptions`); its ``seed`` is the
            curator secret seeding the subset, the search and the final run (``None``: fresh OS entropy). A
            journal is not supported: the subset and the final run are not journaled.
        **option_fields: The same fields as keywords, replacing those of ``options``.

    Returns:
        A :class:`SubsampledSearchResult` whose release holds the final model and the transferred hyperparameters,
        and whose ``subsampling`` says how they were obtained.
    """
    run_options = resolve_options("tune_subsampled", options, option_fields)
    if run_options.journal is not None:
        raise ValueError("tune_subsampled does not support a journal: the subset and the final run are not "
                         "journaled (use dphypo.tune for a resumable search)")
    chosen, search = checked_search(space, training, strategy, runs, epsilon=epsilon, sigma=sigma)
    check_no_per_record_split(training)
    if space.changes_privacy:
        raise ValueError("tune_subsampled accounts one DP-SGD mechanism for every run (Koskela-Kulkarni Theorem 1); "
                         "a space with batch-size or epochs axes needs dphypo.tune")
    subset_objective = _checked_subsampling(objective, space, training, fraction, variant)
    entropy = fresh_entropy() if run_options.seed is None else int(run_options.seed)
    split = _SubsampledSearch.build(subset_objective, space, training, search, fraction=fraction, variant=variant,
                                    delta=delta, max_lost=max_lost, entropy=entropy)
    split.report(1.0 if sigma is None else sigma)  # scope (binomial, adaptive Poisson T), mechanisms: before any data
    if epsilon is not None:
        sigma = split.calibrated_sigma(epsilon)
    assert sigma is not None
    kk = split.report(sigma)
    mechanism = split.tuning.mechanism(sigma)
    # max_lost is charged up front in the release's report; the inner search stops once it would lose one more.
    inner_privacy = PrivacyAccounting(search, mechanism.rdp(), delta, max_lost=max_lost)
    inner = Tuner(subset_objective.with_subset(split.tuning_part), space, inner_privacy, strategy=chosen,
                  mechanism=mechanism, options=run_options, seed=entropy).run()
    return split.release(inner, sigma, kk)


def check_no_per_record_split(training: DPSGD) -> None:
    """Refuse a per-record split (``training.split_rule``): Theorem S is not proven for subsampled tuning.

    docs/proofs/split.md §8 item 5: Koskela-Kulkarni's theorems take the tuning search's and the final run's curves
    on one pair; side by side they would need the validation records to enter the tuning set and the final run
    through the same Poisson masks as the training records, which is not shown. One line, before any data is read.
    """
    if training.split_rule is not None:
        raise ValueError(
            "subsampled tuning (--tune-fraction) does not support a per-record split (--data-split per-record): "
            "Theorem S is not proven for it (docs/proofs/split.md §8 item 5); use --data-split permutation, got "
            f"split_rule={training.split_rule}"
        )


def _checked_subsampling(objective: Objective, space: SearchSpace, training: DPSGD, fraction: float,
                         variant: Variant) -> SubsetObjective:
    """``objective`` as a :class:`SubsetObjective`, once the subsampling arguments are checked.

    Raises:
        TypeError: ``objective`` cannot restrict its runs to a subset.
        ValueError: ``variant`` is not 1 or 2, ``fraction`` is not in (0, 1), or ``space`` has no ``"lr"`` axis.
    """
    check_variant(variant)
    nominal_set_sizes(float(training.n_train), fraction, variant)  # validates q
    if not isinstance(objective, SubsetObjective):
        raise TypeError(
            "tune_subsampled needs a SubsetObjective: with_subset(DataSubset) restricting every run to the subset, "
            "and its optimizer ('sgd' or 'adam', for the learning-rate transfer); DPSGDObjective is one"
        )
    if "lr" not in space.names:
        raise ValueError(f"tune_subsampled transfers the learning rate: space must have an 'lr' axis, got "
                         f"{space.names}")
    return objective


@dataclass(frozen=True, eq=False)
class _SubsampledSearch:
    """A subsampled search's fixed parts: the data split, the two DP-SGD recipes and what the accounting takes.

    Attributes:
        objective: The objective (restricted to a part of the data per run).
        space: The grid of hyperparameters.
        search: The accounted search (T's law, C, c).
        fraction: Poisson rate q of the tuning subset X₁.
        variant: 1 (final run on X minus X₁) or 2 (on X).
        delta: δ of the guarantee.
        max_lost: Lost attempts charged up front.
        entropy: The curator-secret seed of the subset, the search and the final run.
        n_train: Public size of the training split.
        tuning_part: X₁, where every tuning run trains and is scored.
        final_part: Where the final run trains.
        tuning: How every tuning run trains (its nominal set size m = round(q·n_train)).
        final: How the final run trains (batch size scaled so that the sampling ratio γ stays, KK Sec. 3.2).
        orders: The RDP orders of the accounting (integers for KK's theorems).
    """

    objective: SubsetObjective
    space: SearchSpace
    search: RepeatAndSelect
    fraction: float
    variant: Variant
    delta: float
    max_lost: int
    entropy: int
    n_train: int
    tuning_part: DataSubset
    final_part: DataSubset
    tuning: DPSGD
    final: DPSGD
    orders: np.ndarray

    @classmethod
    def build(cls, objective: SubsetObjective, space: SearchSpace, training: DPSGD, search: RepeatAndSelect, *,
              fraction: float, variant: Variant, delta: float, max_lost: int, entropy: int) -> _SubsampledSearch:
        """Split the data (a stream seeded by ``entropy`` and the public sizes only) and derive both recipes.

        Raises:
            ValueError: ``training.batch_size`` exceeds the tuning set's nominal size.
        """
        n_train, n_val, batch_size = training.n_train, training.n_val, training.batch_size
        subset_seed = int(np.random.SeedSequence([entropy, _SUBSET_TAG]).generate_state(1)[0])
        tuning_part = DataSubset(fraction, subset_seed, "tune")
        final_part = DataSubset(fraction, subset_seed, "rest" if variant == 1 else "all")
        m, n_final = tuning_part.nominal_size(n_train), final_part.nominal_size(n_train)
        m_val = None if n_val is None else tuning_part.nominal_size(n_val)
        if not 1 <= batch_size <= m:
            raise ValueError(f"batch_size must be in [1, round(q*n_train)={m}] (the tuning-set size), got "
                             f"{batch_size!r}")
        final_batch = min(n_final, max(1, round(batch_size * n_final / m)))  # γ kept (KK Sec. 3.2)
        tuning = DPSGD(batch_size=batch_size, epochs=training.epochs, n_train=m, n_val=m_val,
                       score_noise=training.score_noise, secure_mode=training.secure_mode)
        final = DPSGD(batch_size=final_batch, epochs=training.epochs, n_train=n_final,
                      secure_mode=training.secure_mode)
        return cls(objective, space, search, fraction, variant, delta, max_lost, entropy, n_train, tuning_part,
                   final_part, tuning, final, accounting_orders())

    def report(self, sigma: float, search: RepeatAndSelect | None = None) -> SubsampledTuningReport:
        """The Koskela-Kulkarni accounting at σ (of ``search``, default this search), lost attempts charged."""
        return subsampled_tuning(self.tuning.mechanism(sigma).rdp(self.orders), search or self.search,
                                 self.fraction, self.variant, self.delta,
                                 final=self.final.mechanism(sigma).training_rdp(self.orders),
                                 charged_runs=self.max_lost)

    def calibrated_sigma(self, epsilon: float) -> float:
        """One σ for the tuning runs and the final run whose KK total meets ``epsilon``.

        Cached on disk by the description of both mechanisms, the search and (ε, δ)
        (:mod:`dphypo.api.calibration_cache`; a cached σ is re-certified by one KK accounting at full precision).
        """
        def compute() -> tuple[tuple[float, ...], SubsampledTuningReport]:
            calibration = calibrate_subsampled_sigma(
                epsilon, self.delta, self.search, self.fraction, self.variant,
                lambda s: self.tuning.mechanism(s).rdp(self.orders),
                lambda s: self.final.mechanism(s).training_rdp(self.orders), max_lost=self.max_lost,
            )
            return (calibration.sigma,), calibration.report

        def certify(sigmas: tuple[float, ...]) -> SubsampledTuningReport | None:
            report = self.report(sigmas[0]) if len(sigmas) == 1 else None
            return report if report is not None and report.epsilon <= epsilon else None

        def mechanism(recipe: DPSGD) -> dict[str, Any]:
            m = recipe.mechanism(1.0)
            return {"sample_rate": m.sample_rate, "steps": m.steps, "score_noise": m.score_noise}

        description = {"calibration": "subsampled (Koskela-Kulkarni)", "epsilon": float(epsilon),
                       "delta": float(self.delta), "search": self.search.describe(),
                       "run_count": repr(self.search.run_count), "fraction": float(self.fraction),
                       "variant": repr(self.variant), "max_lost": int(self.max_lost),
                       "orders": [float(o) for o in self.orders], "tuning": mechanism(self.tuning),
                       "final": mechanism(self.final)}
        return cached_sigmas(description, compute, certify)[0][0]

    def release(self, inner: SearchResult, sigma: float, kk: SubsampledTuningReport) -> SubsampledSearchResult:
        """Transfer the best hyperparameters, train the final model once and release it with the KK total ε.

        Args:
            inner: The search on X₁.
            sigma: The noise multiplier of every run.
            kk: :meth:`report` at ``sigma`` (computed before the search touched any data).
        """
        tuning_mechanism, final_mechanism = self.tuning.mechanism(sigma), self.final.mechanism(sigma)
        tuned = inner.release.params
        # Poisson T = 0: a data-independent default (the prior mode, KK notes pitfall 11); the final run still
        # happens.
        start = dict(tuned) if tuned is not None else self.space.params(int(np.argmax(self.space.prior)))
        m = self.tuning.n_train
        transferred = _transfer(start, tuning_mechanism, m, self.n_train, self.fraction, self.variant,
                                self.objective.optimizer)
        artifact, failed = _final_run(self.objective.with_subset(self.final_part), transferred,
                                      self.space.index(start), final_mechanism, self.entropy)
        uniform = self.report(sigma, self.search.uniform()) if self.search.adaptive else kk
        report = _kk_privacy_report(kk, uniform, self.search, tuning_mechanism)
        info = SubsampledTuning(
            subsampled_method(self.variant), self.variant, float(self.fraction), tuned, transferred,
            float(start["lr"]), float(transferred["lr"]), m, self.final.n_train, tuning_mechanism, final_mechanism,
            kk, failed,
        )
        release = Release(params=transferred, score=inner.release.score, artifact=artifact, epsilon=kk.epsilon,
                          delta=self.delta, privacy=report, mechanism=final_mechanism)
        return SubsampledSearchResult(release, inner.history, info)


def _transfer(params: dict[str, Any], mechanism: DPSGDMechanism, m: int, n_train: int, q: float, variant: Variant,
              optimizer: str) -> dict[str, Any]:
    """KK Sec. 3.2 transfer with public nominal sizes (m = q·n, n′ = (1−q)·n or n)."""
    tuning_size, final_size = nominal_set_sizes(float(n_train), q, variant)
    tuned = DpSgdHyperparameters(float(params["lr"]), mechanism.sigma, mechanism.sample_rate, mechanism.steps,
                                 float(params.get("clip", 1.0)))
    out = transfer_hyperparameters(tuned, tuning_set_size=tuning_size, final_set_size=final_size,
                                   optimizer="adam" if optimizer == "adam" else "sgd")
    return {**params, "lr": out.learning_rate}


def _final_run(objective: Objective, params: dict[str, Any], index: int, mechanism: DPSGDMechanism, entropy: int
               ) -> tuple[Any, bool]:
    """M_base: one DP-SGD run under ``mechanism`` (``index``: grid index of t₁, a label only).

    The objective's score of the final model is discarded, never released (it is not accounted).
    """
    seed = int(np.random.SeedSequence([entropy, _FINAL_RUN_TAG]).generate_state(1)[0])
    run = Run(number=0, seed=seed, privacy=None, grid_index=index, mechanism=mechanism).open()
    try:
        out = objective(params, run)
    except RunMisuse:  # a bug of the objective against the mechanism: stop, loudly
        raise
    except Exception:  # privacy rule 5: a final run that failed on the data releases no model, is not retried
        run.check()
        return None, True
    run.check(finished=True)
    return (run.released_artifact(out[1]) if isinstance(out, tuple) else None), False


def _kk_privacy_report(kk: SubsampledTuningReport, uniform: SubsampledTuningReport, search: RepeatAndSelect,
                       mechanism: DPSGDMechanism) -> PrivacyReport:
    """The release's report: the KK total with the usual breakdown (one run, + repetition, + adaptivity)."""
    method = subsampled_method(kk.variant)
    theorem = ("Koskela-Kulkarni 2023 Theorem 1 (variant 1)" if kk.variant == 1 else
               "Koskela-Kulkarni 2023 variant 2 (Zhu-Wang 2019 subsampling + composition)")
    return PrivacyReport(
        epsilon=kk.epsilon, delta=kk.delta, base_epsilon=kk.single_run_epsilon,
        repetition_epsilon=uniform.epsilon - kk.single_run_epsilon, adaptivity_epsilon=kk.epsilon - uniform.epsilon,
        order=kk.order, order_hat=math.nan, expected_runs=kk.expected_runs,
        theorem=f"{theorem}, q={kk.tuning_rate:g}, tuning on X1 by {kk.tuning_theorem}", search=search,
        base_label=mechanism.rdp().label, methods={method: kk.epsilon}, method=method,
    )
