"""Sampling strategies: rules that turn the observations so far into a density over the grid.

A :class:`Strategy` is an immutable configuration; :meth:`Strategy.start` opens a :class:`StrategySession` for
one search. After every observed run the tuner calls :meth:`StrategySession.density` with *all* observations
so far and gets an **unprojected** density over the grid. The tuner projects every density onto
S_{C,c}(π0) (DP-HyPO eq. 3.1) before drawing from it, so a strategy never samples and may return any
density: the privacy guarantee of DP-HyPO Framework 1 holds for *any* update rule, which is also why a
strategy may fall back (e.g. to its previous density) whenever its model fails, without privacy cost.

Observations are ``(grid index, score)`` pairs in the order the runs were made. A run that failed (e.g. a
diverged DP-SGD run) is passed with a non-finite score (``nan``; ``±inf`` are treated the same). Strategies
treat it as the *worst* run: its score is imputed as the worst finite score observed so far (minimum when
maximising, maximum when minimising); with no finite score yet the strategy keeps its previous density (or
the prior). Each newly seen failed run is recorded as a ``"failed-run"`` event.

To add a strategy, write a frozen dataclass with a ``name`` property and a ``start`` method returning an
object with ``density`` and ``events``; :func:`oriented_scores` does the direction/NaN bookkeeping.

Importing this module does not import torch: :mod:`dphypo.surrogate` (BoTorch) is loaded on the first GP fit,
so uniform search stays light.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from dphypo.space import SearchSpace
    from dphypo.surrogate import SurrogateFit

__all__ = [
    "GPUCB",
    "SCALES",
    "Direction",
    "GPUCBSession",
    "Scale",
    "Strategy",
    "StrategyEvent",
    "StrategySession",
    "Uniform",
    "UniformSession",
    "oriented_scores",
    "tilted_softmax",
    "ucb_scores",
]

Direction = Literal["maximize", "minimize"]
Scale = Literal["raw", "standardized", "range"]
SCALES: tuple[str, ...] = ("raw", "standardized", "range")


@dataclass(frozen=True)
class StrategyEvent:
    """Something a strategy did that the curator may want to know (never released).

    Attributes:
        step: Number of observations the density was computed from (0 for the first density).
        kind: ``"fallback"`` (model unavailable, previous density or prior reused), ``"fit-warning"``
            (the fit succeeded but BoTorch warned) or ``"failed-run"`` (a non-finite score was imputed).
        message: Human-readable detail.
    """

    step: int
    kind: str
    message: str


@runtime_checkable
class StrategySession(Protocol):
    """One search's adaptive state."""

    @property
    def events(self) -> list[StrategyEvent]:
        """Recorded fallbacks and warnings so far, in order (a copy)."""
        ...

    def density(self, observations: Sequence[tuple[int, float]]) -> np.ndarray:
        """Unprojected density over the grid given all observations so far.

        Args:
            observations: ``(grid index, score)`` pairs in the order the runs were made; failed runs have a
                non-finite score.

        Returns:
            Array of shape ``(n,)``, non-negative, summing to 1.
        """
        ...


@runtime_checkable
class Strategy(Protocol):
    """Immutable strategy configuration."""

    @property
    def name(self) -> str:
        """Short identifier, e.g. ``"uniform"``."""
        ...

    def start(self, space: SearchSpace, direction: Direction, seed: int) -> StrategySession:
        """Open a session for one search.

        Args:
            space: The discretised search space (grid, unit coordinates, prior).
            direction: ``"maximize"`` or ``"minimize"`` the score.
            seed: Non-negative integer; a seeded session is deterministic.

        Returns:
            A fresh :class:`StrategySession`.
        """
        ...


