"""The private search loop: DP-HyPO Framework 1.

::

    draw T ~ run-count distribution          (once, from the PrivacyAccounting the accountant reads, before any data)
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
import warnings
from dataclasses import dataclass, field
from typing import Any, Unpack

import numpy as np

from dphypo._paths import check_output_file
from dphypo.privacy import PrivacyAccounting, PrivacyReport
from dphypo.privacy.two_stage import TwoStageReport
from dphypo.search.evaluation import Objective, checked_score
from dphypo.search.execution import make_executor
from dphypo.search.limits import check_expected_runs
from dphypo.search.loop import best_trial
from dphypo.search.options import SearchOptionFields, SearchOptions, resolve_options
from dphypo.search.recording import Recorder
from dphypo.search.records import RunContext, RunMechanism, Trial
from dphypo.search.run import SearchRun, SearchStreams
from dphypo.search.storage import Journal, MemoryJournal, SQLiteJournal
from dphypo.search.storage.describe import array_digest, describe, qualified_name
from dphypo.space import SearchSpace
from dphypo.strategies import Strategy, StrategyEvent, Uniform
from dphypo.strategies.base import check_strategy

__all__ = ["Candidate", "Release", "SearchHistory", "SearchResult", "Tuner", "release_payload"]

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
        privacy: The full accounting report (breakdown, theorem, orders); a two-stage search's
            (:func:`dphypo.api.tune_two_stage`) is the composition of its stages.
        mechanism: The public per-run mechanism (for DP-SGD: σ, sampling rate, steps, score noise), if the search had
            one.
    """

    params: dict[str, Any] | None
    score: float | None
    artifact: Any
    epsilon: float
    delta: float
    privacy: PrivacyReport | TwoStageReport = field(repr=False)
    mechanism: RunMechanism | None = None


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
class Candidate:
    """A candidate :meth:`Tuner.ask` hands out: train it with ``params`` through ``run``, then :meth:`Tuner.tell`.

    Attributes:
        number: 0-based run number within the search.
        params: The hyperparameters (python scalars).
        run: The run: ``run.make_private(...)`` trains privately, ``run.private_score(count)`` privatises the score.
    """

    number: int
    params: dict[str, Any]
    run: RunContext


@dataclass(frozen=True)
class SearchResult:
    """A finished search: the publishable :attr:`release` and the curator-only :attr:`history`."""

    release: Release
    history: SearchHistory


