"""One candidate's DP-SGD plan, its budget check and the privatised validation score.

:class:`DPSGDPlan` is the DP-SGD :class:`~dphypo.search.plan.RunPlan` (what the search core calls).

A :class:`DPSGDPlan` fixes everything the per-candidate RDP curve depends on (σ, sampling rate, steps, score noise)
*before* any data is touched; :meth:`DPSGDPlan.make_private` wraps a model with Opacus exactly as planned
(:mod:`dphypo.train.opacus`) and :func:`check_budget` verifies afterwards, from Opacus's own accountant history,
that the run did not spend more than the plan.

Opacus conventions this module follows (Opacus 1.6, ``opacus/data_loader.py`` and ``privacy_engine.py``):

* the Poisson rate of the ``DPDataLoader`` is ``1 / len(data_loader)`` of the *original* loader, i.e.
  ``1 / ceil(n_train / batch_size)``;
* the ``DPDataLoader`` yields ``int(1 / rate)`` batches per epoch, which floating-point rounding makes one fewer
  than ``len(data_loader)`` for some lengths (93, 99, 105, 117, ...: ``int(1 / (1 / 93)) == 92``);
* the accountant records the rate ``1 / len(dp_data_loader)``, so for those lengths it books a rate slightly
  *above* the true one (conservative). :attr:`DPSGDPlan.sample_rate` and :attr:`DPSGDPlan.steps` are defined
  to match what the accountant books, so :func:`check_budget` compares like with like.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dphypo.privacy import DEFAULT_ORDERS, RdpCurve, compose, dpsgd_rdp
from dphypo.privacy.dpsgd_run import RUN_PROFILE_DISCRETIZATION, dpsgd_run_profile, dpsgd_run_rdp
from dphypo.privacy.errors import DphypoError
from dphypo.search.records import RunMisuse
from dphypo.train.opacus import attach_engine

if TYPE_CHECKING:
    from dphypo.privacy.profiles import PldProfile
    from dphypo.search.plan import RunHandle
    from dphypo.train.data import Splits

__all__ = [
    "BudgetExceeded",
    "DPSGDPlan",
    "check_budget",
    "private_accuracy",
    "private_score",
    "run_stream_seed",
    "spent_rdp",
]

# Independent per-run random streams (numpy SeedSequence spawn keys under the run seed).
INIT_STREAM, SAMPLING_STREAM, NOISE_STREAM, SCORE_STREAM = range(4)

_RELATIVE_SLACK = 1e-9


class BudgetExceeded(DphypoError, RuntimeError):
    """A run's Opacus accountant booked more privacy than its :class:`DPSGDPlan` allows."""


