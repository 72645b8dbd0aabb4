r"""Two-stage searches: cheap probes whose outcome is released, then one committed run (or a small selection).

A two-stage search fixes, before any data is touched, the probes' fidelity (noise, epochs, a data subsample), how
stage 1 releases its outcome, ``k`` and the budget split; then

* **stage 1** is one of

  - :class:`ProbeSelection`: a private selection (Papernot & Steinke 2022 / DP-HyPO Framework 1: a random number T
    of probes, candidates drawn from densities in S_{C,c}) that releases its best probe, hyperparameters and
    noisy score. Its curve is the search's (:func:`~dphypo.privacy.search_rdp.tuning_rdp`: Papernot–Steinke
    Theorems 2 and 6, Theorem B of docs/proofs/adaptive.md). Only the **best** probe: those theorems bound the
    release of the best candidate, and the top k of a selection are not covered (``k = 1``);
  - :class:`ProbeRelease`: a fixed number n of probes, each releasing its noisy score. Its curve is the n-fold
    adaptive composition of the probe's curve (Mironov 2017, Proposition 1). So where each probe is placed may
    depend on every earlier released score (GP-UCB, expected improvement: post-processing, no S_{C,c} needed),
    and so may the top k handed to stage 2;

* **stage 2** runs at full fidelity: :class:`FinalRun` (one run of the stage-1 winner) or
  :class:`FinalSelection` (a uniform private selection, random T′, over the stage-1 top k; its prior, uniform on
  the top k, is a function of stage 1's release, which adaptive composition allows: Mironov 2017, Prop. 1 holds
  for a second mechanism chosen from the first one's output).

**Total.** RDP composition of the two stages (Mironov 2017, Prop. 1), converted to (ε, δ) by
:func:`~dphypo.privacy.conversion.epsilon_from_rdp` (Canonne, Kamath & Steinke 2020, Prop. 12, as everywhere in
dphypo). When stage 1 is a :class:`ProbeRelease`, stage 2 a :class:`FinalRun` and both runs come with privacy
loss distributions (PLDs, pessimistic, both directions), the composed PLD is a second valid bound (composition of
PLDs, Koskela, Redberg & Wang 2024 Sec. 6.2 use the same numerical accountant); the report gives every valid
bound and uses the smallest, named. A *selection* stage has a privacy profile only for its own release
(Koskela–Redberg–Wang Thm 5.2), and a profile does not compose with another mechanism by addition, so a design
with a selection is accounted in RDP only.

Everything stage 1 releases is part of the search's release: the probes' hyperparameters and noisy scores for
:class:`ProbeRelease`, the best probe's for :class:`ProbeSelection`.

Pure numpy/scipy and dp_accounting; no torch, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dphypo.privacy.calibration import CalibrationError, coarse_to_fine_sigma, smallest_sigma
from dphypo.privacy.conversion import epsilon_from_rdp
from dphypo.privacy.errors import DphypoError
from dphypo.privacy.profiles import PldProfile
from dphypo.privacy.rdp import RdpCurve, compose
from dphypo.privacy.search_rdp import tuning_rdp
from dphypo.privacy.spec import RepeatAndSelect
from dphypo.privacy.validation import check_delta, check_int_at_least, check_non_negative_int, check_positive

__all__ = [
    "FinalRun",
    "FinalSelection",
    "ProbeRelease",
    "ProbeSelection",
    "TwoStage",
    "TwoStageCalibration",
    "TwoStageDesignError",
    "TwoStageReport",
    "account_two_stage",
    "calibrate_two_stage",
    "check_design",
    "check_split",
]


class TwoStageDesignError(DphypoError, ValueError):
    """A two-stage design no theorem covers, or one that leaves a stage nothing to do."""


@dataclass(frozen=True)
class ProbeSelection:
    """Stage 1 as a private selection that releases its best probe (hyperparameters and noisy score).

    Args:
        search: The selection's T law and density bounds (C, c); ``C = c = 1`` is a uniform selection.
        adaptive_theorem: The bound for C > c (``"B"``, default; ``"A"``; ``"published"``), as in
            :func:`~dphypo.privacy.search_rdp.tuning_rdp`.
    """

    search: RepeatAndSelect
    adaptive_theorem: str = "B"

    def __post_init__(self) -> None:
        if not isinstance(self.search, RepeatAndSelect):
            raise TypeError(f"search must be a RepeatAndSelect, got {self.search!r}")

    @property
    def top_k(self) -> int:
        """A selection releases one probe (module docstring)."""
        return 1

    @property
    def expected_probes(self) -> float:
        """E[T] of the selection."""
        return float(self.search.run_count.mean)

    def curve(self, probe: RdpCurve) -> tuple[RdpCurve, str]:
        """The stage's RDP curve and the theorem behind it."""
        tuned = tuning_rdp(probe, self.search.run_count, self.search.C, self.search.c,
                           adaptive_theorem=self.adaptive_theorem)
        return tuned.curve, tuned.theorem


