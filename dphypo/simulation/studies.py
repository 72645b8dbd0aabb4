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
``SearchSpec(run_count, C, c)`` with the per-run RDP curve of the DP-SGD plan the landscape was built with
(:func:`landscape_plan`: σ, batch size, epochs and the score release from the landscape's metadata, split
sizes from :func:`dphypo.train.load_dataset`). Only the RDP bound is used, because the shipped landscapes were
calibrated with it (a white-box pair has equal RDP ε); the profile bound of a uniform search
(:meth:`dphypo.train.DPSGDPlan.profile`, which ``dphypo tune`` also uses) would make uniform arms cheaper
still. Uniform arms are always simulated and accounted with
C = c = 1 (a uniform search is the non-adaptive special case; its density is the prior whatever C, c are).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from dphypo.privacy import RunCountDistribution, SearchSpec, TruncatedNegativeBinomial, account
from dphypo.search.execution import Executor, executor_scope
from dphypo.simulation.landscapes import Landscape
from dphypo.simulation.simulate import ENGINES, ArmResult, Engine, mean_ci95, simulate
from dphypo.simulation.synthetic import resolve_landscape
from dphypo.strategies import Strategy, Uniform
from dphypo.train.plan import DPSGDPlan

__all__ = [
    "FIXED_T_NOTE", "TABLE1_GAMMAS", "TABLE2_UPPER_BOUNDS", "ArmSpec", "Cell", "Setting", "StudyConfig",
    "StudyResult", "arm_epsilon", "finite_or_none", "fixed_T_settings", "landscape_plan", "parse_T_values",
    "run_count_settings", "run_study",
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

    Args:
        label: Row label (e.g. ``"T=5"``, ``"γ=0.01"``, ``"C=1.25, c=0.8"``).
        T: Fixed number of runs (research mode), or ``None`` when
        run_count: T is drawn per search from this distribution (as a private search does).
        C: Upper density-ratio bound of the adaptive arms (≥ 1).
        c: Lower density-ratio bound of the adaptive arms (in (0, 1]).
        adaptive_repeats: Repeats of the adaptive arms in this row if not the study's (0: not simulated, e.g.
            too costly; stated in every output), or ``None``.
    """

    label: str
    T: int | None = None
    run_count: RunCountDistribution | None = None
    C: float = 2.0
    c: float = 0.75
    adaptive_repeats: int | None = None

    def __post_init__(self) -> None:
        if (self.T is None) == (self.run_count is None):
            raise ValueError(f"setting {self.label!r}: give exactly one of T or run_count")
        if self.T is not None and not (isinstance(self.T, int) and self.T >= 1):
            raise ValueError(f"T must be a positive integer, got {self.T!r}")
        # The adaptive arms' search must have a privacy theorem (it raises for e.g. adaptive Poisson T).
        if self.run_count is not None:
            SearchSpec(self.run_count, self.C, self.c)
        if self.adaptive_repeats is not None and not (
            isinstance(self.adaptive_repeats, int) and self.adaptive_repeats >= 0
        ):
            raise ValueError(
                f"adaptive_repeats must be an integer >= 0 or None, got {self.adaptive_repeats!r}"
            )

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
        landscape: A landscape ``.npz`` path or ``synthetic:<name>``.
    """

    label: str
    strategy: Strategy
    landscape: str

    @property
    def adaptive(self) -> bool:
        """Whether the arm adapts its density (anything but uniform search)."""
        return not isinstance(self.strategy, Uniform)


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

    def __post_init__(self) -> None:
        if not self.settings or not self.arms:
            raise ValueError("settings and arms must both be non-empty")
        for name, objects in (("settings", self.settings), ("arms", self.arms)):
            labels = [x.label for x in objects]
            if len(set(labels)) != len(labels):
                raise ValueError(f"{name} labels must be distinct, got {labels}")
        if not (isinstance(self.repeats, int) and self.repeats >= 1):
            raise ValueError(f"repeats must be a positive integer, got {self.repeats!r}")
        if not (0.0 < self.delta < 1.0):
            raise ValueError(f"delta must be in (0, 1), got {self.delta!r}")
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, got {self.engine!r}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready configuration."""
        return {
            "name": self.name, "repeats": self.repeats, "seed": self.seed, "delta": self.delta,
            "engine": self.engine, "batch": self.batch, "workers": self.workers,
            "arms": [{"label": a.label, "strategy": a.strategy.name, "landscape": a.landscape,
                      "config": _strategy_config(a.strategy)} for a in self.arms],
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
        C: Upper bound the arm was simulated and accounted with (1 for uniform search).
        c: Lower bound (1 for uniform search).
        result: The simulation, or ``None`` when the row asked for 0 repeats of this arm (not simulated).
        epsilon: Total ε of the search at the study's δ, or ``None`` when there is no claim.
        epsilon_note: Why ``epsilon`` is ``None`` (empty otherwise).
        seconds: Wall time of the simulation (0 when reused or not simulated).
        difference: For an adaptive arm, the paired difference to the study's first uniform arm in the same
            row over their common repeats (same random streams, so the same T per repeat):
            ``(mean, (low, high))`` with a 95 % Student-t interval; ``None`` otherwise.
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

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (also readable by ``dphypo plot accuracy --from``)."""
        r = self.result
        return {
            "setting": self.setting.label, "arm": self.arm.label, "strategy": self.arm.strategy.name,
            "landscape": self.arm.landscape, "C": self.C, "c": self.c, "T": self.setting.T,
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
        best_values: The best mean of every landscape used, by landscape spec.
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
            "best_values": self.best_values, "best_value": best.pop() if len(best) == 1 else None,
            "seconds": self.seconds, "results": [c.to_dict() for c in self.cells],
        }


