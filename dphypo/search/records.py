"""The typed records of a search, and what the core needs of a per-run mechanism.

What a run receives (:class:`Run`, opened as a :class:`RunContext`), what it returns or raises
(:class:`PrivateScore`, :class:`DataFailure`, :class:`RunMisuse`) and how it is recorded (:class:`Trial`: one type
for the loop, the tuner and the journals). :class:`RunMechanism` is the protocol a training method implements
(:class:`dphypo.train.DPSGDMechanism` for DP-SGD); it lives here because a run and its mechanism refer to each
other, and the core (loop, tuner, journal) talks only to it, so it never imports a training library.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from dphypo.privacy.errors import DphypoError

if TYPE_CHECKING:
    from dphypo.privacy import PrivacyAccounting, RdpCurve
    from dphypo.privacy.profiles import PrivacyProfile

__all__ = ["DataFailure", "PrivateScore", "Run", "RunContext", "RunMechanism", "RunMisuse", "Trial"]


class DataFailure(DphypoError):
    """Raise from an objective when a run failed, decided from its DP outputs only (e.g. non-finite parameters).

    The run then scores worst and is not retried (privacy rule 5): retrying would make the number of runs, and so
    the release, depend on the data. Whether a run failed is part of what a search releases (a failed released probe
    has no score), so base it only on what the run's DP mechanism released — the parameters of the model trained
    through ``run.make_private`` (e.g. not finite after an optimizer step) or the noisy score — never on a training
    loss, a per-example gradient or a record: one record whose loss overflows would decide it, outside ε. (dphypo's
    own training decides failure this way, and the optimizer of ``run.make_private`` gives a record whose
    per-example gradient is not finite a zero contribution before clipping.) A non-finite returned score, and *any*
    other exception the objective raises (an out-of-memory error driven by a Poisson batch's size, a failure on some
    record), are treated the same way, because code that runs on the data can fail because of the data
    (docs/parallel.md): keep data-dependent code from raising. Only what cannot
    depend on the data stops a search: the worker process or host dying (charged up front, see
    :attr:`~dphypo.privacy.PrivacyAccounting.max_lost`), the curator's Ctrl-C, or a run that spent more privacy than
    planned.
    """


class RunMisuse(DphypoError, ValueError):
    """An objective used its :class:`Run` against the mechanism; the search stops without a release.

    A second score for one run, a count outside ``[0, n_val]``, a bad clipping norm, or a run that returned a
    score without the mechanism's private training (:meth:`Run.make_private`) would release something the accounted ε
    does not cover (privacy rules 4 and 8). These are bugs of the objective, not failures on the data, so they
    are not scored worst and skipped: the search stops, loudly. The run records the misuse even when the
    objective catches the exception, so a broad ``except`` in user code cannot turn it into a data failure.
    """


class PrivateScore(float):
    """A run's score privatised exactly as its run mechanism accounts for (made by :meth:`Run.private_score`).

    It is a ``float`` (compare and print it as one). When the run's mechanism releases a noisy score
    (``mechanism.score_noise``), the objective must return this object, not a bare number: a score that skipped the
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
    """A run as the search schedules it: the record the loop, the journal and the executors pass around.

    The objective does not receive this record but the context its mechanism opens for it (:meth:`open`): a
    :class:`RunContext` (no mechanism), or the mechanism's own (:class:`dphypo.train.DPSGDRun` for DP-SGD, with
    ``make_private``). The core knows no training library.

    Attributes:
        number: 0-based index of this run within the search.
        seed: A per-run seed derived from the search's secret entropy (data order, initialisation, noise).
        privacy: The search's privacy configuration (the per-run budget the run must stay within).
        grid_index: Flat index of the hyperparameters in the search space.
        mechanism: The per-run mechanism (e.g. :class:`dphypo.train.DPSGDMechanism`) the per-run budget was computed
            from; ``None`` when the search has none.
    """

    number: int
    seed: int
    privacy: PrivacyAccounting | None
    grid_index: int
    mechanism: RunMechanism | None = None

    def open(self) -> RunContext:
        """The context the objective receives: ``mechanism.open(run)``, or a plain one without a mechanism."""
        return RunContext(self) if self.mechanism is None else self.mechanism.open(self)


