"""The private search loop: DP-HyPO Framework 1.

::

    draw T ~ run-count distribution          (once, from the PrivacyConfig the accountant reads, before any data)
    for j = 0 .. T-1:
        π̃ = project(strategy density given all observations so far) onto S_{C,c}(π0)
        draw λ ~ π̃; (model, score) = objective(λ)      (the score is part of the run's DP output)
    release only the best (λ, model, score) and the accounted (ε, δ)

:class:`Tuner` owns T and the release. The :class:`Release` is what may be published; the
:class:`SearchHistory` (T, every run's score, timings, densities) is **not private** and is for the curator only.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dphypo.density import in_bounded_set, project
from dphypo.privacy import PrivacyConfig, PrivacyReport
from dphypo.space import SearchSpace
from dphypo.strategies import Direction, Strategy, StrategyEvent, Uniform

__all__ = [
    "DataFailure",
    "Objective",
    "Release",
    "Run",
    "SearchHistory",
    "SearchResult",
    "Trial",
    "Tuner",
    "better",
    "run_search",
]

#: ``objective(params, run) -> score`` or ``-> (score, artifact)``.
Objective = Callable[[dict[str, Any], "Run"], Any]

# Independent random streams derived from the search seed (numpy SeedSequence spawn keys).
_T_STREAM, _SAMPLING_STREAM, _STRATEGY_STREAM, _RUN_STREAM = range(4)


class DataFailure(Exception):
    """Raise from an objective when a run failed *because of the data* (e.g. the loss diverged).

    The run then scores worst and is not retried (privacy rule 5): retrying would make the number of runs, and so
    the release, depend on the data. A non-finite returned score is treated the same way. Any other exception
    is an infrastructure failure and propagates.
    """


@dataclass(frozen=True)
class Run:
    """What an objective receives besides the hyperparameters.

    Attributes:
        number: 0-based index of this run within the search.
        seed: A per-run seed derived from the search seed (use it for data order, initialisation, noise).
        privacy: The search's privacy configuration (the per-run budget the run must stay within).
        grid_index: Flat index of the hyperparameters in the search space.
        plan: The DP-SGD plan (σ, sampling rate, steps, score noise) the per-run budget was computed from, when
            the search trains with DP-SGD (:class:`dphypo.train.DPSGDPlan`); ``None`` otherwise.
        engines: Opacus privacy engines created through :meth:`make_private`; the tuner checks each one's
            accountant history against the plan after the run.
    """

    number: int
    seed: int
    privacy: PrivacyConfig | None
    grid_index: int
    plan: Any = None
    engines: list[Any] = field(default_factory=list, compare=False, repr=False)

    @property
    def rng(self) -> np.random.Generator:
        """A fresh generator seeded with :attr:`seed`."""
        return np.random.default_rng(self.seed)

    def make_private(self, module: Any, optimizer: Any, data_loader: Any, *, max_grad_norm: float) -> tuple:
        """Opacus ``make_private`` with this search's calibrated σ and Poisson sampling.

        Returns ``(module, optimizer, data_loader)`` wrapped by Opacus; see :func:`dphypo.train.make_private`.
        """
        from dphypo.train.private import make_private

        return make_private(self, module, optimizer, data_loader, max_grad_norm=max_grad_norm)

    def check_budget(self) -> None:
        """Fail loudly if any engine of this run spent more than the plan's per-run budget."""
        if not self.engines:
            return
        from dphypo.train.private import check_budget

        for engine in self.engines:
            check_budget(engine, self.plan)


@dataclass(frozen=True)
class Trial:
    """One run, as the curator sees it (NOT private: its score and timing must not be published)."""

    number: int
    grid_index: int
    params: dict[str, Any]
    score: float
    failed: bool
    seconds: float


@dataclass(frozen=True)
class Release:
    """What a private search may publish: the best run and the accounted (ε, δ).

    Attributes:
        params: Hyperparameters of the best run (``None`` only when a Poisson T was 0: no run happened and the
            data-independent default output is released).
        score: Its (privatised) score, ``nan`` if every run failed, ``None`` when no run happened.
        artifact: What the objective returned beside the score (e.g. the trained model), or ``None``.
        epsilon: Total ε of the whole search.
        delta: δ of the guarantee.
        privacy: The full accounting report (breakdown, theorem, orders).
        plan: The public per-run DP-SGD plan (σ, sampling rate, steps, score noise), if the search had one.
    """

    params: dict[str, Any] | None
    score: float | None
    artifact: Any
    epsilon: float
    delta: float
    privacy: PrivacyReport = field(repr=False)
    plan: Any = None


@dataclass(frozen=True)
class SearchHistory:
    """Everything that happened during a search. **NOT PRIVATE — curator only.**

    It reveals T (the number of runs), every run's hyperparameters, score and timing, and the densities used;
    publishing any of it voids the accounted (ε, δ) (Papernot & Steinke 2022, §3.3: releasing T turns the search
    into best-of-T for a known T). Use it for debugging and research only.

    Attributes:
        run_count: The drawn T.
        trials: Every run in order.
        best_number: Index in ``trials`` of the released run (``None`` if T = 0).
        densities: The projected densities the runs were drawn from (one per update), if recorded.
        events: The strategy's fallbacks and warnings.
        seed: The entropy the search's random streams were derived from.
    """

    run_count: int
    trials: tuple[Trial, ...]
    best_number: int | None
    densities: tuple[np.ndarray, ...]
    events: tuple[StrategyEvent, ...]
    seed: int