def _strategy_config(strategy: Strategy) -> dict[str, Any]:
    fields = ("tau", "beta", "scale")
    return {name: getattr(strategy, name) for name in fields if hasattr(strategy, name)}


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
            values = list(range(low, high + 1))
        else:
            values = [int(part) for part in text.split(",")]
    except ValueError as exc:
        raise ValueError(f"fixed T must be N, LOW..HIGH or a comma list of integers, got {text!r}") from exc
    if not values or min(values) < 1 or sorted(set(values)) != values:
        raise ValueError(f"fixed T values must be strictly increasing integers >= 1, got {text!r}")
    return tuple(values)


def fixed_T_settings(Ts: Iterable[int], C: float, c: float) -> tuple[Setting, ...]:
    """Rows T = t for every t (DP-HyPO Figure 1 view; no privacy claim)."""
    return tuple(Setting(f"T={T}", T=int(T), C=C, c=c) for T in Ts)


def run_count_settings(
    run_counts: Sequence[RunCountDistribution],
    bounds: Sequence[tuple[float, float]],
    adaptive_repeats: dict[float, int] | None = None,
) -> tuple[Setting, ...]:
    """Rows for every (run count, bounds) pair: Table 1 (several γ, one bound) or Table 2 (one γ, several C).

    Args:
        run_counts: Distributions of T.
        bounds: ``(C, c)`` pairs of the adaptive arms.
        adaptive_repeats: Repeats of the adaptive arms in rows whose γ, E[T] or C equals a key (0 skips them).

    Returns:
        The settings, run counts outer.
    """
    overrides = adaptive_repeats or {}
    rows = []
    for rc in run_counts:
        for C, c in bounds:
            parts = []
            if len(run_counts) > 1:
                parts.append(f"γ={rc.gamma:g}" if isinstance(rc, TruncatedNegativeBinomial) else rc.name)
            if len(bounds) > 1:
                parts.append(f"C={C:g}, c={c:.4g}")
            label = ", ".join(parts) or (f"E[T]={rc.mean:.4g}")
            keys = {rc.mean, C, getattr(rc, "gamma", math.nan)}
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


