from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from matplotlib.figure import Figure

from dphypo.cli import run
from dphypo.density import project
from dphypo.privacy import (
    PrivacyReport,
    SearchSpec,
    account,
    dpsgd_rdp,
    gaussian_rdp,
    geometric,
    pure_dp_rdp,
)
from dphypo.privacy.profiles import dpsgd_profile_or_skip
from dphypo.search.tuner import SearchHistory, Trial
from dphypo.simulation.landscapes import Landscape
from dphypo.simulation.simulate import ArmResult, mean_ci95
from dphypo.space import Choice, Grid, SearchSpace
from dphypo.strategies import Uniform
from dphypo.visualization import (
    accuracy_vs_T_info,
    density_snapshots_info,
    epsilon_breakdown_info,
    epsilon_breakdown_reports,
    landscape_info,
    plot_accuracy_vs_T,
    plot_accuracy_vs_T_json,
    plot_accuracy_vs_T_simulated,
    plot_density_run,
    plot_density_snapshots,
    plot_epsilon_breakdown,
    plot_epsilon_breakdown_bounds,
    plot_landscape,
    plot_landscape_file,
    save_figure,
)
from dphypo.visualization._common import GridAxis, tick_label

# A rendered figure much smaller than this is empty or failed to draw.
MIN_BYTES = {"png": 10_000, "svg": 10_000}


def _landscape(direction: str = "maximize") -> Landscape:
    rng = np.random.default_rng(0)
    return Landscape.from_axes(
        rng.uniform(0.1, 0.9, size=(4, 3)),
        rng.uniform(0.01, 0.05, size=(4, 3)),
        {"lr": [1e-4, 1e-3, 1e-2, 1e-1], "clip": [0.5, 1.0, 1.5]},
        {"lr": "log", "clip": "linear"},
        direction=direction,
        metadata={"dataset": "digits", "model": "mlp", "sigma": 1.5},
    )


def _check_saved(fig: Figure, tmp_path, name: str) -> None:
    for fmt in ("png", "svg"):
        path = save_figure(fig, tmp_path / f"{name}.{fmt}")
        data = path.read_bytes()
        assert len(data) > MIN_BYTES[fmt], (name, fmt, len(data))
        assert data.startswith(b"\x89PNG") if fmt == "png" else b"<svg" in data[:1000]


# --- common -------------------------------------------------------------------------------------------------
def test_log_axis_edges_are_geometric_midpoints() -> None:
    axis = GridAxis("lr", np.array([1e-4, 1e-3, 1e-2]), "log")
    assert axis.edges == pytest.approx([10**-4.5, 10**-3.5, 10**-2.5, 10**-1.5])
    linear = GridAxis("clip", np.array([0.3, 0.6, 1.2]), "linear")
    assert linear.edges == pytest.approx([0.15, 0.45, 0.9, 1.5])


def test_tick_labels_are_compact() -> None:
    assert [tick_label(x) for x in (1e-4, 1e-3, 0.01, 1.0, 10.0, 2e-5, 1e4)] == [
        "1e-4", "0.001", "0.01", "1", "10", "2×1e-5", "1e4"]


def test_save_figure_checks_suffix_and_is_reproducible(tmp_path) -> None:
    fig = plot_landscape(_landscape())
    with pytest.raises(ValueError, match=r"\.png or \.svg"):
        save_figure(fig, tmp_path / "fig.pdf")
    with pytest.raises(TypeError, match="Figure"):
        save_figure("not a figure", tmp_path / "fig.png")  # type: ignore[arg-type]
    for fmt in ("png", "svg"):
        a = save_figure(plot_landscape(_landscape()), tmp_path / f"a.{fmt}").read_bytes()
        b = save_figure(plot_landscape(_landscape()), tmp_path / "sub" / f"b.{fmt}").read_bytes()
        assert a == b  # no timestamp in the file