@dataclass(frozen=True, kw_only=True)
class DPSGDPlan:
    """The privacy-relevant settings of one DP-SGD candidate run, fixed before any data is touched.

    The per-candidate RDP curve :meth:`rdp` (the ``base`` of a :class:`~dphypo.privacy.PrivacyPlan`) is computed
    from these numbers alone; n_train and n_val are treated as public (the splits are a fixed function of the
    dataset size and the fractions).

    Args:
        sigma: Noise multiplier σ > 0 (noise std / clipping norm).
        batch_size: Expected (Poisson) batch size ≥ 1.
        epochs: Passes over the training split ≥ 1.
        n_train: Training-set size ≥ 1.
        n_val: Nominal validation-set size ≥ 1, the public denominator that turns the noisy count of correct
            validation predictions into an accuracy. Required with ``score_noise``; ``None`` otherwise allowed
            (the objective then divides by the actual validation size: the score is not private anyway).
        score_noise: Standard deviation (in examples) of the Gaussian noise added to the count of correct
            validation predictions; the count has sensitivity 1 under add/remove-one. ``None`` means the score
            is *not* privatised: only valid when the validation data is public (not part of the protected
            dataset), because the score is part of each run's DP output (privacy rule 4).
        secure_mode: Draw the DP-SGD noise and Poisson batches from Opacus's cryptographically secure generator
            (``PrivacyEngine(secure_mode=True)``, which also uses Opacus's floating-point-attack-resistant
            Gaussian sampler); needs the ``torchcsprng`` package. Default ``False``: torch's Mersenne Twister,
            seeded per run from the search's secret entropy (see docs/privacy.md for what that means).
    """

    sigma: float
    batch_size: int
    epochs: int
    n_train: int
    n_val: int | None = None
    score_noise: float | None = None
    secure_mode: bool = False

    def __post_init__(self) -> None:
        if not (_is_real(self.sigma) and self.sigma > 0):
            raise ValueError(f"sigma must be a finite number > 0, got {self.sigma!r}")
        if self.score_noise is not None and not (_is_real(self.score_noise) and self.score_noise > 0):
            raise ValueError(f"score_noise must be a finite number > 0 or None, got {self.score_noise!r}")
        if self.score_noise is not None and self.n_val is None:
            raise ValueError("n_val must be given when score_noise is (it turns the noisy count into an accuracy)")
        for name in ("batch_size", "epochs", "n_train", "n_val"):
            value = getattr(self, name)
            if name == "n_val" and value is None:
                continue
            if not (isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) >= 1):
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
            object.__setattr__(self, name, int(value))
        if self.batch_size > self.n_train:
            raise ValueError(f"batch_size must be <= n_train={self.n_train}, got {self.batch_size!r}")
        if not isinstance(self.secure_mode, bool):
            raise ValueError(f"secure_mode must be a bool, got {self.secure_mode!r}")
        object.__setattr__(self, "sigma", float(self.sigma))
        if self.score_noise is not None:
            object.__setattr__(self, "score_noise", float(self.score_noise))

    @classmethod
    def from_splits(
        cls, splits: Splits, *, sigma: float, batch_size: int, epochs: int, score_noise: float | None = None
    ) -> DPSGDPlan:
        """A plan whose n_train / n_val are the sizes of ``splits``."""
        return cls(
            sigma=sigma,
            batch_size=batch_size,
            epochs=epochs,
            n_train=len(splits.y_train),
            n_val=len(splits.y_val),
            score_noise=score_noise,
        )

    @property
    def batches_per_epoch(self) -> int:
        """``ceil(n_train / batch_size)``: the length of a plain ``DataLoader`` over the training split."""
        return math.ceil(self.n_train / self.batch_size)

    @property
    def steps_per_epoch(self) -> int:
        """Batches Opacus's ``DPDataLoader`` yields per epoch: ``int(1 / (1 / batches_per_epoch))``.

        Equal to :attr:`batches_per_epoch` except for lengths where float rounding loses one (e.g. 93 → 92).
        """
        return int(1 / (1 / self.batches_per_epoch))

    @property
    def sample_rate(self) -> float:
        """The Poisson rate q the Opacus accountant books: ``1 / steps_per_epoch``.

        This is Opacus's ``1 / len(data_loader)``; it is never below the true sampling rate
        ``1 / batches_per_epoch``, so accounting with it is valid (the subsampled Gaussian's RDP grows with q).
        """
        return 1.0 / self.steps_per_epoch

    @property
    def steps(self) -> int:
        """Noisy gradient steps of the run: ``epochs × steps_per_epoch``."""
        return self.epochs * self.steps_per_epoch

    def training_rdp(self, orders: Iterable[float] | None = None) -> RdpCurve:
        """RDP of the DP-SGD training alone (Mironov, Talwar & Zhang 2019; via :func:`~dphypo.privacy.dpsgd_rdp`)."""
        return dpsgd_rdp(self.sigma, self.sample_rate, self.steps, orders=orders)

    def profile(self, discretization: float = RUN_PROFILE_DISCRETIZATION) -> PldProfile:
        """Privacy profile of one whole candidate run: DP-SGD training, then the noisy release of its score.

        :func:`~dphypo.privacy.dpsgd_run.dpsgd_run_profile` (the one construction ``dphypo account`` and
        ``dphypo calibrate`` use too): the DP-SGD PLD composed with the PLD of the Gaussian mechanism
        N(0, ``score_noise``²) on the count of correct validation predictions (sensitivity 1 under add/remove-one).

        Args:
            discretization: PLD discretisation interval (both PLDs must share it to compose).

        Returns:
            The profile.
        """
        return dpsgd_run_profile(self.sigma, self.sample_rate, self.steps, score_noise=self.score_noise,
                                 discretization=discretization)

    def rdp(self, orders: Iterable[float] | None = None) -> RdpCurve:
        """RDP of one candidate run: DP-SGD training composed with the noisy score release.

        ``ε(α) = ε_DPSGD(α) + α / (2 score_noise²)`` (:func:`~dphypo.privacy.dpsgd_run.dpsgd_run_rdp`; Mironov
        2017, Propositions 1 and 7; the count has sensitivity 1). Without ``score_noise`` this is
        :meth:`training_rdp`.
        """
        return dpsgd_run_rdp(self.sigma, self.sample_rate, self.steps, score_noise=self.score_noise, orders=orders)

    # -- the RunPlan protocol (dphypo.search.plan): what the search core calls -----------------------------------

    def make_private(
        self, run: RunHandle, module: Any, optimizer: Any, data_loader: Any, *, max_grad_norm: float
    ) -> tuple[Any, Any, Any]:
        """Wrap a model for DP-SGD exactly as this plan says, and register the engine on the run.

        Uses ``PrivacyEngine(accountant="rdp", secure_mode=plan.secure_mode)`` and
        ``make_private(noise_multiplier=plan.sigma, poisson_sampling=True)``.

        * Default (``plan.secure_mode=False``): the Gaussian noise comes from a ``torch.Generator`` seeded from
          ``run.seed`` (Opacus's ``noise_generator``), and the Poisson sampler of the returned ``DPDataLoader`` gets
          its own generator seeded from ``run.seed`` (replacing any generator of ``data_loader``). ``run.seed`` comes
          from the search's secret entropy (fresh OS entropy unless the curator gave a seed), so nobody without it can
          regenerate the noise; a journaled search replays exactly. torch's generator is a Mersenne Twister, not a
          CSPRNG, and Opacus skips its floating-point-attack mitigation in this mode (docs/privacy.md).
        * ``plan.secure_mode=True``: Opacus draws noise and batches from its CSPRNG (``torchcsprng``, /dev/urandom)
          and samples the Gaussian noise in its attack-resistant way; nothing is seeded, so a resumed search does not
          replay a run bit for bit (its release is still covered by the same ε).

        Args:
            run: The tuner's run; ``run.plan`` must be this plan. Only one engine per run is allowed (the
                plan is a per-run budget and each engine is checked against it separately).
            module: The model (its parameters must be the optimizer's).
            optimizer: A torch optimizer over ``module``'s parameters.
            data_loader: A ``DataLoader`` over the training split with ``batch_size=plan.batch_size``.
            max_grad_norm: Per-example clipping norm C > 0.

        Returns:
            ``(module, optimizer, data_loader)`` wrapped by Opacus.

        Raises:
            ValueError: The run has another plan, a second engine for the run, a bad clipping norm, or a loader
                whose length (hence Opacus's sampling rate ``1 / len(data_loader)``) differs from the plan's.
        """
        if run.plan != self:
            raise ValueError(f"run.plan must be a DPSGDPlan to train with DP-SGD (pass plan= to the Tuner), got "
                             f"{run.plan!r}")
        if run.engines:
            raise ValueError("make_private was already called for this run; one DP-SGD training per run")
        if not (_is_real(max_grad_norm) and max_grad_norm > 0):
            raise ValueError(f"max_grad_norm must be a finite number > 0, got {max_grad_norm!r}")
        if len(data_loader) != self.batches_per_epoch:
            raise ValueError(
                f"data_loader has {len(data_loader)} batches (Opacus sample rate 1/{len(data_loader)}) but the plan "
                f"was computed for n_train={self.n_train}, batch_size={self.batch_size}: {self.batches_per_epoch} "
                f"batches (sample rate 1/{self.batches_per_epoch}); build the loader with batch_size={self.batch_size} "
                f"over {self.n_train} examples"
            )
        seeded = not self.secure_mode  # secure mode: Opacus's CSPRNG for noise and batches, nothing seeded
        engine, wrapped, optimizer, dp_loader = attach_engine(
            module, optimizer, data_loader, sigma=self.sigma, max_grad_norm=max_grad_norm,
            secure_mode=self.secure_mode,
            noise_seed=run_stream_seed(run.seed, NOISE_STREAM) if seeded else None,
            sampling_seed=run_stream_seed(run.seed, SAMPLING_STREAM) if seeded else None,
            steps_per_epoch=self.steps_per_epoch,
        )
        run.engines.append(engine)
        run.wrapped.append((wrapped, module))  # released as the plain nn.Module, never Opacus's wrapper
        return wrapped, optimizer, dp_loader

    def check_budget(self, run: RunHandle, *, finished: bool = False) -> None:
        """Raise :class:`BudgetExceeded` if any Opacus engine of ``run`` booked more than this plan.

        Each engine is checked on its own (:func:`check_budget`).

        Args:
            run: The run.
            finished: The objective returned a score; the run must then have trained through
                :meth:`make_private`, else :class:`~dphypo.search.records.RunMisuse` (the release would be
                labelled with an ε its model never paid).
        """
        if finished and not run.engines:
            raise RunMisuse(
                f"run {run.number} returned a score without training through run.make_private(...): its model "
                "would be released under an epsilon it never paid; train with DP-SGD through run.make_private"
            )
        for engine in run.engines:
            check_budget(engine, self)

    def private_score(self, run: RunHandle, count: int) -> float:
        """``(count + N(0, score_noise²)) / n_val``, noise from ``run``'s secret score stream (:func:`private_score`).

        Args:
            run: The run (its seed drives the noise; one score per run).
            count: Correct validation predictions (an integer ≥ 0, sensitivity 1).

        Returns:
            The noisy accuracy.
        """
        return private_score(run, count)

    def describe(self) -> dict[str, Any]:
        """The plan's fields with the derived ``sample_rate`` and ``steps`` (JSON-ready, printed in the release)."""
        return {**dataclasses.asdict(self), "sample_rate": self.sample_rate, "steps": self.steps}


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def run_stream_seed(run_seed: int, stream: int) -> int:
    """A 63-bit seed for one of a run's independent random streams (``*_STREAM`` constants)."""
    state = np.random.SeedSequence(int(run_seed), spawn_key=(stream,)).generate_state(2, dtype=np.uint32)
    return (int(state[0]) << 31) ^ int(state[1])


