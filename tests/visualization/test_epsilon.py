"""The ε breakdown figure (dphypo/visualization/_epsilon.py)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from dphypo.privacy import PrivacyReport, RepeatAndSelect, account, gaussian_rdp, geometric, pure_dp_rdp
from dphypo.visualization import epsilon_breakdown_info, plot_epsilon_breakdown
from tests.visualization._helpers import _check_saved


def _reports() -> list[tuple[str, PrivacyReport]]:
    base = gaussian_rdp(3.0)
    bounds = [(1.0, 1.0), (1.25, 0.8), (1.5, 2 / 3), (2.0, 0.5)]
    return [(f"C={C:g}", account(base, RepeatAndSelect(geometric(0.1), C, c), 1e-5)) for C, c in bounds]


def test_epsilon_info_matches_reports() -> None:
    reports = _reports()
    info = epsilon_breakdown_info(reports)
    assert info.labels == ("C=1", "C=1.25", "C=1.5", "C=2")
    assert info.total.tolist() == [r.epsilon for _, r in reports]
    assert info.base.tolist() == [r.base_epsilon for _, r in reports]
    assert info.base + info.repetition + info.adaptivity == pytest.approx(info.total)
    assert info.adaptivity[0] == 0.0 and np.all(np.diff(info.adaptivity) > 0)  # grows with C/c
    assert np.ptp(info.base) == 0 and np.ptp(info.repetition) == pytest.approx(0.0, abs=1e-12)
    assert info.delta == 1e-5 and info.run_counts[0] == "geometric, E[T] = 10"


def test_epsilon_info_rejects_bad_input() -> None:
    reports = _reports()
    with pytest.raises(ValueError, match="at least one"):
        epsilon_breakdown_info([])
    with pytest.raises(TypeError, match="pairs"):
        epsilon_breakdown_info([reports[0][1]])  # type: ignore[list-item]
    other = account(pure_dp_rdp(1.0), RepeatAndSelect(geometric(0.1)), 1e-6)
    with pytest.raises(ValueError, match="share one delta"):
        epsilon_breakdown_info([*reports, ("other", other)])
    label, report = reports[1]
    with pytest.raises(ValueError, match="base \\+ repetition \\+ adaptivity"):
        epsilon_breakdown_info([(label, dataclasses.replace(report, epsilon=report.epsilon + 0.1))])
    with pytest.raises(ValueError, match="finite"):
        epsilon_breakdown_info([(label, dataclasses.replace(report, base_epsilon=math.inf))])


def test_plot_epsilon_breakdown_stacks_to_the_totals(tmp_path) -> None:
    reports = _reports()
    fig = plot_epsilon_breakdown(reports)
    ax = fig.axes[0]
    tops: dict[float, float] = {}
    for bar in ax.patches:
        x = round(bar.get_x() + bar.get_width() / 2, 6)
        tops[x] = max(tops.get(x, 0.0), bar.get_y() + bar.get_height())
    assert [tops[k] for k in sorted(tops)] == pytest.approx([r.epsilon for _, r in reports])
    _check_saved(fig, tmp_path, "epsilon")

