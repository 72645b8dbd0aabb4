from __future__ import annotations

import json

from dphypo.cli import run


def test_plot_landscape_and_epsilon(tmp_path, capsys) -> None:
    png, svg = tmp_path / "land.png", tmp_path / "eps.svg"
    assert run(["plot", "landscape", "--landscape", "synthetic:ridge", "--out", str(png)]) == 0
    assert run(["plot", "epsilon", "--sigma", "1", "--sample-rate", "0.01", "--steps", "500", "--gamma", "0.05",
                "--bounds", "1:1", "--bounds", "2:0.75", "--out", str(svg)]) == 0
    assert png.stat().st_size > 10_000 and svg.read_text().lstrip().startswith("<?xml")


def test_plot_accuracy_from_simulate_json(tmp_path, capsys) -> None:
    files = []
    for T in (2, 4):
        assert run(f"simulate --landscape synthetic:smooth --strategy uniform --fixed-T {T} --repeats 5 --workers 1 "
                   "--json".split()) == 0
        path = tmp_path / f"T{T}.json"
        path.write_text(capsys.readouterr().out)
        files += ["--from", str(path)]
    out = tmp_path / "acc.png"
    assert run(["plot", "accuracy", *files, "--out", str(out)]) == 0
    assert out.stat().st_size > 10_000
    assert json.loads((tmp_path / "T2.json").read_text())["results"][0]["T"] == 2


def test_plot_errors_are_one_line(tmp_path, capsys) -> None:
    assert run(["plot", "density", "--out", str(tmp_path / "x.png")]) == 2
    assert "needs --landscape" in capsys.readouterr().err
    assert run(["plot", "epsilon", "--sigma", "1", "--sample-rate", "0.01", "--steps", "5", "--bounds", "2-1",
                "--out", str(tmp_path / "x.png")]) == 2
    assert "C:c" in capsys.readouterr().err


def test_plot_an_n_d_landscape_as_a_slice_and_as_marginals(tmp_path, capsys) -> None:
    import numpy as np

    from dphypo.simulation.landscapes import Landscape

    axes = {"lr": [1e-3, 1e-2, 1e-1], "clip": [0.5, 1.0], "batch": [32, 64, 128], "epochs": [5, 10]}
    mean = np.random.default_rng(0).uniform(0.2, 0.9, size=(3, 2, 3, 2))
    path = tmp_path / "four.npz"
    Landscape.from_axes(mean, mean / 10, axes, {"lr": "log", "clip": "linear", "batch": "log", "epochs": "linear"}
                        ).save(path)
    assert run(["plot", "landscape", "--landscape", str(path), "--axes", "batch,epochs",
                "--out", str(tmp_path / "slice.png")]) == 0
    assert run(["plot", "marginals", "--landscape", str(path), "--out", str(tmp_path / "marginals.svg")]) == 0
    assert (tmp_path / "slice.png").stat().st_size > 10_000 and (tmp_path / "marginals.svg").stat().st_size > 10_000
    capsys.readouterr()
    assert run(["plot", "landscape", "--landscape", str(path), "--axes", "batch,size",
                "--out", str(tmp_path / "bad.png")]) == 2
    err = capsys.readouterr().err
    assert "must name distinct axes among" in err and err.count("\n") == 1
