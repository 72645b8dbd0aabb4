"""benchmarks/two_stage.py: its arms are the ones its docstring names, calibrated to the same ε, and cached."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_two_stage", ROOT / "benchmarks" / "two_stage.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_the_two_stage_grid_has_35_distinct_designs(bench) -> None:
    labels = [design.label() for design in bench.designs()]
    assert len(labels) == 35 and len(set(labels)) == 35


def test_the_mnist_family_joins_the_shipped_member_and_its_probes_are_cheaper(bench) -> None:
    family = bench.load("mnist")
    assert 1.3716 in family.sigmas and len(family.sigmas) >= 5
    probes = bench.load("mnist", 2)
    assert probes.mechanism_metadata["epochs"] == 2 and family.mechanism_metadata["epochs"] == 10


def test_uniform_arms_meet_epsilon_with_sigma_rising_in_runs_and_cache_their_values(bench) -> None:
    family = bench.load("mnist")
    arms = bench.single_stage_arms(family, 8.0, ((1.0, 1.0),))
    assert [arm.runs for arm in arms.values()] == [10.0, 20.0, 50.0, 100.0, 200.0]
    sigmas = [float(name.split("sigma ")[1].rstrip(")")) for name in arms]
    assert sigmas == sorted(sigmas) and family.sigma_range[0] <= sigmas[0]
    arm = next(iter(arms.values()))
    first = arm.values(20, 1)
    assert arm.values(20, 1) is first and first.shape == (20,)
    assert not np.array_equal(arm.values(20, 2), first)  # another stream, other searches


def test_any_family_and_its_probe_families_are_read_from_landscape_options(bench) -> None:
    members = str(ROOT / "landscapes" / "digits_mlp_sigma*.npz")
    probes = [str(ROOT / "landscapes" / "multifidelity" / f"digits_mlp_epochs{e}_sigma*.npz") for e in (1, 2)]

    def families(*argv: str):
        return bench.families(bench.build_parser().parse_args(list(argv)))

    family, probe_families = families("--landscape", members, "--probe-landscape", *probes)
    assert family.mechanism_metadata["epochs"] == 10 and len(family.sigmas) == len(bench.expand([members]))
    # full-fidelity probes on the family itself, and one probe family per fidelity given, grouped by epochs
    assert sorted(probe_families) == [1, 2, 10] and probe_families[10] is family
    assert all(probe_families[e].mechanism_metadata["epochs"] == e for e in (1, 2))
    assert list(families("--landscape", members, "--probe-landscape", probes[1], "--probe-epochs", "2")[1]) == [2]
    with pytest.raises(ValueError, match=r"--probe-epochs \[5\] have no --probe-landscape members"):
        families("--landscape", members, "--probe-landscape", probes[1], "--probe-epochs", "5")
    with pytest.raises(ValueError, match="--probe-landscape needs --landscape"):
        families("--probe-landscape", probes[1])
    with pytest.raises(FileNotFoundError, match="no landscape file matches"):
        families("--landscape", str(ROOT / "landscapes" / "nothing*.npz"))
    shipped, fidelities = families("--family", "mnist")  # the shipped families as before
    assert shipped.sigmas == bench.load("mnist").sigmas and list(fidelities) == [10]
