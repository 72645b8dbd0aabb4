"""Figures of landscapes, simulated searches, sampling densities and privacy budgets (matplotlib, Agg).

Each figure has a data-extraction function returning a NamedTuple (``*_info``, validated, no matplotlib) and a
public ``plot_*`` function that renders it to a :class:`matplotlib.figure.Figure` (Optuna's split between
``_get_<plot>_info`` and rendering). Figures are created without pyplot on an Agg canvas; write them with
:func:`save_figure` (PNG or SVG by suffix). The ``plot_*_file``/``*_run``/``*_json``/``*_bounds``
functions are the bodies of the ``dphypo plot ...`` subcommands.

Figures of a :class:`~dphypo.search.tuner.SearchHistory` or of simulations show curator-only data (T, every run's
score): they must not be published alongside a private release.
"""

from __future__ import annotations

from dphypo.visualization._accuracy import (
    AccuracyVsTInfo,
    ArmSummary,
    StrategyCurve,
    accuracy_vs_T_info,
    plot_accuracy_vs_T,
)
from dphypo.visualization._commands import (
    epsilon_breakdown_reports,
    plot_accuracy_vs_T_json,
    plot_accuracy_vs_T_simulated,
    plot_density_run,
    plot_epsilon_breakdown_bounds,
    plot_landscape_file,
    plot_marginals_file,
)
from dphypo.visualization._common import SAVE_FORMATS, GridAxis, save_figure
from dphypo.visualization._density import (
    DensitySnapshot,
    DensitySnapshotsInfo,
    density_snapshots_info,
    plot_density_snapshots,
)
from dphypo.visualization._epsilon import EpsilonBreakdownInfo, epsilon_breakdown_info, plot_epsilon_breakdown
from dphypo.visualization._landscape import (
    LandscapeInfo,
    MarginalInfo,
    landscape_info,
    marginals_info,
    plot_landscape,
    plot_marginals,
)
from dphypo.visualization._pareto import ParetoInfo, pareto_info, plot_pareto, plot_pareto_json

__all__ = [
    "SAVE_FORMATS",
    "AccuracyVsTInfo",
    "ArmSummary",
    "DensitySnapshot",
    "DensitySnapshotsInfo",
    "EpsilonBreakdownInfo",
    "GridAxis",
    "LandscapeInfo",
    "MarginalInfo",
    "ParetoInfo",
    "StrategyCurve",
    "accuracy_vs_T_info",
    "density_snapshots_info",
    "epsilon_breakdown_info",
    "epsilon_breakdown_reports",
    "landscape_info",
    "marginals_info",
    "pareto_info",
    "plot_accuracy_vs_T",
    "plot_accuracy_vs_T_json",
    "plot_accuracy_vs_T_simulated",
    "plot_density_run",
    "plot_density_snapshots",
    "plot_epsilon_breakdown",
    "plot_epsilon_breakdown_bounds",
    "plot_landscape",
    "plot_landscape_file",
    "plot_marginals",
    "plot_marginals_file",
    "plot_pareto",
    "plot_pareto_json",
    "save_figure",
]
