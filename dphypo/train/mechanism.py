"""One candidate's DP-SGD mechanism, its budget check and the privatised validation score.

:class:`DPSGDMechanism` is the DP-SGD :class:`~dphypo.search.records.RunMechanism` (what the search core calls).

A :class:`DPSGDMechanism` fixes everything the per-candidate RDP curve depends on (σ, sampling rate, steps, score noise)
*before* any data is touched; the context it opens for each run (:class:`DPSGDRun`) wraps a model with Opacus
exactly as planned (``run.make_private``, :mod:`dphypo.train.opacus`) and :func:`check_budget` verifies afterwards,
from Opacus's own accountant history, that the run did not spend more than the mechanism.

Opacus conventions this module follows (Opacus 1.6, ``opacus/data_loader.py`` and ``privacy_engine.py``):

* the Poisson rate of the ``DPDataLoader`` is ``1 / len(data_loader)`` of the *original* loader, i.e.
  ``1 / ceil(n_train / batch_size)``;
* the ``DPDataLoader`` yields ``int(1 / rate)`` batches per epoch, which floating-point rounding makes one fewer
  than ``len(data_loader)`` for some lengths (93, 99, 105, 117, ...: ``int(1 / (1 / 93)) == 92``);
* the accountant records the rate ``1 / len(dp_data_loader)``, so for those lengths it books a rate slightly
  *above* the true one (conservative). :attr:`DPSGDMechanism.sample_rate` and :attr:`DPSGDMechanism.steps` are defined
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
from dphypo.privacy.split import SplitRule
from dphypo.privacy.two_stage import TwoStageDesignError
from dphypo.privacy.validation import check_int_at_least, check_positive
from dphypo.search.records import Run, RunContext, RunMisuse
from dphypo.train.opacus import attach_engine, check_grad_sample_mode, memory_safe_loader

if TYPE_CHECKING:
    from dphypo.privacy.profiles import PldProfile
    from dphypo.train.data import Splits

__all__ = [
    "BudgetExceeded",
    "DPSGDMechanism",
    "DPSGDRun",
    "check_budget",
    "check_probe_fidelity",
    "private_accuracy",
    "private_score",
    "run_stream_seed",
    "spent_rdp",
]

# Independent per-run random streams (numpy SeedSequence spawn keys under the run seed).
INIT_STREAM, SAMPLING_STREAM, NOISE_STREAM, SCORE_STREAM = range(4)

_RELATIVE_SLACK = 1e-9


class BudgetExceeded(DphypoError, RuntimeError):
    """A run's Opacus accountant booked more privacy than its :class:`DPSGDMechanism` allows."""


