"""The private search loop: DP-HyPO Framework 1.

::

    draw T ~ run-count distribution          (once, from the PrivacyPlan the accountant reads, before any data)
    for j = 0 .. T-1:
        π̃ = project(strategy density given all observations so far) onto S_{C,c}(π0)
        draw λ ~ π̃; (model, score) = objective(λ)      (the score is part of the run's DP output)
    release only the best (λ, model, score) and the accounted (ε, δ)

:class:`Tuner` owns T and the release. The :class:`Release` is what may be published; the
:class:`SearchHistory` (T, every run's score, timings, densities) is **not private** and is for the curator only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dphypo._paths import check_output_file
from dphypo.privacy import PrivacyPlan, PrivacyReport
from dphypo.search.execution import Executor, make_executor
from dphypo.search.limits import check_expected_runs
from dphypo.search.loop import (
    LostAttemptsExceeded,
    Objective,
    Recorder,
    best_trial,
    better,
    evaluate_task,
    projected_density,
    run_loop,
)
from dphypo.search.plan import RunPlan
from dphypo.search.records import DataFailure, PrivateScore, Run, Trial
from dphypo.search.storage import Journal, MemoryJournal, SQLiteJournal
from dphypo.search.storage.describe import array_digest, describe, qualified_name
from dphypo.space import SearchSpace
from dphypo.strategies import Direction, Strategy, StrategyEvent, Uniform

__all__ = [
    "DataFailure",
    "LostAttemptsExceeded",
    "Objective",
    "PrivateScore",
    "Release",
    "Run",
    "SearchHistory",
    "SearchResult",
    "Trial",
    "Tuner",
    "best_trial",
    "better",
    "evaluate_task",
    "projected_density",
    "release_payload",
    "run_loop",
    "run_search",
]

# Independent random streams derived from the search seed (numpy SeedSequence spawn keys).
_T_STREAM, _SAMPLING_STREAM, _STRATEGY_STREAM, _RUN_STREAM = range(4)


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
        plan: The public per-run plan (for DP-SGD: σ, sampling rate, steps, score noise), if the search had one.
    """

    params: dict[str, Any] | None
    score: float | None
    artifact: Any
    epsilon: float
    delta: float
    privacy: PrivacyReport = field(repr=False)
    plan: RunPlan | None = None


@dataclass(frozen=True)
class SearchHistory:
    """Everything that happened during a search (**NOT PRIVATE — curator only**).

    It reveals T (the number of runs), every run's hyperparameters, score and timing, and the densities used;
    publishing any of it voids the accounted (ε, δ) (Papernot & Steinke 2022, §3.3: releasing T turns the search
    into best-of-T for a known T). Use it for debugging and research only.

    Attributes:
        run_count: The drawn T.
        trials: Every run in order.
        best_number: Index in ``trials`` of the released run (``None`` if T = 0).
        densities: The projected densities the runs were drawn from (one per update), if recorded.
        events: The strategy's fallbacks and warnings.
        seed: The entropy every random stream of the search was derived from (T, candidates, per-run seeds:
            batches, DP-SGD noise, score noise). **Secret**: whoever knows it can recompute T and the noise.
        lost_attempts: Attempts lost to a dead worker or process (or stopped mid-run), over all sessions of a
            journaled search; at most the ``max_lost`` that ε charged up front.
    """

    run_count: int
    trials: tuple[Trial, ...]
    best_number: int | None
    densities: tuple[np.ndarray, ...]
    events: tuple[StrategyEvent, ...]
    seed: int
    lost_attempts: int = 0