# ----------------------------------------------------------------------------------------------- Uniform
@dataclass(frozen=True)
class Uniform:
    """Non-adaptive random search (DP-HyPO Algorithm 2; Papernot & Steinke 2022): always the prior π0."""

    @property
    def name(self) -> str:
        """Strategy identifier."""
        return "uniform"

    def start(self, space: SearchSpace, direction: Direction, seed: int) -> UniformSession:
        """Open a session that always returns ``space.prior``.

        Args:
            space: Search space; its ``prior`` has shape ``(n,)``.
            direction: ``"maximize"`` or ``"minimize"`` (validated, otherwise unused).
            seed: Non-negative integer (validated, otherwise unused).

        Returns:
            A :class:`UniformSession`.
        """
        _check_direction(direction)
        _check_seed(seed)
        return UniformSession(_checked_prior(space))


class UniformSession:
    """Session of :class:`Uniform`: the density is the prior whatever was observed."""

    def __init__(self, prior: np.ndarray) -> None:
        """Store the prior.

        Args:
            prior: Prior over the grid, shape ``(n,)``, summing to 1.
        """
        self._prior = prior

    @property
    def events(self) -> list[StrategyEvent]:
        """Always empty: uniform search has nothing to fall back from."""
        return []

    def density(self, observations: Sequence[tuple[int, float]]) -> np.ndarray:
        """Return the prior, shape ``(n,)``.

        Args:
            observations: ``(grid index, score)`` pairs (validated, otherwise ignored).

        Returns:
            A copy of the prior, shape ``(n,)``.
        """
        _split_observations(observations, self._prior.size)
        return self._prior.copy()


# ------------------------------------------------------------------------------------------------ GP-UCB
@dataclass(frozen=True)
class GPUCB:
    """GP-UCB softmax strategy (DP-HyPO Algorithm 3, Wang et al. 2023).

    After each run a GP is refitted on all observations, the upper confidence bound s = μ + τσ is computed
    on the grid (on the oriented score, so higher s is better also when minimising), and the density is the
    softmax π(λ) ∝ π0(λ)·exp(β·s_λ) (see :func:`tilted_softmax`; the paper's uniform π0 gives its
    exp(βs_λ)/Σexp(βs)). With no observations, or when the GP cannot be fitted (one observation, all-equal
    scores, fitting error), the previous density (or the prior) is returned and a ``"fallback"`` event is
    recorded.

    The scale of s decides how peaked the softmax is, and thus whether the projection onto S_{C,c} binds:

    * ``"raw"``: s in the score's own units (the paper's form; β=1 on accuracies in [0, 1] is nearly flat).
    * ``"standardized"``: μ and σ in units of the observed scores' standard deviation (the GP's
      ``Standardize`` space; μ is also centred, which the softmax ignores). τ keeps its meaning and β is
      per observed standard deviation, whatever the score's units.
    * ``"range"``: s mapped affinely onto [0, 1] over the grid, so β is the log-ratio of the largest to the
      smallest density-to-prior ratio before projection.

    Default ``scale="standardized", beta=1``: in ``benchmarks/sampler.py`` (T=20, C=2, c=0.75, synthetic
    accuracy bump on the 320-point MNIST grid, noise 0.02, 200 repeats) it gave the best true value of the
    released point, 0.822 ± 0.016 vs 0.773 ± 0.020 for uniform search, while the paper's raw β=1 gave
    0.781 ± 0.020 (its softmax is nearly flat, so the search is nearly uniform). Standardised β ∈ [0.5, 2]
    and range β=3 were within noise of it. Too peaked a softmax is worse, not better: the Euclidean
    projection of a near-point-mass pins a few points at C·π0 and spreads the rest almost evenly.

    Attributes:
        tau: UCB exploration weight τ ≥ 0 (the paper uses 0.1). BoTorch's ``UpperConfidenceBound(beta=b)``
            is μ + √b·σ, i.e. τ = √b.
        beta: Softmax inverse temperature β ≥ 0 (the paper uses 1 with raw scores).
        scale: ``"raw"``, ``"standardized"`` or ``"range"`` (see above).
    """

    tau: float = 0.1
    beta: float = 1.0
    scale: Scale = "standardized"

    def __post_init__(self) -> None:
        """Validate eagerly."""
        if not (np.isfinite(self.tau) and self.tau >= 0):
            raise ValueError(f"tau must be a finite number >= 0, got {self.tau!r}")
        if not (np.isfinite(self.beta) and self.beta >= 0):
            raise ValueError(f"beta must be a finite number >= 0, got {self.beta!r}")
        if self.scale not in SCALES:
            raise ValueError(f"scale must be one of {SCALES}, got {self.scale!r}")

    @property
    def name(self) -> str:
        """Strategy identifier."""
        return "gp-ucb"

    def start(self, space: SearchSpace, direction: Direction, seed: int) -> GPUCBSession:
        """Open a GP-UCB session.

        Args:
            space: Search space with ``unit_coordinates`` ``(n, d)`` and ``prior`` ``(n,)``.
            direction: ``"maximize"`` or ``"minimize"`` the score.
            seed: Non-negative integer; the GP fit at step t is seeded from ``(seed, t)``.

        Returns:
            A :class:`GPUCBSession`.
        """
        _check_direction(direction)
        _check_seed(seed)
        # Import BoTorch now, so a broken install fails here instead of as a silent fallback on every step.
        import dphypo.surrogate  # noqa: F401

        prior = _checked_prior(space)
        coords = np.asarray(space.unit_coordinates, dtype=np.float64)
        if coords.ndim != 2 or coords.shape[0] != prior.size:
            raise ValueError(f"space.unit_coordinates must have shape ({prior.size}, d), got {coords.shape!r}")
        return GPUCBSession(self, coords, prior, direction, seed)