@dataclass(frozen=True)
class ProbeRelease:
    """Stage 1 as ``probes`` runs whose noisy scores are all released (composition).

    Args:
        probes: Number of probe runs n ≥ 1, fixed before any data.
        top_k: How many of the best released probes stage 2 may use (1 ≤ k ≤ n).
    """

    probes: int
    top_k: int = 1

    def __post_init__(self) -> None:
        check_int_at_least("probes", self.probes, 1)
        check_int_at_least("top_k", self.top_k, 1)
        if self.top_k > self.probes:
            raise TwoStageDesignError(
                f"top_k must be at most the number of probes ({self.probes}), got {self.top_k}"
            )

    @property
    def expected_probes(self) -> float:
        """N (a fixed count)."""
        return float(self.probes)

    def curve(self, probe: RdpCurve) -> tuple[RdpCurve, str]:
        """n-fold adaptive composition of the probe's curve (Mironov 2017, Proposition 1)."""
        return probe.repeated(self.probes), f"composition of {self.probes} released probe(s) (Mironov 2017, Prop. 1)"


@dataclass(frozen=True)
class FinalRun:
    """Stage 2 as one full-fidelity run of the stage-1 winner."""

    @property
    def expected_runs(self) -> float:
        """One run."""
        return 1.0

    def curve(self, final: RdpCurve) -> tuple[RdpCurve, str]:
        """The run's own curve."""
        return final, "one final run"


@dataclass(frozen=True)
class FinalSelection:
    """Stage 2 as a uniform private selection over the stage-1 top k (random T′, releases its best run).

    Args:
        search: T′'s law; must be uniform (C = c = 1): the prior is uniform on the top k.
    """

    search: RepeatAndSelect

    def __post_init__(self) -> None:
        if not isinstance(self.search, RepeatAndSelect):
            raise TypeError(f"search must be a RepeatAndSelect, got {self.search!r}")
        if self.search.adaptive:
            raise TwoStageDesignError(
                f"the final selection must be uniform over the stage-1 top k (C = c = 1), got C={self.search.C:g}, "
                f"c={self.search.c:g}"
            )

    @property
    def expected_runs(self) -> float:
        """E[T′]."""
        return float(self.search.run_count.mean)

    def curve(self, final: RdpCurve) -> tuple[RdpCurve, str]:
        """The uniform selection's curve (Papernot-Steinke Theorems 2/6, Theorem B at C = c = 1)."""
        tuned = tuning_rdp(final, self.search.run_count, 1.0, 1.0)
        return tuned.curve, tuned.theorem


Stage1 = ProbeSelection | ProbeRelease
Stage2 = FinalRun | FinalSelection