# --- landscape ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_landscape_info_orientation_and_best_point(direction: str) -> None:
    land = _landscape(direction)
    info = landscape_info(land)
    assert (info.x.name, info.y.name, info.x.scale, info.y.scale) == ("lr", "clip", "log", "linear")
    assert info.mean.shape == info.std.shape == (3, 4)
    for i in range(4):
        for j in range(3):
            assert info.mean[j, i] == land.mean[i, j] and info.std[j, i] == land.std[i, j]
    pick = np.argmax if direction == "maximize" else np.argmin
    i, j = np.unravel_index(pick(land.mean), land.shape)
    assert info.best == (land.axis_values[0][i], land.axis_values[1][j])
    assert info.best_value == land.mean[i, j]
    assert all(s in info.title for s in ("digits", "mlp", "σ = 1.5"))


def test_landscape_needs_two_axes() -> None:
    axes = {"a": [1, 2], "b": [1, 2], "d": [1, 2]}
    land = Landscape.from_axes(np.zeros((2, 2, 2)), np.zeros((2, 2, 2)), axes, dict.fromkeys(axes, "linear"))
    with pytest.raises(ValueError, match="2-D grid"):
        landscape_info(land)


def test_plot_landscape_draws_both_panels_with_colorbars(tmp_path) -> None:
    fig = plot_landscape(_landscape())
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert len(panels) == 2 and len(fig.axes) == 4
    assert all(ax.get_xscale() == "log" and ax.get_yscale() == "linear" for ax in panels)
    mesh = panels[0].collections[0]
    assert np.asarray(mesh.get_array()).reshape(3, 4) == pytest.approx(landscape_info(_landscape()).mean)
    _check_saved(fig, tmp_path, "landscape")


# --- accuracy vs T ------------------------------------------------------------------------------------------
def _arm(strategy: str, T: int, seed: int, repeats: int = 20) -> ArmResult:
    values = np.random.default_rng(seed).normal(0.9, 0.02, size=repeats)
    mean, ci = mean_ci95(values)
    return ArmResult(strategy, T, None, mean, ci, repeats, values)


def test_accuracy_info_groups_sorts_and_keeps_intervals() -> None:
    arms = [_arm("gp-ucb", 20, 0), _arm("uniform", 10, 1), _arm("gp-ucb", 5, 2), _arm("uniform", 5, 3),
            _arm("gp-ucb", 10, 4)]
    info = accuracy_vs_T_info(arms, best_value=0.95)
    assert [c.label for c in info.curves] == ["gp-ucb", "uniform"]
    gp, uniform = info.curves
    assert gp.T.tolist() == [5, 10, 20] and uniform.T.tolist() == [5, 10]
    by_T = {a.T: a for a in arms if a.strategy == "gp-ucb"}
    assert gp.mean.tolist() == [by_T[t].mean for t in (5, 10, 20)]
    assert gp.lower.tolist() == [by_T[t].ci95[0] for t in (5, 10, 20)]
    assert gp.upper.tolist() == [by_T[t].ci95[1] for t in (5, 10, 20)]
    assert np.all(gp.lower < gp.mean) and np.all(gp.mean < gp.upper)
    assert info.best_value == 0.95 and info.log_T is False  # 20 / 5 < 8
    assert accuracy_vs_T_info([_arm("u", 5, 0), _arm("u", 40, 1)]).log_T is True


def test_accuracy_info_relabels_and_rejects_bad_input() -> None:
    arms = [_arm("gp-ucb", 5, 0), _arm("gp-ucb", 5, 1)]
    info = accuracy_vs_T_info(arms, labels=["C=1.5", "C=2"])
    assert [c.label for c in info.curves] == ["C=1.5", "C=2"]
    with pytest.raises(ValueError, match="one arm per"):
        accuracy_vs_T_info(arms)
    with pytest.raises(ValueError, match="at least one"):
        accuracy_vs_T_info([])
    with pytest.raises(ValueError, match="fixed T"):
        accuracy_vs_T_info([dataclasses.replace(arms[0], T=None, run_count="geometric")])
    with pytest.raises(ValueError, match="one label per result"):
        accuracy_vs_T_info(arms, labels=["x"])
    with pytest.raises(ValueError, match="contain the mean"):
        accuracy_vs_T_info([dataclasses.replace(arms[0], ci95=(0.0, 0.1))])