def private_score(run: RunHandle, count: int) -> float:
    """The privatised score of a run: :func:`private_accuracy` with noise from the run's secret score stream.

    The Gaussian mechanism on a sensitivity-1 count with std ``plan.score_noise`` is exactly what
    :meth:`DPSGDPlan.rdp` composes into every run's curve (privacy rule 4). One score per run: a second noisy
    view of the data would be a release the plan does not account for.

    Args:
        run: The run; ``run.plan`` must be a :class:`DPSGDPlan` with ``score_noise`` and ``n_val``.
        count: Correct validation predictions (an integer ≥ 0; sensitivity 1 under add/remove-one).

    Returns:
        ``(count + N(0, score_noise²)) / n_val``.
    """
    plan = run.plan
    if not isinstance(plan, DPSGDPlan) or plan.score_noise is None:
        raise ValueError(
            f"run.private_score needs a DPSGDPlan with score_noise and n_val (dphypo.tune(score_noise=..., "
            f"n_val=...)), got {plan!r}"
        )
    if run.scores:
        raise ValueError("run.private_score was already called for this run; one released score per run")
    return private_accuracy(count, plan, np.random.default_rng(run_stream_seed(run.seed, SCORE_STREAM)))


def spent_rdp(history: Iterable[tuple[float, float, int]], orders: Iterable[float] | None = None) -> RdpCurve | None:
    """RDP booked by an Opacus accountant history ``[(noise_multiplier, sample_rate, steps), ...]``.

    Returns:
        The composition of one :func:`~dphypo.privacy.dpsgd_rdp` per entry, or ``None`` for an empty history.
    """
    curves = [dpsgd_rdp(float(sigma), float(q), int(steps), orders=orders) for sigma, q, steps in history]
    return compose(*curves) if curves else None