def landscape_plan(landscape: Landscape) -> DPSGDPlan | None:
    """The per-run DP-SGD plan a landscape was built with, or ``None`` if its metadata does not say.

    Reconstructs what :func:`dphypo.simulation.builder.build_landscape` trained: σ, batch size and epochs from the
    metadata, n_train / n_val from :func:`~dphypo.train.load_dataset` with the metadata's ``data_seed``, and
    the score release the landscape's ``std`` includes (``score_noise`` in accuracy units × n_val examples, a
    Gaussian on the count of correct validation predictions). A landscape without a score release
    (score_noise 0) has no plan: its scores would not be private (privacy rule 4).

    Args:
        landscape: The landscape.

    Returns:
        The plan, or ``None`` (synthetic landscapes, missing keys, no score noise).
    """
    meta = landscape.metadata
    if any(key not in meta for key in _PLAN_KEYS) or not float(meta["score_noise"]) > 0.0:
        return None
    n_train, n_val = _split_sizes(str(meta["dataset"]), int(meta.get("data_seed", 0)))
    return DPSGDPlan(sigma=float(meta["sigma"]), batch_size=int(meta["batch_size"]),
                     epochs=int(meta["epochs"]), n_train=n_train, n_val=n_val,
                     score_noise=float(meta["score_noise"]) * n_val)


def arm_epsilon(
    landscape: Landscape, setting: Setting, C: float, c: float, delta: float
) -> tuple[float | None, str]:
    """Total ε of the search one cell simulates, by :func:`dphypo.privacy.account` (RDP bound).

    Args:
        landscape: The arm's landscape (its metadata gives the per-run plan, :func:`landscape_plan`).
        setting: The row (its run count).
        C: Upper bound of the arm (1 for uniform search).
        c: Lower bound of the arm.
        delta: δ ∈ (0, 1).

    Returns:
        ``(epsilon, note)``: ε, or ``None`` with the reason there is no claim.
    """
    if setting.run_count is None:
        return None, FIXED_T_NOTE
    plan = landscape_plan(landscape)
    if plan is None:
        return None, "landscape metadata has no DP-SGD plan with a score release (e.g. synthetic)"
    return float(account(plan.rdp(), SearchSpec(setting.run_count, C, c), delta).epsilon), ""


# ------------------------------------------------------------------------------------------------ running
def run_study(config: StudyConfig, *, progress: Callable[[Cell], None] | None = None,
              executor: Executor | str | None = None) -> StudyResult:
    """Simulate every cell of a study and account its ε.

    Uniform arms do not depend on (C, c); a uniform cell whose landscape and T setting an earlier row already
    simulated reuses that result (identical streams, identical values).

    Args:
        config: The study.
        progress: Called with every finished cell.
        executor: Where the searches run (:func:`dphypo.search.execution.make_executor` name or object; e.g.
            ``"ray"`` spreads them over a Ray cluster). Default: one local process pool of ``config.workers`` for
            the whole study. Results do not depend on it.

    Returns:
        The result.
    """
    with executor_scope(executor, workers=config.workers) as pool:
        return _run_study(config, progress, pool)


def _run_study(config: StudyConfig, progress: Callable[[Cell], None] | None, executor: Executor) -> StudyResult:
    start = time.perf_counter()
    landscapes = {a.landscape: resolve_landscape(a.landscape) for a in config.arms}
    done: dict[tuple[str, int | None, str, float, float, int], ArmResult] = {}
    cells: list[Cell] = []
    for setting in config.settings:
        for arm in config.arms:
            C, c = (setting.C, setting.c) if arm.adaptive else (1.0, 1.0)
            override = setting.adaptive_repeats if arm.adaptive else None
            repeats = config.repeats if override is None else override
            land = landscapes[arm.landscape]
            key = (arm.label, setting.T, repr(setting.run_count), C, c, repeats)
            tick = time.perf_counter()
            result = done.get(key)
            if result is None and repeats > 0:
                result = simulate(land, [arm.strategy], repeats=repeats, T=setting.T,
                                  run_count=setting.run_count, C=C, c=c, seed=config.seed,
                                  workers=config.workers, engine=config.engine,
                                  batch=config.batch, executor=executor)[0]
                done[key] = result
            seconds = time.perf_counter() - tick
            epsilon, note = arm_epsilon(land, setting, C, c, config.delta)
            if repeats == 0:
                note = "not simulated (0 repeats)" + (f"; {note}" if note else "")
            paired = _paired(result, cells, setting, arm)
            cell = Cell(setting, arm, C, c, result, epsilon, note, seconds, paired)
            cells.append(cell)
            if progress is not None:
                progress(cell)
    best = {spec: land.best_value for spec, land in landscapes.items()}
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