@dataclass(frozen=True)
class SearchResult:
    """A finished search: the publishable :attr:`release` and the curator-only :attr:`history`."""

    release: Release
    history: SearchHistory


def better(a: tuple[float, int], b: tuple[float, int], direction: Direction) -> bool:
    """The fixed, data-independent total order on run outputs ``(score, grid index)``.

    Higher (``maximize``) or lower (``minimize``) score wins; a failed run (non-finite score) loses to every
    finished one; ties go to the smaller grid index, so the order never depends on chance or on the data beyond
    the outputs themselves (Papernot & Steinke 2022, pitfall 11 of the notes).
    """

    def key(out: tuple[float, int]) -> tuple[float, int]:
        score, index = out
        oriented = score if direction == "maximize" else -score
        return (oriented if math.isfinite(score) else -math.inf, -index)

    return key(a) > key(b)


def _draw(density: np.ndarray, rng: np.random.Generator) -> int:
    """One index from a probability vector (inverse CDF; one uniform draw per sample)."""
    cdf = np.cumsum(density)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), density.size - 1))


class Tuner:
    """A private hyperparameter search (DP-HyPO Framework 1).

    Args:
        objective: ``objective(params, run) -> score`` or ``(score, artifact)``; ``params`` is a dict of python
            scalars, ``run`` a :class:`Run`. Raise :class:`DataFailure` (or return a non-finite score) when the run
            failed because of the data.
        space: The grid and prior π0.
        privacy: Run-count distribution, C, c, per-run RDP curve and δ: T is drawn from exactly this object and
            the release's ε is accounted from it.
        strategy: How densities adapt (default :class:`~dphypo.strategies.Uniform`).
        direction: ``"maximize"`` (accuracy) or ``"minimize"`` (loss).
        seed: Seed for every random choice of the search (T, sampling, strategy, per-run seeds); ``None`` draws
            fresh entropy (recorded in the history).
        batch_size: Candidates drawn from one projected density before the next update (still Framework 1: the
            update rule may keep π unchanged, DP-HyPO §3).
        record_densities: Keep every projected density in the history.
        progress: Called with the number of completed runs after each run (counts only, never scores).
        plan: DP-SGD plan handed to each :class:`Run` (for :meth:`Run.make_private` and the budget check).
    """

    def __init__(
        self,
        objective: Objective,
        space: SearchSpace,
        privacy: PrivacyConfig,
        *,
        strategy: Strategy | None = None,
        direction: Direction = "maximize",
        seed: int | None = None,
        batch_size: int = 1,
        record_densities: bool = False,
        progress: Callable[[int], None] | None = None,
        plan: Any = None,
    ) -> None:
        if not isinstance(privacy, PrivacyConfig):
            raise TypeError(f"privacy must be a PrivacyConfig, got {type(privacy).__name__}")
        if direction not in ("maximize", "minimize"):
            raise ValueError(f"direction must be 'maximize' or 'minimize', got {direction!r}")
        if not (isinstance(batch_size, int) and batch_size >= 1):
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        if seed is not None and not (isinstance(seed, (int, np.integer)) and seed >= 0):
            raise ValueError(f"seed must be a non-negative integer or None, got {seed!r}")
        self.objective = objective
        self.space = space
        self.privacy = privacy
        self.strategy = strategy if strategy is not None else Uniform()
        self.direction = direction
        self.seed = int(np.random.SeedSequence().entropy if seed is None else seed)  # type: ignore[arg-type]
        self.batch_size = batch_size
        self.record_densities = record_densities
        self.progress = progress
        self.plan = plan
        if plan is not None:
            _check_plan_is_accounted(plan, privacy)

    def _stream(self, *key: int) -> np.random.SeedSequence:
        return np.random.SeedSequence(self.seed, spawn_key=key)

    def draw_run_count(self) -> int:
        """T, from its own stream of the search seed (the same value on every call for a given seed)."""
        return self.privacy.search.run_count.sample(np.random.default_rng(self._stream(_T_STREAM)))

    def run(self) -> SearchResult:
        """Run the whole search and return the release and the curator-only history."""
        run_count = self.draw_run_count()  # privacy rule 2: before any data is touched
        trials, artifacts, densities, events = run_loop(
            self.objective,
            self.space,
            (self.privacy.search.C, self.privacy.search.c),
            self.strategy,
            self.direction,
            run_count,
            sampling_rng=np.random.default_rng(self._stream(_SAMPLING_STREAM)),
            strategy_seed=int(self._stream(_STRATEGY_STREAM).generate_state(1)[0]),
            run_seed=lambda j: int(self._stream(_RUN_STREAM, j).generate_state(1)[0]),
            privacy=self.privacy,
            plan=self.plan,
            batch_size=self.batch_size,
            record_densities=self.record_densities,
            progress=self.progress,
        )
        best = best_trial(trials, self.direction)
        report = self.privacy.account()
        release = Release(
            params=None if best is None else dict(trials[best].params),
            score=None if best is None else trials[best].score,
            artifact=None if best is None else artifacts[best],
            epsilon=report.epsilon,
            delta=report.delta,
            privacy=report,
            plan=self.plan,
        )
        history = SearchHistory(run_count, tuple(trials), best, tuple(densities), tuple(events), self.seed)
        return SearchResult(release, history)