@dataclass(frozen=True, kw_only=True)
class DPSGDMechanism:
    """The privacy-relevant settings of one DP-SGD candidate run, fixed before any data is touched.

    The per-candidate RDP curve :meth:`rdp` (the ``base`` of a :class:`~dphypo.privacy.PrivacyAccounting`) is computed
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
        split_rule: The public rule of a per-record split (:class:`~dphypo.privacy.split.SplitRule`,
            docs/proofs/split.md) the runs train and score on, or ``None`` (a seeded permutation split). Under a
            per-record split ``n_train`` and ``n_val`` are the public *nominal* sizes (assumption (N), §5): the
            realised splits may be larger or smaller, the sampling rate, steps and normalisation stay these, and a
            count above ``n_val`` is clipped to ``n_val`` (:func:`private_accuracy`).
    """

    sigma: float
    batch_size: int
    epochs: int
    n_train: int
    n_val: int | None = None
    score_noise: float | None = None
    secure_mode: bool = False
    split_rule: SplitRule | None = None

    def __post_init__(self) -> None:
        check_positive("sigma", self.sigma)
        if self.split_rule is not None and not isinstance(self.split_rule, SplitRule):
            raise ValueError(f"split_rule must be a SplitRule or None, got {self.split_rule!r}")
        check_positive("score_noise", self.score_noise, optional=True)
        if self.score_noise is not None and self.n_val is None:
            raise ValueError("n_val must be given when score_noise is (it turns the noisy count into an accuracy)")
        for name in ("batch_size", "epochs", "n_train", "n_val"):
            value = getattr(self, name)
            if name == "n_val" and value is None:
                continue
            check_int_at_least(name, value, 1)
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
    ) -> DPSGDMechanism:
        """A mechanism whose n_train / n_val are the accounted sizes of ``splits``.

        :attr:`~dphypo.train.data.Splits.accounted_sizes`: the public nominal sizes of a per-record split (never the
        realised, data-dependent ones; docs/proofs/split.md §5), else the split sizes; ``split_rule`` is the splits'.
        """
        n_train, n_val = splits.accounted_sizes
        return cls(
            sigma=sigma,
            batch_size=batch_size,
            epochs=epochs,
            n_train=n_train,
            n_val=n_val,
            score_noise=score_noise,
            split_rule=splits.split_rule,
        )

    @property
    def expected_batch_size(self) -> int:
        """Opacus's divisor of the noisy gradient sum, from the public ``n_train``: ``int(n_train · sample_rate)``.

        Opacus computes ``int(len(dataset) · sample_rate)`` from the realised training set; dphypo pins it to the
        mechanism's (nominal) ``n_train`` so that, under a per-record split or a Poisson subsample, the
        normalisation does not depend on the data (docs/proofs/split.md §5). Equal to Opacus's when the realised
        size is ``n_train``.
        """
        return int(self.n_train * self.sample_rate)

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

    # -- the RunMechanism protocol (dphypo.search.records): what the search core calls
    # -----------------------------------

    def open(self, run: Run) -> DPSGDRun:
        """The context an objective receives for ``run``: Opacus training exactly as this mechanism says."""
        if run.mechanism != self:
            raise ValueError(f"run.mechanism must be this DPSGDMechanism, got {run.mechanism!r}")
        return DPSGDRun(run)

    def private_score(self, run: RunContext, count: int) -> float:
        """``(count + N(0, score_noise²)) / n_val``, noise from ``run``'s secret score stream (:func:`private_score`).

        Args:
            run: The run (its seed drives the noise; one score per run).
            count: Correct validation predictions (an integer ≥ 0, sensitivity 1).

        Returns:
            The noisy accuracy.
        """
        return private_score(run, count)

    def describe(self) -> dict[str, Any]:
        """Its fields with the derived ``sample_rate`` and ``steps`` (JSON-ready, printed in the release).

        ``split_rule`` appears only for a per-record split (its public description), so a permutation-split
        mechanism describes itself as before.
        """
        fields = dataclasses.asdict(self)
        rule = fields.pop("split_rule")
        if self.split_rule is not None:
            fields["split_rule"] = self.split_rule.describe()
        else:
            assert rule is None
        return {**fields, "sample_rate": self.sample_rate, "steps": self.steps}