def test_plot_accuracy_draws_each_curve_and_the_reference(tmp_path) -> None:
    arms = [_arm("uniform", t, t) for t in (5, 10, 20, 40)] + [_arm("gp-ucb", t, 100 + t, 4) for t in (5, 10)]
    fig = plot_accuracy_vs_T(arms, best_value=0.95)
    ax = fig.axes[0]
    curves = accuracy_vs_T_info(arms).curves
    lines = [line for line in ax.get_lines() if len(line.get_xdata()) > 0 and line.get_linestyle() == "-"]
    for line, curve in zip(lines, curves, strict=True):
        assert np.asarray(line.get_xdata()).tolist() == curve.T.tolist()
        assert np.asarray(line.get_ydata()) == pytest.approx(curve.mean)
    assert any(line.get_linestyle() == "--" and line.get_ydata()[0] == 0.95 for line in ax.get_lines())
    assert ax.get_xscale() == "log"
    _check_saved(fig, tmp_path, "accuracy")


# --- densities ----------------------------------------------------------------------------------------------
def _space(prior: np.ndarray | None = None) -> SearchSpace:
    return SearchSpace({"lr": Grid((1e-3, 1e-2, 1e-1), scale="log"), "clip": Grid((0.5, 1.0, 2.0, 4.0))},
                       prior=prior)


def _history(space: SearchSpace, runs: int, runs_per_update: int = 1, C: float = 2.0, c: float = 0.5,
             seed: int = 0) -> SearchHistory:
    """Projected random densities (as the tuner records them) and runs drawn from them."""
    rng = np.random.default_rng(seed)
    densities, trials = [], []
    for k in range(math.ceil(runs / runs_per_update)):
        density = project(rng.dirichlet(np.full(space.size, 0.3)), space.prior, C, c)
        densities.append(density)
        for _ in range(min(runs_per_update, runs - k * runs_per_update)):
            index = int(rng.choice(space.size, p=density))
            trials.append(Trial(len(trials), index, space.params(index), float(rng.random()), False, 0.0))
    return SearchHistory(runs, tuple(trials), 0, tuple(densities), (), seed)


@pytest.mark.parametrize("uniform_prior", [True, False])
def test_density_info_ratio_runs_and_scale(uniform_prior: bool) -> None:
    prior = None if uniform_prior else np.random.default_rng(1).uniform(1.0, 3.0, size=12)
    space = _space(prior)
    history = _history(space, runs=9, runs_per_update=2)
    info = density_snapshots_info(history, space, steps=[3, 0], C=2.0, c=0.5, runs_per_update=2)
    assert [s.step for s in info.snapshots] == [3, 0]
    assert (info.vmin, info.vmax, info.bounds_given) == (0.5, 2.0, True)
    for snap in info.snapshots:
        density = history.densities[snap.step]
        assert snap.ratio.shape == (4, 3)
        for i in range(3):
            for j in range(4):
                assert snap.ratio[j, i] == pytest.approx(density[4 * i + j] / space.prior[4 * i + j])
        assert np.all((snap.ratio >= 0.5 - 1e-9) & (snap.ratio <= 2.0 + 1e-9))
        drawn = [t.grid_index for t in history.trials]
        assert snap.observed.tolist() == drawn[: 2 * snap.step]
        assert snap.drawn.tolist() == drawn[2 * snap.step : 2 * snap.step + 2]


def test_density_info_defaults_and_errors() -> None:
    space = _space()
    history = _history(space, runs=20)
    info = density_snapshots_info(history, space)
    assert [s.step for s in info.snapshots] == [0, 6, 13, 19]
    ratios = np.stack([s.ratio for s in info.snapshots])
    assert (info.vmin, info.vmax) == (min(1.0, ratios.min()), max(1.0, ratios.max()))
    assert info.bounds_given is False
    empty = dataclasses.replace(history, densities=())
    with pytest.raises(ValueError, match="record_densities=True"):
        density_snapshots_info(empty, space)
    with pytest.raises(ValueError, match=r"outside S_\(C,c\)"):
        density_snapshots_info(history, space, C=1.2, c=0.9)
    with pytest.raises(ValueError, match="both C and c"):
        density_snapshots_info(history, space, C=2.0)
    with pytest.raises(ValueError, match="runs_per_update=2 does not match"):
        density_snapshots_info(history, space, runs_per_update=2)
    with pytest.raises(ValueError, match=r"steps must be integers in \[0, 20\)"):
        density_snapshots_info(history, space, steps=[20])
    with pytest.raises(ValueError, match="search's space"):
        density_snapshots_info(history, SearchSpace({"a": Grid((1.0, 2.0)), "b": Grid((1.0, 2.0))}))