class GPUCBSession:
    """Session of :class:`GPUCB`: refits the GP on every call and remembers its last density."""

    def __init__(
        self, config: GPUCB, coords: np.ndarray, prior: np.ndarray, direction: Direction, seed: int
    ) -> None:
        """Store the configuration and grid.

        Args:
            config: The strategy configuration.
            coords: Unit coordinates of the grid, shape ``(n, d)``.
            prior: Prior over the grid, shape ``(n,)``.
            direction: ``"maximize"`` or ``"minimize"``.
            seed: Non-negative integer seed.
        """
        self._config = config
        self._coords = coords
        self._prior = prior
        self._direction = direction
        self._seed = seed
        self._previous: np.ndarray | None = None
        self._events: list[StrategyEvent] = []
        self._failed_runs_reported = 0

    @property
    def events(self) -> list[StrategyEvent]:
        """Recorded fallbacks, fit warnings and imputed failed runs, in order (a copy)."""
        return list(self._events)

    def density(self, observations: Sequence[tuple[int, float]]) -> np.ndarray:
        """Refit the GP on all observations and return softmax(β·UCB), shape ``(n,)``.

        Args:
            observations: ``(grid index, score)`` pairs in run order; failed runs have a non-finite score.

        Returns:
            Unprojected density, shape ``(n,)``, non-negative, summing to 1.
        """
        step = len(observations)
        indices, utilities, failed = oriented_scores(observations, self._prior.size, self._direction)
        self._report_failed_runs(step, observations, failed)
        if step == 0:
            result = self._prior.copy()
        elif not np.all(np.isfinite(utilities)):
            result = self._fallback(step, "no finite score observed yet")
        else:
            result = self._density_from_fit(step, indices, utilities)
        self._previous = result
        return result.copy()

    def _density_from_fit(self, step: int, indices: np.ndarray, utilities: np.ndarray) -> np.ndarray:
        """Fit the surrogate and turn its UCB into a density, falling back on any failure.

        Args:
            step: Number of observations.
            indices: Observation grid indices, shape ``(k,)``.
            utilities: Oriented, imputed scores (higher is better), shape ``(k,)``.

        Returns:
            Density of shape ``(n,)``.
        """
        try:
            fit = _fit_surrogate(self._coords, indices, utilities, seed=_step_seed(self._seed, step))
        except Exception as err:  # any model error must not end a search that has spent privacy budget
            return self._fallback(step, f"surrogate raised {type(err).__name__}: {err}")
        for message in fit.warnings:
            self._events.append(StrategyEvent(step, "fit-warning", message))
        if not fit.ok:
            return self._fallback(step, f"surrogate fit not usable: {fit.reason}")
        s = ucb_scores(fit, self._config.tau, self._config.scale)
        return tilted_softmax(s, self._config.beta, self._prior)

    def _fallback(self, step: int, reason: str) -> np.ndarray:
        """Record a fallback and return the previous density, or the prior if there is none.

        Args:
            step: Number of observations.
            reason: Why the model is unavailable.

        Returns:
            Density of shape ``(n,)``.
        """
        target = "previous density" if self._previous is not None else "prior"
        self._events.append(StrategyEvent(step, "fallback", f"{reason}; using the {target}"))
        return (self._previous if self._previous is not None else self._prior).copy()

    def _report_failed_runs(self, step: int, observations: Sequence[tuple[int, float]], failed: int) -> None:
        """Record one ``"failed-run"`` event per failed run not reported before.

        Args:
            step: Number of observations.
            observations: All observations.
            failed: Number of observations with a non-finite score.
        """
        if failed <= self._failed_runs_reported:
            return
        bad = [i for i, (_, score) in enumerate(observations) if not np.isfinite(score)]
        for i in bad[self._failed_runs_reported :]:
            index, score = observations[i]
            message = f"run {i} (grid index {index}) scored {score!r}; treated as the worst finite score"
            self._events.append(StrategyEvent(step, "failed-run", message))
        self._failed_runs_reported = failed