class DPSGDRun(RunContext):
    """A DP-SGD run's context (what an objective receives): its Opacus training, private score and budget check.

    Opened by :meth:`DPSGDMechanism.open`. ``make_private`` uses ``PrivacyEngine(accountant="rdp",
    secure_mode=mechanism.secure_mode)`` and ``make_private(noise_multiplier=mechanism.sigma, poisson_sampling=True)``:

    * Default (``mechanism.secure_mode=False``): the Gaussian noise comes from a ``torch.Generator`` seeded from the
      run's secret seed (Opacus's ``noise_generator``), and the Poisson sampler of the returned ``DPDataLoader``
      gets its own generator seeded from it (replacing any generator of ``data_loader``). The seed comes from the
      search's secret entropy (fresh OS entropy unless the curator gave a seed), so nobody without it can
      regenerate the noise; a journaled search replays exactly. torch's generator is a Mersenne Twister, not a
      CSPRNG, and Opacus skips its floating-point-attack mitigation in this mode (docs/privacy.md).
    * ``mechanism.secure_mode=True``: Opacus draws noise and batches from its CSPRNG (``torchcsprng``) and samples the
      Gaussian noise in its attack-resistant way; nothing is seeded, so a resumed search does not replay a run
      bit for bit (its release is still covered by the same ε).

    After the run, :meth:`check` compares every engine's booked RDP with the mechanism (:func:`check_budget`).

    Args:
        run: The scheduled run; ``run.mechanism`` is the :class:`DPSGDMechanism`.

    Attributes:
        engines: The Opacus engines made by :meth:`make_private` (one per run).
        wrapped: ``(wrapped, plain)`` modules: a returned wrapper is released as the plain module.
    """

    def __init__(self, run: Run) -> None:
        super().__init__(run)
        self.engines: list[Any] = []
        self.wrapped: list[tuple[Any, Any]] = []
        self._memory: list[Any] = []  # BatchMemoryManager contexts, exited by check()
        #: Axis name → privacy role of the axes the mechanism consumed (batch size, epochs: set by
        #: :class:`~dphypo.train.heterogeneous.HeterogeneousDPSGD`); empty when no axis changes privacy.
        self.privacy_axes: dict[str, str] = {}

    def training_params(self, params: dict[str, Any]) -> dict[str, Any]:
        """``params`` without the privacy axes the mechanism consumed, after checking they are the run's own.

        A search over batch size or epochs trains each point under its own mechanism (σ_i, batch size, epochs);
        the objective reads only the remaining hyperparameters (lr, clip).

        Raises:
            RunMisuse: A privacy axis whose value is not the one the run's mechanism trains with.
        """
        if not self.privacy_axes:
            return params
        mechanism = self.dpsgd
        for name, role in self.privacy_axes.items():
            if role in ("batch_size", "epochs") and name in params and int(params[name]) != getattr(mechanism, role):
                raise RunMisuse(f"params[{name!r}]={params[name]!r} but the run's mechanism trains with "
                                f"{role}={getattr(mechanism, role)}")
        return {key: value for key, value in params.items() if key not in self.privacy_axes}

    @property
    def dpsgd(self) -> DPSGDMechanism:
        """The run's mechanism."""
        mechanism = self.mechanism
        assert isinstance(mechanism, DPSGDMechanism)  # DPSGDMechanism.open made this context
        return mechanism

    def make_private(
        self,
        module: Any,
        optimizer: Any,
        data_loader: Any,
        *,
        max_grad_norm: float,
        grad_sample_mode: str = "hooks",
        max_physical_batch_size: int | None = None,
    ) -> tuple[Any, ...]:
        """Wrap a model for DP-SGD exactly as the mechanism says, and register the engine for the budget check.

        Args:
            module: The model (its parameters must be the optimizer's).
            optimizer: A torch optimizer over ``module``'s parameters.
            data_loader: A ``DataLoader`` over the training split with ``batch_size=mechanism.batch_size``.
            max_grad_norm: Per-example clipping norm C > 0.
            grad_sample_mode: Opacus's per-sample gradient mode: ``"hooks"`` (default), ``"functorch"`` or ``"ew"``.
                The mechanism — per-example clipping to C, Gaussian noise σC on the sum, Poisson sampling — and hence
                the accounted ε are the same in every mode. A record whose per-example gradient is not finite
                contributes zero (:func:`~dphypo.train.opacus.drop_non_finite_examples`), so a run fails only when
                its noisy update does. Ghost clipping is refused: it cannot drop such a record (see
                :data:`~dphypo.train.opacus.GRAD_SAMPLE_MODES`).
            max_physical_batch_size: Process each Poisson batch in chunks of at most this many examples (Opacus's
                ``BatchMemoryManager``): the optimizer steps once per logical batch, so the mechanism and ε are
                unchanged; only memory is bounded.

        Returns:
            ``(module, optimizer, data_loader)`` as wrapped by Opacus.

        Raises:
            RunMisuse: The mechanism refuses the arguments (a second call, a bad clipping norm, a loader whose length
                differs from the mechanism's, ghost clipping); recorded on the run.
        """
        try:
            return self._make_private(module, optimizer, data_loader, max_grad_norm, grad_sample_mode,
                                      max_physical_batch_size)
        except ValueError as exc:
            raise self._misused(exc) from exc

    def _make_private(
        self, module: Any, optimizer: Any, data_loader: Any, max_grad_norm: float, grad_sample_mode: str,
        max_physical_batch_size: int | None,
    ) -> tuple[Any, ...]:
        mechanism = self.dpsgd
        if self.engines:
            raise ValueError("make_private was already called for this run; one DP-SGD training per run")
        check_positive("max_grad_norm", max_grad_norm)
        check_grad_sample_mode(grad_sample_mode)
        if max_physical_batch_size is not None and not (
            isinstance(max_physical_batch_size, numbers.Integral) and max_physical_batch_size >= 1
        ):
            raise ValueError(f"max_physical_batch_size must be a positive integer, got {max_physical_batch_size!r}")
        if len(data_loader) != mechanism.batches_per_epoch:
            raise ValueError(
                f"data_loader has {len(data_loader)} batches (Opacus sample rate 1/{len(data_loader)}) but the "
                f"mechanism was computed for n_train={mechanism.n_train}, batch_size={mechanism.batch_size}: "
                f"{mechanism.batches_per_epoch} batches (sample rate 1/{mechanism.batches_per_epoch}); build the "
                f"loader with batch_size={mechanism.batch_size} over {mechanism.n_train} examples"
            )
        seeded = not mechanism.secure_mode  # secure mode: Opacus's CSPRNG for noise and batches, nothing seeded
        engine, wrapped, optimizer, dp_loader = attach_engine(
            module, optimizer, data_loader, sigma=mechanism.sigma, max_grad_norm=max_grad_norm,
            secure_mode=mechanism.secure_mode,
            noise_seed=run_stream_seed(self.seed, NOISE_STREAM) if seeded else None,
            sampling_seed=run_stream_seed(self.seed, SAMPLING_STREAM) if seeded else None,
            steps_per_epoch=mechanism.steps_per_epoch, grad_sample_mode=grad_sample_mode,
            expected_batch_size=mechanism.expected_batch_size,
        )
        self.engines.append(engine)
        self.wrapped.append((wrapped, module))  # released as the plain nn.Module, never Opacus's wrapper
        if max_physical_batch_size is not None:
            dp_loader = memory_safe_loader(dp_loader, optimizer, max_physical_batch_size, self._memory)
        return wrapped, optimizer, dp_loader

    def book(self, engine: Any) -> None:
        """Register a DP-SGD training that ran outside :meth:`make_private`, for :meth:`check`'s budget check.

        The vectorised engine (:mod:`dphypo.train.vectorized`) trains many runs at once and hands each run its
        booking (:class:`~dphypo.train.vectorized.Booked`, shaped as an Opacus accountant history); :meth:`check`
        then compares it with the mechanism exactly as it does an Opacus engine's.

        Args:
            engine: Anything with ``accountant.history`` (``[(noise_multiplier, sample_rate, steps)]``).

        Raises:
            RunMisuse: The run already trained (one DP-SGD training per run); recorded on the run.
        """
        if self.engines:
            raise self._misused(ValueError("this run already trained; one DP-SGD training per run"))
        self.engines.append(engine)

    def to_standard_module(self, module: Any) -> Any:
        """The plain ``nn.Module`` inside a module returned by :meth:`make_private` (anything else as it is).

        Use it to evaluate or save the trained model (Opacus's wrapper must not see evaluation batches in
        ``ew`` mode, and is not what is released).
        """
        for wrapped, plain in self.wrapped:
            if module is wrapped:
                return plain
        return module

    def released_artifact(self, artifact: Any) -> Any:
        """``artifact`` as it may be released: a module wrapped by :meth:`make_private` becomes the plain one."""
        return self.to_standard_module(artifact)

    def check(self, *, finished: bool = False) -> None:
        """After the run: a misuse, a score without private training, or a budget overrun stops the search.

        Args:
            finished: The objective returned a score; the run must then have trained through
                :meth:`make_private` (else its model would be released under an ε it never paid).

        Raises:
            RunMisuse: A misuse of the run, or ``finished`` without private training.
            BudgetExceeded: An engine booked more than the mechanism (:func:`check_budget`).
        """
        for manager in self._memory:
            manager.__exit__(None, None, None)
        self._memory.clear()
        super().check(finished=finished)
        if finished and not self.engines:
            raise RunMisuse(
                f"run {self.number} returned a score without training through run.make_private(...): its model "
                "would be released under an epsilon it never paid; train with DP-SGD through run.make_private"
            )
        for engine in self.engines:
            check_budget(engine, self.dpsgd)