def check_design(stage1: Stage1, stage2: Stage2) -> None:
    """Refuse, in one line, a design no theorem covers or that cannot run.

    Raises:
        TypeError: A stage of the wrong kind.
        TwoStageDesignError: A final selection over fewer than two stage-1 candidates.
    """
    if not isinstance(stage1, (ProbeSelection, ProbeRelease)):
        raise TypeError(f"stage1 must be a ProbeSelection or a ProbeRelease, got {stage1!r}")
    if not isinstance(stage2, (FinalRun, FinalSelection)):
        raise TypeError(f"stage2 must be a FinalRun or a FinalSelection, got {stage2!r}")
    if isinstance(stage2, FinalSelection) and stage1.top_k < 2:
        raise TwoStageDesignError(
            "a final selection needs at least two stage-1 candidates (top_k >= 2, which only a ProbeRelease "
            f"can hand over: a private selection releases its best probe only), got top_k={stage1.top_k}; "
            "use FinalRun for one committed run"
        )


@dataclass(frozen=True)
class TwoStage:
    """A two-stage design: both stages and the budget split, configuration fixed before any data is touched.

    The probes' fidelity (fewer epochs) is the caller's: :func:`dphypo.api.tune_two_stage` takes ``probe_epochs``, a
    simulation takes a probe landscape family.

    Args:
        stage1: :class:`ProbeSelection` (a private selection releasing its best probe) or :class:`ProbeRelease`
            (every probe's noisy score released).
        stage2: :class:`FinalRun` (default: one committed run of the stage-1 winner) or :class:`FinalSelection`.
        split: Fraction of ε given to the probes before the common rescaling (:func:`calibrate_two_stage`).

    Raises:
        TwoStageDesignError: A design :func:`check_design` refuses, or a split outside (0, 1).

    Example:
        20 released probes, then one committed run, half the budget each:

        >>> TwoStage(ProbeRelease(20), FinalRun(), split=0.5).label()
        'release 20 probes -> 1 final run, split 0.5'
    """

    stage1: Stage1
    stage2: Stage2 = field(default_factory=FinalRun)
    split: float = 0.5

    def __post_init__(self) -> None:
        check_design(self.stage1, self.stage2)
        check_split(self.split)

    def label(self) -> str:
        """A short description for tables, e.g. ``"release 50 probes, top 3 -> select E[T']=2, split 0.5"``."""
        if isinstance(self.stage1, ProbeRelease):
            first = f"release {self.stage1.probes} probes"
            first += f", top {self.stage1.top_k}" if self.stage1.top_k > 1 else ""
        else:
            first = f"select 1 of E[T]={self.stage1.expected_probes:g} probes"
            if self.stage1.search.adaptive:
                first += f" (C={self.stage1.search.C:g}, c={self.stage1.search.c:g})"
        second = "1 final run" if isinstance(self.stage2, FinalRun) else (
            f"select E[T']={self.stage2.expected_runs:g} final runs")
        return f"{first} -> {second}, split {self.split:g}"

    def describe(self) -> dict[str, Any]:
        """JSON-ready configuration."""
        out: dict[str, Any] = {"label": self.label(), "split": self.split, "top_k": self.stage1.top_k,
                               "expected_probes": self.stage1.expected_probes,
                               "expected_final_runs": self.stage2.expected_runs,
                               "probe_mode": "release" if isinstance(self.stage1, ProbeRelease) else "select"}
        if isinstance(self.stage1, ProbeSelection):
            out["probe_search"] = self.stage1.search.describe()
        if isinstance(self.stage2, FinalSelection):
            out["final_search"] = self.stage2.search.describe()
        return out


