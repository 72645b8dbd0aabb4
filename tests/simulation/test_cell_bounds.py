"""The one rule for a study cell's density bounds (studies.cell_strategy / cell_bounds), issue #15 item 3.

A cell simulates a strategy object whose own (C, c) are the bounds it projects onto and is accounted with: uniform
(1, 1); GP-UCB the row's (C, c) or its own; GPTopSet the row's C with its c re-derived from C and its top mass.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from dphypo.density import lower_bound_for_top_mass
from dphypo.privacy import RepeatAndSelect, account, geometric, make_run_count
from dphypo.simulation.equal_epsilon import arm_calibration, cell_landscapes
from dphypo.simulation.family import load_family
from dphypo.simulation.landscapes import load_landscape
from dphypo.simulation.simulate import simulate
from dphypo.simulation.studies import (
    ArmSpec,
    Setting,
    StudyConfig,
    cell_bounds,
    cell_strategy,
    derives_lower_bound,
    landscape_mechanism,
    run_count_settings,
    run_study,
)
from dphypo.strategies import GPUCB, GPTopSet, Uniform

LANDSCAPES = Path(__file__).resolve().parents[2] / "landscapes"
DIGITS_UNIFORM = str(LANDSCAPES / "digits_mlp_sigma1.2226.npz")
FAMILY = tuple(str(LANDSCAPES / f"digits_mlp_sigma{s}.npz") for s in ("1.45", "1.7673", "2.1"))
SMOOTH = "synthetic:smooth"
#: c of GPTopSet(C=2, top_mass=0.05): (1 − 2·0.05)/(1 − 0.05) = 0.947…
TOP_C = (1 - 2 * 0.05) / (1 - 0.05)


class _PlainStrategy:
    """A Strategy that is not a dataclass: it has its bounds but cannot be given a row's."""

    C, c, name = 1.5, 0.9, "plain"

    def start(self, space, direction, seed):  # pragma: no cover - never simulated here
        raise AssertionError("not simulated")


def _arms(landscape: str | tuple[str, ...] = SMOOTH) -> dict[str, ArmSpec]:
    return {
        "uniform": ArmSpec("uniform", Uniform(), landscape),
        "gp": ArmSpec("gp", GPUCB(C=1.5, c=0.8), landscape),
        "top": ArmSpec("top", GPTopSet(C=2.0, top_mass=0.05, tolerance=0.3), landscape),
    }


def test_derived_c_is_recognised_from_the_dataclass_fields() -> None:
    assert derives_lower_bound(GPTopSet())
    assert not derives_lower_bound(GPUCB()) and not derives_lower_bound(Uniform())
    assert not derives_lower_bound(_PlainStrategy())  # type: ignore[arg-type]


def test_rows_without_bounds_use_each_arm_strategys_own() -> None:
    row = Setting("own", run_count=geometric(0.1))
    assert (row.C, row.c) == (None, None)  # the default: nothing overrides the arms
    arms = _arms()
    assert cell_bounds(row, arms["uniform"]) == (1.0, 1.0)
    assert cell_bounds(row, arms["gp"]) == (1.5, 0.8)
    assert cell_bounds(row, arms["top"]) == (2.0, GPTopSet(C=2.0, top_mass=0.05).c) == (2.0, pytest.approx(TOP_C))
    assert cell_strategy(row, arms["top"]) is arms["top"].strategy  # nothing to change: the arm's own object
    plain = ArmSpec("plain", _PlainStrategy(), SMOOTH)  # type: ignore[arg-type]
    assert cell_bounds(row, plain) == (1.5, 0.9)


def test_row_bounds_go_to_the_strategy_and_top_set_rederives_c() -> None:
    row = Setting("C=1.5, c=0.6667", run_count=geometric(0.1), C=1.5, c=1 / 1.5)
    arms = _arms()
    assert cell_bounds(row, arms["uniform"]) == (1.0, 1.0)  # uniform never adapts, whatever the row says
    assert cell_bounds(row, arms["gp"]) == (1.5, 1 / 1.5)
    top = cell_strategy(row, arms["top"])
    assert isinstance(top, GPTopSet) and (top.C, top.top_mass, top.tolerance) == (1.5, 0.05, 0.3)
    assert top.c == lower_bound_for_top_mass(1.5, 0.05) != row.c  # the row's c plays no part for top-set
    assert cell_bounds(row, arms["top"]) == (1.5, top.c)
    gp = cell_strategy(row, arms["gp"])
    assert gp == dataclasses.replace(arms["gp"].strategy, C=1.5, c=1 / 1.5)  # tau, beta, scale kept
    # a row may give C alone when it only feeds strategies that derive c
    assert cell_bounds(Setting("C=4", T=3, C=4.0), arms["top"]) == (4.0, lower_bound_for_top_mass(4.0, 0.05))