def check_probe_fidelity(probe: DPSGDMechanism, final: DPSGDMechanism) -> None:
    """Refuse, in one line, two-stage probes that are not at most as costly as the final run.

    A probe takes no more DP-SGD steps than the final run, at a sampling rate no larger (fewer epochs, a smaller
    batch); anything else is not a cheaper fidelity, and the design would buy nothing a single-stage search cannot.

    Raises:
        dphypo.privacy.two_stage.TwoStageDesignError: More steps or a larger sampling rate than the final run.
    """
    if probe.steps > final.steps or probe.sample_rate > final.sample_rate:
        raise TwoStageDesignError(
            f"a probe fidelity above the final one: probes take {probe.steps} steps at q={probe.sample_rate:.4g}, "
            f"the final run {final.steps} at q={final.sample_rate:.4g}; probes must be cheaper"
        )


def run_stream_seed(run_seed: int, stream: int) -> int:
    """A 63-bit seed for one of a run's independent random streams (``*_STREAM`` constants)."""
    state = np.random.SeedSequence(int(run_seed), spawn_key=(stream,)).generate_state(2, dtype=np.uint32)
    return (int(state[0]) << 31) ^ int(state[1])


def private_score(run: RunContext, count: int) -> float:
    """The privatised score of a run: :func:`private_accuracy` with noise from the run's secret score stream.

    The Gaussian mechanism on a sensitivity-1 count with std ``mechanism.score_noise`` is exactly what
    :meth:`DPSGDMechanism.rdp` composes into every run's curve (privacy rule 4). One score per run: a second noisy
    view of the data would be a release the mechanism does not account for.

    Args:
        run: The run; ``run.mechanism`` must be a :class:`DPSGDMechanism` with ``score_noise`` and ``n_val``.
        count: Correct validation predictions (an integer ≥ 0; sensitivity 1 under add/remove-one).

    Returns:
        ``(count + N(0, score_noise²)) / n_val``.
    """
    mechanism = run.mechanism
    if not isinstance(mechanism, DPSGDMechanism) or mechanism.score_noise is None:
        raise ValueError(
            f"run.private_score needs a DPSGDMechanism with score_noise and n_val (dphypo.tune(score_noise=..., "
            f"n_val=...)), got {mechanism!r}"
        )
    return private_accuracy(count, mechanism, np.random.default_rng(run_stream_seed(run.seed, SCORE_STREAM)))


