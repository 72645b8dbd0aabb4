"""Each notebook runs top to bottom offline, at a small size (DPHYPO_NB_SMALL=1)."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def test_notebooks_exist() -> None:
    assert {p.stem for p in NOTEBOOKS} >= {"quickstart", "accounting", "uniform_vs_gp"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path: Path, monkeypatch) -> None:
    monkeypatch.setenv("DPHYPO_NB_SMALL", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(path, as_version=4)
    # A last cell reports the size switch as the kernel saw it: the small run must have reached the notebook.
    nb.cells.append(nbformat.v4.new_code_cell('import os\nprint(os.environ.get("DPHYPO_NB_SMALL"))'))
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    errors = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
    images = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])
              if "image/png" in o.get("data", {})]
    if path.stem != "quickstart":
        assert images, "the notebook's figures did not render"
    probe = [o for o in nb.cells[-1].get("outputs", []) if o.get("output_type") == "stream"]
    assert "".join(o.get("text", "") for o in probe) == "1\n", "the kernel did not run with DPHYPO_NB_SMALL=1"
    code = [(i, cell) for i, cell in enumerate(nb.cells) if cell.cell_type == "code" and cell.source.strip()]
    unexecuted = [i for i, cell in code if cell.execution_count is None]
    assert not unexecuted, f"code cells {unexecuted} did not run"
