"""What the search core needs of a per-run privacy plan (:class:`RunPlan`), and nothing about how runs train.

A plan fixes, before any data is touched, what one run may spend: its RDP curve (training *and* the release of
its score, privacy rule 4) and optionally a privacy profile. During the run it wraps the user's training so it
spends exactly that (:meth:`RunPlan.make_private`), privatises the score (:meth:`RunPlan.private_score`), and
afterwards checks that nothing spent more (:meth:`RunPlan.check_budget`). :class:`dphypo.train.DPSGDPlan` is the
DP-SGD implementation; the core (loop, tuner, journal) only talks to this protocol, so it never imports the
training layer.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from dphypo.privacy import RdpCurve
    from dphypo.privacy.profiles import PrivacyProfile

__all__ = ["RunHandle", "RunPlan"]


class RunHandle(Protocol):
    """What a plan reads and fills on the run it serves (:class:`dphypo.search.records.Run` is one).

    Declared here, not imported from the records, so the plan protocol depends on nothing else in the search.
    """

    @property
    def number(self) -> int:
        """0-based run number."""
        ...

    @property
    def seed(self) -> int:
        """The run's secret seed (drives its noise)."""
        ...

    @property
    def plan(self) -> RunPlan | None:
        """The plan the run is accounted with."""
        ...

    @property
    def engines(self) -> list[Any]:
        """Privacy engines made for the run (filled by :meth:`RunPlan.make_private`)."""
        ...

    @property
    def wrapped(self) -> list[tuple[Any, Any]]:
        """``(wrapped, plain)`` modules (filled by :meth:`RunPlan.make_private`)."""
        ...

    @property
    def scores(self) -> list[Any]:
        """The private scores the run made so far."""
        ...


@runtime_checkable
class RunPlan(Protocol):
    """A per-run privacy plan: the budget every run of a search is accounted with, and how runs keep to it.

    Attributes:
        score_noise: Standard deviation of the noise on the released score (``None``: the score is released as
            is, only valid when the validation data is public). When set, an objective must return
            :meth:`Run.private_score <dphypo.search.records.Run.private_score>`, never a bare number.
    """

    @property
    def score_noise(self) -> float | None:
        """Noise std of the released score, or ``None`` (read-only: a frozen dataclass field satisfies it)."""
        ...

    def rdp(self, orders: Iterable[float] | None = None) -> RdpCurve:
        """RDP curve of one whole run, including the release of its score (the ``base`` of a PrivacyPlan).

        Args:
            orders: RDP orders α, shape ``(K,)``; default :data:`~dphypo.privacy.DEFAULT_ORDERS`.

        Returns:
            The curve ε(α), shape ``(K,)``.
        """
        ...

    def profile(self) -> PrivacyProfile | None:
        """The run's privacy profile (for the profile-based accountants), or ``None`` when it has none."""
        ...

    def make_private(
        self, run: RunHandle, module: Any, optimizer: Any, data_loader: Any, *, max_grad_norm: float
    ) -> tuple[Any, Any, Any]:
        """Wrap the run's training so it spends exactly the plan; returns ``(module, optimizer, data_loader)``.

        The implementation registers what :meth:`check_budget` inspects on ``run.engines`` and the
        ``(wrapped, plain)`` module pair on ``run.wrapped`` (a wrapped module is released as the plain one).
        """
        ...

    def check_budget(self, run: RunHandle, *, finished: bool = False) -> None:
        """After the run (in the process that trained): raise if it spent other than planned.

        Args:
            run: The run.
            finished: The objective returned a score: a plan whose privacy rests on its own training step
                (:meth:`make_private`) must then raise :class:`~dphypo.search.records.RunMisuse` if that step
                never happened (the score would be released with an ε that does not describe the model).
        """
        ...

    def private_score(self, run: RunHandle, count: int) -> float:
        """The privatised score of a sensitivity-1 count, with noise from the run's secret stream.

        Args:
            run: The run whose score it is (its seed drives the noise).
            count: The raw statistic, an integer ≥ 0 (e.g. correct validation predictions).

        Returns:
            The noisy score.
        """
        ...

    def describe(self) -> dict[str, Any]:
        """The public settings of the plan, JSON-ready (printed in the release)."""
        ...