def spent_rdp(history: Iterable[tuple[float, float, int]], orders: Iterable[float] | None = None) -> RdpCurve | None:
    """RDP booked by an Opacus accountant history ``[(noise_multiplier, sample_rate, steps), ...]``.

    Returns:
        The composition of one :func:`~dphypo.privacy.dpsgd_rdp` per entry, or ``None`` for an empty history.
    """
    curves = [dpsgd_rdp(float(sigma), float(q), int(steps), orders=orders) for sigma, q, steps in history]
    return compose(*curves) if curves else None


def check_budget(engine: Any, mechanism: DPSGDMechanism) -> None:
    """Raise :class:`BudgetExceeded` if an engine's accountant booked more RDP than ``mechanism.training_rdp()``.

    The comparison is at every order of :data:`~dphypo.privacy.DEFAULT_ORDERS` with a relative slack of 1e-9
    (float noise only). An empty history (no optimizer step taken) spends nothing and passes.

    Args:
        engine: An Opacus ``PrivacyEngine`` (anything with ``accountant.history``).
        mechanism: The run's mechanism.
    """
    if not isinstance(mechanism, DPSGDMechanism):
        raise ValueError(f"mechanism must be a DPSGDMechanism, got {mechanism!r}")
    history = list(engine.accountant.history)
    spent = spent_rdp(history, DEFAULT_ORDERS)
    if spent is None:
        return
    planned = mechanism.training_rdp(DEFAULT_ORDERS)
    over = spent.epsilons > planned.epsilons * (1.0 + _RELATIVE_SLACK)
    if np.any(over):
        i = int(np.argmax(over))
        booked = ", ".join(f"(sigma={s:g}, q={q:g}, steps={n})" for s, q, n in history)
        raise BudgetExceeded(
            f"the run spent more privacy than planned: planned sigma={mechanism.sigma:g}, q={mechanism.sample_rate:g}, "
            f"steps={mechanism.steps}; Opacus booked {booked} (total steps {sum(n for _, _, n in history)}); "
            f"at order {planned.orders[i]:g} spent RDP {spent.epsilons[i]:.6g} > planned {planned.epsilons[i]:.6g}"
        )


