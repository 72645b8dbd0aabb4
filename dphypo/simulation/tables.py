"""Studies (:mod:`dphypo.simulation.studies`) rendered as Table-1/Table-2 style grids: rows, CSV, Markdown."""

from __future__ import annotations

import math
from typing import Any

from dphypo.simulation.studies import FIXED_T_NOTE, ArmSpec, Cell, StudyResult, derives_lower_bound, finite_or_none

__all__ = [
    "format_difference",
    "format_epsilon",
    "format_mean_ci",
    "format_sigma",
    "table_csv",
    "table_markdown",
    "table_rows",
]

def table_rows(result: StudyResult) -> list[dict[str, Any]]:
    """The Table-1/Table-2 style grid: one dict per setting with per-arm mean, 95 % CI, repeats and ε.

    Keys: ``setting``, ``runs``, then for every arm label ``a``: ``a_mean``, ``a_ci_low``, ``a_ci_high``,
    ``a_repeats``, ``a_epsilon``, ``a_C``, ``a_c`` (an equal-ε study also ``a_sigma``, the arm's calibrated σ)
    and, for adaptive arms, the paired difference to the uniform arm ``a_minus_uniform`` with ``..._ci_low``,
    ``..._ci_high`` (``None`` where not available).
    """
    rows = []
    for setting in result.config.settings:
        row: dict[str, Any] = {"setting": setting.label, "runs": setting.describe_runs()}
        for arm in result.config.arms:
            cell = result.cell(setting.label, arm.label)
            r = cell.result
            a, ci = arm.label, (math.nan, math.nan) if r is None else r.ci95
            row.update({f"{a}_mean": None if r is None else r.mean, f"{a}_ci_low": finite_or_none(ci[0]),
                        f"{a}_ci_high": finite_or_none(ci[1]), f"{a}_repeats": 0 if r is None else r.repeats,
                        f"{a}_epsilon": cell.epsilon, f"{a}_C": cell.C, f"{a}_c": cell.c})
            if result.config.epsilon is not None:
                row[f"{a}_sigma"] = cell.sigma
            if arm.adaptive:
                d = cell.difference or (None, (math.nan, math.nan))
                row.update({f"{a}_minus_uniform": d[0], f"{a}_minus_uniform_ci_low": finite_or_none(d[1][0]),
                            f"{a}_minus_uniform_ci_high": finite_or_none(d[1][1])})
        rows.append(row)
    return rows


def table_csv(result: StudyResult) -> str:
    """:func:`table_rows` as CSV (numbers in full precision, empty fields for ``None``)."""
    import csv
    import io

    rows = table_rows(result)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        # repr: a float written in full precision reads back to the same float
        writer.writerow({k: "" if v is None else repr(v) if isinstance(v, float) else v
                         for k, v in row.items()})
    return out.getvalue()


def _interval(mean: float, ci: tuple[float, float], spec: str) -> str:
    if not all(math.isfinite(x) for x in ci):  # a single repeat has no interval
        return f"{mean:{spec}}"
    return f"{mean:{spec}} [{ci[0]:{spec}}, {ci[1]:{spec}}]"


def format_mean_ci(cell: Cell) -> str:
    """``"0.9312 [0.9290, 0.9334]"``, or ``"not run"`` for a cell with 0 repeats."""
    return "not run" if cell.result is None else _interval(cell.result.mean, cell.result.ci95, ".4f")


def format_epsilon(cell: Cell) -> str:
    """ε with 3 decimals, or ``"-"`` when there is no claim (fixed T, no plan in the metadata)."""
    return "-" if cell.epsilon is None else f"{cell.epsilon:.3f}"


def format_sigma(cell: Cell) -> str:
    """The σ of the cell's landscape with 4 decimals, or ``"-"`` when it states none (synthetic)."""
    return "-" if cell.sigma is None else f"{cell.sigma:.4f}"


def table_markdown(result: StudyResult) -> str:
    """The grid as a Markdown table with a header line naming the arms, repeats and notes."""
    config = result.config
    arms = config.arms
    header = ["setting", "runs"]
    equal = config.epsilon is not None
    for a in arms:
        header += [f"{a.label} σ"] if equal else []
        header += [f"{a.label} mean [95% CI]", f"{a.label} ε"]
        header += [f"{a.label} − uniform (paired)"] if a.adaptive else []
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for setting in config.settings:
        cells = [result.cell(setting.label, a.label) for a in arms]
        values = [setting.label, setting.describe_runs()]
        for cell in cells:
            values += [format_sigma(cell)] if equal else []
            values += [_with_repeats(cell, config.repeats), format_epsilon(cell)]
            values += [format_difference(cell)] if cell.arm.adaptive else []
        lines.append("| " + " | ".join(values) + " |")
    notes = [f"- `{a.label}`: {a.strategy.name} on `{a.landscape_name}` ({_bounds_note(a)})" for a in arms]
    notes.append(f"- {config.repeats} repeats per cell unless marked (n = …); seed {config.seed}; "
                 f"δ = {config.delta:g}; ε by dphypo.privacy.account (per-run plan from the landscape "
                 "metadata; RDP, and for uniform arms also the privacy-profile bounds); paired differences over "
                 "the common repeats (same random streams)")
    if equal:
        notes.append(f"- equal ε: every cell runs on its family's landscape at the σ at which its search costs "
                     f"total ε = {config.epsilon:g} (dphypo.simulation.equal_epsilon.arm_sigma; isotonic in σ, "
                     "interpolated in log σ between members)")
    if any(s.T is not None for s in config.settings):
        notes.append(f"- ε '-': {FIXED_T_NOTE}")
    return "\n".join([*lines, "", *notes]) + "\n"


def format_difference(cell: Cell) -> str:
    """``"+0.0123 [+0.0100, +0.0146]"``, or ``"-"`` when there is no paired uniform arm."""
    return "-" if cell.difference is None else _interval(*cell.difference, "+.4f")


def _with_repeats(cell: Cell, default: int) -> str:
    text = format_mean_ci(cell)
    if cell.result is not None and cell.result.repeats != default:
        text += f" (n = {cell.result.repeats})"
    return text


def _bounds_note(arm: ArmSpec) -> str:
    """Which (C, c) the arm's cells use (:func:`dphypo.simulation.studies.cell_strategy`)."""
    if not arm.adaptive:
        return "C = c = 1"
    if derives_lower_bound(arm.strategy):
        return "C of the row, or its own; c derived from C"
    return "C, c of the row, or its own"
