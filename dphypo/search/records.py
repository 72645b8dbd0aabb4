"""The typed records of a search.

What a run receives (:class:`Run`), what it returns or raises (:class:`PrivateScore`, :class:`DataFailure`) and
how it is recorded (:class:`Trial`: one type for the loop, the tuner and the journals).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from dphypo.privacy.errors import DphypoError
from dphypo.search.plan import RunPlan

if TYPE_CHECKING:
    from dphypo.privacy import PrivacyPlan

__all__ = ["DataFailure", "PrivateScore", "Run", "RunMisuse", "Trial"]


class DataFailure(DphypoError):
    """Raise from an objective when a run failed *because of the data* (e.g. the loss diverged).

    The run then scores worst and is not retried (privacy rule 5): retrying would make the number of runs, and so
    the release, depend on the data. A non-finite returned score, and *any* other exception the objective raises
    (an out-of-memory error driven by a Poisson batch's size, a failure on some record), are treated the same
    way, because code that runs on the data can fail because of the data (docs/parallel.md). Only what cannot
    depend on the data stops a search: the worker process or host dying (charged up front, see
    :attr:`~dphypo.privacy.PrivacyPlan.max_lost`), the curator's Ctrl-C, or a run that spent more privacy than
    planned.
    """


class RunMisuse(DphypoError, ValueError):
    """An objective used its :class:`Run` against the plan; the search stops without a release.

    A second score for one run, a count outside ``[0, n_val]``, a bad clipping norm, or a run that returned a
    score without the plan's private training (:meth:`Run.make_private`) would release something the accounted ε
    does not cover (privacy rules 4 and 8). These are bugs of the objective, not failures on the data, so they
    are not scored worst and skipped: the search stops, loudly. The run records the misuse even when the
    objective catches the exception, so a broad ``except`` in user code cannot turn it into a data failure.
    """


class PrivateScore(float):
    """A run's score privatised by the mechanism its plan accounts for (made by :meth:`Run.private_score`).

    It is a ``float`` (compare and print it as one). When the run's plan releases a noisy score
    (``plan.score_noise``), the objective must return this object, not a bare number: a score that skipped the
    noise would be released while ε still claims it was privatised (privacy rule 4).

    Attributes:
        run_number: The run that made it.
    """

    run_number: int

    def __new__(cls, value: float, run_number: int) -> PrivateScore:  # noqa: D102 - documented on the class
        score = super().__new__(cls, value)
        score.run_number = int(run_number)
        return score

    def __reduce__(self) -> tuple[Any, ...]:
        return (PrivateScore, (float(self), self.run_number))

    @property
    def value(self) -> float:
        """The noisy score as a plain float."""
        return float(self)


@dataclass(frozen=True)
class Run:
    """What an objective receives besides the hyperparameters.

    Attributes:
        number: 0-based index of this run within the search.
        seed: A per-run seed derived from the search seed (use it for data order, initialisation, noise).
        privacy: The search's privacy configuration (the per-run budget the run must stay within).
        grid_index: Flat index of the hyperparameters in the search space.
        plan: The per-run plan (e.g. :class:`dphypo.train.DPSGDPlan`: σ, sampling rate, steps, score noise) the
            per-run budget was computed from; ``None`` when the search has none.
        engines: Privacy engines the plan created through :meth:`make_private`; the plan checks each against
            its budget after the run (:meth:`check_budget`).
        wrapped: ``(wrapped, plain)`` modules from :meth:`make_private`: a returned wrapper is released as the
            plain module.
        scores: The :class:`PrivateScore` objects this run made (only those are accepted as its score).
        misuse: What the objective did against the plan (:class:`RunMisuse`), checked after it returns.
    """

    number: int
    seed: int
    privacy: PrivacyPlan | None
    grid_index: int
    plan: RunPlan | None = None
    engines: list[Any] = field(default_factory=list, compare=False, repr=False)
    wrapped: list[tuple[Any, Any]] = field(default_factory=list, compare=False, repr=False)
    scores: list[PrivateScore] = field(default_factory=list, compare=False, repr=False)
    misuse: list[str] = field(default_factory=list, compare=False, repr=False)

    @property
    def rng(self) -> np.random.Generator:
        """A fresh generator seeded with :attr:`seed`."""
        return np.random.default_rng(self.seed)

    def make_private(self, module: Any, optimizer: Any, data_loader: Any, *, max_grad_norm: float) -> tuple:
        """Wrap the run's training as its plan says (for DP-SGD: Opacus with the calibrated σ, Poisson sampling).

        Returns ``(module, optimizer, data_loader)`` as wrapped by :meth:`RunPlan.make_private`.

        Raises:
            RunMisuse: The run has no plan, or the plan refuses the arguments (e.g. a clipping norm ≤ 0, a
                second call); recorded on the run, so the search stops even if the objective catches it.
        """
        if self.plan is None:
            raise self._misused(ValueError("run.plan must be a DPSGDPlan to train with DP-SGD (pass plan= to the "
                                           "Tuner), got None"))
        try:
            return self.plan.make_private(self, module, optimizer, data_loader, max_grad_norm=max_grad_norm)
        except ValueError as exc:
            raise self._misused(exc) from exc

    def _misused(self, error: Exception) -> RunMisuse:
        """Record ``error`` as a misuse of this run and return it as a :class:`RunMisuse` to raise."""
        message = f"run {self.number}: {error}"
        self.misuse.append(message)
        return RunMisuse(message)

    def private_score(self, count: int) -> PrivateScore:
        """The privatised score of a count statistic (for DP-SGD: ``(count + N(0, score_noise²)) / n_val``).

        ``count`` must have sensitivity 1 under adding or removing one record (e.g. the number of correct
        validation predictions); the noise comes from this run's secret stream and is exactly the mechanism the
        plan's per-run curve accounts for (:meth:`RunPlan.private_score`).

        Args:
            count: The raw statistic, an integer ≥ 0.

        Returns:
            The score to return from the objective.

        Raises:
            RunMisuse: The run has no plan, the plan does not privatise scores, a score was already made for this
                run, or ``count`` is not an integer in ``[0, n_val]`` (recorded on the run: the search stops).
        """
        if self.plan is None:
            raise self._misused(ValueError(
                "run.private_score needs a DPSGDPlan with score_noise and n_val (dphypo.tune(score_noise=..., "
                "n_val=...)), got None"
            ))
        if self.scores:
            raise self._misused(ValueError("run.private_score was already called for this run; one released score "
                                           "per run"))
        try:
            value = self.plan.private_score(self, count)
        except ValueError as exc:
            raise self._misused(exc) from exc
        score = PrivateScore(value, self.number)
        self.scores.append(score)
        return score

    def released_artifact(self, artifact: Any) -> Any:
        """``artifact`` as it may be released: a module wrapped by :meth:`make_private` becomes the plain one."""
        for wrapped, plain in self.wrapped:
            if artifact is wrapped:
                return plain
        return artifact

    def check_budget(self, *, finished: bool = False) -> None:
        """After the objective: fail loudly on a misuse of the run, or a run that spent other than planned.

        Args:
            finished: The objective returned a score (a run that failed on the data may not have trained).

        Raises:
            RunMisuse: The objective misused the run (even if it caught the error), or ``finished`` and the
                plan's private training never happened (:meth:`RunPlan.check_budget`).
            BudgetExceeded: A privacy engine of the run spent more than the plan's per-run budget.
        """
        if self.misuse:
            raise RunMisuse(self.misuse[0])
        if self.plan is not None:
            self.plan.check_budget(self, finished=finished)


@dataclass(frozen=True)
class Trial:
    """One run as recorded by the loop and the journal. **NOT PRIVATE — curator only** (score, timing, error).

    Attributes:
        number: 0-based run number within the search.
        grid_index: Flat index of its hyperparameters in the search space.
        params: The hyperparameters (python scalars).
        score: Its score; ``nan`` for a failed run.
        failed: The run failed (a data failure: it scores worst and is not retried, privacy rule 5).
        seconds: Its wall time.
        error: Why a failed run failed (the exception's type and message), for debugging only.
    """

    number: int
    grid_index: int
    params: dict[str, Any]
    score: float
    failed: bool
    seconds: float
    error: str | None = None