def private_accuracy(correct: int, mechanism: DPSGDMechanism, rng: np.random.Generator, *, clip: bool = False) -> float:
    """The released validation accuracy: ``(correct + N(0, score_noise²)) / n_val``.

    The Gaussian mechanism on a sensitivity-1 count (Dwork & Roth 2014, Theorem A.1; RDP accounted in
    :meth:`DPSGDMechanism.rdp`); dividing by the public ``mechanism.n_val`` is post-processing. The raw noisy value is
    an unbiased estimate and may leave [0, 1]; ``clip=True`` clips it to [0, 1] (also post-processing, but biased
    near the ends). Without ``score_noise`` it is the exact ``correct / n_val``.

    Under a per-record split (``mechanism.split_rule``) ``n_val`` is the public nominal size and the realised
    validation split may hold more records: a count above ``n_val`` is clipped to ``n_val`` before the noise is
    added (a function of the count, sensitivity still ≤ 1: docs/proofs/split.md §5). Otherwise such a count is
    refused (a bug of the objective).

    Args:
        correct: Number of correct validation predictions (≥ 0).
        mechanism: The run's mechanism (``score_noise``, ``n_val``).
        rng: Source of the noise.
        clip: Clip to [0, 1].

    Returns:
        The (noisy) accuracy.
    """
    if mechanism.n_val is None:
        raise ValueError("mechanism.n_val must be set to turn a count into an accuracy")
    if (mechanism.split_rule is not None and isinstance(correct, numbers.Integral) and not isinstance(correct, bool)
            and correct > mechanism.n_val):
        correct = mechanism.n_val  # nominal n_val below a realised count: clip (sensitivity ≤ 1)
    if not (isinstance(correct, numbers.Integral) and not isinstance(correct,
                                                                     bool) and 0 <= correct <= mechanism.n_val):
        # a count outside [0, n_val] is a bug of the objective; releasing it would scale the score past 1
        raise ValueError(f"correct must be an integer count in [0, n_val={mechanism.n_val}], got {correct!r}")
    noisy = float(correct) if mechanism.score_noise is None else float(correct) + rng.normal(0.0, mechanism.score_noise)
    accuracy = noisy / mechanism.n_val
    return min(max(accuracy, 0.0), 1.0) if clip else accuracy