def test_plot_density_snapshots_panels_and_files(tmp_path) -> None:
    space = _space()
    history = _history(space, runs=6)
    fig = plot_density_snapshots(history, space, steps=[0, 2, 5], C=2.0, c=0.5)
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.get_label() != "<colorbar>"]
    assert len(panels) == 3
    colorbar = next(ax for ax in fig.axes if ax.get_label() == "<colorbar>")
    assert colorbar.get_ylim() == pytest.approx((0.5, 2.0))  # the colour scale is [c, C]
    _check_saved(fig, tmp_path, "density")


def test_plot_density_run_with_a_real_gp_search(tmp_path) -> None:
    path = plot_density_run("synthetic:smooth", tmp_path / "run.png", runs=4, C=2.0, c=0.75, seed=0)
    assert path.stat().st_size > MIN_BYTES["png"]
    # A uniform search (C = c = 1): every ratio is 1, the degenerate colour scale still renders.
    path = plot_density_run("synthetic:smooth", tmp_path / "uniform.svg", strategy=Uniform(), runs=3,
                            C=1.0, c=1.0)
    assert path.stat().st_size > MIN_BYTES["svg"]


# --- ε breakdown --------------------------------------------------------------------------------------------
def _reports() -> list[tuple[str, PrivacyReport]]:
    base = gaussian_rdp(3.0)
    bounds = [(1.0, 1.0), (1.25, 0.8), (1.5, 2 / 3), (2.0, 0.5)]
    return [(f"C={C:g}", account(base, SearchSpec(geometric(0.1), C, c), 1e-5)) for C, c in bounds]


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
    other = account(pure_dp_rdp(1.0), SearchSpec(geometric(0.1)), 1e-6)
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