class Tuner:
    """A private hyperparameter search (DP-HyPO Framework 1).

    Args:
        objective: ``objective(params, run) -> score`` or ``(score, artifact)``; ``params`` is a dict of python
            scalars, ``run`` a :class:`Run` (``None``: the search is driven with :meth:`ask` and :meth:`tell`).
            Raise :class:`DataFailure` (or return a non-finite score) when the run
            failed because of the data.
        space: The grid and prior π0.
        privacy: Run-count distribution, C, c, per-run RDP curve and δ: T is drawn from exactly this object and
            the release's ε is accounted from it.
        strategy: How densities adapt (default :class:`~dphypo.strategies.Uniform`).
        mechanism: Per-run mechanism handed to each :class:`Run` (a :class:`~dphypo.search.records.RunMechanism`
            such as :class:`dphypo.train.DPSGDMechanism`: its training entry point, the private score and the
            budget check). With more than one worker, ``objective`` and its artifacts must be picklable.
        options: How the search runs (:class:`~dphypo.search.options.SearchOptions`: direction, secret seed,
            executor, journal, runs per update, progress). A journal file is sealed with the configuration and T
            before any data is touched; an existing one is *resumed*: T is read, not redrawn, finished runs are
            replayed, and runs in flight when the previous process died count as lost attempts (covered by
            ``privacy.max_lost``, else the resume is refused with
            :class:`~dphypo.search.tuner.LostAttemptsExceeded`) and are re-run; a changed configuration is refused
            (:class:`~dphypo.search.storage.JournalMismatch`).
        record_densities: Keep every projected density in the history.
        objective_id: Description of the objective sealed in the journal (e.g. dataset and model), so a resume
            with a different objective is refused; default: the fields of a dataclass objective (e.g.
            :class:`~dphypo.train.DPSGDObjective`: dataset, model, split), else its qualified name.

    Raises:
        ValueError: Invalid arguments, a mechanism costlier than ``privacy.base``, or a strategy whose density bounds
            ``(C, c)`` differ from ``privacy.search``'s (the sampler must project onto the accounted set).

    Example:
        A uniform search over four learning rates, T geometric with mean 5, each run ε(α) = α/(2·4²) (a Gaussian
        mechanism); the objective is a toy function, a real one trains with ``run.make_private``
        (:func:`dphypo.tune` builds all of this for DP-SGD):

        >>> from dphypo import PrivacyAccounting, SearchSpace, RepeatAndSelect, Tuner
        >>> from dphypo.privacy import gaussian_rdp, geometric
        >>> from dphypo.space import Grid
        >>> space = SearchSpace({"lr": Grid((0.01, 0.03, 0.1, 0.3))})
        >>> privacy = PrivacyAccounting(RepeatAndSelect(geometric(0.2)), gaussian_rdp(4.0), 1e-5)
        >>> result = Tuner(lambda params, run: -abs(params["lr"] - 0.1), space, privacy, seed=1).run()
        >>> result.release.params, round(result.release.epsilon, 2)
        ({'lr': 0.1}, 1.43)
        >>> result.history.run_count  # T: curator-only, never published
        6
    """

    def __init__(
        self,
        objective: Objective | None,
        space: SearchSpace,
        privacy: PrivacyAccounting,
        *,
        strategy: Strategy | None = None,
        mechanism: RunMechanism | None = None,
        options: SearchOptions | None = None,
        record_densities: bool = False,
        objective_id: Any = None,
        **option_fields: Unpack[SearchOptionFields],
    ) -> None:
        if not isinstance(privacy, PrivacyAccounting):
            raise TypeError(f"privacy must be a PrivacyAccounting, got {type(privacy).__name__}")
        self.options = resolve_options("Tuner", options, option_fields)
        check_expected_runs(privacy.search.run_count)  # T must be drawable (and trainable) in bounded time
        self.objective = objective
        self.space = space
        self.privacy = privacy
        self.strategy = strategy if strategy is not None else Uniform()
        check_strategy(self.strategy)
        _check_strategy_bounds(self.strategy, privacy)
        self.direction = self.options.direction
        seed = self.options.seed
        self.seed = int(np.random.SeedSequence().entropy if seed is None else seed)  # type: ignore[arg-type]
        self._seed_given = seed is not None
        self.runs_per_update = self.options.runs_per_update
        self.record_densities = record_densities
        self.progress = self.options.progress
        self.mechanism = mechanism
        if mechanism is not None:
            _check_mechanism_is_accounted(mechanism, privacy)
        self.executor = self.options.executor
        # proven writable before anything is calibrated or trained (a journal that cannot be opened later loses
        # the whole search's budget)
        journal = self.options.journal
        self.journal = None if journal is None else check_output_file(journal, "journal")
        self._search: SearchRun | None = None  # an ask/tell search, started by the first ask()
        # asked and not told: run number -> (journaled attempt, the run context this tuner opened for it)
        self._attempts: dict[int, tuple[int, RunContext]] = {}
        self.objective_id = objective_id if objective_id is not None else _objective_description(objective)

    def _stream(self, *key: int) -> np.random.SeedSequence:
        return np.random.SeedSequence(self.seed, spawn_key=key)

    def draw_run_count(self) -> int:
        """T, from its own stream of the search seed (the same value on every call for a given seed)."""
        return self.privacy.search.run_count.sample(np.random.default_rng(self._stream(_T_STREAM)))

    def run(self) -> SearchResult:
        """Run (or resume) the whole search and return the release and the curator-only history."""
        if self._search is not None:
            raise RuntimeError("this Tuner is driven with ask()/tell(); finish it with result()")
        if self.objective is None:
            raise ValueError("objective is None: give one to run the search, or drive it with ask() and tell()")
        with contextlib.ExitStack() as cleanup:
            executor = make_executor(self.executor)
            if executor is not self.executor:  # created here, so closed here
                cleanup.callback(executor.close)
            # k candidates per projected density: one per worker unless given (Framework 1, docs/parallel.md)
            runs_per_update = self.runs_per_update if self.runs_per_update is not None else executor.workers
            search = self._start(runs_per_update)
            cleanup.callback(search.recorder.journal.close)
            search.run(executor, runs_per_update=runs_per_update, progress=self.progress)
            return self._finish(search)

    # -- ask and tell: a search driven by the caller's own training loop ------------------------------------------

    def ask(self) -> Candidate | None:
        """The next candidate to train, or ``None`` once the search has made its T runs (then call :meth:`result`).

        For callers that run their own training loop (Optuna's habit): train with ``candidate.params`` through
        ``candidate.run`` (``run.make_private(...)``, ``run.private_score(count)``) and :meth:`tell` the score. The
        privacy rules are the tuner's: T was drawn (or read from the journal) before the first candidate, only the
        best run is released, and every density is projected onto S_{C,c}. Candidates are drawn
        ``runs_per_update`` (default 1) at a time from one density; ask several before telling to train them in
        parallel. A journaled search resumes: runs it already finished are replayed, never asked again.

        Returns:
            The candidate: its ``number``, ``params`` and ``run``.
        """
        if self._search is None:
            self._search = self._start(self.runs_per_update or 1)
        run = self._search.ask(self.runs_per_update or 1)
        if run is None:
            return None
        params = self.space.params(run.grid_index)
        context = run.open()
        self._attempts[run.number] = (self._search.recorder.started(run.number, run.grid_index, params), context)
        return Candidate(run.number, params, context)

    def tell(self, candidate: Candidate, score: Any, artifact: Any = None) -> None:
        """Record a candidate's score (and what it produced, e.g. the trained model).

        Args:
            candidate: What :meth:`ask` returned.
            score: ``candidate.run.private_score(count)`` when the mechanism releases a noisy score (a bare number is
                then refused, privacy rule 4); a non-finite score (or ``float("nan")``) marks a run that failed
                on the data (scored worst, never retried: privacy rule 5).
            artifact: Released if this run is the best (a module made private by ``run.make_private`` is released
                as the plain module).

        Raises:
            RunMisuse: The run misused its mechanism (e.g. never trained through ``run.make_private``); the search
                stops.
            TypeError: A bare number where the mechanism releases a noisy score.
            ValueError: A candidate this tuner did not hand out (another tuner's, or one told already).
        """
        search = self._search
        if search is None or candidate.number not in self._attempts:
            raise ValueError(f"candidate {candidate.number} was not asked from this tuner, or was told already")
        attempt, run = self._attempts[candidate.number]
        # Only the run this tuner opened carries this tuner's mechanism (σ, budget check): a candidate another tuner
        # handed out trained under another mechanism, and this tuner's ε would not cover it (privacy rule 8).
        if candidate.run is not run:
            raise ValueError(f"candidate {candidate.number} was not handed out by this tuner (its run is another "
                             "tuner's): tell each tuner only the candidates its own ask() returned")
        value = math.nan if not _is_finite_number(score) else checked_score(score, score, run)
        run.check(finished=math.isfinite(value))
        trial = search.trial_of(run.run, value, error=None if math.isfinite(value) else "non-finite score")
        kept = run.released_artifact(artifact) if math.isfinite(value) else None
        del self._attempts[candidate.number]
        search.recorder.finished(attempt, trial, kept)
        search.tell(candidate.number, trial, kept)
        if self.progress is not None:
            self.progress(len(search.trace.trials))

    def result(self) -> SearchResult:
        """The release and the history of an ask/tell search, once every asked candidate was told.

        Raises:
            RuntimeError: Candidates are still pending or the search has runs left to ask.
        """
        search = self._search
        if search is None:
            raise RuntimeError("nothing was asked yet: call ask() until it returns None, telling every candidate")
        if not search.finished:
            left = search.run_count - len(search.trace.trials)
            raise RuntimeError(f"the search has {left} run(s) left: ask() until it returns None and tell each")
        try:
            return self._finish(search)
        finally:
            search.recorder.journal.close()

    def close(self) -> None:
        """Stop an ask/tell search without finishing it, releasing its journal (idempotent).

        The journal keeps what was told; a new :class:`Tuner` on the same file resumes the search (runs asked and
        not told count as lost attempts, as after a crash). Without a journal the search is simply abandoned: no
        release, and the privacy already spent on the data is not recoverable.
        """
        search, self._search = self._search, None
        self._attempts.clear()
        if search is not None:
            search.recorder.journal.close()

    def _start(self, runs_per_update: int) -> SearchRun:
        """Open the journal, seal (or read) T before any data is touched (privacy rule 2), set up the search."""
        journal = self._open_journal()
        try:
            recorder = Recorder(self.direction, journal, self.privacy.max_lost)
            run_count = self._sealed_run_count(journal, recorder, self.sealed_config(runs_per_update))
        except BaseException:
            journal.close()
            raise
        streams = SearchStreams(
            sampling=np.random.default_rng(self._stream(_SAMPLING_STREAM)),
            strategy_seed=int(self._stream(_STRATEGY_STREAM).generate_state(1)[0]),
            run_seed=self._run_seed,
        )
        bounds = (self.privacy.search.C, self.privacy.search.c)
        return SearchRun(self.objective, self.space, self.strategy, self.direction, bounds, run_count, streams,
                         recorder=recorder, privacy=self.privacy, mechanism=self.mechanism,
                         record_densities=self.record_densities)

    def _run_seed(self, number: int) -> int:
        return int(self._stream(_RUN_STREAM, number).generate_state(1)[0])

    def _finish(self, search: SearchRun) -> SearchResult:
        """The release (best run, accounted ε) written to the journal, and the curator-only history."""
        trace = search.result()
        trials, recorder = trace.trials, search.recorder
        best = best_trial(trials, self.direction)
        if trials and all(t.failed for t in trials):  # visible in the release anyway (no finite score)
            warnings.warn("every run of the search failed, so the release has no score; the reasons are in "
                          "result.history.trials[i].error (curator-only)", RuntimeWarning, stacklevel=3)
        report = self.privacy.account()  # max_lost charged up front, whatever was actually lost
        release = Release(
            params=None if best is None else dict(trials[best].params),
            score=None if best is None else trials[best].score,
            artifact=None if best is None else recorder.artifact(best, trace.artifacts[best]),
            epsilon=report.epsilon,
            delta=report.delta,
            privacy=report,
            mechanism=self.mechanism,
        )
        recorder.journal.write_release(release_payload(release))
        history = SearchHistory(search.run_count, tuple(trials), best, tuple(trace.densities), tuple(trace.events),
                                self.seed, recorder.lost_attempts)
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
            "mechanism": self.mechanism,
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
    mechanism = None if release.mechanism is None else release.mechanism.describe()
    score = release.score
    return {
        "params": release.params,
        "score": None if score is None or not math.isfinite(score) else score,
        "epsilon": release.epsilon,
        "delta": release.delta,
        "privacy": release.privacy.to_dict(),
        # lost attempts charged up front (docs/parallel.md); a two-stage search charges none
        "max_lost": release.privacy.charged_runs if isinstance(release.privacy, PrivacyReport) else 0,
        "mechanism": mechanism,
    }