def ucb_scores(fit: SurrogateFit, tau: float, scale: Scale) -> np.ndarray:
    """Upper confidence bound s = μ + τσ on the grid in the requested scale (DP-HyPO Algorithm 3).

    Args:
        fit: A successful surrogate fit (``fit.ok``) on oriented scores.
        tau: Exploration weight τ ≥ 0.
        scale: ``"raw"`` (score units), ``"standardized"`` (units of the observed scores' std, centred) or
            ``"range"`` (affinely mapped onto [0, 1] over the grid; all zeros if s is constant).

    Returns:
        Array of shape ``(n,)``.
    """
    if not fit.ok or fit.mean is None or fit.std is None:
        raise ValueError(f"fit must be a successful SurrogateFit, got ok={fit.ok!r}")
    if scale == "standardized":
        return (fit.mean - fit.score_loc) / fit.score_scale + tau * fit.std / fit.score_scale
    s = fit.mean + tau * fit.std
    if scale == "raw":
        return s
    if scale == "range":
        spread = float(s.max() - s.min())
        if not spread > 0:
            return np.zeros_like(s)
        return (s - s.min()) / spread
    raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")


def tilted_softmax(s: np.ndarray, beta: float, prior: np.ndarray) -> np.ndarray:
    """Softmax tilted by the prior: π(λ) = π0(λ)·exp(β s_λ) / Σ_λ' π0(λ')·exp(β s_λ').

    For the uniform π0 of DP-HyPO Algorithm 3 this is exactly its exp(β s_λ)/Σ exp(β s_λ'). For another π0
    it keeps the ratio π/π0 — the quantity the projection onto S_{C,c}(π0) bounds — equal to exp(β s)/Z, and
    β = 0 gives back the prior.

    Args:
        s: Scores, shape ``(n,)``, finite.
        beta: Inverse temperature β ≥ 0.
        prior: Prior, shape ``(n,)``, non-negative, summing to 1.

    Returns:
        Density of shape ``(n,)``, non-negative, summing to 1, zero where the prior is zero.
    """
    s = np.asarray(s, dtype=np.float64)
    if s.shape != prior.shape or not np.all(np.isfinite(s)):
        raise ValueError(f"s must be finite with shape {prior.shape!r}, got shape {s.shape!r}")
    support = prior > 0
    # Shift by the max over the prior's support so the best supported point has weight π0·1 > 0 (no underflow
    # to an all-zero vector, no overflow).
    logits = beta * (s - s[support].max())
    weights = np.where(support, prior * np.exp(np.minimum(logits, 0.0)), 0.0)
    return weights / weights.sum()


