"""Simulation studies: grids of simulated searches, each arm with its total ε (DP-HyPO §4.2, App. E).

A study is a grid of *settings* (rows: how T is chosen and the density bounds C, c of the adaptive arms) ×
*arms* (columns: a strategy on a landscape). Every cell is one :func:`dphypo.simulation.simulate.simulate` call; all
cells use the same study seed, so repeat r of every cell shares its random streams (common random numbers).
The paper's experiments map onto it as follows:

* Figure 1 (value vs fixed T): settings T = 1..T_max (:func:`fixed_T_settings`); research mode, no claim.
* Table 1 (value averaged over geometric T, γ ∈ :data:`TABLE1_GAMMAS`): :func:`run_count_settings`.
* Table 2 / black box (one base landscape, adaptivity paid on top, C ∈ :data:`TABLE2_UPPER_BOUNDS`, c = 1/C):
  :func:`run_count_settings` with several bounds.
* White box (total budget fixed): the uniform arm on a landscape built at the σ a uniform search may use, the
  GP arm on one built at the larger σ a GP search may use for the same total ε.

The total ε of an arm is what :func:`dphypo.privacy.account` reports for the search that arm simulates:
``RepeatAndSelect(run_count, C, c)`` with the per-run RDP curve of the DP-SGD mechanism the landscape was built with
(:func:`landscape_mechanism`: σ, batch size, epochs and the score release from the landscape's metadata, split
sizes from :func:`dphypo.train.load_dataset`). A uniform arm (C = c = 1) is also accounted with the
privacy-profile bounds of Koskela, Redberg & Wang 2024 (the mechanism's :meth:`dphypo.train.DPSGDMechanism.profile`, as
``dphypo tune`` and :func:`dphypo.simulation.equal_epsilon.arm_sigma` do), the accountant reporting the smallest
valid bound; no profile bound is proven for C > c, so adaptive arms are RDP only.

Which (C, c) a cell uses is decided in one place, :func:`cell_strategy` (:func:`cell_bounds`), for
:func:`run_study` and the equal-ε calibration alike: the cell simulates a strategy object whose *own* (C, c) are
the bounds it projects every density onto and is accounted with. Uniform arms: C = c = 1 whatever the row says (the
non-adaptive special case; its density is the prior). A row without bounds (``Setting.C = c = None``, the default):
each adaptive arm's own strategy, bounds included. A row with bounds gives them to the arm's strategy: GP-UCB
takes the row's C and c (Table 2 sweeps C with c = 1/C); a strategy that derives c from C
(:class:`~dphypo.strategies.GPTopSet`, c = (1 − C·p)/(1 − p) for its top mass p) takes the row's C and re-derives
its c, the row's c playing no part for it. Every cell reports the (C, c) it really used.

An equal-ε study (:attr:`StudyConfig.epsilon` set; every arm's landscape a landscape family, given as the tuple of
its member files, :func:`dphypo.simulation.family.load_family`) runs every cell on ``family.at(σ)`` with σ the
noise multiplier at which that cell's search (its run count, its C, c) costs exactly the total ε: the white-box
setting of DP-HyPO §4.2 without hand-built landscape pairs. The calibration lives one layer up, in
:mod:`dphypo.simulation.equal_epsilon` (:func:`~dphypo.simulation.equal_epsilon.run_equal_epsilon_study`), which
calibrates every cell's σ, and checks it lies in the family's range, before the first simulated search; this module
only runs the cells on the landscapes it is given.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dphypo.privacy import RepeatAndSelect, RunCountDistribution, TruncatedNegativeBinomial, account
from dphypo.privacy.adaptive import check_adaptive_theorem
from dphypo.privacy.split import SplitRule
from dphypo.privacy.validation import check_delta, check_non_negative_int, check_positive, check_positive_int
from dphypo.search.execution import Executor, executor_scope
from dphypo.search.limits import check_expected_runs, check_runs
from dphypo.simulation.landscapes import Landscape
from dphypo.simulation.simulate import ENGINES, ArmResult, Engine, mean_ci95, simulate
from dphypo.simulation.synthetic import resolve_landscape
from dphypo.strategies import Strategy, Uniform, density_bounds
from dphypo.train.mechanism import DPSGDMechanism

if TYPE_CHECKING:
    from dphypo.privacy.profiles import PldProfile, ProfileSkipped

__all__ = [
    "FIXED_T_NOTE",
    "TABLE1_GAMMAS",
    "TABLE2_UPPER_BOUNDS",
    "ArmSpec",
    "Cell",
    "CellLandscape",
    "Setting",
    "StudyConfig",
    "StudyResult",
    "arm_epsilon",
    "arm_landscapes",
    "cell_bounds",
    "cell_strategy",
    "derives_lower_bound",
    "finite_or_none",
    "fixed_T_settings",
    "landscape_mechanism",
    "mechanism_from_metadata",
    "mechanism_profile",
    "parse_T_values",
    "run_count_settings",
    "run_study",
    "strategy_config",
    "study_searches",
]

#: What a fixed-T cell shows instead of ε: fixed T is a research mode with no privacy theorem.
FIXED_T_NOTE = "fixed T: research mode, no privacy claim"


def finite_or_none(x: float) -> float | None:
    """``x`` as a float, or ``None`` when it is not finite (JSON has no inf/nan)."""
    return float(x) if math.isfinite(x) else None

#: γ of the geometric run counts of DP-HyPO Table 1.
TABLE1_GAMMAS: tuple[float, ...] = (0.001, 0.002, 0.003, 0.005, 0.01, 0.02, 0.025, 0.03)
#: Upper density-ratio bounds of DP-HyPO Table 2 (federated learning, black box); c = 1/C.
TABLE2_UPPER_BOUNDS: tuple[float, ...] = (1.25, 1.33, 1.5)

_PLAN_KEYS = ("dataset", "sigma", "batch_size", "epochs", "score_noise")


@dataclass(frozen=True)
class Setting:
    """One row of a study: how T is chosen and the density bounds of its adaptive arms.

    The bounds are optional: ``C = c = None`` (the default) runs every adaptive arm with its own strategy's
    bounds, which is what a study of strategies configured one by one expects. Given bounds override the arms'
    (a sweep of C, as Table 2): GP-UCB takes both, a strategy that derives c from C (GPTopSet) takes C only and
    ignores ``c`` (``c`` may then be left ``None``). :func:`cell_strategy` states the rule; the
    :class:`Cell` reports the (C, c) actually used.

    Args:
        label: Row label (e.g. ``"T=5"``, ``"γ=0.01"``, ``"C=1.25, c=0.8"``).
        T: Fixed number of runs (research mode), or ``None`` when
        run_count: T is drawn per search from this distribution (as a private search does).
        C: Upper density-ratio bound of the adaptive arms (≥ 1), or ``None``: each arm's own.
        c: Lower density-ratio bound of the adaptive arms that take one (in (0, 1]), or ``None``: each arm's own
            (only together with ``C = None``, or with a C for arms that derive c).
        adaptive_repeats: Repeats of the adaptive arms in this row if not the study's (0: not simulated, e.g.
            too costly; stated in every output), or ``None``.
    """

    label: str
    T: int | None = None
    run_count: RunCountDistribution | None = None
    C: float | None = None
    c: float | None = None
    adaptive_repeats: int | None = None

    def __post_init__(self) -> None:
        if (self.T is None) == (self.run_count is None):
            raise ValueError(f"setting {self.label!r}: give exactly one of T or run_count")
        if self.T is not None:
            check_positive_int("T", self.T)
        if self.C is None and self.c is not None:
            raise ValueError(f"setting {self.label!r}: c={self.c!r} needs its C (an arm's c alone is no bound)")
        for name, value in (("C", self.C), ("c", self.c)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                      or not math.isfinite(value)):
                raise ValueError(f"setting {self.label!r}: {name} must be a finite number or None, got {value!r}")
        if self.C is not None and self.C < 1.0:
            raise ValueError(f"setting {self.label!r}: C must be >= 1, got {self.C!r}")
        # The adaptive arms' search must have a privacy theorem (it raises for e.g. adaptive Poisson T); rows
        # without both bounds are checked per arm by StudyConfig (cell_strategy).
        if self.run_count is not None and self.C is not None and self.c is not None:
            RepeatAndSelect(self.run_count, self.C, self.c)
        check_non_negative_int("adaptive_repeats", self.adaptive_repeats, optional=True)

    def describe_runs(self) -> str:
        """How T is chosen, in words (``"T = 20"`` or the distribution with E[T])."""
        if self.T is not None:
            return f"T = {self.T}"
        rc = self.run_count
        assert rc is not None
        params = f"θ={rc.theta:g}, γ={rc.gamma:g}, " if isinstance(rc, TruncatedNegativeBinomial) else ""
        return f"{rc.name}({params}E[T]={rc.mean:.4g})"


@dataclass(frozen=True)
class ArmSpec:
    """One column of a study: a strategy on a landscape.

    Args:
        label: Column label (e.g. ``"uniform"``, ``"gp"``).
        strategy: The sampling strategy.
        landscape: A landscape ``.npz`` path or ``synthetic:<name>``; in an equal-ε study
            (:attr:`StudyConfig.epsilon`), the member ``.npz`` paths of a landscape family (a tuple, at least 2).
    """

    label: str
    strategy: Strategy
    landscape: str | tuple[str, ...]

    def __post_init__(self) -> None:
        if isinstance(self.landscape, list):  # a list of member paths reads as the family it names
            object.__setattr__(self, "landscape", tuple(self.landscape))
        if isinstance(self.landscape, tuple) and not (
            len(self.landscape) >= 2 and all(isinstance(p, str) for p in self.landscape)
        ):
            raise ValueError(f"arm {self.label!r}: a landscape family needs at least 2 member paths, got "
                             f"{self.landscape!r}")
        if not isinstance(self.landscape, str | tuple):
            raise ValueError(f"arm {self.label!r}: landscape must be a path, synthetic:<name> or a tuple of "
                             f"family member paths, got {self.landscape!r}")

    @property
    def adaptive(self) -> bool:
        """Whether the arm adapts its density (anything but uniform search)."""
        return not isinstance(self.strategy, Uniform)

    @property
    def is_family(self) -> bool:
        """Whether the arm's landscape is a family (equal-ε study) rather than one landscape."""
        return isinstance(self.landscape, tuple)

    @property
    def landscape_name(self) -> str:
        """The landscape for display: the spec, or the family's member file names joined by ``+``."""
        if isinstance(self.landscape, str):
            return self.landscape
        return "+".join(Path(p).name for p in self.landscape)