def _check_plan_is_accounted(plan: Any, privacy: PrivacyConfig) -> None:
    """Privacy rule 4: the per-run curve the accountant uses must cover what the plan lets each run spend.

    The budget check after every run compares Opacus's history with the *plan*; the release's ε comes from
    ``privacy.base``. A plan costlier than ``privacy.base`` at any order would pass both checks yet under-report ε.
    """
    base = privacy.base
    planned = plan.rdp(orders=base.orders).epsilons
    if np.any(planned > base.epsilons * (1 + 1e-9) + 1e-12):
        raise ValueError(
            "plan spends more per run than privacy.base accounts for; build the PrivacyConfig from plan.rdp() "
            "(dphypo.tune does this)"
        )


def best_trial(trials: Sequence[Trial], direction: Direction) -> int | None:
    """Index of the run to release under :func:`better` (``None`` for no runs)."""
    best: int | None = None
    for i, trial in enumerate(trials):
        if best is None or better((trial.score, trial.grid_index), (trials[best].score, trials[best].grid_index),
                                  direction):
            best = i
    return best


def projected_density(session_density: np.ndarray, space: SearchSpace, C: float, c: float) -> np.ndarray:
    """Project a strategy's density onto S_{C,c}(π0) and verify the result (privacy rule 3).

    Every density the sampler draws from passes through here; a strategy can return anything, and an
    out-of-set result (which would void Theorem 1) raises instead of being sampled.
    """
    prior = space.prior
    density = project(np.asarray(session_density, dtype=np.float64), prior, C, c)
    if not in_bounded_set(density, prior, C, c):
        raise RuntimeError("projection produced a density outside S_{C,c}; refusing to sample from it")
    return density


def run_loop(
    objective: Objective,
    space: SearchSpace,
    bounds: tuple[float, float],
    strategy: Strategy,
    direction: Direction,
    run_count: int,
    *,
    sampling_rng: np.random.Generator,
    strategy_seed: int,
    run_seed: Callable[[int], int],
    privacy: PrivacyConfig | None = None,
    plan: Any = None,
    batch_size: int = 1,
    record_densities: bool = False,
    progress: Callable[[int], None] | None = None,
) -> tuple[list[Trial], list[Any], list[np.ndarray], list[StrategyEvent]]:
    """The Framework-1 loop for a *given* T (the :class:`Tuner` draws T; simulations may fix it).

    Args:
        bounds: ``(C, c)``, the density-ratio bounds every sampling density is projected onto.
        plan: DP-SGD plan handed to every :class:`Run` (see :attr:`Run.plan`).

    Returns:
        ``(trials, artifacts, densities, events)``; densities only if ``record_densities``.
    """
    session = strategy.start(space, direction, strategy_seed)
    observations: list[tuple[int, float]] = []
    trials: list[Trial] = []
    artifacts: list[Any] = []
    densities: list[np.ndarray] = []
    while len(trials) < run_count:
        density = projected_density(session.density(observations), space, *bounds)
        if record_densities:
            densities.append(density)
        for _ in range(min(batch_size, run_count - len(trials))):
            number = len(trials)
            grid_index = _draw(density, sampling_rng)
            params = space.params(grid_index)
            run = Run(number, run_seed(number), privacy, grid_index, plan)
            score, artifact, seconds = _evaluate(objective, params, run)
            run.check_budget()
            trials.append(Trial(number, grid_index, params, score, not math.isfinite(score), seconds))
            artifacts.append(artifact)
            if progress is not None:
                progress(len(trials))
        observations = [(t.grid_index, t.score) for t in trials]
    return trials, artifacts, densities, session.events


def _evaluate(objective: Objective, params: Mapping[str, Any], run: Run) -> tuple[float, Any, float]:
    start = time.perf_counter()
    try:
        out = objective(dict(params), run)
    except DataFailure:
        return math.nan, None, time.perf_counter() - start
    score, artifact = out if isinstance(out, tuple) else (out, None)
    try:
        score = float(score)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"objective must return a number or (number, artifact), got {out!r}") from exc
    if not math.isfinite(score):
        score, artifact = math.nan, None  # privacy rule 5: scores worst, not retried
    return score, artifact, time.perf_counter() - start


def run_search(
    objective: Objective,
    space: SearchSpace,
    privacy: PrivacyConfig,
    **kwargs: Any,
) -> SearchResult:
    """Shorthand for ``Tuner(objective, space, privacy, **kwargs).run()``."""
    return Tuner(objective, space, privacy, **kwargs).run()