def check_budget(engine: Any, plan: DPSGDPlan) -> None:
    """Raise :class:`BudgetExceeded` if an engine's accountant booked more RDP than ``plan.training_rdp()``.

    The comparison is at every order of :data:`~dphypo.privacy.DEFAULT_ORDERS` with a relative slack of 1e-9
    (float noise only). An empty history (no optimizer step taken) spends nothing and passes.

    Args:
        engine: An Opacus ``PrivacyEngine`` (anything with ``accountant.history``).
        plan: The run's plan.
    """
    if not isinstance(plan, DPSGDPlan):
        raise ValueError(f"plan must be a DPSGDPlan, got {plan!r}")
    history = list(engine.accountant.history)
    spent = spent_rdp(history, DEFAULT_ORDERS)
    if spent is None:
        return
    planned = plan.training_rdp(DEFAULT_ORDERS)
    over = spent.epsilons > planned.epsilons * (1.0 + _RELATIVE_SLACK)
    if np.any(over):
        i = int(np.argmax(over))
        booked = ", ".join(f"(sigma={s:g}, q={q:g}, steps={n})" for s, q, n in history)
        raise BudgetExceeded(
            f"the run spent more privacy than planned: planned sigma={plan.sigma:g}, q={plan.sample_rate:g}, "
            f"steps={plan.steps}; Opacus booked {booked} (total steps {sum(n for _, _, n in history)}); "
            f"at order {planned.orders[i]:g} spent RDP {spent.epsilons[i]:.6g} > planned {planned.epsilons[i]:.6g}"
        )