@dataclass(frozen=True)
class SearchResult:
    """A finished search: the publishable :attr:`release` and the curator-only :attr:`history`."""

    release: Release
    history: SearchHistory


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
        seed: Seed of every random choice of the search (T, candidate draws, strategy, per-run seeds for batches,
            DP-SGD noise and score noise). ``None`` (default) draws 128 bits of fresh OS entropy, kept only in the
            curator-only history and journal. A given seed is a **curator secret**: anyone who knows it (and the
            code) can recompute T and subtract the noise, so never use a public value (privacy rule 6).
        runs_per_update: Candidates drawn from one projected density before the next update (still Framework 1: the
            update rule may keep π unchanged, DP-HyPO §3); default one per worker of the executor.
        record_densities: Keep every projected density in the history.
        progress: Called with the number of completed runs after each run (counts only, never scores).
        plan: Per-run plan handed to each :class:`Run` (a :class:`~dphypo.search.plan.RunPlan` such as
            :class:`dphypo.train.DPSGDPlan`: for :meth:`Run.make_private`, the private score and the budget check).
        executor: Where runs execute: ``"sequential"`` (default, in this process), ``"process"`` (a local pool,
            one thread and one GPU per worker), ``"ray"``, or a :class:`dphypo.search.execution.Executor`. With
            more than one worker, ``objective`` and its artifacts must be picklable. The release does not depend on
            the executor; it depends on ``runs_per_update`` (give the same one to compare executors).
        journal: Path of a crash-safe journal (:class:`dphypo.search.storage.SQLiteJournal`, curator only). A new
            file is sealed with the plan and T before any data is touched; an existing one is *resumed*: T is read, not
            redrawn, finished runs are replayed from it, and runs in flight when the previous process died count
            as lost attempts (covered by ``privacy.max_lost``, else the resume is refused with
            :class:`~dphypo.search.tuner.LostAttemptsExceeded`) and are re-run. A changed configuration is refused
            (:class:`~dphypo.search.storage.JournalMismatch`).
        objective_id: Description of the objective sealed in the journal (e.g. dataset and model), so a resume
            with a different objective is refused; default: the fields of a dataclass objective (e.g.
            :class:`~dphypo.train.DPSGDObjective`: dataset, model, split), else its qualified name.

    Raises:
        ValueError: Invalid arguments, a plan costlier than ``privacy.base``, or a strategy whose density bounds
            ``(C, c)`` differ from ``privacy.search``'s (the sampler must project onto the accounted set).

    Example:
        A uniform search over four learning rates, T geometric with mean 5, each run ε(α) = α/(2·4²) (a Gaussian
        mechanism); the objective is a toy function, a real one trains with ``run.make_private``
        (:func:`dphypo.tune` builds all of this for DP-SGD):

        >>> from dphypo import PrivacyPlan, SearchSpace, SearchSpec, Tuner
        >>> from dphypo.privacy import gaussian_rdp, geometric
        >>> from dphypo.space import Grid
        >>> space = SearchSpace({"lr": Grid((0.01, 0.03, 0.1, 0.3))})
        >>> privacy = PrivacyPlan(SearchSpec(geometric(0.2)), gaussian_rdp(4.0), 1e-5)
        >>> result = Tuner(lambda params, run: -abs(params["lr"] - 0.1), space, privacy, seed=1).run()
        >>> result.release.params, round(result.release.epsilon, 2)
        ({'lr': 0.1}, 1.43)
        >>> result.history.run_count  # T: curator-only, never published
        6
    """

    def __init__(
        self,
        objective: Objective,
        space: SearchSpace,
        privacy: PrivacyPlan,
        *,
        strategy: Strategy | None = None,
        direction: Direction = "maximize",
        seed: int | None = None,
        runs_per_update: int | None = None,
        record_densities: bool = False,
        progress: Callable[[int], None] | None = None,
        plan: RunPlan | None = None,
        executor: Executor | str | None = None,
        journal: str | os.PathLike[str] | None = None,
        objective_id: Any = None,
    ) -> None:
        if not isinstance(privacy, PrivacyPlan):
            raise TypeError(f"privacy must be a PrivacyPlan, got {type(privacy).__name__}")
        if direction not in ("maximize", "minimize"):
            raise ValueError(f"direction must be 'maximize' or 'minimize', got {direction!r}")
        if runs_per_update is not None and not (isinstance(runs_per_update, int) and runs_per_update >= 1):
            raise ValueError(f"runs_per_update must be a positive integer or None, got {runs_per_update!r}")
        if seed is not None and not (isinstance(seed, (int, np.integer)) and seed >= 0):
            raise ValueError(f"seed must be a non-negative integer or None, got {seed!r}")
        check_expected_runs(privacy.search.run_count)  # T must be drawable (and trainable) in bounded time
        self.objective = objective
        self.space = space
        self.privacy = privacy
        if strategy is not None and not callable(getattr(strategy, "start", None)):  # what the loop calls
            raise TypeError(f"strategy must be a Strategy (e.g. dphypo.GPUCB(C=2, c=0.75)), got "
                            f"{type(strategy).__name__}")
        self.strategy = strategy if strategy is not None else Uniform()
        _check_strategy_bounds(self.strategy, privacy)
        self.direction = direction
        self.seed = int(np.random.SeedSequence().entropy if seed is None else seed)  # type: ignore[arg-type]
        self._seed_given = seed is not None
        self.runs_per_update = runs_per_update
        self.record_densities = record_densities
        self.progress = progress
        self.plan = plan
        if plan is not None:
            _check_plan_is_accounted(plan, privacy)
        self.executor = executor
        # proven writable before anything is calibrated or trained (a journal that cannot be opened later loses
        # the whole search's budget)
        self.journal = None if journal is None else check_output_file(journal, "journal")
        self.objective_id = objective_id if objective_id is not None else _objective_description(objective)

    def _stream(self, *key: int) -> np.random.SeedSequence:
        return np.random.SeedSequence(self.seed, spawn_key=key)

    def draw_run_count(self) -> int:
        """T, from its own stream of the search seed (the same value on every call for a given seed)."""
        return self.privacy.search.run_count.sample(np.random.default_rng(self._stream(_T_STREAM)))

    def run(self) -> SearchResult:
        """Run (or resume) the whole search and return the release and the curator-only history."""
        with contextlib.ExitStack() as cleanup:
            journal = self._open_journal()
            cleanup.callback(journal.close)
            executor = make_executor(self.executor)
            if executor is not self.executor:  # created here, so closed here
                cleanup.callback(executor.close)
            # k candidates per projected density: one per worker unless given (Framework 1, docs/parallel.md)
            runs_per_update = self.runs_per_update if self.runs_per_update is not None else executor.workers
            recorder = Recorder(self.direction, journal, self.privacy.max_lost)
            # privacy rule 2: T is drawn (or read from the journal) before any data is touched
            run_count = self._sealed_run_count(journal, recorder, self.sealed_config(runs_per_update))
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
                runs_per_update=runs_per_update,
                record_densities=self.record_densities,
                progress=self.progress,
                executor=executor,
                recorder=recorder,
            )
            best = best_trial(trials, self.direction)
            if trials and all(t.failed for t in trials):  # visible in the release anyway (no finite score)
                warnings.warn("every run of the search failed, so the release has no score; the reasons are in "
                              "result.history.trials[i].error (curator-only)", RuntimeWarning, stacklevel=2)
            report = self.privacy.account()  # max_lost charged up front, whatever was actually lost
            release = Release(
                params=None if best is None else dict(trials[best].params),
                score=None if best is None else trials[best].score,
                artifact=None if best is None else recorder.artifact(best, artifacts[best]),
                epsilon=report.epsilon,
                delta=report.delta,
                privacy=report,
                plan=self.plan,
            )
            journal.write_release(release_payload(release))
        history = SearchHistory(run_count, tuple(trials), best, tuple(densities), tuple(events), self.seed,
                                recorder.lost_attempts)
        return SearchResult(release, history)

    def sealed_config(self, runs_per_update: int) -> dict[str, Any]:
        """The configuration a journal seals (JSON-ready); a resumed search must reproduce it exactly.

        Args:
            runs_per_update: Candidates drawn per projected density (``runs_per_update`` or the executor's workers).
        """
        privacy = self.privacy
        config = {
            "privacy": {
                **privacy.search.describe(),
                "run_count": privacy.search.run_count,
                "delta": privacy.delta,
                "base": {"label": privacy.base.label, "sha256": array_digest(privacy.base.orders,
                                                                             privacy.base.epsilons)},
                "profile": privacy.profile,
                "adaptive_theorem": privacy.adaptive_theorem,
                "max_lost": privacy.max_lost,
            },
            "space": self.space,
            "strategy": self.strategy,
            "direction": self.direction,
            "seed": self.seed,
            "runs_per_update": runs_per_update,
            "objective": self.objective_id,
            "plan": self.plan,
        }
        return describe(config)  # exact values, never a repr (an address in one would never match on resume)

    def check_journal(self, *, ignore: tuple[str, ...] = ()) -> None:
        """Refuse a resume whose configuration differs from the sealed one, before anything costly happens.

        :meth:`run` checks every field again; this early check lets a caller (e.g. :func:`dphypo.tune`) refuse a
        changed resume before calibrating σ, with ``ignore`` naming the fields it cannot know yet.

        Raises:
            JournalMismatch: Naming the fields that differ.
        """
        if self.journal is None or not self.journal.is_file() or self.journal.stat().st_size == 0:
            return  # a new journal: nothing sealed to compare with
        with SQLiteJournal.open(self.journal, read_only=True) as journal:
            sealed = journal.sealed()
            if sealed is None:
                return
            sealed_k = sealed.config.get("runs_per_update", 1)
            config = self.sealed_config(sealed_k if self.runs_per_update is None else self.runs_per_update)
            if not self._seed_given:
                config["seed"] = sealed.config.get("seed", self.seed)
            journal.verify(config, ignore=ignore)

    def _open_journal(self) -> Journal:
        """The search's journal: the file's (created or resumed), else a fresh in-memory one."""
        if self.journal is None:
            return MemoryJournal()
        journal = SQLiteJournal.open(self.journal)
        sealed = journal.sealed()
        if sealed is not None and not self._seed_given:
            self.seed = int(sealed.config.get("seed", self.seed))  # resuming a search seeded from fresh entropy
        return journal

    def _sealed_run_count(self, journal: Journal, recorder: Recorder, config: dict[str, Any]) -> int:
        """T: drawn and sealed for a new search, read (never redrawn) from the journal of a resumed one."""
        if journal.sealed() is None:
            return journal.seal(config, self.draw_run_count()).run_count
        sealed = journal.verify(config)
        recorder.resume()
        return sealed.run_count


def release_payload(release: Release) -> dict[str, Any]:
    """The JSON-ready, publishable part of a release (what ``dphypo release FILE`` prints)."""
    plan = None if release.plan is None else release.plan.describe()
    score = release.score
    return {
        "params": release.params,
        "score": None if score is None or not math.isfinite(score) else score,
        "epsilon": release.epsilon,
        "delta": release.delta,
        "privacy": release.privacy.to_dict(),
        "max_lost": release.privacy.charged_runs,  # lost attempts charged up front (docs/parallel.md)
        "plan": plan,
    }


def _check_strategy_bounds(strategy: Strategy, privacy: PrivacyPlan) -> None:
    """Refuse a strategy whose own (C, c) differ from the accountant's (privacy rule 3).

    The sampler projects onto S_{C,c} with ``privacy.search``'s bounds, so a strategy that carries its own must
    carry the same ones: else its densities are clipped to bounds it was not built for, or a caller accounts
    with one pair and believes it samples with another.

    Raises:
        ValueError: Naming both pairs.
    """
    C, c = getattr(strategy, "C", None), getattr(strategy, "c", None)
    if C is None or c is None:  # a strategy without bounds of its own: the tuner projects with privacy.search's
        return
    search = privacy.search
    if (float(C), float(c)) != (float(search.C), float(search.c)):
        raise ValueError(
            f"the strategy's density bounds (C, c) = ({C:g}, {c:g}) differ from privacy.search's "
            f"(C, c) = ({search.C:g}, {search.c:g}); the accountant and the sampler must use the same bounds"
        )


def _objective_description(objective: Any) -> Any:
    """A stable description of an objective: a dataclass's fields (its configuration), else its qualified name."""
    if dataclasses.is_dataclass(objective) and not isinstance(objective, type):
        return describe(objective, "objective")
    return qualified_name(objective if hasattr(objective, "__qualname__") else type(objective))


def _check_plan_is_accounted(plan: RunPlan, privacy: PrivacyPlan) -> None:
    """Privacy rule 4: the per-run curve the accountant uses must cover what the plan lets each run spend.

    The budget check after every run compares Opacus's history with the *plan*; the release's ε comes from
    ``privacy.base``. A plan costlier than ``privacy.base`` at any order would pass both checks yet under-report ε.
    """
    base = privacy.base
    planned = plan.rdp(orders=base.orders).epsilons
    if np.any(planned > base.epsilons * (1 + 1e-9) + 1e-12):
        raise ValueError(
            "plan spends more per run than privacy.base accounts for; build the PrivacyPlan from plan.rdp() "
            "(dphypo.tune does this)"
        )


def run_search(
    objective: Objective,
    space: SearchSpace,
    privacy: PrivacyPlan,
    **kwargs: Any,
) -> SearchResult:
    """Shorthand for ``Tuner(objective, space, privacy, **kwargs).run()``."""
    return Tuner(objective, space, privacy, **kwargs).run()