@pytest.mark.parametrize(
    ("row", "arm", "message"),
    [
        (Setting("C=25", T=3, C=25.0, c=0.04), "top",
         r"arm 'top' \(gp-top-set\) in setting 'C=25': C=25 leaves no valid c: top_mass must be in \(0, 1/C\)"),
        (Setting("C=1", T=3, C=1.0, c=1.0), "top", r"arm 'top' .* leaves no valid c: C must be > 1"),
        (Setting("C=3", T=3, C=3.0), "gp", r"arm 'gp' \(gp-ucb\) in setting 'C=3': the row gives C=3 but no c"),
        (Setting("C=3", T=3, C=3.0, c=0.5), "plain", r"arm 'plain' \(plain\) .* does not take density bounds"),
    ],
)
def test_impossible_cells_are_refused_in_one_line(row: Setting, arm: str, message: str) -> None:
    arms = {**_arms(), "plain": ArmSpec("plain", _PlainStrategy(), SMOOTH)}  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message) as info:
        cell_bounds(row, arms[arm])
    assert "\n" not in str(info.value)
    # ... and by the study itself, before anything is simulated
    with pytest.raises(ValueError, match=message):
        StudyConfig("s", (row,), (arms["uniform"], arms[arm]), repeats=2, workers=1)


def test_setting_bound_checks() -> None:
    with pytest.raises(ValueError, match=r"c=0\.5 needs its C"):
        Setting("c only", T=3, c=0.5)
    with pytest.raises(ValueError, match="C must be >= 1"):
        Setting("small", T=3, C=0.5)
    with pytest.raises(ValueError, match="C must be a finite number or None"):
        Setting("inf", T=3, C=float("inf"))
    # an adaptive arm with Poisson T has no theorem: refused per cell even when the row leaves the bounds to it
    with pytest.raises(ValueError, match=r"arm 'top' in setting 'p' \(C=2, c=0.947368\): .*Poisson"):
        StudyConfig("s", (Setting("p", run_count=make_run_count("poisson", mean=5)),), (_arms()["top"],), repeats=2)
    # top-set-only sweeps label their rows by C alone
    rows = run_count_settings([geometric(0.1)], [(1.25, None), (1.5, None)])
    assert [(s.label, s.C, s.c) for s in rows] == [("C=1.25", 1.25, None), ("C=1.5", 1.5, None)]


def test_top_set_cell_simulates_and_accounts_its_own_bounds() -> None:
    """The reported (C, c) are GPTopSet's, ε is the accountant's for exactly them, the values its simulation."""
    runs = geometric(0.5)
    arms = _arms(DIGITS_UNIFORM)
    config = StudyConfig(
        "top", run_count_settings([runs], [(None, None), (1.5, 1 / 1.5)]), (arms["top"], arms["gp"]), repeats=3,
        seed=2, workers=1,
    )
    result = run_study(config)
    mechanism = landscape_mechanism(load_landscape(DIGITS_UNIFORM))
    assert mechanism is not None
    land = load_landscape(DIGITS_UNIFORM)
    for label, C in (("own bounds", 2.0), ("C=1.5, c=0.6667", 1.5)):
        cell = result.cell(label, "top")
        expected_c = GPTopSet(C=C, top_mass=0.05).c
        assert (cell.C, cell.c) == (C, expected_c)
        expected = account(mechanism.rdp(), RepeatAndSelect(runs, C, expected_c), 1e-5).epsilon
        assert cell.epsilon == pytest.approx(expected, abs=1e-9)
        direct = simulate(land, [GPTopSet(C=C, top_mass=0.05, tolerance=0.3)], repeats=3, run_count=runs,
                          C=C, c=expected_c, seed=2, workers=1)[0]
        np.testing.assert_array_equal(cell.result.values, direct.values)
        assert cell.to_dict()["c"] == expected_c
    assert (result.cell("own bounds", "gp").C, result.cell("own bounds", "gp").c) == (1.5, 0.8)
    arms_json = result.to_dict()["study"]["arms"][0]["config"]
    assert {k: arms_json[k] for k in ("C", "c", "top_mass", "tolerance")} == {"C": 2.0, "c": TOP_C, "top_mass": 0.05,
                                                                            "tolerance": 0.3}


def test_equal_epsilon_calibrates_the_top_set_cell_with_its_derived_c() -> None:
    runs = make_run_count("geometric", mean=20.0)
    arms = _arms(FAMILY)
    # Theorem A named: the σ below are Theorem A's, inside the test family (Theorem B's is below it: 1.3144)
    config = StudyConfig("eq", run_count_settings([runs], [(2.0, 0.75)]), (arms["top"],), repeats=2, workers=1,
                         epsilon=8.0, adaptive_theorem="A")
    cell = cell_landscapes(config)[("E[T]=20", "top")]
    meta = load_family(FAMILY).mechanism_metadata
    calibration = arm_calibration(8.0, 1e-5, runs, 2.0, TOP_C, meta, adaptive_theorem="A")
    assert cell.sigma == calibration.sigma == pytest.approx(1.5678, abs=2e-4)  # not the 1.7128 of c = 0.75
    sharp = arm_calibration(8.0, 1e-5, runs, 2.0, TOP_C, meta)
    assert sharp.report.method == "rdp-theorem-b" and sharp.sigma == pytest.approx(1.3144, abs=2e-4)