def oriented_scores(
    observations: Sequence[tuple[int, float]], size: int, direction: Direction
) -> tuple[np.ndarray, np.ndarray, int]:
    """Grid indices and "higher is better" scores of the observations, with failed runs imputed.

    Scores are negated when minimising. Non-finite scores (failed runs) are replaced by the worst finite
    oriented score observed (the minimum); if no score is finite they stay ``nan``.

    Args:
        observations: ``(grid index, score)`` pairs.
        size: Number of grid points n.
        direction: ``"maximize"`` or ``"minimize"``.

    Returns:
        ``(indices, utilities, n_failed)``: int64 indices of shape ``(k,)``, float64 utilities of shape
        ``(k,)`` and the number of non-finite scores.
    """
    _check_direction(direction)
    indices, scores = _split_observations(observations, size)
    utilities = -scores if direction == "minimize" else scores.copy()
    bad = ~np.isfinite(utilities)
    if bad.any() and not bad.all():
        utilities[bad] = utilities[~bad].min()
    elif bad.any():
        utilities[:] = np.nan
    return indices, utilities, int(bad.sum())


# ----------------------------------------------------------------------------------------------- helpers
def _split_observations(
    observations: Sequence[tuple[int, float]], size: int
) -> tuple[np.ndarray, np.ndarray]:
    """Validate observations and split them into arrays.

    Args:
        observations: ``(grid index, score)`` pairs.
        size: Number of grid points n.

    Returns:
        int64 indices and float64 scores, each of shape ``(k,)``.
    """
    indices = np.empty(len(observations), dtype=np.int64)
    scores = np.empty(len(observations), dtype=np.float64)
    for position, pair in enumerate(observations):
        if len(pair) != 2:
            raise ValueError(f"observations must be (grid index, score) pairs, got {pair!r}")
        index, score = pair
        if isinstance(index, bool) or not isinstance(index, int | np.integer) or not 0 <= index < size:
            raise ValueError(f"observation grid index must be an integer in [0, {size}), got {index!r}")
        indices[position] = index
        scores[position] = float(score)
    return indices, scores


def _checked_prior(space: SearchSpace) -> np.ndarray:
    """Return ``space.prior`` as float64 after checking it is a distribution.

    Args:
        space: Search space.

    Returns:
        Prior of shape ``(n,)``.
    """
    prior = np.asarray(space.prior, dtype=np.float64)
    if prior.ndim != 1 or prior.size == 0 or np.any(prior < 0) or not np.isclose(prior.sum(), 1.0):
        raise ValueError(f"space.prior must be a non-negative vector summing to 1, got shape {prior.shape!r}")
    return prior


def _fit_surrogate(grid: np.ndarray, indices: np.ndarray, scores: np.ndarray, *, seed: int) -> SurrogateFit:
    """Call :func:`dphypo.surrogate.fit_surrogate`, importing BoTorch only when a GP is first needed.

    The attribute is looked up at call time, so patching ``dphypo.surrogate.fit_surrogate`` takes effect.
    """
    from dphypo import surrogate

    return surrogate.fit_surrogate(grid, indices, scores, seed=seed)


def _check_direction(direction: str) -> None:
    """Raise unless ``direction`` is ``"maximize"`` or ``"minimize"``."""
    if direction not in ("maximize", "minimize"):
        raise ValueError(f"direction must be 'maximize' or 'minimize', got {direction!r}")


def _check_seed(seed: int) -> None:
    """Raise unless ``seed`` is a non-negative integer."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")


def _step_seed(seed: int, step: int) -> int:
    """Independent, reproducible seed for the fit at ``step`` of the session seeded with ``seed``."""
    return int(np.random.SeedSequence([int(seed), step]).generate_state(1, dtype=np.uint32)[0])