@dataclass(frozen=True)
class StudyConfig:
    """A full study: settings × arms, the number of repeats and how to simulate.

    Args:
        name: Study name (e.g. ``"fixed-T"``, ``"run-count"``, ``"white-box"``, ``"black-box"``).
        settings: The rows.
        arms: The columns (distinct labels).
        repeats: Independent searches per cell (a row's ``adaptive_repeats`` overrides it for adaptive arms).
        seed: Study seed (the same for every cell: common random numbers).
        delta: δ of the reported (ε, δ).
        engine: ``"batched"`` or ``"sequential"`` (:func:`dphypo.simulation.simulate.simulate`).
        batch: Batched engine: GP searches fitted together.
        workers: Processes for :func:`~dphypo.simulation.simulate.simulate` (``None``: all cores).
        epsilon: Equal-ε study: the total ε every cell's search costs (each cell runs on its arm's family at the
            σ calibrated for it, module docstring); every arm's landscape must then be a family and every setting
            a run count. ``None``: every cell runs on its arm's landscape as it is.
        adaptive_theorem: The accounting of every cell, named explicitly and recorded (:func:`dphypo.privacy.account`):
            ``"B"`` (Theorem B for C > c, and Theorem B at C = c = 1 for uniform arms), ``"A"`` (Theorem A;
            Papernot-Steinke and the profile bounds for uniform arms: the accounting the shipped studies in
            docs/studies/ were calibrated and accounted with) or ``"published"``.
        split_rule: Equal-ε study: calibrate and account every cell as ``tune`` with a per-record split does
            (Theorem S, docs/proofs/split.md); ``None`` (default): each run charged the sum of its two parts.
    """

    name: str
    settings: tuple[Setting, ...]
    arms: tuple[ArmSpec, ...]
    repeats: int
    seed: int = 0
    delta: float = 1e-5
    engine: Engine = "batched"
    batch: int = 256
    workers: int | None = None
    epsilon: float | None = None
    adaptive_theorem: str = "B"
    split_rule: SplitRule | None = None

    def __post_init__(self) -> None:
        check_adaptive_theorem(self.adaptive_theorem)
        if not self.settings or not self.arms:
            raise ValueError("settings and arms must both be non-empty")
        for name, objects in (("settings", self.settings), ("arms", self.arms)):
            labels = [x.label for x in objects]
            if len(set(labels)) != len(labels):
                raise ValueError(f"{name} labels must be distinct, got {labels}")
        check_positive_int("repeats", self.repeats)
        check_delta(self.delta)
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, got {self.engine!r}")
        for setting in self.settings:  # every cell's bounds exist and have a theorem, before any simulation
            for arm in self.arms:
                C, c = cell_bounds(setting, arm)
                if setting.run_count is not None:
                    try:
                        RepeatAndSelect(setting.run_count, C, c)
                    except ValueError as err:
                        raise ValueError(f"arm {arm.label!r} in setting {setting.label!r} (C={C:g}, c={c:.6g}): "
                                         f"{err}") from None
        if self.epsilon is None:
            families = [a.label for a in self.arms if a.is_family]
            if families:
                raise ValueError(f"arms {families} run on a landscape family, which needs an equal-ε study: set "
                                 "epsilon (the total ε every cell's search costs)")
            return
        check_positive("epsilon", self.epsilon)
        single = [a.label for a in self.arms if not a.is_family]
        if single:
            raise ValueError(f"an equal-ε study runs every arm on a landscape family (at least 2 member files), "
                             f"but arms {single} have a single landscape")
        fixed = [s.label for s in self.settings if s.run_count is None]
        if fixed:
            raise ValueError(f"an equal-ε study needs T drawn from a run count (fixed T has no privacy claim), got "
                             f"fixed-T settings {fixed}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready configuration."""
        return {
            "name": self.name, "repeats": self.repeats, "seed": self.seed, "delta": self.delta,
            "engine": self.engine, "batch": self.batch, "workers": self.workers, "epsilon": self.epsilon,
            "adaptive_theorem": self.adaptive_theorem,
            "data_split": "permutation" if self.split_rule is None else "per-record",
            "arms": [{"label": a.label, "strategy": a.strategy.name, "landscape": _landscape_json(a.landscape),
                      "config": strategy_config(a.strategy)} for a in self.arms],
            "settings": [{"label": s.label, "T": s.T, "runs": None if s.T is not None else s.describe_runs(),
                          "C": s.C, "c": s.c, "adaptive_repeats": s.adaptive_repeats}
                         for s in self.settings],
        }


@dataclass(frozen=True)
class Cell:
    """The outcome of one (setting, arm) pair.

    Attributes:
        setting: The row.
        arm: The column.
        C: Upper bound the arm was simulated and accounted with (1 for uniform search; :func:`cell_bounds`).
        c: Lower bound (1 for uniform search; the derived c of a GPTopSet arm, whatever the row's c).
        result: The simulation, or ``None`` when the row asked for 0 repeats of this arm (not simulated).
        epsilon: Total ε of the search at the study's δ, or ``None`` when there is no claim.
        epsilon_note: Why ``epsilon`` is ``None`` (empty otherwise).
        seconds: Wall time of the simulation (0 when reused or not simulated).
        difference: For an adaptive arm, the paired difference to the study's first uniform arm in the same
            row over their common repeats (same random streams, so the same T per repeat):
            ``(mean, (low, high))`` with a 95 % Student-t interval; ``None`` otherwise.
        sigma: Noise multiplier σ of the landscape the cell ran on (its metadata's; in an equal-ε study the
            calibrated σ), or ``None`` when the landscape states none (synthetic).
        sigma_tolerance: Equal-ε study: the calibration's tolerance on σ (σ is on the conservative side of the
            exact root by at most this much); ``None`` otherwise.
        epsilon_target: Equal-ε study: the total ε the cell was calibrated for (``epsilon`` ≤ it); ``None``
            otherwise.
    """

    setting: Setting
    arm: ArmSpec
    C: float
    c: float
    result: ArmResult | None
    epsilon: float | None
    epsilon_note: str
    seconds: float
    difference: tuple[float, tuple[float, float]] | None = None
    sigma: float | None = None
    sigma_tolerance: float | None = None
    epsilon_target: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (also readable by ``dphypo plot accuracy --from``)."""
        r = self.result
        return {
            "setting": self.setting.label, "arm": self.arm.label, "strategy": self.arm.strategy.name,
            "landscape": _landscape_json(self.arm.landscape), "sigma": self.sigma,
            "sigma_tolerance": self.sigma_tolerance, "epsilon_target": self.epsilon_target,
            "C": self.C, "c": self.c, "T": self.setting.T,
            "run_count": None if self.setting.run_count is None else repr(self.setting.run_count),
            "runs": self.setting.describe_runs(),
            "mean": None if r is None else r.mean,
            "ci95": None if r is None else [finite_or_none(x) for x in r.ci95],
            "repeats": 0 if r is None else r.repeats,
            "epsilon": self.epsilon, "epsilon_note": self.epsilon_note, "seconds": self.seconds,
            "difference_vs_uniform": None if self.difference is None else {
                "mean": self.difference[0], "ci95": [finite_or_none(x) for x in self.difference[1]]},
        }


@dataclass(frozen=True)
class StudyResult:
    """All cells of a study, row-major (settings × arms).

    Attributes:
        config: The study configuration.
        cells: One :class:`Cell` per (setting, arm), settings outer.
        best_values: The best mean of every landscape used, by landscape spec (equal-ε study: by
            ``"<members>@sigma=<σ>"``).
        seconds: Total wall time.
    """

    config: StudyConfig
    cells: tuple[Cell, ...]
    best_values: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0

    def cell(self, setting: str, arm: str) -> Cell:
        """The cell of a setting label and an arm label."""
        for cell in self.cells:
            if cell.setting.label == setting and cell.arm.label == arm:
                return cell
        raise KeyError(f"no cell ({setting!r}, {arm!r})")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready result: the configuration and every cell (``results``)."""
        best = set(self.best_values.values())
        return {
            "study": self.config.to_dict(), "delta": self.config.delta, "seed": self.config.seed,
            "epsilon_target": self.config.epsilon,
            "best_values": self.best_values, "best_value": best.pop() if len(best) == 1 else None,
            "seconds": self.seconds, "results": [c.to_dict() for c in self.cells],
        }


def _landscape_json(spec: str | tuple[str, ...]) -> str | list[str]:
    return spec if isinstance(spec, str) else list(spec)


def strategy_config(strategy: Strategy) -> dict[str, Any]:
    """Every field of a dataclass strategy (its own bounds, a derived c included); ``{}`` for any other object."""
    if not dataclasses.is_dataclass(strategy):
        return {}
    return {f.name: getattr(strategy, f.name) for f in dataclasses.fields(strategy)}


# ------------------------------------------------------------------------------------------------ bounds
def _init_fields(strategy: Strategy) -> set[str]:
    """Names of a dataclass strategy's constructor arguments (empty for any other object)."""
    if not dataclasses.is_dataclass(strategy):
        return set()
    return {f.name for f in dataclasses.fields(strategy) if f.init}


def derives_lower_bound(strategy: Strategy) -> bool:
    """Whether ``strategy`` derives c from C: a dataclass taking ``C`` whose ``c`` is no constructor argument.

    :class:`~dphypo.strategies.GPTopSet` is one (c = (1 − C·p)/(1 − p),
    :func:`dphypo.density.lower_bound_for_top_mass`); :class:`~dphypo.strategies.GPUCB` takes both bounds,
    :class:`~dphypo.strategies.Uniform` neither.
    """
    names = _init_fields(strategy)
    return "C" in names and "c" not in names and hasattr(strategy, "c")


def cell_strategy(setting: Setting, arm: ArmSpec) -> Strategy:
    """The strategy object one cell simulates: the arm's, with the row's bounds given to it.

    Its own (C, c) are exactly the bounds the cell projects every density onto and accounts (:func:`cell_bounds`),
    so no cell samples with one pair of bounds and reports or accounts another:

    * uniform arm: the arm's strategy, C = c = 1 whatever the row says (its density is the prior);
    * row without bounds (``setting.C is None``): the arm's strategy, its own bounds;
    * a strategy that derives c from C (:func:`derives_lower_bound`, e.g. GPTopSet):
      ``dataclasses.replace(strategy, C=setting.C)``, c re-derived; the row's c plays no part;
    * any other adaptive strategy (e.g. GPUCB): ``dataclasses.replace(strategy, C=setting.C, c=setting.c)``.

    Args:
        setting: The row.
        arm: The column.

    Returns:
        The strategy (the arm's own object when nothing changes).

    Raises:
        ValueError: One line naming the arm and the row: the row's C leaves the arm no valid c (e.g. a GPTopSet
            top mass ≥ 1/C), the row gives C without c to an arm that takes both, or the arm's strategy is no
            dataclass taking C (and c), so the row's bounds cannot be given to it.
    """
    strategy = arm.strategy
    if not arm.adaptive or setting.C is None:
        return strategy
    where = f"arm {arm.label!r} ({strategy.name}) in setting {setting.label!r}"
    names = _init_fields(strategy)
    if derives_lower_bound(strategy):
        changes: dict[str, float] = {"C": setting.C}
    elif {"C", "c"} <= names:
        if setting.c is None:
            raise ValueError(f"{where}: the row gives C={setting.C:g} but no c, and this strategy takes both bounds")
        changes = {"C": setting.C, "c": setting.c}
    else:
        raise ValueError(f"{where}: the strategy does not take density bounds as dataclass fields, so the row's "
                         f"C={setting.C:g} cannot be given to it; leave the row's C, c None (its own bounds)")
    try:
        # strategy is a dataclass (its init fields were read above), which the Strategy protocol cannot say
        return dataclasses.replace(strategy, **changes)  # type: ignore[type-var]
    except ValueError as err:
        raise ValueError(f"{where}: C={setting.C:g} leaves no valid c: {err}") from None


def cell_bounds(setting: Setting, arm: ArmSpec) -> tuple[float, float]:
    """The (C, c) one cell projects onto and is accounted with: those of :func:`cell_strategy`.

    Args:
        setting: The row.
        arm: The column.

    Returns:
        ``(C, c)``; ``(1.0, 1.0)`` for a uniform arm.

    Raises:
        ValueError: As :func:`cell_strategy`.
    """
    return density_bounds(cell_strategy(setting, arm))


# ------------------------------------------------------------------------------------------------ settings
def parse_T_values(text: str) -> tuple[int, ...]:
    """``"20"``, ``"1..20"`` (inclusive range) or ``"1,5,10"`` → fixed numbers of runs.

    Args:
        text: The specification.

    Returns:
        Strictly increasing positive integers.
    """
    try:
        if ".." in text:
            low, high = (int(part) for part in text.split(".."))
            check_runs(high, "fixed T")  # before the range is built
            values = list(range(low, high + 1))
        else:
            values = [int(part) for part in text.split(",")]
    except ValueError as exc:
        if "fixed T" in str(exc):
            raise
        raise ValueError(f"fixed T must be N, LOW..HIGH or a comma list of integers, got {text!r}") from exc
    if values:
        check_runs(max(values), "fixed T")
    if not values or min(values) < 1 or sorted(set(values)) != values:
        raise ValueError(f"fixed T values must be strictly increasing integers >= 1, got {text!r}")
    return tuple(values)


def fixed_T_settings(Ts: Iterable[int], C: float | None, c: float | None) -> tuple[Setting, ...]:
    """Rows T = t for every t (DP-HyPO Figure 1 view; no privacy claim); ``C``, ``c`` as :class:`Setting`'s."""
    return tuple(Setting(f"T={T}", T=int(T), C=C, c=c) for T in Ts)


def run_count_settings(
    run_counts: Sequence[RunCountDistribution],
    bounds: Sequence[tuple[float | None, float | None]],
    adaptive_repeats: dict[float, int] | None = None,
) -> tuple[Setting, ...]:
    """Rows for every (run count, bounds) pair: Table 1 (several γ, one bound) or Table 2 (one γ, several C).

    Args:
        run_counts: Distributions of T.
        bounds: ``(C, c)`` pairs of the adaptive arms (as :class:`Setting`'s: ``(None, None)`` for each arm's
            own, ``(C, None)`` for arms that derive c).
        adaptive_repeats: Repeats of the adaptive arms in rows whose γ, E[T] or C equals a key (0 skips them).

    Returns:
        The settings, run counts outer.
    """
    overrides = adaptive_repeats or {}
    rows = []
    for rc in run_counts:
        check_expected_runs(rc)
        for C, c in bounds:
            parts = []
            if len(run_counts) > 1:
                parts.append(f"γ={rc.gamma:g}" if isinstance(rc, TruncatedNegativeBinomial) else rc.name)
            if len(bounds) > 1:
                parts.append("own bounds" if C is None else f"C={C:g}" + ("" if c is None else f", c={c:.4g}"))
            label = ", ".join(parts) or (f"E[T]={rc.mean:.4g}")
            keys = {rc.mean, math.nan if C is None else C, getattr(rc, "gamma", math.nan)}
            chosen = [n for key, n in overrides.items() if any(math.isclose(key, k) for k in keys)]
            rows.append(
                Setting(label, run_count=rc, C=C, c=c, adaptive_repeats=chosen[0] if chosen else None)
            )
    return tuple(rows)


# ------------------------------------------------------------------------------------------------ privacy
@lru_cache(maxsize=16)
def _split_sizes(dataset: str, data_seed: int) -> tuple[int, int]:
    from dphypo.train import load_dataset

    splits = load_dataset(dataset, seed=data_seed)
    return len(splits.y_train), len(splits.y_val)


def mechanism_from_metadata(metadata: Mapping[str, Any]) -> DPSGDMechanism | None:
    """The per-run DP-SGD mechanism that landscape metadata describes, or ``None`` if the metadata does not say.

    Reconstructs what :func:`dphypo.simulation.builder.build_landscape` trained: σ, batch size and epochs from the
    metadata, n_train / n_val from :func:`~dphypo.train.load_dataset` with the metadata's ``data_seed``, and
    the score release the landscape's ``std`` includes (``score_noise`` in accuracy units × n_val examples, a
    Gaussian on the count of correct validation predictions). Metadata without a score release (score_noise 0)
    has no mechanism: its scores would not be private (privacy rule 4).

    Args:
        metadata: Landscape (or family) metadata with ``dataset``, ``sigma``, ``batch_size``, ``epochs`` and
            ``score_noise`` (optionally ``data_seed``).

    Returns:
        The mechanism, or ``None`` (synthetic landscapes, missing keys, no score noise).
    """
    if any(key not in metadata for key in _PLAN_KEYS) or not float(metadata["score_noise"]) > 0.0:
        return None
    n_train, n_val = _split_sizes(str(metadata["dataset"]), int(metadata.get("data_seed", 0)))
    return DPSGDMechanism(sigma=float(metadata["sigma"]), batch_size=int(metadata["batch_size"]),
                     epochs=int(metadata["epochs"]), n_train=n_train, n_val=n_val,
                     score_noise=float(metadata["score_noise"]) * n_val)


def landscape_mechanism(landscape: Landscape) -> DPSGDMechanism | None:
    """The per-run DP-SGD mechanism a landscape was built with: :func:`mechanism_from_metadata` of its metadata.

    Args:
        landscape: The landscape.

    Returns:
        The mechanism, or ``None`` (synthetic landscapes, missing keys, no score noise).
    """
    return mechanism_from_metadata(landscape.metadata)


@lru_cache(maxsize=32)
def mechanism_profile(mechanism: DPSGDMechanism) -> PldProfile | ProfileSkipped:
    """Privacy profile of one run of ``mechanism`` (score release included), as ``dphypo tune`` builds it.

    :func:`dphypo.api.search.profile_or_skipped`: the mechanism's PLD at the tuner's discretisation, or a
    ``ProfileSkipped`` (RDP bounds only, stated in the report) when it would exceed its size cap. Cached: one
    profile takes about half a second and a study or calibration asks for the same mechanism many times.

    Args:
        mechanism: The per-run mechanism.

    Returns:
        The profile, or the reason it was skipped.
    """
    from dphypo.api.search import profile_or_skipped

    return profile_or_skipped(mechanism)


@lru_cache(maxsize=256)
def _search_epsilon(mechanism: DPSGDMechanism, search: RepeatAndSelect, delta: float, adaptive_theorem: str) -> float:
    # Profile bounds are proven for uniform searches only (Koskela, Redberg & Wang 2024); the accountant ignores
    # a profile for C > c, so not building one there saves the PLD.
    if mechanism.split_rule is not None:  # Theorem S side by side, as the calibration certified it (and tune accounts)
        from dphypo.api.search import split_parts_of
        from dphypo.privacy.accounting import PrivacyAccounting

        split = split_parts_of(mechanism, profiles=not search.adaptive)
        return float(PrivacyAccounting(search, mechanism.rdp(), delta, adaptive_theorem=adaptive_theorem,
                                       split=split).account().epsilon)
    profile = None if search.adaptive else mechanism_profile(mechanism)
    return float(account(mechanism.rdp(), search, delta, profile=profile, adaptive_theorem=adaptive_theorem).epsilon)


def arm_epsilon(
    landscape: Landscape, setting: Setting, C: float, c: float, delta: float, *, adaptive_theorem: str = "B",
    split_rule: SplitRule | None = None,
) -> tuple[float | None, str]:
    """Total ε of the search one cell simulates, by :func:`dphypo.privacy.account`.

    The smallest valid bound: RDP, and for a uniform arm (C = c = 1) also the privacy-profile bounds of
    :func:`mechanism_profile` (module docstring), so that a uniform arm calibrated by
    :func:`dphypo.simulation.equal_epsilon.arm_sigma` reads the ε it was calibrated for.

    Args:
        landscape: The arm's landscape (its metadata gives the per-run mechanism, :func:`landscape_mechanism`).
        setting: The row (its run count).
        C: Upper bound of the arm (1 for uniform search).
        c: Lower bound of the arm.
        delta: δ ∈ (0, 1).
        adaptive_theorem: The accounting, named explicitly (:attr:`StudyConfig.adaptive_theorem`).
        split_rule: A per-record split (:attr:`StudyConfig.split_rule`: Theorem S), or ``None``: the sum.

    Returns:
        ``(epsilon, note)``: ε, or ``None`` with the reason there is no claim.
    """
    if setting.run_count is None:
        return None, FIXED_T_NOTE
    mechanism = landscape_mechanism(landscape)
    if mechanism is None:
        return None, "landscape metadata has no DP-SGD mechanism with a score release (e.g. synthetic)"
    check_adaptive_theorem(adaptive_theorem)
    mechanism = dataclasses.replace(mechanism, split_rule=split_rule)
    return _search_epsilon(mechanism, RepeatAndSelect(setting.run_count, C, c), delta, adaptive_theorem), ""


# ------------------------------------------------------------------------------------------------ running
@dataclass(frozen=True)
class CellLandscape:
    """The landscape one cell runs on, with what the cell reports about it.

    Attributes:
        landscape: The landscape.
        key: Its name in :attr:`StudyResult.best_values`.
        sigma: Its noise multiplier σ (the metadata's; equal-ε: the calibrated σ), or ``None`` (synthetic).
        sigma_tolerance: Equal-ε: the calibration's tolerance on σ; ``None`` otherwise.
    """

    landscape: Landscape
    key: str
    sigma: float | None
    sigma_tolerance: float | None = None


def _metadata_sigma(landscape: Landscape) -> float | None:
    sigma = landscape.metadata.get("sigma")
    return float(sigma) if isinstance(sigma, int | float) and not isinstance(sigma, bool) else None


def arm_landscapes(config: StudyConfig) -> dict[tuple[str, str], CellLandscape]:
    """Every cell's landscape, by (setting label, arm label): each arm's landscape spec, resolved once.

    Args:
        config: A study that is not equal-ε (:attr:`StudyConfig.epsilon` is ``None``).

    Returns:
        The landscapes.
    """
    if config.epsilon is not None:
        raise ValueError("an equal-ε study runs each cell at its calibrated σ: take its landscapes from "
                         "dphypo.simulation.equal_epsilon.cell_landscapes(config)")
    out: dict[tuple[str, str], CellLandscape] = {}
    single: dict[str, CellLandscape] = {}
    for arm in config.arms:
        assert isinstance(arm.landscape, str)  # StudyConfig refuses families outside equal-ε studies
        if arm.landscape not in single:
            land = resolve_landscape(arm.landscape)
            single[arm.landscape] = CellLandscape(land, arm.landscape, _metadata_sigma(land))
        for setting in config.settings:
            out[(setting.label, arm.label)] = single[arm.landscape]
    return out


def run_study(
    config: StudyConfig,
    *,
    progress: Callable[[Cell], None] | None = None,
    executor: Executor | str | None = None,
    landscapes: Mapping[tuple[str, str], CellLandscape] | None = None,
    searches_done: Callable[[int], None] | None = None,
) -> StudyResult:
    """Simulate every cell of a study and account its ε.

    Each cell simulates :func:`cell_strategy` (the arm's strategy with the row's bounds, if any), projects onto
    that strategy's own (C, c) and is accounted with exactly those (:func:`cell_bounds`). Uniform arms do not
    depend on (C, c); a uniform cell whose landscape and T setting an earlier row already simulated reuses that
    result (identical streams, identical values).

    Args:
        config: The study.
        progress: Called with every finished cell.
        executor: Where the searches run (:func:`dphypo.search.execution.make_executor` name or object; e.g.
            ``"ray"`` spreads them over a Ray cluster). Default: one local process pool of ``config.workers`` for
            the whole study. Results do not depend on it.
        landscapes: Every cell's landscape by (setting label, arm label); default :func:`arm_landscapes`. An
            equal-ε study needs :func:`dphypo.simulation.equal_epsilon.cell_landscapes` (or run it with
            :func:`dphypo.simulation.equal_epsilon.run_equal_epsilon_study`), which calibrates every cell first.
        searches_done: Called with the number of simulated searches finished since the last call; they add up
            to :func:`study_searches` (a progress bar's total).

    Returns:
        The result.
    """
    cells = arm_landscapes(config) if landscapes is None else dict(landscapes)
    missing = [(s.label, a.label) for s in config.settings for a in config.arms if (s.label, a.label) not in cells]
    if missing:
        raise ValueError(f"landscapes lacks the cells {missing}")
    with executor_scope(executor, workers=config.workers) as pool:
        return _run_study(config, progress, pool, cells, searches_done)


def _cell_repeats(config: StudyConfig, setting: Setting, arm: ArmSpec) -> int:
    """Simulated searches of one cell (the setting's override for adaptive arms, else the study's)."""
    override = setting.adaptive_repeats if arm.adaptive else None
    return config.repeats if override is None else override


def study_searches(config: StudyConfig) -> int:
    """Simulated searches a study runs in all (cells reusing an earlier result count as done at once)."""
    return sum(_cell_repeats(config, setting, arm) for setting in config.settings for arm in config.arms)


def _run_study(
    config: StudyConfig, progress: Callable[[Cell], None] | None, executor: Executor,
    landscapes: dict[tuple[str, str], CellLandscape], searches_done: Callable[[int], None] | None = None,
) -> StudyResult:
    start = time.perf_counter()
    done: dict[tuple[str, str, int | None, str, float, float, int], ArmResult] = {}
    cells: list[Cell] = []
    for setting in config.settings:
        for arm in config.arms:
            strategy = cell_strategy(setting, arm)  # its own (C, c): projected onto, accounted and reported
            C, c = density_bounds(strategy)
            repeats = _cell_repeats(config, setting, arm)
            cell_land = landscapes[(setting.label, arm.label)]
            land = cell_land.landscape
            key = (arm.label, cell_land.key, setting.T, repr(setting.run_count), C, c, repeats)
            tick = time.perf_counter()
            result = done.get(key)
            if result is None and repeats > 0:
                result = simulate(land, [strategy], repeats=repeats, T=setting.T,
                                  run_count=setting.run_count, C=C, c=c, seed=config.seed,
                                  workers=config.workers, engine=config.engine,
                                  batch=config.batch, executor=executor, progress=searches_done)[0]
                done[key] = result
            elif searches_done is not None:  # reused (or 0 repeats): done at once
                searches_done(repeats)
            seconds = time.perf_counter() - tick
            epsilon, note = arm_epsilon(land, setting, C, c, config.delta, adaptive_theorem=config.adaptive_theorem,
                                        split_rule=config.split_rule)
            if config.epsilon is not None and (epsilon is None or epsilon > config.epsilon):
                # arm_calibration verified ε ≤ target under this very accounting; anything else is a bug
                raise RuntimeError(f"arm {arm.label!r} in setting {setting.label!r} was calibrated for total "
                                   f"epsilon={config.epsilon:g} but is accounted at {epsilon!r}")
            if repeats == 0:
                note = "not simulated (0 repeats)" + (f"; {note}" if note else "")
            paired = _paired(result, cells, setting, arm)
            cell = Cell(setting, arm, C, c, result, epsilon, note, seconds, paired, sigma=cell_land.sigma,
                        sigma_tolerance=cell_land.sigma_tolerance, epsilon_target=config.epsilon)
            cells.append(cell)
            if progress is not None:
                progress(cell)
    best = {x.key: x.landscape.best_value for x in landscapes.values()}
    return StudyResult(config, tuple(cells), best, time.perf_counter() - start)


def _paired(
    result: ArmResult | None, cells: list[Cell], setting: Setting, arm: ArmSpec
) -> tuple[float, tuple[float, float]] | None:
    """Paired (adaptive − first uniform arm of the row) difference over their common repeats, or ``None``.

    Repeat r has the same random streams whatever the number of repeats, so the first min(n_a, n_b) repeats of
    two cells are paired even when one cell ran fewer repeats.
    """
    baseline = next((x for x in cells if x.setting is setting and not x.arm.adaptive), None)
    if not arm.adaptive or result is None or baseline is None or baseline.result is None:
        return None
    n = min(result.repeats, baseline.result.repeats)
    return mean_ci95(result.values[:n] - baseline.result.values[:n])