def _check_strategy_bounds(strategy: Strategy, privacy: PrivacyAccounting) -> None:
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


def _is_finite_number(value: Any) -> bool:
    """Whether ``value`` is a number that is finite (a NaN or inf score marks a run that failed on the data)."""
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return True  # not a number at all: checked_score names the problem


def _objective_description(objective: Any) -> Any:
    """A stable description of an objective: a dataclass's fields (its configuration), else its qualified name."""
    if dataclasses.is_dataclass(objective) and not isinstance(objective, type):
        return describe(objective, "objective")
    return qualified_name(objective if hasattr(objective, "__qualname__") else type(objective))


def _check_mechanism_is_accounted(mechanism: RunMechanism, privacy: PrivacyAccounting) -> None:
    """Privacy rule 4: the per-run curve the accountant uses must cover what the mechanism lets each run spend.

    The budget check after every run compares Opacus's history with the *mechanism*; the release's ε comes from
    ``privacy.base``. A mechanism costlier than ``privacy.base`` at any order would pass both checks yet under-report ε.
    """
    base = privacy.base
    planned = mechanism.rdp(orders=base.orders).epsilons
    if np.any(planned > base.epsilons * (1 + 1e-9) + 1e-12):
        raise ValueError(
            "mechanism spends more per run than privacy.base accounts for; build the PrivacyAccounting from "
            "mechanism.rdp() (dphypo.tune does this)"
        )