class RunContext:
    """What an objective receives besides the hyperparameters: its run, its private score, the after-run check.

    A mechanism that trains privately subclasses it (:class:`dphypo.train.DPSGDRun` adds ``make_private`` for Opacus);
    this base knows no training library.

    Args:
        run: The scheduled run.

    Attributes:
        scores: The :class:`PrivateScore` objects this run made (only those are accepted as its score).
        misuse: What the objective did against the mechanism (:class:`RunMisuse`), checked after it returns.
    """

    def __init__(self, run: Run) -> None:
        self.run = run
        self.scores: list[PrivateScore] = []
        self.misuse: list[str] = []

    @property
    def number(self) -> int:
        """0-based index of this run within the search."""
        return self.run.number

    @property
    def seed(self) -> int:
        """The run's secret seed (use it for data order, initialisation, noise)."""
        return self.run.seed

    @property
    def grid_index(self) -> int:
        """Flat index of the hyperparameters in the search space."""
        return self.run.grid_index

    @property
    def privacy(self) -> PrivacyAccounting | None:
        """The search's privacy configuration."""
        return self.run.privacy

    @property
    def mechanism(self) -> RunMechanism | None:
        """The per-run mechanism, or ``None``."""
        return self.run.mechanism

    @property
    def rng(self) -> np.random.Generator:
        """A fresh generator seeded with :attr:`seed`."""
        return np.random.default_rng(self.seed)

    def make_private(self, *args: Any, **kwargs: Any) -> Any:
        """A run without a training mechanism cannot train privately: recorded as a misuse (the search stops).

        Raises:
            RunMisuse: Always (a mechanism that trains opens a context with its own ``make_private``).
        """
        raise self._misused(ValueError("run.mechanism must be a DPSGDMechanism to train with DP-SGD (pass "
                                       f"mechanism= to the Tuner), got {self.mechanism!r}"))

    def _misused(self, error: Exception) -> RunMisuse:
        """Record ``error`` as a misuse of this run and return it as a :class:`RunMisuse` to raise."""
        message = f"run {self.number}: {error}"
        self.misuse.append(message)
        return RunMisuse(message)

    def private_score(self, count: int) -> PrivateScore:
        """The privatised score of a count statistic (for DP-SGD: ``(count + N(0, score_noise²)) / n_val``).

        ``count`` must have sensitivity 1 under adding or removing one record (e.g. the number of correct
        validation predictions); the noise comes from this run's secret stream and is exactly the mechanism the
        mechanism's per-run curve accounts for (:meth:`RunMechanism.private_score`).

        Args:
            count: The raw statistic, an integer ≥ 0.

        Returns:
            The score to return from the objective.

        Raises:
            RunMisuse: The run has no mechanism, the mechanism does not privatise scores, a score was already made for
                this run, or ``count`` is not an integer in ``[0, n_val]`` (recorded on the run: the search stops).
        """
        if self.mechanism is None:
            raise self._misused(ValueError(
                "run.private_score needs a DPSGDMechanism with score_noise and n_val (dphypo.tune(score_noise=..., "
                "n_val=...)), got None"
            ))
        if self.scores:
            raise self._misused(ValueError("run.private_score was already called for this run; one released score "
                                           "per run"))
        try:
            value = self.mechanism.private_score(self, count)
        except ValueError as exc:
            raise self._misused(exc) from exc
        score = PrivateScore(value, self.number)
        self.scores.append(score)
        return score

    def released_artifact(self, artifact: Any) -> Any:
        """``artifact`` as it may be released (a mechanism's context may unwrap what its training wrapped)."""
        return artifact

    def check(self, *, finished: bool = False) -> None:
        """After the objective: fail loudly on a misuse of the run, or (in a mechanism's context) on a budget overrun.

        Args:
            finished: The objective returned a score (a run that failed on the data may not have trained).

        Raises:
            RunMisuse: The objective misused the run, even if it caught the error.
        """
        if self.misuse:
            raise RunMisuse(self.misuse[0])


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


@runtime_checkable
class RunMechanism(Protocol):
    """A per-run privacy mechanism: the budget every run of a search is accounted with, and how runs keep to it.

    Attributes:
        score_noise: Standard deviation of the noise on the released score (``None``: the score is released as
            is, only valid when the validation data is public). When set, an objective must return
            :meth:`RunContext.private_score <dphypo.search.records.RunContext.private_score>`, never a bare
            number.
    """

    @property
    def score_noise(self) -> float | None:
        """Noise std of the released score, or ``None`` (read-only: a frozen dataclass field satisfies it)."""
        ...

    def rdp(self, orders: Iterable[float] | None = None) -> RdpCurve:
        """RDP curve of one whole run, including the release of its score (the ``base`` of a PrivacyAccounting).

        Args:
            orders: RDP orders α, shape ``(K,)``; default :data:`~dphypo.privacy.DEFAULT_ORDERS`.

        Returns:
            The curve ε(α), shape ``(K,)``.
        """
        ...

    def profile(self) -> PrivacyProfile | None:
        """The run's privacy profile (for the profile-based accountants), or ``None`` when it has none."""
        ...

    def open(self, run: Run) -> RunContext:
        """The context the objective receives for ``run`` (its training entry point, private score and check).

        Its ``check(finished=...)`` runs after the objective, in the process that trained: it raises
        :class:`~dphypo.search.records.RunMisuse` for a misuse (e.g. a score from a run that never made its
        training private) and the mechanism's own error for a budget overrun.
        """
        ...

    def private_score(self, run: RunContext, count: int) -> float:
        """The privatised score of a sensitivity-1 count, with noise from the run's secret stream.

        Args:
            run: The run whose score it is (its seed drives the noise).
            count: The raw statistic, an integer ≥ 0 (e.g. correct validation predictions).

        Returns:
            The noisy score.
        """
        ...

    def describe(self) -> dict[str, Any]:
        """The public settings of the mechanism, JSON-ready (printed in the release)."""
        ...