def private_accuracy(correct: int, plan: DPSGDPlan, rng: np.random.Generator, *, clip: bool = False) -> float:
    """The released validation accuracy: ``(correct + N(0, score_noise²)) / n_val``.

    The Gaussian mechanism on a sensitivity-1 count (Dwork & Roth 2014, Theorem A.1; RDP accounted in
    :meth:`DPSGDPlan.rdp`); dividing by the public ``plan.n_val`` is post-processing. The raw noisy value is an
    unbiased estimate and may leave [0, 1]; ``clip=True`` clips it to [0, 1] (also post-processing, but biased
    near the ends). Without ``score_noise`` it is the exact ``correct / n_val``.

    Args:
        correct: Number of correct validation predictions (≥ 0).
        plan: The run's plan (``score_noise``, ``n_val``).
        rng: Source of the noise.
        clip: Clip to [0, 1].

    Returns:
        The (noisy) accuracy.
    """
    if plan.n_val is None:
        raise ValueError("plan.n_val must be set to turn a count into an accuracy")
    if not (isinstance(correct, numbers.Integral) and not isinstance(correct, bool) and 0 <= correct <= plan.n_val):
        # a count outside [0, n_val] is a bug of the objective; releasing it would scale the score past 1
        raise ValueError(f"correct must be an integer count in [0, n_val={plan.n_val}], got {correct!r}")
    noisy = float(correct) if plan.score_noise is None else float(correct) + rng.normal(0.0, plan.score_noise)
    accuracy = noisy / plan.n_val
    return min(max(accuracy, 0.0), 1.0) if clip else accuracy
