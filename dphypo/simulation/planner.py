"""Plan a private search: which strategy, density bounds (C, c) and E[T] release the best model for a total (ε, δ).

The curator fixes the whole configuration of a private search (strategy, C, c, the run-count law of T) before any
private data is touched, and the accountant charges it whatever it turns out to be worth. :func:`plan_search`
compares configurations *at equal total ε* on a landscape family (:mod:`dphypo.simulation.family`): every candidate
calibrates its own noise multiplier σ for the total (ε, δ) with the accountant's best valid bound for its own search
(:func:`dphypo.simulation.equal_epsilon.arm_calibration`: privacy-profile bounds for a uniform search, the adaptive
theorem for C > c), runs on the family's landscape at that σ (``family.at(σ)``) and is judged by the mean true value
of the point its simulated searches release (:func:`dphypo.simulation.simulate.simulate`). The configuration with
the highest mean is the plan; the runner-up and the difference between the two, with its 95 % interval, say how
sure the plan is.

The plan is computed from landscapes (public data, or data whose privacy cost was already paid), never from the
private data of the search it configures, so choosing the configuration from it costs no privacy.

Status of a candidate that cannot run (reported, never raised, never extrapolated):

* ``"unreachable"``: no σ meets the total ε (:class:`dphypo.privacy.CalibrationError`: what T and log(C/c) cost
  even with infinite noise, or the σ-independent score release, exceeds it);
* ``"outside family"``: the calibrated σ lies outside the family's σ range.

Compute (:class:`ComputeBudget`): a plan may also be bounded in compute. Every row reports its expected number of
training runs (E[T]; a simulated search loses no attempt, so none is charged) and, given the seconds one run takes
(the family's ``seconds_per_run_mean`` metadata, :func:`family_run_seconds`, or the curator's own figure), its
expected compute E[T] × seconds. Rows over ``max_mean_runs`` or over the compute budget are simulated and shown but
never picked; :attr:`PlanResult.pareto_front` lists the rows no cheaper row matches in mean released value (the
utility-vs-compute front at the plan's fixed ε). Each candidate names its ``design`` (``"uniform"`` or
``"dp-hypo"``), the axis along which other search designs (e.g. two-stage searches) join a plan.

Fresh repeats (:class:`PlanEvaluation`): the best of many rows on the selection repeats is biased upwards (the
winner's curse), so :func:`plan_search` re-simulates the pick on ``evaluate_repeats`` fresh repeats, drawn from a seed
no selection repeat uses, together with every uniform search whose expected runs are at least the pick's, and reports
the pick's fresh mean and its difference against the best of those uniform searches on the same fresh repeats.

Race (:class:`Race`, ``dphypo plan``'s default): DP-HyPO rows, whose simulated GP searches cost the most, run the
selection repeats in rounds and stop once significantly below the leader (the rule and its error bound are
:class:`Race`'s); they keep the repeats they ran, rank after every other row and are never picked. Rows without a GP
run every selection repeat. Single-stage rows of one round run together on the executor's workers
(:func:`dphypo.simulation.batched.simulate_many`, the costliest first).

Calibrations: a plan calibrates every distinct candidate once, in the executor's workers; single-stage σ
(:func:`~dphypo.simulation.equal_epsilon.arm_calibration`) and two-stage σ pairs
(:func:`~dphypo.simulation.two_stage.calibrate_design`, memoised by :func:`two_stage_calibration`) are cached on
disk by the mechanism's description (:mod:`dphypo.api.calibration_cache`), so a repeated plan recalibrates nothing.

Differences (:func:`compare_rows`): every candidate of one plan runs the same repeats with the same study seed, so
repeat r of every candidate uses the same random streams (:func:`dphypo.simulation.batched.repeat_streams`), and of
two candidates with the same run-count law also the same T. The pairs (value_r of one, value_r of the other) are then
i.i.d. over r and the difference's interval is the paired Student-t interval of the per-repeat differences (as
:mod:`dphypo.simulation.studies` pairs an adaptive arm with uniform search). Two results that do not share their
streams (different seeds) are compared with Welch's unequal-variance interval.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from scipy import stats

from dphypo.privacy import CalibrationError, RepeatAndSelect, RunCountDistribution, make_run_count
from dphypo.privacy.adaptive import check_adaptive_theorem
from dphypo.privacy.split import SplitRule
from dphypo.privacy.two_stage import (
    FinalRun,
    ProbeRelease,
    ProbeSelection,
    TwoStage,
    TwoStageCalibration,
    TwoStageDesignError,
)
from dphypo.privacy.validation import (
    check_delta,
    check_non_negative_int,
    check_positive,
    check_positive_int,
    is_real,
)
from dphypo.search.execution import Executor, executor_scope
from dphypo.simulation.batched import BatchedSimulation, simulate_many
from dphypo.simulation.equal_epsilon import arm_calibration
from dphypo.simulation.family import LandscapeFamily
from dphypo.simulation.simulate import mean_ci95
from dphypo.simulation.studies import finite_or_none, strategy_config
from dphypo.simulation.two_stage import calibrate_design, two_stage_values
from dphypo.strategies import GPUCB, GPTopSet, Strategy, Uniform, density_bounds

if TYPE_CHECKING:
    from dphypo.api.design import Design

__all__ = [
    "DEFAULT_GPUCB_BOUNDS",
    "DEFAULT_TOP_MASSES",
    "DEFAULT_TWO_STAGE_SPLITS",
    "EVALUATION_SEED_OFFSET",
    "PLAN_RUN_COUNTS",
    "RACE_ALPHA",
    "RACE_FIRST_REPEATS",
    "RACE_TWIN_FACTOR",
    "Candidate",
    "Comparison",
    "ComputeBudget",
    "PlanCandidate",
    "PlanEvaluation",
    "PlanResult",
    "PlanRow",
    "Race",
    "RowStatus",
    "TwoStageCandidate",
    "candidate_design",
    "compare_rows",
    "default_candidates",
    "default_two_stage_candidates",
    "family_run_seconds",
    "plan_search",
    "strategy_label",
    "two_stage_calibration",
    "welch_ci95",
]

#: (C, c) of the GP-UCB candidates: DP-HyPO's (2, 0.75) and two narrower sets (c = 1/C and a cheap (1.25, 0.8)).
DEFAULT_GPUCB_BOUNDS: tuple[tuple[float, float], ...] = ((2.0, 0.75), (1.5, 1.0 / 1.5), (1.25, 0.8))
#: Prior masses of the favoured set of the GP top-set candidates (C = 2; c derived from C and the mass).
DEFAULT_TOP_MASSES: tuple[float, ...] = (0.05, 0.1)
#: Run-count laws :func:`default_candidates` takes: ``dphypo tune``'s default ``geometric`` (the truncated negative
#: binomial with θ = 1) and ``logarithmic`` (θ = 0); both have an adaptive theorem. Poisson and binomial T do not.
PLAN_RUN_COUNTS: tuple[str, ...] = ("geometric", "logarithmic")

RowStatus = Literal["ok", "unreachable", "outside family"]

#: Spawn key of the two-stage rows' random streams (distinct from the repeat streams' keys).
_TWO_STAGE_STREAM = 2_024

#: The fresh repeats' seed is the selection seed plus this when not given: disjoint from every selection seed below
#: 2**32 and never equal to the plan's own (repeat streams are keyed by the seed, :func:`~dphypo.simulation.batched
#: .repeat_streams`).
EVALUATION_SEED_OFFSET = 2**32

#: Budget splits (fraction of ε to the probes) of :func:`default_two_stage_candidates`.
DEFAULT_TWO_STAGE_SPLITS: tuple[float, ...] = (0.3, 0.5, 0.7)

#: Selection repeats of a race's first round (:class:`Race`): enough for the t intervals of its elimination rule.
RACE_FIRST_REPEATS = 50
#: Error of a race per (row, leader) pair over all its rounds (:class:`Race`).
RACE_ALPHA = 0.01
#: A racing row's uniform twin runs this many times the selection repeats for the race's bound (uniform search
#: costs little; :class:`Race`).
RACE_TWIN_FACTOR = 10


@dataclass(frozen=True)
class Race:
    """Successive elimination of the costly rows of a plan (DP-HyPO searches, whose GP makes them costly).

    Rows without a GP (uniform search, two-stage designs) cost little and run every selection repeat at once. Each
    DP-HyPO row runs the selection repeats in rounds: repeats ``[0, first)``, then up to ``2·first``, ``4·first``,
    ..., ``repeats`` (the same repeats, with the same streams, as without a race). After every round but the last
    (R elimination rounds), the *leader* is the simulated, not eliminated row within the compute budget with the
    highest mean so far, and a racing row is eliminated (it keeps the repeats it ran, ranks after every other row
    and is never picked) when a one-sided upper confidence bound of its mean minus the leader's, at level
    α₁ = ``alpha``/R, is below 0. The bound (chosen by the rows' kinds, never by their values) is the paired
    Student-t bound of the per-repeat differences when the leader shares the row's streams (:func:`compare_rows`);
    else, when the row has a *uniform twin* (the uniform row with its law of T: the same T in every repeat), the
    paired bound on row − twin plus the bound on twin − leader, each at α₁/2 (if both hold, so does their sum),
    the latter over ``twin_factor`` times the selection repeats of the twin (repeats ``0 .. twin_factor·repeats −
    1`` of the same streams; uniform search costs little, and these extra repeats serve only this bound, they are
    not reported); else Welch's.

    Guarantee: for a row and a leader whose true mean is at most the row's, each bound is wrong (below the true
    difference) with probability at most α₁ (up to the t approximation of means of ≥ ``first`` bounded values), so
    over the R rounds that leader eliminates the row with probability at most ``alpha`` (Bonferroni). The leader is
    chosen by the data: a row at least as good as every other could be eliminated by any of the K − 1 rows, so the
    union bound for it is (K − 1)·``alpha``, though only rows nearly as good as it contribute materially (a row far
    below it leads it by a significant margin with negligible probability). The race only decides which rows can be
    picked: the pick is still reported on fresh searches against uniform search (:class:`PlanEvaluation`).

    Attributes:
        first: Repeats of the first round (≥ 2); a plan of at most this many repeats has no race.
        alpha: Error per (row, leader) pair over all rounds, in (0, 1).
        twin_factor: A uniform twin's repeats for the race's bound, in multiples of the selection repeats (≥ 1).
    """

    first: int = RACE_FIRST_REPEATS
    alpha: float = RACE_ALPHA
    twin_factor: int = RACE_TWIN_FACTOR

    def __post_init__(self) -> None:
        """Validate eagerly."""
        if not (isinstance(self.first, int) and not isinstance(self.first, bool) and self.first >= 2):
            raise ValueError(f"race first repeats must be an integer >= 2, got {self.first!r}")
        if not (is_real(self.alpha) and 0.0 < float(self.alpha) < 1.0):
            raise ValueError(f"race alpha must be in (0, 1), got {self.alpha!r}")
        if not (isinstance(self.twin_factor, int) and not isinstance(self.twin_factor, bool) and self.twin_factor >= 1):
            raise ValueError(f"race twin_factor must be an integer >= 1, got {self.twin_factor!r}")

    def schedule(self, repeats: int) -> list[int]:
        """Cumulative repeats after each round: ``first``, doubling, ending at ``repeats`` (``[repeats]`` if small)."""
        sizes = []
        size = self.first
        while size < repeats:
            sizes.append(size)
            size *= 2
        return [*sizes, repeats]

    def to_dict(self, repeats: int) -> dict[str, Any]:
        """JSON-ready settings and the round sizes for ``repeats`` selection repeats."""
        return {"first": self.first, "alpha": self.alpha, "twin_factor": self.twin_factor,
                "rounds": self.schedule(repeats)}


def strategy_label(strategy: Strategy) -> str:
    """A short label naming a strategy and the bounds it projects onto, e.g. ``"gp-ucb C=2 c=0.75"``.

    Args:
        strategy: The strategy.

    Returns:
        The label.
    """
    if isinstance(strategy, Uniform):
        return "uniform"
    C, c = density_bounds(strategy)
    if isinstance(strategy, GPTopSet):
        return f"{strategy.name} C={C:g} mass={strategy.top_mass:g} (c={c:.4g})"
    return f"{strategy.name} C={C:g} c={c:.4g}"


@dataclass(frozen=True)
class ComputeBudget:
    """What a plan may spend on training: a cap on E[T] and an expected-compute budget.

    Attributes:
        run_seconds: Seconds one training run takes (> 0), or ``None`` when unknown (then only ``max_mean_runs``
            can bound the plan, and compute is reported in runs).
        budget_seconds: Expected compute a configuration may use, E[runs] × ``run_seconds`` (> 0; needs
            ``run_seconds``), or ``None`` for no budget.
        max_mean_runs: Largest E[runs] a configuration may have (≥ 1), or ``None``.
        source: Where ``run_seconds`` came from (e.g. ``"--run-seconds"``, ``"family metadata
            seconds_per_run_mean"``), for the report.
    """

    run_seconds: float | None = None
    budget_seconds: float | None = None
    max_mean_runs: float | None = None
    source: str = ""

    def __post_init__(self) -> None:
        """Validate eagerly: budgets are positive, and a seconds budget needs a cost per run."""
        check_positive("run_seconds", self.run_seconds, optional=True)
        check_positive("budget_seconds", self.budget_seconds, optional=True)
        runs = self.max_mean_runs
        if runs is not None and not (is_real(runs) and math.isfinite(float(runs)) and float(runs) >= 1.0):
            raise ValueError(f"max_mean_runs must be a finite number >= 1, got {self.max_mean_runs!r}")
        if self.budget_seconds is not None and self.run_seconds is None:
            raise ValueError("budget_seconds needs run_seconds (the family's metadata has no seconds_per_run_mean: "
                             "give the cost of one run)")

    @property
    def bounded(self) -> bool:
        """Whether any compute constraint is set."""
        return self.budget_seconds is not None or self.max_mean_runs is not None

    def expected_compute(self, expected_runs: float) -> float | None:
        """Expected seconds of ``expected_runs`` runs, or ``None`` without ``run_seconds``."""
        return None if self.run_seconds is None else float(expected_runs) * self.run_seconds

    def over_budget(self, expected_runs: float) -> str:
        """Why a configuration with ``expected_runs`` runs exceeds the budget (one line), or ``""`` if it fits."""
        if self.max_mean_runs is not None and expected_runs > self.max_mean_runs:
            return f"E[runs] = {expected_runs:g} > max mean runs {self.max_mean_runs:g}"
        compute = self.expected_compute(expected_runs)
        if self.budget_seconds is not None and compute is not None and compute > self.budget_seconds:
            return f"expected compute {compute:.4g} s > budget {self.budget_seconds:g} s"
        return ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready settings."""
        return {"run_seconds": self.run_seconds, "budget_seconds": self.budget_seconds,
                "max_mean_runs": self.max_mean_runs, "source": self.source}


def family_run_seconds(family: LandscapeFamily) -> float | None:
    """Seconds one training run of the family's mechanism took: the mean of its members' ``seconds_per_run_mean``.

    The members' timings (written by the landscape builder, :mod:`dphypo.simulation.builder`) measure the same
    mechanism at different σ, which does not change the work of a run, so their mean is the estimate. The hardware
    they were measured on is the builder's, not necessarily the curator's: pass the curator's own figure when it
    differs.

    Args:
        family: The landscape family.

    Returns:
        The mean, or ``None`` when a member lacks a finite positive ``seconds_per_run_mean``.
    """
    seconds = [member.metadata.get("seconds_per_run_mean") for member in family.members]
    if not all(is_real(x) and math.isfinite(float(x)) and float(x) > 0 for x in seconds):
        return None
    return float(np.mean(np.asarray(seconds, dtype=np.float64)))


@dataclass(frozen=True)
class PlanCandidate:
    """One configuration a plan compares: a strategy (with its own C, c) and the law of the number of runs T.

    Attributes:
        label: Names the strategy and its bounds (:func:`strategy_label`); a plan's candidates are told apart by
            ``(label, run_count)``.
        strategy: The strategy; it projects onto, and is accounted with, its own (C, c)
            (:func:`dphypo.strategies.density_bounds`).
        run_count: The law of T.
    """

    label: str
    strategy: Strategy
    run_count: RunCountDistribution

    def __post_init__(self) -> None:
        """Validate eagerly: the search must have a privacy theorem (e.g. adaptive Poisson T has none)."""
        if not isinstance(self.label, str) or not self.label:
            raise ValueError(f"label must be a non-empty string, got {self.label!r}")
        if not isinstance(self.run_count, RunCountDistribution):
            raise ValueError(f"run_count must be a RunCountDistribution, got {self.run_count!r}")
        RepeatAndSelect(self.run_count, *self.bounds)

    @property
    def bounds(self) -> tuple[float, float]:
        """``(C, c)``: the strategy's own bounds, the ones it projects onto and is accounted with."""
        return density_bounds(self.strategy)

    @property
    def adaptive(self) -> bool:
        """Whether the search is adaptive, C > c (as the accountant sees it; C = c = 1 samples the prior only)."""
        C, c = self.bounds
        return c < C

    @property
    def design(self) -> str:
        """The search design: ``"uniform"`` (C = c = 1) or ``"dp-hypo"`` (an adaptive sampler in S_{C,c})."""
        return "dp-hypo" if self.adaptive else "uniform"

    @property
    def expected_runs(self) -> float:
        """Expected training runs: E[T] (a simulated search loses no attempt, so no lost attempt is charged)."""
        return float(self.run_count.mean)

    @property
    def name(self) -> str:
        """The label with E[T], e.g. ``"uniform, E[T]=20"``."""
        return f"{self.label}, E[T]={self.expected_runs:g}"

    @property
    def key(self) -> tuple[str, str]:
        """What tells a plan's candidates apart: ``(label, run count)``."""
        return self.label, repr(self.run_count)

    @property
    def shares_streams(self) -> bool:
        """Repeat r runs on :func:`dphypo.simulation.batched.repeat_streams` ``(seed, r)`` (pairable across rows)."""
        return True


@dataclass(frozen=True, eq=False)
class TwoStageCandidate:
    """A two-stage design a plan compares (:mod:`dphypo.simulation.two_stage`): probes, then one committed run.

    The probes run on ``probe_family`` when given (a cheaper fidelity on the same grid, e.g. fewer epochs: each probe
    is accounted with its own steps and costs ``probe steps / final steps`` of a run in compute), else on the plan's
    family itself (full-fidelity runs at their own, larger σ). Its simulated repeats draw from their own streams (not
    :func:`~dphypo.simulation.batched.repeat_streams`), so it is compared with other rows by Welch's interval.

    Attributes:
        two_stage: The design (stages and budget split).
        probe_family: The probes' landscape family, or ``None`` for full-fidelity probes.
        final_epochs: Epochs of the final runs (the plan's family's), which a cheaper probe's compute share is
            relative to; :func:`plan_search` checks it.
    """

    two_stage: TwoStage
    probe_family: LandscapeFamily | None = None
    final_epochs: int = 10

    def __post_init__(self) -> None:
        if not isinstance(self.two_stage, TwoStage):
            raise ValueError(f"two_stage must be a TwoStage, got {self.two_stage!r}")
        if self.probe_family is not None and not isinstance(self.probe_family, LandscapeFamily):
            raise ValueError(f"probe_family must be a LandscapeFamily or None, got {self.probe_family!r}")

    @property
    def probe_epochs(self) -> int | None:
        """The probes' epochs when they have their own family, else ``None`` (the final run's)."""
        return None if self.probe_family is None else int(self.probe_family.mechanism_metadata["epochs"])

    @property
    def label(self) -> str:
        """``"two-stage: "``, the design's own label and the probes' epochs when they are cheaper."""
        epochs = "" if self.probe_epochs is None else f", {self.probe_epochs}-epoch probes"
        return f"two-stage: {self.two_stage.label()}{epochs}"

    @property
    def name(self) -> str:
        """The label (it already names the run counts)."""
        return self.label

    @property
    def design(self) -> str:
        """``"two-stage"``."""
        return "two-stage"

    @property
    def adaptive(self) -> bool:
        """Not a DP-HyPO search: its probes are drawn from the prior (adaptivity is in the commitment)."""
        return False

    def expected_runs_for(self, final_epochs: int) -> float:
        """Expected training runs of both stages in full-run equivalents (a probe of e epochs counts e/final)."""
        share = 1.0 if self.probe_epochs is None else self.probe_epochs / final_epochs
        return self.two_stage.stage1.expected_probes * share + self.two_stage.stage2.expected_runs

    @property
    def expected_runs(self) -> float:
        """Expected training runs of both stages, cheaper probes counted by their share of a final run."""
        return self.expected_runs_for(self.final_epochs)


    @property
    def key(self) -> tuple[str, str]:
        """What tells a plan's candidates apart (the label names the probes' fidelity)."""
        return self.label, "two-stage"

    @property
    def shares_streams(self) -> bool:
        """Its repeats use their own streams (class docstring)."""
        return False


Candidate = PlanCandidate | TwoStageCandidate


def default_two_stage_candidates(
    means: Iterable[float], kind: str = "geometric", splits: Sequence[float] = DEFAULT_TWO_STAGE_SPLITS, *,
    probe_family: LandscapeFamily | None = None, final_epochs: int = 10,
) -> tuple[TwoStageCandidate, ...]:
    """Two-stage designs for a plan: the best of E[T] = m uniform probes, or m released probes, then one final run.

    Every probe count is combined with every budget split; released probes only for an integer m.

    Args:
        means: Probe counts / E[T] of the probe selection (each > 1).
        kind: The probe selection's law of T, one of :data:`PLAN_RUN_COUNTS`.
        splits: Fractions of ε for the probes (each in (0, 1)).
        probe_family: The probes' (cheaper) family, or ``None`` for full-fidelity probes.
        final_epochs: Epochs of the plan family's runs.

    Returns:
        The candidates, E[T] outer, then released / selected probes, then the split.
    """
    if kind not in PLAN_RUN_COUNTS:
        raise ValueError(f"runs must be one of {PLAN_RUN_COUNTS}, got {kind!r}")
    out = []
    for m in (float(x) for x in means):
        selection = ProbeSelection(RepeatAndSelect(make_run_count(kind, mean=m)))
        for split in splits:
            out.append(TwoStageCandidate(TwoStage(selection, FinalRun(), split), probe_family, final_epochs))
            if float(m).is_integer():
                out.append(TwoStageCandidate(TwoStage(ProbeRelease(int(m)), FinalRun(), split), probe_family,
                                             final_epochs))
    return tuple(out)


def default_candidates(
    means: Iterable[float],
    kind: str = "geometric",
    *,
    gpucb_bounds: Sequence[tuple[float, float]] = DEFAULT_GPUCB_BOUNDS,
    top_masses: Sequence[float] = DEFAULT_TOP_MASSES,
    top_set_C: float = 2.0,
) -> tuple[PlanCandidate, ...]:
    """Uniform search, GP-UCB at every ``gpucb_bounds`` and GP top-set at every ``top_masses``, × every E[T].

    GP-UCB and GP top-set keep their default rule parameters (``GPUCB()``'s τ, β and scale, ``GPTopSet()``'s
    tolerance); a top-set candidate's c follows from C and its mass (:func:`dphypo.density.lower_bound_for_top_mass`).
    T's law is ``make_run_count(kind, mean=m)``; ``"geometric"`` is what ``dphypo tune`` uses by default.

    Args:
        means: E[T] of the candidates (each > 1, distinct).
        kind: One of :data:`PLAN_RUN_COUNTS`.
        gpucb_bounds: ``(C, c)`` of the GP-UCB candidates.
        top_masses: Favoured prior masses of the GP top-set candidates, each in (0, 1/``top_set_C``).
        top_set_C: C of the GP top-set candidates (> 1).

    Returns:
        The candidates, E[T] outer, strategies inner (uniform first).

    Raises:
        ValueError: ``kind`` not in :data:`PLAN_RUN_COUNTS`, no or repeated means, or invalid bounds or masses.
    """
    if kind not in PLAN_RUN_COUNTS:
        raise ValueError(f"runs must be one of {PLAN_RUN_COUNTS} (a plan compares adaptive searches, which need an "
                         f"adaptive theorem; poisson and binomial T have none), got {kind!r}")
    means = [float(m) for m in means]
    if not means:
        raise ValueError("means must name at least one E[T], got none")
    if len(set(means)) != len(means):
        raise ValueError(f"means must be distinct, got {means}")
    strategies: list[Strategy] = [Uniform()]
    strategies += [GPUCB(C=C, c=c) for C, c in gpucb_bounds]
    strategies += [GPTopSet(C=top_set_C, top_mass=p) for p in top_masses]
    return tuple(
        PlanCandidate(strategy_label(s), s, make_run_count(kind, mean=m)) for m in means for s in strategies
    )


@dataclass(frozen=True, eq=False)
class PlanRow:
    """What a plan found for one candidate.

    Attributes:
        candidate: The configuration.
        status: ``"ok"`` (simulated), ``"unreachable"`` (no σ meets the total ε) or ``"outside family"`` (σ outside
            the family's range: not simulated, never extrapolated).
        reason: Why a row is not ``"ok"`` (one line; empty otherwise).
        sigma: The calibrated σ (``None`` when unreachable); of the final run(s) for a two-stage design.
        probe_sigma: The probes' σ of a two-stage design (``None`` otherwise).
        sigma_tolerance: The calibration's tolerance on σ (conservative side), or ``None``.
        epsilon: Total ε accounted at ``sigma`` (≤ the target), or ``None``.
        method: The bound that gave ``epsilon`` (e.g. ``"profile-tnb"``, ``"rdp-theorem-b"``), or ``None``.
        theorem: The theorem behind ``epsilon``, or ``None``.
        seed: The study seed of the simulated repeats.
        mean: Mean true value of the released point over the repeats (``None`` unless ``"ok"``).
        ci95: Its 95 % Student-t interval, or ``None``.
        values: The true value each repeat released, shape ``(repeats,)`` (empty unless ``"ok"``); curator-only
            simulation output, not in :meth:`to_dict`.
        seconds: Wall time of the simulation rounds the row ran in (the rows of a round run together).
        expected_compute: Expected training seconds, E[runs] × seconds per run (``None`` without a cost per run).
        budget_reason: Why the row is over the compute budget (one line; empty when it fits).
        eliminated: Why a race (:class:`Race`) stopped the row's simulation before the plan's repeats (one line
            naming its repeats, the leader and the bound; empty when it ran them all). Such a row is never picked.
    """

    candidate: Candidate
    status: RowStatus
    reason: str = ""
    sigma: float | None = None
    probe_sigma: float | None = None
    sigma_tolerance: float | None = None
    epsilon: float | None = None
    method: str | None = None
    theorem: str | None = None
    seed: int = 0
    mean: float | None = None
    ci95: tuple[float, float] | None = None
    values: np.ndarray = dataclasses.field(default_factory=lambda: np.empty(0))
    seconds: float = 0.0
    expected_compute: float | None = None
    budget_reason: str = ""
    eliminated: str = ""

    @property
    def within_budget(self) -> bool:
        """Whether the row fits the plan's compute budget (only such rows can be picked)."""
        return not self.budget_reason

    @property
    def feasible(self) -> bool:
        """Whether the candidate was simulated (its mean is known)."""
        return self.status == "ok"

    @property
    def repeats(self) -> int:
        """Simulated repeats (0 unless ``"ok"``)."""
        return int(self.values.size)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (no inf/nan; without the per-repeat values)."""
        cand = self.candidate
        ci = (math.nan, math.nan) if self.ci95 is None else self.ci95
        return {
            "label": cand.label, "name": cand.name, "design": cand.design, **_candidate_config(cand),
            "adaptive": cand.adaptive, "expected_runs": cand.expected_runs,
            "status": self.status, "reason": self.reason,
            "sigma": self.sigma, "probe_sigma": self.probe_sigma, "sigma_tolerance": self.sigma_tolerance,
            "epsilon": None if self.epsilon is None else finite_or_none(self.epsilon),
            "method": self.method, "theorem": self.theorem, "seed": self.seed,
            "mean": None if self.mean is None else finite_or_none(self.mean),
            "ci95": None if self.ci95 is None else [finite_or_none(ci[0]), finite_or_none(ci[1])],
            "repeats": self.repeats, "seconds": self.seconds,
            "expected_compute": self.expected_compute, "within_budget": self.within_budget,
            "budget_reason": self.budget_reason, "eliminated": self.eliminated,
        }


def _candidate_config(candidate: Candidate) -> dict[str, Any]:
    """The JSON fields that describe a candidate's search: its strategy and T, or its two-stage design."""
    if isinstance(candidate, TwoStageCandidate):
        return {"strategy": None, "config": None, "C": 1.0, "c": 1.0, "run_count": None,
                "two_stage": {**candidate.two_stage.describe(), "probe_epochs": candidate.probe_epochs}}
    C, c = candidate.bounds
    return {"strategy": candidate.strategy.name, "config": strategy_config(candidate.strategy), "C": C, "c": c,
            "run_count": repr(candidate.run_count)}


def welch_ci95(a: np.ndarray, b: np.ndarray) -> tuple[float, tuple[float, float]]:
    """Mean difference ``mean(a) − mean(b)`` of two independent samples with Welch's 95 % interval.

    Welch (1947), *Biometrika* 34: the standard error sqrt(s_a²/n_a + s_b²/n_b) with the Welch-Satterthwaite
    degrees of freedom (s_a²/n_a + s_b²/n_b)² / ((s_a²/n_a)²/(n_a − 1) + (s_b²/n_b)²/(n_b − 1)).

    Args:
        a: Shape ``(n_a,)``, n_a ≥ 2.
        b: Shape ``(n_b,)``, n_b ≥ 2.

    Returns:
        ``(difference, (low, high))``; the interval is ``(nan, nan)`` when a sample has fewer than 2 values, and
        collapses to the difference when both samples are constant.
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.ndim != 1 or b.ndim != 1 or a.size == 0 or b.size == 0:
        raise ValueError(f"a and b must be non-empty 1-d samples, got shapes {a.shape} and {b.shape}")
    difference = float(a.mean() - b.mean())
    if a.size < 2 or b.size < 2:
        return difference, (math.nan, math.nan)
    va, vb = float(a.var(ddof=1)) / a.size, float(b.var(ddof=1)) / b.size
    if va + vb == 0.0:
        return difference, (difference, difference)
    df = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
    half = float(stats.t.ppf(0.975, df) * math.sqrt(va + vb))
    return difference, (difference - half, difference + half)


@dataclass(frozen=True, eq=False)
class Comparison:
    """``first − second`` in mean released value, with a 95 % interval.

    Attributes:
        first: The row the difference starts from (e.g. the best, or the best adaptive configuration).
        second: The row subtracted (e.g. the runner-up, or the best uniform configuration).
        difference: ``first.mean − second.mean`` (paired: the mean of the per-repeat differences over the common
            repeats, the same number when both ran the same repeats).
        ci95: 95 % interval of the difference (``(nan, nan)`` with fewer than 2 repeats).
        paired: Whether the rows share their repeats' random streams (same seed) and the interval is the paired
            one; otherwise Welch's.
        same_runs: Paired with the same run-count law: repeat r of both drew the same T.
    """

    first: PlanRow
    second: PlanRow
    difference: float
    ci95: tuple[float, float]
    paired: bool
    same_runs: bool

    @property
    def significant(self) -> bool:
        """Whether the 95 % interval excludes 0 (``first`` is significantly better, or worse)."""
        low, high = self.ci95
        return bool(low > 0.0 or high < 0.0)

    @property
    def pairing(self) -> str:
        """How the interval was computed, in words."""
        if not self.paired:
            return "unpaired, Welch"
        return "paired, same T per repeat" if self.same_runs else "paired by common random numbers, T differs"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (rows by name)."""
        return {
            "first": self.first.candidate.name, "second": self.second.candidate.name,
            "difference": finite_or_none(self.difference),
            "ci95": [finite_or_none(self.ci95[0]), finite_or_none(self.ci95[1])],
            "paired": self.paired, "same_runs": self.same_runs, "pairing": self.pairing,
            "significant": self.significant,
        }


def compare_rows(first: PlanRow, second: PlanRow) -> Comparison:
    """``first − second`` with a 95 % interval: paired when the rows share their streams, else Welch's.

    Rows share their streams when they ran with the same seed and both draw from the repeat streams (repeat r of
    each used :func:`dphypo.simulation.batched.repeat_streams` ``(seed, r)``, whatever the number of repeats; a
    :class:`TwoStageCandidate` has streams of its own): the pairs over
    their common repeats are then i.i.d. over r, so the paired interval (:func:`dphypo.simulation.simulate.mean_ci95`
    of the per-repeat differences, as :mod:`dphypo.simulation.studies` pairs arms) is valid, while Welch's, which
    assumes independent samples, is not. Rows with different seeds are independent: :func:`welch_ci95`.

    Args:
        first: A simulated row.
        second: Another simulated row.

    Returns:
        The comparison.

    Raises:
        ValueError: A row was not simulated.
    """
    for row in (first, second):
        if not row.feasible:
            raise ValueError(f"row {row.candidate.name!r} was not simulated ({row.status}): nothing to compare")
    paired = first.seed == second.seed and first.candidate.shares_streams and second.candidate.shares_streams
    if paired:
        n = min(first.repeats, second.repeats)  # repeat r's streams do not depend on the number of repeats
        difference, ci = mean_ci95(first.values[:n] - second.values[:n])
    else:
        difference, ci = welch_ci95(first.values, second.values)
    same_runs = paired and first.candidate.key[1] == second.candidate.key[1]  # both PlanCandidates: the same T law
    return Comparison(first, second, difference, ci, paired, same_runs)


@dataclass(frozen=True, eq=False)
class PlanEvaluation:
    """The pick on fresh repeats, against the best uniform search with at least its expected compute.

    The pick is the best of many candidates on the selection repeats, so its mean there is biased upwards (the
    winner's curse). Re-simulated on ``repeats`` fresh searches, from a seed no selection repeat of the plan used,
    its mean is an unbiased estimate of what it releases. The comparator is chosen among the uniform searches whose
    expected runs are at least the pick's (the plan's own uniform rows, or a uniform search at exactly the pick's
    expected runs when the plan has none), all evaluated on the same fresh repeats, as the one with the best fresh
    mean: a choice that favours the comparator, never the pick.

    Attributes:
        selected: The pick's row on the selection repeats.
        pick: The pick on the fresh repeats (same candidate and σ; ``seed`` the evaluation seed).
        uniform: The uniform searches with at least the pick's expected runs on the same fresh repeats, best first
            (the comparator is the first).
        comparison: pick − comparator on the fresh repeats (:func:`compare_rows`: paired when both draw from the
            repeat streams, a two-stage pick against uniform search is Welch's), or ``None`` without a comparator.
        reason: Why there is no comparator (one line), ``""`` otherwise.
        repeats: Fresh repeats.
        seed: Seed of the fresh repeats (never the selection seed).
    """

    selected: PlanRow
    pick: PlanRow
    uniform: tuple[PlanRow, ...]
    comparison: Comparison | None
    reason: str
    repeats: int
    seed: int

    @property
    def comparator(self) -> PlanRow | None:
        """The best uniform search with at least the pick's expected runs, on the fresh repeats, or ``None``."""
        return self.uniform[0] if self.uniform else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the pick's fresh mean and interval, the comparator, and their difference with its interval."""
        pick, comparator, cmp = self.pick, self.comparator, self.comparison

        def summary(row: PlanRow) -> dict[str, Any]:
            ci = row.ci95 if row.ci95 is not None else (math.nan, math.nan)
            return {"name": row.candidate.name, "design": row.candidate.design,
                    "expected_runs": row.candidate.expected_runs, "expected_compute": row.expected_compute,
                    "sigma": row.sigma, "probe_sigma": row.probe_sigma,
                    "mean": finite_or_none(float(row.mean or 0.0)),
                    "ci95": [finite_or_none(ci[0]), finite_or_none(ci[1])]}

        return {
            "repeats": self.repeats, "seed": self.seed,
            "pick": summary(pick),
            "selection_mean": finite_or_none(float(self.selected.mean or 0.0)),
            "selection_repeats": self.selected.repeats, "selection_seed": self.selected.seed,
            "uniform_comparator": None if comparator is None else summary(comparator),
            "uniform_considered": [summary(row) for row in self.uniform],
            "difference_vs_uniform": None if cmp is None else cmp.to_dict(),
            "reason": self.reason,
        }


@dataclass(frozen=True, eq=False)
class PlanResult:
    """The outcome of :func:`plan_search`.

    Attributes:
        epsilon: The total ε every candidate was calibrated for.
        delta: δ.
        repeats: Simulated searches per candidate.
        seed: Study seed (the same for every candidate: common random numbers).
        family_sigmas: σ of the family's members.
        best_value: The best mean on the family's least noisy member (an upper reference, no search reaches it).
        rows: One row per candidate, in candidate order.
        seconds: Wall time of the plan.
        adaptive_theorem: The accounting every candidate was calibrated with (:func:`plan_search`).
        compute: The compute budget the plan picks under (rows over it are shown, never picked).
        evaluation: The pick re-simulated on fresh repeats against the best uniform search of at least its compute
            (:class:`PlanEvaluation`), or ``None`` when not asked for (``evaluate_repeats=0``) or nothing was picked.
        race: The race that eliminated costly rows early (:class:`Race`), or ``None`` (every row ran ``repeats``).
        phases: Wall seconds of the plan's phases, ``(name, seconds)`` in order: ``"calibration"``, each race
            round (``"selection repeats 0-49"``, ...) and ``"evaluation"``.
    """

    epsilon: float
    delta: float
    repeats: int
    seed: int
    family_sigmas: tuple[float, ...]
    best_value: float
    rows: tuple[PlanRow, ...]
    seconds: float = 0.0
    adaptive_theorem: str = "B"
    compute: ComputeBudget = ComputeBudget()
    evaluation: PlanEvaluation | None = None
    race: Race | None = None
    phases: tuple[tuple[str, float], ...] = ()

    @property
    def ranked(self) -> tuple[PlanRow, ...]:
        """The simulated rows, best mean first (ties: candidate order), over-budget rows included.

        Rows a race eliminated (:class:`Race`) come after every other: they are never picked.
        """
        feasible = [(k, r) for k, r in enumerate(self.rows) if r.feasible]
        return tuple(r for _, r in sorted(feasible, key=lambda kr: (bool(kr[1].eliminated),
                                                                    -float(kr[1].mean or 0.0), kr[0])))

    @property
    def eligible(self) -> tuple[PlanRow, ...]:
        """The simulated rows within the compute budget, best mean first: the ones a plan can pick."""
        return tuple(r for r in self.ranked if r.within_budget)

    @property
    def best(self) -> PlanRow | None:
        """The best mean released value within the compute budget, or ``None`` when no such candidate ran."""
        eligible = self.eligible
        return eligible[0] if eligible else None

    @property
    def runner_up(self) -> PlanRow | None:
        """The second-best configuration within the compute budget, or ``None``."""
        eligible = self.eligible
        return eligible[1] if len(eligible) > 1 else None

    @property
    def pareto_front(self) -> tuple[PlanRow, ...]:
        """The utility-vs-compute front at the plan's ε: simulated rows no cheaper row matches in mean value.

        Rows are ordered by expected compute (expected runs when no cost per run is known; ties: higher mean first,
        then candidate order) and a row is on the front when its mean beats every cheaper row's. Over-budget rows
        can be on it: the front shows what more compute would buy.
        """
        order = sorted(((k, r) for k, r in enumerate(self.rows) if r.feasible),
                       key=lambda kr: (kr[1].candidate.expected_runs, -float(kr[1].mean or 0.0), kr[0]))
        front: list[PlanRow] = []
        for _, row in order:
            if not front or float(row.mean or 0.0) > float(front[-1].mean or 0.0):
                front.append(row)
        return tuple(front)

    @property
    def difference(self) -> Comparison | None:
        """Best − runner-up with its 95 % interval (:func:`compare_rows`), or ``None`` without a runner-up."""
        best, second = self.best, self.runner_up
        return None if best is None or second is None else compare_rows(best, second)

    @property
    def significant(self) -> bool:
        """Whether the best is significantly better than the runner-up (95 % interval of the difference > 0)."""
        diff = self.difference
        return diff is not None and diff.ci95[0] > 0.0

    def by_expected_runs(self) -> list[tuple[float, PlanRow | None, PlanRow | None, Comparison | None]]:
        """Per E[T]: the best uniform row, the best adaptive row and their difference (adaptive − uniform).

        Both rows of an E[T] share the run-count law, so the difference is paired with the same T per repeat.

        Returns:
            ``(E[T], best uniform or None, best adaptive or None, comparison or None)`` per E[T], in candidate
            order.
        """
        out = []
        means: list[float] = []
        for row in self.rows:
            if row.candidate.design != "two-stage" and row.candidate.expected_runs not in means:
                means.append(row.candidate.expected_runs)
        ranked = self.ranked
        for m in means:
            uniform = next((r for r in ranked if r.candidate.expected_runs == m and r.candidate.design == "uniform"),
                           None)
            adaptive = next((r for r in ranked if r.candidate.expected_runs == m and r.candidate.design == "dp-hypo"),
                            None)
            comparison = None if uniform is None or adaptive is None else compare_rows(adaptive, uniform)
            out.append((m, uniform, adaptive, comparison))
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready result: settings, every row, the best, the runner-up, their difference and per-E[T] pairs."""
        best, second, diff = self.best, self.runner_up, self.difference
        return {
            "epsilon": self.epsilon, "delta": self.delta, "repeats": self.repeats, "seed": self.seed,
            "adaptive_theorem": self.adaptive_theorem, "family_sigmas": list(self.family_sigmas),
            "compute": self.compute.to_dict(),
            "best_value": finite_or_none(self.best_value),
            "seconds": self.seconds, "phases": [[name, seconds] for name, seconds in self.phases],
            "race": None if self.race is None else self.race.to_dict(self.repeats),
            "eliminated": [r.candidate.name for r in self.rows if r.eliminated],
            "rows": [r.to_dict() for r in self.rows],
            "best": None if best is None else best.candidate.name,
            # the pick as a design value: `dphypo tune --design-from` (dphypo.api.design_from_dict) runs it as it is
            "pick": None if best is None else candidate_design(best.candidate).describe(),
            "runner_up": None if second is None else second.candidate.name,
            "difference": None if diff is None else diff.to_dict(),
            "significant": self.significant,
            "pareto_front": [
                {"name": r.candidate.name, "design": r.candidate.design, "expected_runs": r.candidate.expected_runs,
                 "expected_compute": r.expected_compute, "mean": finite_or_none(float(r.mean or 0.0)),
                 "within_budget": r.within_budget}
                for r in self.pareto_front
            ],
            "by_expected_runs": [
                {"expected_runs": m, "best_uniform": None if u is None else u.candidate.name,
                 "best_adaptive": None if a is None else a.candidate.name,
                 "difference": None if cmp is None else cmp.to_dict()}
                for m, u, a, cmp in self.by_expected_runs()
            ],
            "evaluation": None if self.evaluation is None else self.evaluation.to_dict(),
        }


def candidate_design(candidate: Candidate) -> Design:
    """The design value :func:`dphypo.tune` runs for a plan's candidate (:mod:`dphypo.api.design`).

    A strategy candidate is a :class:`~dphypo.api.design.SingleStage` search with its strategy and T; a two-stage one
    a :class:`~dphypo.api.design.TwoStageSearch` with uniform probe placement (what the simulation places) and the
    probes' epochs of its probe family (the final runs' epochs when the probes are full-fidelity runs).
    """
    from dphypo.api.design import SingleStage, TwoStageSearch

    if isinstance(candidate, TwoStageCandidate):
        epochs = candidate.final_epochs if candidate.probe_epochs is None else candidate.probe_epochs
        return TwoStageSearch(candidate.two_stage, "uniform", epochs)
    return SingleStage(candidate.strategy, candidate.run_count)


def _outside(family: LandscapeFamily, sigma: float, epsilon: float, what: str = "sigma") -> str:
    """Why σ cannot be simulated on the family (one line), or ``""`` inside its range."""
    low, high = family.sigma_range
    if low <= sigma <= high:
        return ""
    return (f"needs {what}={sigma:.6g} for total epsilon={epsilon:g}, outside the family's range [{low:g}, {high:g}]; "
            f"build a member there (dphypo landscape build --sigma)")


@functools.lru_cache(maxsize=512)
def two_stage_calibration(
    design: TwoStage, epsilon: float, delta: float, final_metadata: str, probe_metadata: str,
    split_rule: SplitRule | None = None,
) -> TwoStageCalibration:
    """:func:`~dphypo.simulation.two_stage.calibrate_design` of a design on two families, memoised in this process.

    σ of both stages depends only on the description of the mechanisms (q, steps, score noise of a probe and of a
    final run), the design and (ε, δ): ``calibrate_design`` caches it on disk by that description (the calibration
    ``tune`` runs, re-certified when read), and this memo spares even the re-certification when a plan, its
    evaluation or a benchmark asks again in one process.

    Args:
        design: The design.
        epsilon: Total ε.
        delta: δ.
        final_metadata: The final runs' family's mechanism metadata as canonical JSON (hashable), e.g.
            ``json.dumps(family.mechanism_metadata, sort_keys=True)``.
        probe_metadata: The probes' family's, likewise (the final one for full-fidelity probes).
        split_rule: A per-record split (``tune --data-split per-record``: Theorem S, docs/proofs/split.md), or
            ``None`` (default: the sum).

    Returns:
        The calibration (both σ and the report there).

    Raises:
        CalibrationError: No σ pair meets ε.
        TwoStageDesignError: A refused design or fidelity.
    """
    return calibrate_design(design, epsilon, delta, json.loads(final_metadata), json.loads(probe_metadata),
                            split_rule=split_rule)


@dataclass(frozen=True)
class _CalibrationJob:
    """What one candidate's σ depends on (small and picklable: the calibrations may run in worker processes).

    Attributes:
        epsilon: Total ε.
        delta: δ.
        final_metadata: The family's mechanism metadata as canonical JSON (:func:`_canonical`).
        probe_metadata: The probes' family's, for a two-stage design (its own or the family's), else ``None``.
        adaptive_theorem: The accounting of a single-stage candidate.
        run_count: A single-stage candidate's law of T (``None`` for a two-stage design).
        bounds: A single-stage candidate's ``(C, c)``.
        design: A two-stage candidate's design (``None`` otherwise).
        split_rule: A per-record split (Theorem S, as ``tune``'s default ``--data-split per-record``), or ``None``
            (the sum of each run's two parts).
    """

    epsilon: float
    delta: float
    final_metadata: str
    probe_metadata: str | None = None
    adaptive_theorem: str = "B"
    run_count: RunCountDistribution | None = None
    bounds: tuple[float, float] = (1.0, 1.0)
    design: TwoStage | None = None
    split_rule: SplitRule | None = None


@dataclass(frozen=True)
class _Calibrated:
    """A job's outcome: the σ (pair) and the report's summary, or why no σ meets ε (``error``)."""

    error: str = ""
    sigma: float | None = None
    probe_sigma: float | None = None
    sigma_tolerance: float | None = None
    epsilon: float | None = None
    method: str | None = None
    theorem: str | None = None


def _calibration_job(family: LandscapeFamily, epsilon: float, delta: float, candidate: Candidate,
                     adaptive_theorem: str, split_rule: SplitRule | None = None) -> _CalibrationJob:
    """The job that calibrates ``candidate`` on ``family``."""
    final = _canonical(family.mechanism_metadata)
    if isinstance(candidate, TwoStageCandidate):
        probes = family if candidate.probe_family is None else candidate.probe_family
        return _CalibrationJob(epsilon, delta, final, _canonical(probes.mechanism_metadata), design=candidate.two_stage,
                               split_rule=split_rule)
    return _CalibrationJob(epsilon, delta, final, adaptive_theorem=adaptive_theorem, run_count=candidate.run_count,
                           bounds=candidate.bounds, split_rule=split_rule)


def _calibrate(job: _CalibrationJob) -> _Calibrated:
    """Run one calibration job (module level: an executor's workers run it); a refusal is an outcome, not raised."""
    try:
        if job.design is not None:
            assert job.probe_metadata is not None
            pair = two_stage_calibration(job.design, job.epsilon, job.delta, job.final_metadata, job.probe_metadata,
                                         split_rule=job.split_rule)
            report = pair.report
            theorem = f"stage 1: {report.stage1_theorem}; stage 2: {report.stage2_theorem}; composed ({report.method})"
            return _Calibrated(sigma=pair.final_sigma, probe_sigma=pair.probe_sigma, epsilon=float(report.epsilon),
                               method=report.method, theorem=theorem)
        assert job.run_count is not None
        single = arm_calibration(job.epsilon, job.delta, job.run_count, *job.bounds, json.loads(job.final_metadata),
                                 adaptive_theorem=job.adaptive_theorem, split_rule=job.split_rule)
    except (CalibrationError, TwoStageDesignError) as err:
        return _Calibrated(error=" ".join(str(err).split()))
    return _Calibrated(sigma=single.sigma, sigma_tolerance=single.sigma_tolerance,
                       epsilon=float(single.report.epsilon), method=single.report.method,
                       theorem=single.report.theorem)


def _row(family: LandscapeFamily, candidate: Candidate, calibrated: _Calibrated, target: float, seed: int) -> PlanRow:
    """The candidate's row from its calibration for total ε ``target`` (status ``"ok"``: still to be simulated)."""
    if calibrated.error:
        return PlanRow(candidate, "unreachable", reason=calibrated.error, seed=seed)
    assert calibrated.sigma is not None and calibrated.epsilon is not None
    row = PlanRow(candidate, "ok", sigma=calibrated.sigma, probe_sigma=calibrated.probe_sigma,
                  sigma_tolerance=calibrated.sigma_tolerance, epsilon=calibrated.epsilon, method=calibrated.method,
                  theorem=calibrated.theorem, seed=seed)
    if isinstance(candidate, TwoStageCandidate):
        assert calibrated.probe_sigma is not None
        probes = family if candidate.probe_family is None else candidate.probe_family
        reason = (_outside(probes, calibrated.probe_sigma, target, "probe sigma")
                  or _outside(family, calibrated.sigma, target, "final sigma"))
    else:
        reason = _outside(family, calibrated.sigma, target)
    return dataclasses.replace(row, status="outside family", reason=reason) if reason else row


def _canonical(metadata: Mapping[str, Any]) -> str:
    """The metadata as canonical JSON (a hashable memo key); values JSON cannot hold are written by ``repr``."""
    return json.dumps(dict(metadata), sort_keys=True, default=repr)


def _calibrated_row(
    family: LandscapeFamily, epsilon: float, delta: float, candidate: Candidate, seed: int,
    adaptive_theorem: str = "B", split_rule: SplitRule | None = None,
) -> PlanRow:
    """The candidate's σ for the total ε and its status (``"ok"`` still to be simulated); nothing is simulated."""
    job = _calibration_job(family, epsilon, delta, candidate, adaptive_theorem, split_rule)
    return _row(family, candidate, _calibrate(job), epsilon, seed)


def plan_search(
    family: LandscapeFamily,
    epsilon: float,
    delta: float,
    candidates: Sequence[Candidate],
    *,
    repeats: int,
    seed: int = 0,
    workers: int | None = None,
    executor: Executor | str | None = None,
    progress: Callable[[PlanRow], None] | None = None,
    adaptive_theorem: str = "B",
    compute: ComputeBudget | None = None,
    evaluate_repeats: int | None = None,
    evaluate_seed: int | None = None,
    comparator_runs: str = "geometric",
    split_rule: SplitRule | None = None,
    race: Race | None = None,
) -> PlanResult:
    """Compare candidate configurations at equal total (ε, δ) on a landscape family; the best is the plan.

    Every candidate is calibrated first (σ for its own search, :func:`dphypo.simulation.equal_epsilon.arm_calibration`
    with the strategy's own (C, c)); then each feasible one runs ``repeats`` simulated searches on ``family.at(σ)``
    with the batched engine, projected onto and accounted with those same (C, c) (with a ``race``, a DP-HyPO row
    significantly below the leader stops earlier, :class:`Race`). Every candidate uses the same
    ``seed``, so repeat r of every candidate shares its random streams (module docstring).

    Args:
        family: The landscape family (members built with the DP-SGD plan of the search being planned).
        epsilon: Total ε of the search (> 0).
        delta: δ ∈ (0, 1).
        candidates: The configurations (distinct ``(label, run_count)``), e.g. :func:`default_candidates`.
        repeats: Simulated searches per candidate (≥ 1; ≥ 2 for intervals).
        seed: Study seed (≥ 0).
        workers: Processes of the default executor (``None``: all cores; 1 runs in this process).
        executor: Where the searches run (:func:`dphypo.search.execution.executor_scope`); results do not depend
            on it.
        progress: Called with every finished row (calibrated-only rows included), in candidate order (a row is
            passed once it and every row before it are finished).
        adaptive_theorem: The accounting every candidate is calibrated with, named explicitly and recorded
            (:func:`dphypo.simulation.equal_epsilon.arm_calibration`: ``"B"``, or ``"A"`` as in the shipped plans
            of docs/studies/, whose rows also name their method and theorem).
        compute: The compute budget (default: none, compute reported when the family's metadata times a run).
            Without ``run_seconds`` it takes :func:`family_run_seconds`.
        evaluate_repeats: Fresh repeats the pick and its uniform comparators are re-simulated on
            (:class:`PlanEvaluation`; ``None``: ``repeats``; 0: no evaluation).
        evaluate_seed: Seed of the fresh repeats, ≠ ``seed`` (``None``: ``seed`` + :data:`EVALUATION_SEED_OFFSET`,
            streams no selection repeat uses).
        comparator_runs: Law of T (one of :data:`PLAN_RUN_COUNTS`) of the uniform search at the pick's expected
            runs, simulated when the plan has no uniform row with at least the pick's expected runs.
        split_rule: Calibrate every candidate as ``tune`` with a per-record split does (Theorem S: each run charged
            the worse of its DP-SGD and its score release, docs/proofs/split.md), or ``None``: the sum (a seeded
            permutation split).
        race: Eliminate DP-HyPO rows significantly below the leader early (:class:`Race`: its rule, and why it
            keeps the pick's chance), or ``None``: every row runs ``repeats`` (the default).

    Returns:
        One row per candidate; :attr:`PlanResult.best`, :attr:`~PlanResult.runner_up` and
        :attr:`~PlanResult.difference`; :attr:`PlanResult.evaluation`.

    Raises:
        ValueError: Invalid arguments, or a compute budget no candidate meets (a candidate that cannot run is a row
            with its status, not an error).
    """
    if not isinstance(family, LandscapeFamily):
        raise ValueError(f"family must be a LandscapeFamily, got {type(family).__name__}")
    check_positive("epsilon", epsilon)
    check_delta(delta)
    epsilon, delta = float(epsilon), float(delta)
    check_positive_int("repeats", repeats)
    check_non_negative_int("seed", seed)
    evaluate_repeats = repeats if evaluate_repeats is None else evaluate_repeats
    check_non_negative_int("evaluate_repeats", evaluate_repeats)
    evaluate_seed = seed + EVALUATION_SEED_OFFSET if evaluate_seed is None else evaluate_seed
    check_non_negative_int("evaluate_seed", evaluate_seed)
    if evaluate_seed == seed:
        raise ValueError(f"evaluate_seed must differ from seed (fresh repeats draw fresh streams), got {seed}")
    if comparator_runs not in PLAN_RUN_COUNTS:
        raise ValueError(f"comparator_runs must be one of {PLAN_RUN_COUNTS}, got {comparator_runs!r}")
    candidates = tuple(candidates)
    if not candidates:
        raise ValueError("candidates must not be empty")
    for candidate in candidates:
        if not isinstance(candidate, (PlanCandidate, TwoStageCandidate)):
            raise ValueError(f"candidates must be PlanCandidate or TwoStageCandidate objects, got {candidate!r}")
    epochs = int(family.mechanism_metadata.get("epochs", 0))
    wrong = [x.name for x in candidates if isinstance(x, TwoStageCandidate) and x.final_epochs != epochs]
    if wrong:
        raise ValueError(f"two-stage candidates must count compute relative to the family's {epochs} epochs "
                         f"(final_epochs), got {wrong}")
    keys = [x.key for x in candidates]
    if len(set(keys)) != len(keys):
        raise ValueError(f"candidates must be distinct (label, run count) pairs, got {[x.name for x in candidates]}")
    check_adaptive_theorem(adaptive_theorem)
    if race is not None and not isinstance(race, Race):
        raise ValueError(f"race must be a Race or None, got {race!r}")
    compute = _with_run_seconds(compute or ComputeBudget(), family)
    _check_some_candidate_fits(candidates, compute)
    start = time.perf_counter()
    with executor_scope(executor, workers=workers) as pool:
        # Every σ first (in the executor's workers: calibrations are independent), so an unreachable or out-of-range
        # candidate is known before the first simulated search; each distinct calibration runs once
        # (two_stage_calibration, arm_calibration: memoised, and cached on disk by the mechanism's description).
        jobs = [_calibration_job(family, epsilon, delta, x, adaptive_theorem, split_rule) for x in candidates]
        distinct = list(dict.fromkeys(jobs))
        outcomes = dict(zip(distinct, _run_jobs(pool, distinct), strict=True))
        calibrated = [_budgeted(_row(family, x, outcomes[job], epsilon, seed), compute)
                      for x, job in zip(candidates, jobs, strict=True)]
        phases = [("calibration", time.perf_counter() - start)]
        rows = _race(family, calibrated, repeats, pool, race, progress, phases)
        result = PlanResult(epsilon, delta, repeats, seed, family.sigmas, family.members[0].best_value, tuple(rows),
                            0.0, adaptive_theorem, compute, race=race)
        evaluation = None
        if evaluate_repeats > 0 and result.best is not None:
            tick = time.perf_counter()
            settings = _Settings(epsilon, delta, adaptive_theorem, compute, workers, pool, split_rule)
            evaluation = _evaluate(family, result, result.best, evaluate_repeats, evaluate_seed, comparator_runs,
                                   settings)
            phases.append(("evaluation", time.perf_counter() - tick))
    return dataclasses.replace(result, seconds=time.perf_counter() - start, evaluation=evaluation,
                               phases=tuple(phases))


def _run_jobs(pool: Executor, jobs: list[_CalibrationJob]) -> list[_Calibrated]:
    """Every calibration job, in the executor's workers when it has more than one (in order)."""
    if getattr(pool, "workers", 1) > 1 and len(jobs) > 1:
        return pool.run(_calibrate, jobs)
    return [_calibrate(job) for job in jobs]


@dataclass(frozen=True)
class _Settings:
    """What an evaluation's extra rows are calibrated and simulated with (the plan's own settings)."""

    epsilon: float
    delta: float
    adaptive_theorem: str
    compute: ComputeBudget
    workers: int | None
    pool: Executor
    split_rule: SplitRule | None = None


def _evaluate(
    family: LandscapeFamily, result: PlanResult, selected: PlanRow, repeats: int, seed: int, runs: str,
    settings: _Settings,
) -> PlanEvaluation:
    """The pick and every uniform search with at least its expected runs, on ``repeats`` fresh repeats (``seed``).

    The plan's uniform rows with at least the pick's expected runs are the comparators; when it has none (and the
    pick is not itself uniform search), a uniform search with E[T] = the pick's expected runs (law ``runs``) is
    calibrated and simulated for the comparison.
    """
    runs_needed = selected.candidate.expected_runs * (1.0 - 1e-12)  # round-off of a probe's share of a run
    pool = [row for row in result.rows if row is not selected and row.candidate.design == "uniform"
            and row.candidate.expected_runs >= runs_needed]
    reason = ""
    if not pool and selected.candidate.design != "uniform":
        extra = PlanCandidate("uniform", Uniform(), make_run_count(runs, mean=selected.candidate.expected_runs))
        pool = [_budgeted(_calibrated_row(family, settings.epsilon, settings.delta, extra, seed,
                                          settings.adaptive_theorem, settings.split_rule), settings.compute)]
    ran = [row for row in pool if row.feasible]
    if not pool:
        reason = (f"the pick is the uniform search with the most expected runs ({selected.candidate.expected_runs:g}):"
                  f" no uniform search with at least its compute to compare with")
    elif not ran:
        reason = "; ".join(f"{row.candidate.name}: {row.status}: {row.reason}" for row in pool)
        reason = f"no uniform search with at least the pick's expected runs could run ({reason})"

    fresh = _simulated(family, [dataclasses.replace(row, seed=seed, eliminated="", values=np.empty(0), seconds=0.0)
                                for row in (selected, *ran)], [(0, repeats)] * (1 + len(ran)), settings.pool)
    pick = fresh[0]
    uniform = sorted(fresh[1:], key=lambda row: -float(row.mean or 0.0))
    comparison = compare_rows(pick, uniform[0]) if uniform else None
    return PlanEvaluation(selected, pick, tuple(uniform), comparison, reason, repeats, seed)


def _with_run_seconds(compute: ComputeBudget, family: LandscapeFamily) -> ComputeBudget:
    """``compute`` with the family's cost per run filled in when the caller gave none."""
    if not isinstance(compute, ComputeBudget):
        raise ValueError(f"compute must be a ComputeBudget, got {compute!r}")
    if compute.run_seconds is not None:
        return compute
    seconds = family_run_seconds(family)
    if seconds is None:
        return compute
    return dataclasses.replace(compute, run_seconds=seconds, source="family metadata seconds_per_run_mean")


def _check_some_candidate_fits(candidates: Sequence[Candidate], compute: ComputeBudget) -> None:
    """Refuse, in one line and before any work, a compute budget that no candidate meets."""
    if any(not compute.over_budget(x.expected_runs) for x in candidates):
        return
    cheapest = min(candidates, key=lambda x: x.expected_runs)
    raise ValueError(f"no candidate meets the compute budget: the cheapest, {cheapest.name}, has "
                     f"{compute.over_budget(cheapest.expected_runs)}")


def _budgeted(row: PlanRow, compute: ComputeBudget) -> PlanRow:
    """``row`` with its expected compute and, when it exceeds the budget, why."""
    runs = row.candidate.expected_runs
    return dataclasses.replace(row, expected_compute=compute.expected_compute(runs),
                               budget_reason=compute.over_budget(runs))


def _race(
    family: LandscapeFamily, rows: list[PlanRow], repeats: int, pool: Executor, race: Race | None,
    progress: Callable[[PlanRow], None] | None, phases: list[tuple[str, float]],
) -> list[PlanRow]:
    """Simulate every feasible row on the selection repeats, in the rounds of ``race`` (:class:`Race`) if given.

    Appends each round's wall seconds to ``phases``.
    """
    rows = list(rows)
    costly = {k for k, row in enumerate(rows) if row.feasible and _races(row.candidate)}
    schedule = [repeats] if race is None else race.schedule(repeats)
    live = set(costly)
    reported = 0
    done = 0
    pivots: dict[tuple[str, str], PlanRow] = {}
    for number, stop in enumerate(schedule):
        tick = time.perf_counter()
        begin = 0 if number == 0 else schedule[number - 1]
        # the first round also runs every cheap row on all the repeats
        cheap = [k for k, row in enumerate(rows) if row.feasible and k not in costly] if number == 0 else []
        racing = sorted(live)
        spans = [(0, repeats)] * len(cheap) + [(begin, stop)] * len(racing)
        for k, row in zip(cheap + racing, _simulated(family, [rows[k] for k in cheap + racing], spans, pool),
                          strict=True):
            rows[k] = row
        if race is not None and number < len(schedule) - 1:
            alpha = race.alpha / (len(schedule) - 1)  # Bonferroni over the elimination rounds
            if number == 0:
                pivots = _twin_pivots(family, rows, live, repeats, race.twin_factor, pool)
            for k in sorted(live):
                reason = _elimination(rows[k], rows, alpha, pivots)
                if reason:
                    rows[k] = dataclasses.replace(rows[k], eliminated=reason)
                    live.discard(k)
        phases.append((f"selection repeats {begin}-{stop - 1}", time.perf_counter() - tick))
        if number == len(schedule) - 1:
            live.clear()
        done_rows = {k for k in range(len(rows)) if k not in live}
        while done < len(rows) and done in done_rows:
            done += 1
        if progress is not None:
            for k in range(reported, done):
                progress(rows[k])
        reported = done
        if not live:
            break
    return rows


def _twin_pivots(family: LandscapeFamily, rows: Sequence[PlanRow], live: set[int], repeats: int, factor: int,
                 pool: Executor) -> dict[tuple[str, str], PlanRow]:
    """Every racing row's uniform twin (by candidate key), simulated on ``factor`` × ``repeats`` repeats.

    The first ``repeats`` are the twin's own row values (the same streams); the others only sharpen the race's
    bound on twin − leader (uniform search costs little), they are not reported.
    """
    twins = {twin.candidate.key: twin for k in sorted(live) if (twin := _uniform_twin(rows[k], rows)) is not None}
    chosen = [twin for twin in twins.values() if twin.repeats == repeats]
    if factor <= 1 or not chosen:
        return twins
    longer = _simulated(family, chosen, [(repeats, factor * repeats)] * len(chosen), pool)
    return {**twins, **{twin.candidate.key: row for twin, row in zip(chosen, longer, strict=True)}}


def _races(candidate: Candidate) -> bool:
    """Whether a candidate's rows race (:class:`Race`): a DP-HyPO search (a GP per repeat); the others are cheap."""
    return isinstance(candidate, PlanCandidate) and candidate.adaptive


def _elimination(row: PlanRow, rows: Sequence[PlanRow], alpha: float,
                 pivots: Mapping[tuple[str, str], PlanRow]) -> str:
    """Why a race eliminates ``row`` after this round (one line), or ``""`` when it stays (:class:`Race`'s rule).

    The bound on ``row − leader`` is one of three, chosen by the rows' kinds (never by their values), each wrong
    (below the true difference) with probability at most ``alpha``: paired Student-t when the leader shares the
    row's streams; else, when the row has a uniform twin (the uniform row with its law of T, which ran every
    selection repeat), the paired bound on row − twin plus Welch's on twin − leader, each at ``alpha``/2 (the twin
    has the same T as the row in every repeat, so the first difference is small and precise; the second uses the
    twin's ``pivots`` values, :attr:`Race.twin_factor` times the selection repeats); else Welch's.
    """
    contenders = [r for r in rows if r.feasible and r.within_budget and not r.eliminated and r.values.size >= 2]
    if not contenders or row.values.size < 2:
        return ""
    leader = max(contenders, key=lambda r: float(r.mean or 0.0))
    if leader is row:
        return ""
    twin = _uniform_twin(row, rows)
    if _shares(row, leader) or twin is None:
        difference, upper, how = _upper_bound(row, leader, alpha)
    else:
        first, upper_first, _ = _upper_bound(row, twin, alpha / 2)
        second, upper_second, _ = _upper_bound(pivots.get(twin.candidate.key, twin), leader, alpha / 2)
        difference, upper = first + second, upper_first + upper_second
        pivot = pivots.get(twin.candidate.key, twin)
        how = (f"through {twin.candidate.name}: paired Student-t to it plus "
               f"{'paired Student-t' if _shares(twin, leader) else 'Welch'} from it ({pivot.repeats} repeats) to the "
               f"leader, each at {alpha / 2:.3g}")
    if not upper < 0.0:
        return ""
    return (f"eliminated after {row.repeats} repeats: mean − leader's estimated {difference:+.4f} (leader "
            f"{leader.candidate.name}), one-sided upper bound {upper:+.4f} < 0 at level {alpha:.3g} ({how})")


def _shares(first: PlanRow, second: PlanRow) -> bool:
    """Whether repeat r of both rows ran on the same streams (:func:`compare_rows`' pairing)."""
    return first.seed == second.seed and first.candidate.shares_streams and second.candidate.shares_streams


def _uniform_twin(row: PlanRow, rows: Sequence[PlanRow]) -> PlanRow | None:
    """The uniform row with ``row``'s law of T and streams (same T in every repeat) that ran at least its repeats."""
    candidate = row.candidate
    if not isinstance(candidate, PlanCandidate):
        return None
    for other in rows:
        cand = other.candidate
        if (other is not row and other.feasible and isinstance(cand, PlanCandidate) and not cand.adaptive
                and cand.key[1] == candidate.key[1] and _shares(row, other) and other.repeats >= row.repeats):
            return other
    return None


def _upper_bound(first: PlanRow, second: PlanRow, alpha: float) -> tuple[float, float, str]:
    """``mean(first) − mean(second)`` and its one-sided (1 − ``alpha``) upper confidence bound, and the pairing.

    Paired Student-t over the common repeats when the rows share their streams (as :func:`compare_rows`), else
    Welch's (:func:`welch_ci95`'s degrees of freedom). A bound of zero spread is the difference itself.
    """
    if _shares(first, second):
        n = min(first.repeats, second.repeats)
        d = first.values[:n] - second.values[:n]
        difference = float(d.mean())
        spread = float(d.std(ddof=1)) / math.sqrt(n)
        df = float(n - 1)
        pairing = "paired Student-t"
    else:
        a, b = first.values, second.values
        difference = float(a.mean() - b.mean())
        va, vb = float(a.var(ddof=1)) / a.size, float(b.var(ddof=1)) / b.size
        spread = math.sqrt(va + vb)
        df = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1)) if va + vb > 0 else 1.0
        pairing = "unpaired, Welch"
    if spread == 0.0:
        return difference, difference, pairing
    return difference, difference + float(stats.t.ppf(1.0 - alpha, df)) * spread, pairing


def _simulated(family: LandscapeFamily, rows: Sequence[PlanRow], spans: Sequence[tuple[int, int]], pool: Executor
               ) -> list[PlanRow]:
    """``rows`` with repeats ``start .. stop − 1`` (``spans``, one per row) simulated on the family at each row's σ.

    The new values follow the row's own (repeats ``0 .. start − 1``). Single-stage rows run together
    (:func:`dphypo.simulation.batched.simulate_many`: the costliest jobs first, on the executor's workers); a
    two-stage row runs its repeats at once (``start`` must be 0: its repeats share one stream).
    """
    tick = time.perf_counter()
    values: list[np.ndarray | None] = [None] * len(rows)
    batched: list[tuple[int, BatchedSimulation]] = []
    for k, (row, (start, stop)) in enumerate(zip(rows, spans, strict=True)):
        if row.values.size != start:
            raise ValueError(f"row {row.candidate.name!r} has {row.values.size} repeats, cannot continue at {start}")
        assert row.sigma is not None  # an "ok" row is calibrated
        candidate = row.candidate
        if isinstance(candidate, TwoStageCandidate):
            assert row.probe_sigma is not None and start == 0
            # its own streams, the same for every two-stage row of the plan (common random numbers among them)
            rng = np.random.default_rng([row.seed, _TWO_STAGE_STREAM])
            probes = family if candidate.probe_family is None else candidate.probe_family
            values[k] = two_stage_values(candidate.two_stage, probes.at(row.probe_sigma), family.at(row.sigma),
                                         stop, rng)
        else:
            # projected onto, and run with, exactly the bounds the row was accounted with (the strategy's own)
            batched.append((k, BatchedSimulation(family.at(row.sigma), candidate.strategy, candidate.run_count,
                                                 row.seed, start, stop)))
    if batched:
        for (k, _), got in zip(batched, simulate_many([sim for _, sim in batched], executor=pool), strict=True):
            values[k] = got
    seconds = time.perf_counter() - tick
    out = []
    for row, new in zip(rows, values, strict=True):
        assert new is not None
        joined = np.concatenate([row.values, new])
        mean, ci95 = mean_ci95(joined)
        out.append(dataclasses.replace(row, mean=mean, ci95=ci95, values=joined, seconds=row.seconds + seconds))
    return out