@dataclass(frozen=True)
class TwoStageReport:
    """The accounted privacy of a two-stage search.

    Attributes:
        epsilon: Total ε at ``delta``: the smallest valid bound.
        delta: δ of the guarantee.
        method: The bound used, ``"rdp"`` or ``"pld"``.
        methods: Every valid bound, ``{method: ε}``.
        stage1_epsilon: ε of stage 1 alone (RDP, same δ): what the probes' release costs on its own.
        stage2_epsilon: ε of stage 2 alone (RDP, same δ).
        stage1_theorem: The bound behind stage 1's curve.
        stage2_theorem: The bound behind stage 2's curve.
        order: RDP order of the conversion (``nan`` when the PLD bound is used).
        expected_runs: Expected trained runs ``(stage 1, stage 2)``, charged attempts included.
        curve: The composed RDP curve (what a further composition would add).
    """

    epsilon: float
    delta: float
    method: str
    methods: dict[str, float]
    stage1_epsilon: float
    stage2_epsilon: float
    stage1_theorem: str
    stage2_theorem: str
    order: float
    expected_runs: tuple[float, float]
    curve: RdpCurve

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (the composed curve left out; non-finite numbers become ``None``)."""
        return {
            "epsilon": self.epsilon, "delta": self.delta, "method": self.method, "methods": dict(self.methods),
            "stage1_epsilon": self.stage1_epsilon, "stage2_epsilon": self.stage2_epsilon,
            "stage1_theorem": self.stage1_theorem, "stage2_theorem": self.stage2_theorem,
            "order": self.order if self.order == self.order and abs(self.order) != float("inf") else None,
            "expected_runs": list(self.expected_runs),
        }


def _charged(curve: RdpCurve, theorem: str, *, run: RdpCurve, attempts: int) -> tuple[RdpCurve, str]:
    """Compose ``attempts`` lost runs into a stage (each charged as one more run, :mod:`dphypo.privacy.charged`)."""
    if not attempts:
        return curve, theorem
    return compose(curve, run.repeated(attempts)), f"{theorem} + {attempts} charged attempt(s)"


def _pld_bound(
    stage1: Stage1, stage2: Stage2, probe_profile: PldProfile | None, final_profile: PldProfile | None,
    delta: float, charged: tuple[int, int],
) -> float | None:
    """ε of the composed PLD, where one is valid (released probes, one final run, both PLDs given), else ``None``."""
    if not (isinstance(stage1, ProbeRelease) and isinstance(stage2, FinalRun)):
        return None
    if probe_profile is None or final_profile is None:
        return None
    if probe_profile.discretization != final_profile.discretization:
        raise ValueError(
            "probe_profile and final_profile must share one PLD discretisation to be composed, got "
            f"{probe_profile.discretization!r} and {final_profile.discretization!r}"
        )
    probes = stage1.probes + charged[0]
    final_runs = 1 + charged[1]
    from dphypo.privacy.gaussian_pld import compose, self_compose  # dp_accounting's, with loops on arrays

    pld = compose(self_compose(probe_profile.pld, probes), self_compose(final_profile.pld, final_runs))
    return PldProfile(pld, f"{probes} probe(s) + {final_runs} final run(s)").epsilon(delta)


def account_two_stage(
    probe: RdpCurve,
    final: RdpCurve,
    stage1: Stage1,
    stage2: Stage2,
    delta: float,
    *,
    probe_profile: PldProfile | None = None,
    final_profile: PldProfile | None = None,
    charged_probes: int = 0,
    charged_finals: int = 0,
) -> TwoStageReport:
    """Total (ε, δ) of a two-stage search (module docstring): stage curves composed in RDP, and the PLD where valid.

    Args:
        probe: RDP curve of one probe run (training at probe fidelity and its score release at the probes' own
            score noise, which may exceed the final run's: α/(2·s_probe²) per released score, Mironov 2017,
            Prop. 7), valid for every probe the design can place.
        final: RDP curve of one final run (training and, for a final selection, its score release), on the same
            orders as ``probe``.
        stage1: :class:`ProbeSelection` or :class:`ProbeRelease`.
        stage2: :class:`FinalRun` or :class:`FinalSelection`.
        delta: Target δ ∈ (0, 1).
        probe_profile: PLD of one probe run (both directions), for the PLD bound of released probes.
        final_profile: PLD of the final run, same discretisation as ``probe_profile``.
        charged_probes: Lost probe attempts (crashes), each charged as one more probe run.
        charged_finals: Lost final attempts, each charged as one more final run.

    Returns:
        The report; ``epsilon`` is the smallest valid bound.

    Raises:
        TwoStageDesignError: A design :func:`check_design` refuses.
        ValueError: Curves on different orders, a bad δ or charge count.
    """
    check_design(stage1, stage2)
    check_delta(delta)
    check_non_negative_int("charged_probes", charged_probes)
    check_non_negative_int("charged_finals", charged_finals)
    first, first_theorem = _charged(*stage1.curve(probe), run=probe, attempts=charged_probes)
    second, second_theorem = _charged(*stage2.curve(final), run=final, attempts=charged_finals)
    total = compose(first, second)  # raises on different order grids
    rdp_epsilon, order = epsilon_from_rdp(total.orders, total.epsilons, delta, pure_epsilon=total.pure_epsilon)
    methods = {"rdp": rdp_epsilon}
    pld = _pld_bound(stage1, stage2, probe_profile, final_profile, delta, (charged_probes, charged_finals))
    if pld is not None:
        methods["pld"] = pld
    method = min(methods, key=methods.__getitem__)
    return TwoStageReport(
        epsilon=methods[method],
        delta=float(delta),
        method=method,
        methods=methods,
        stage1_epsilon=epsilon_from_rdp(first.orders, first.epsilons, delta, pure_epsilon=first.pure_epsilon)[0],
        stage2_epsilon=epsilon_from_rdp(second.orders, second.epsilons, delta, pure_epsilon=second.pure_epsilon)[0],
        stage1_theorem=first_theorem,
        stage2_theorem=second_theorem,
        order=order if method == "rdp" else float("nan"),
        expected_runs=(stage1.expected_probes + charged_probes, stage2.expected_runs + charged_finals),
        curve=total,
    )


@dataclass(frozen=True)
class TwoStageCalibration:
    """Noise multipliers of both stages whose two-stage search meets a total ε, with the report there.

    Attributes:
        probe_sigma: σ of every probe run.
        final_sigma: σ of the final run(s).
        report: The total's report at those σ: :func:`account_two_stage` (RDP), or the caller's ``account_at``.
        split: The fraction of ε given to stage 1 before the common rescaling.
    """

    probe_sigma: float
    final_sigma: float
    report: TwoStageReport
    split: float


def check_split(split: float) -> None:
    """Refuse a budget split outside (0, 1) in one line (0 or 1 leaves a stage nothing)."""
    if not (isinstance(split, (int, float)) and 0.0 < split < 1.0):
        raise TwoStageDesignError(
            f"split must be in (0, 1): the fraction of the budget for the probes (0 or 1 leaves a stage nothing), "
            f"got {split!r}"
        )


#: The largest σ calibration considers; a stage's ε there is its floor (what its score releases and its run count
#: cost however noisy the training).
_FLOOR_SIGMA = 1e4
#: The smallest σ a stage's calibration considers: a budget met even there does not determine the noise (as in
#: :func:`~dphypo.privacy.calibration.calibrate_sigma`, refused).
_SMALLEST_SIGMA = 1e-2
#: The range of the common factor both stage σ are scaled by.
_SCALE_BOUNDS = (1e-3, 1e3)


def _stage_sigma(name: str, epsilon_at: Callable[[float], float], target: float, rtol: float,
                 coarse_at: Callable[[float], float] | None = None, total: float | None = None) -> float:
    """The smallest σ meeting ``target`` for one stage alone, or one line naming the stage's floor or its excess.

    Coarse to fine (:func:`~dphypo.privacy.calibration.coarse_to_fine_sigma`) when ``coarse_at`` is given.

    Raises:
        CalibrationError: The stage costs more than ``target`` at any σ, or meets it even at the smallest σ
            considered (so the budget does not determine its noise).
    """
    floor = epsilon_at(_FLOOR_SIGMA)
    if floor > target:
        raise CalibrationError(
            f"{name} alone costs at least epsilon={floor:.4g} at any sigma (its score releases and run count), "
            f"above its share {target:.4g} of the budget: give it a larger split, fewer runs or more score noise"
        )
    bounds = (_SMALLEST_SIGMA, _FLOOR_SIGMA)
    if coarse_at is None:
        sigma = smallest_sigma(epsilon_at, target, rtol=rtol, sigma_bounds=bounds)
    else:
        sigma = coarse_to_fine_sigma(epsilon_at, coarse_at, target, rtol=rtol, sigma_bounds=bounds)
    if sigma <= _SMALLEST_SIGMA:
        raise _undetermined(target if total is None else total,
                            f"{name} alone meets its share {target:.4g} at σ = {_SMALLEST_SIGMA:g}")
    return sigma


def _undetermined(target: float, why: str) -> CalibrationError:
    """The one-line refusal of a budget so large that it does not determine the noise (as single-stage refuses)."""
    return CalibrationError(
        f"target epsilon={target:g} is met even at the smallest sigma considered ({why}), so this budget does not "
        "determine the noise: pass both sigmas explicitly, or a smaller epsilon"
    )


def calibrate_two_stage(
    target_epsilon: float,
    delta: float,
    stage1: Stage1,
    stage2: Stage2,
    probe_for_sigma: Callable[[float], RdpCurve],
    final_for_sigma: Callable[[float], RdpCurve],
    *,
    split: float = 0.5,
    rtol: float = 1e-4,
    coarse_probe_for_sigma: Callable[[float], RdpCurve] | None = None,
    coarse_final_for_sigma: Callable[[float], RdpCurve] | None = None,
    account_at: Callable[[float, float], TwoStageReport] | None = None,
    coarse_account_at: Callable[[float, float], float] | None = None,
) -> TwoStageCalibration:
    """σ for the probes and for the final stage such that the whole two-stage search meets ``target_epsilon``.

    The split is configuration fixed before any data: stage 1 alone is calibrated to ``split · ε`` and stage 2
    alone to ``(1 − split) · ε`` (each by :func:`~dphypo.privacy.calibration.smallest_sigma`), which fixes the
    ratio of the two σ; then both are scaled by the smallest common factor whose composed total meets
    ``target_epsilon`` (:func:`account_two_stage` in RDP, or ``account_at``: e.g. the smallest valid bound, composed
    PLDs included). Every step is non-increasing in σ, so the root finding applies; the σ → ∞ limit is 0, so any
    target > 0 is reachable. A target so large that a stage meets its share at the smallest σ considered
    (:data:`_SMALLEST_SIGMA`), or the total at the smallest factor, does not determine the noise and is refused, as
    :func:`~dphypo.privacy.calibration.calibrate_sigma` refuses it.

    With ``coarse_probe_for_sigma`` and ``coarse_final_for_sigma`` (cheap approximations, e.g. on
    :data:`~dphypo.privacy.calibration.COARSE_ORDERS`) every root is found coarse to fine
    (:func:`~dphypo.privacy.calibration.coarse_to_fine_sigma`): the same σ to ``rtol``, each certified by a
    full-precision evaluation.

    Args:
        target_epsilon: Total ε of both stages.
        delta: δ ∈ (0, 1).
        stage1: The probe stage.
        stage2: The final stage.
        probe_for_sigma: One probe run's RDP curve at σ.
        final_for_sigma: One final run's RDP curve at σ (same orders).
        split: Fraction of ε for stage 1, in (0, 1).
        rtol: Relative tolerance on each σ.
        coarse_probe_for_sigma: A cheap approximation of ``probe_for_sigma`` (``None``: full precision throughout).
        coarse_final_for_sigma: A cheap approximation of ``final_for_sigma``, on the same orders as the coarse
            probe curve.
        account_at: The total's report at ``(probe σ, final σ)`` (default :func:`account_two_stage` of the two
            curves, RDP); it must be non-increasing in a common scale of both σ.
        coarse_account_at: A cheap approximation of ``account_at``'s ε (default: RDP of the coarse curves).

    Returns:
        The calibration; its report's ε ≤ ``target_epsilon`` (checked).

    Raises:
        TwoStageDesignError: A refused design or split.
        CalibrationError: A stage that needs σ outside the calibration's bracket, or a budget that does not
            determine the noise.
    """
    check_design(stage1, stage2)
    check_positive("target_epsilon", target_epsilon)
    check_delta(delta)
    check_split(split)
    coarse = coarse_probe_for_sigma is not None and coarse_final_for_sigma is not None

    def stage_epsilon(stage: Stage1 | Stage2, curve: RdpCurve) -> float:
        tuned, _ = stage.curve(curve)
        return epsilon_from_rdp(tuned.orders, tuned.epsilons, delta, pure_epsilon=tuned.pure_epsilon)[0]

    def coarse_stage(stage: Stage1 | Stage2, curve_at: Callable[[float], RdpCurve] | None
                     ) -> Callable[[float], float] | None:
        return None if curve_at is None or not coarse else (lambda s: stage_epsilon(stage, curve_at(s)))

    probe0 = _stage_sigma("stage 1 (the probes)", lambda s: stage_epsilon(stage1, probe_for_sigma(s)),
                          split * target_epsilon, rtol, coarse_stage(stage1, coarse_probe_for_sigma), target_epsilon)
    final0 = _stage_sigma("stage 2 (the final run)", lambda s: stage_epsilon(stage2, final_for_sigma(s)),
                          (1.0 - split) * target_epsilon, rtol, coarse_stage(stage2, coarse_final_for_sigma),
                          target_epsilon)

    reports: dict[float, TwoStageReport] = {}

    def total_at(scale: float) -> TwoStageReport:
        if scale not in reports:
            if account_at is not None:
                reports[scale] = account_at(scale * probe0, scale * final0)
            else:
                reports[scale] = account_two_stage(probe_for_sigma(scale * probe0), final_for_sigma(scale * final0),
                                                   stage1, stage2, delta)
        return reports[scale]

    def fine_epsilon(scale: float) -> float:
        return total_at(scale).epsilon

    if not coarse:
        scale = smallest_sigma(fine_epsilon, target_epsilon, rtol=rtol, sigma_bounds=_SCALE_BOUNDS)
    else:
        assert coarse_probe_for_sigma is not None and coarse_final_for_sigma is not None
        probe_c, final_c = coarse_probe_for_sigma, coarse_final_for_sigma

        def coarse_epsilon(scale: float) -> float:
            if coarse_account_at is not None:
                return coarse_account_at(scale * probe0, scale * final0)
            return account_two_stage(probe_c(scale * probe0), final_c(scale * final0), stage1, stage2, delta).epsilon

        scale = coarse_to_fine_sigma(fine_epsilon, coarse_epsilon, target_epsilon, rtol=rtol,
                                     sigma_bounds=_SCALE_BOUNDS)
    if scale <= _SCALE_BOUNDS[0]:
        raise _undetermined(target_epsilon, f"both stages together meet it at σ = {scale * probe0:.3g} (probes) "
                                            f"and {scale * final0:.3g} (final)")
    report = total_at(scale)
    if report.epsilon > target_epsilon:  # smallest_sigma guarantees this; a broken monotonicity would not
        raise CalibrationError(
            f"two-stage calibration did not meet epsilon={target_epsilon:g} (got {report.epsilon:g})"
        )
    return TwoStageCalibration(scale * probe0, scale * final0, report, float(split))