def test_epsilon_plot_shows_what_account_reports_and_names_the_method(capsys) -> None:
    # Issue #12 item 7: the uniform bar used RDP only (2.99) where `dphypo account` reported the profile bound
    # (2.395). Now every bar is the report of `account` with the run's profile, labelled with its method.
    sigma, q, steps = 1.0, 0.01, 500
    args = ["--sigma", "1", "--sample-rate", "0.01", "--steps", "500", "--runs", "geometric", "--gamma", "0.05"]
    assert run(["account", *args, "--C", "1", "--c", "1", "--delta", "1e-5", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    base, profile = dpsgd_rdp(sigma, q, steps), dpsgd_profile_or_skip(sigma, q, steps)
    reports = epsilon_breakdown_reports(base, geometric(0.05), [(1, 1), (2, 0.75)], 1e-5, profile=profile)
    uniform = reports[0][1]
    assert uniform.epsilon == pytest.approx(cli["epsilon"], rel=1e-12)
    assert uniform.method == cli["method"] and uniform.methods == pytest.approx(cli["methods"], rel=1e-12)
    assert {"rdp", "rdp-theorem-b", "profile-tnb"} <= set(uniform.methods)  # every valid bound, the least used
    assert uniform.epsilon == min(uniform.methods.values())
    # One convention for "one run" in every bar: min(RDP, profile) of the run.
    assert reports[1][1].base_epsilon == uniform.base_epsilon == pytest.approx(cli["base_epsilon"], rel=1e-12)
    info = epsilon_breakdown_info(reports)
    assert info.methods == tuple(r.method for _, r in reports)
    texts = [t.get_text() for t in plot_epsilon_breakdown(reports).axes[0].texts]
    for (_, report), text in zip(reports, texts, strict=True):
        assert text == f"{report.epsilon:.3g}\n{report.method}"


# --- subcommand bodies --------------------------------------------------------------------------------------
def test_command_functions_write_figures(tmp_path, capsys) -> None:
    assert plot_landscape_file("synthetic:ridge", tmp_path / "l.svg").stat().st_size > MIN_BYTES["svg"]
    out = plot_epsilon_breakdown_bounds(gaussian_rdp(3.0), geometric(0.1), [(1, 1), (2, 0.75)], 1e-5,
                                        tmp_path / "e.png")
    assert out.stat().st_size > MIN_BYTES["png"]
    out = plot_accuracy_vs_T_simulated("synthetic:smooth", tmp_path / "a.png", [Uniform()], [2, 8], repeats=5,
                                       workers=1)
    assert out.stat().st_size > MIN_BYTES["png"]
    paths = []
    for T in (2, 4):
        assert run(f"simulate --landscape synthetic:smooth --strategy uniform --fixed-T {T} --repeats 5 "
                   "--workers 1 --json".split()) == 0
        paths.append(tmp_path / f"sim{T}.json")
        paths[-1].write_text(capsys.readouterr().out)
    assert plot_accuracy_vs_T_json(paths, tmp_path / "j.png").stat().st_size > MIN_BYTES["png"]
    paths[0].write_text(json.dumps({"results": "nope"}))
    with pytest.raises(ValueError, match="simulate --json"):
        plot_accuracy_vs_T_json(paths, tmp_path / "k.png")


def test_simulation_files_are_labelled_by_bounds_and_deduplicated(tmp_path) -> None:
    from dphypo.visualization._commands import _simulation_arms

    def payload(C: float, T: int, gp_mean: float) -> dict:
        arms = [ArmResult("uniform", T, None, 0.8, (0.7, 0.9), 10, np.zeros(10)),
                ArmResult("gp-ucb", T, None, gp_mean, (gp_mean - 0.1, gp_mean + 0.1), 10, np.zeros(10))]
        return {"best_value": 0.95, "C": C, "c": 0.75, "results": [a.to_dict() for a in arms]}

    paths = []
    for k, (C, T, m) in enumerate([(2.0, 5, 0.85), (1.5, 5, 0.83), (2.0, 10, 0.9)]):
        paths.append(tmp_path / f"{k}.json")
        paths[-1].write_text(json.dumps(payload(C, T, m)))
    arms, labels, best = _simulation_arms(paths)
    assert best == 0.95
    # The uniform arm at T=5 is the same in both files: drawn once.
    assert labels == ["uniform", "gp-ucb (C=2, c=0.75)", "gp-ucb (C=1.5, c=0.75)", "uniform",
                      "gp-ucb (C=2, c=0.75)"]
    assert [(a.T, a.mean) for a in arms] == [(5, 0.8), (5, 0.85), (5, 0.83), (10, 0.8), (10, 0.9)]
    info = accuracy_vs_T_info(arms, 0.95, labels)
    assert [(c.label, c.T.tolist()) for c in info.curves] == [
        ("uniform", [5, 10]), ("gp-ucb (C=2, c=0.75)", [5, 10]), ("gp-ucb (C=1.5, c=0.75)", [5])]
    (tmp_path / "other.json").write_text(json.dumps({**payload(2.0, 20, 0.9), "best_value": 0.5}))
    with pytest.raises(ValueError, match="one landscape"):
        _simulation_arms([*paths, tmp_path / "other.json"])


def test_density_plot_with_a_categorical_axis(tmp_path) -> None:
    space = SearchSpace({"optimizer": Choice(("sgd", "adam", "rmsprop")),
                         "lr": Grid((1e-3, 1e-2), scale="log")})
    history = _history(space, runs=3)
    info = density_snapshots_info(history, space, C=2.0, c=0.5)
    assert info.x.positions.tolist() == [0.0, 1.0, 2.0] and info.snapshots[0].ratio.shape == (2, 3)
    fig = plot_density_snapshots(history, space, C=2.0, c=0.5)
    fig.canvas.draw()
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels == ["sgd", "adam", "rmsprop"]
    _check_saved(fig, tmp_path, "categorical")
