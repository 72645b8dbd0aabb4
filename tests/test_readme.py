"""Every command of the README and of the guides in docs/, run as printed and in order, in an empty directory.

The ```bash blocks of README.md and of the guide pages (docs/guide.md, docs/accounting.md, docs/simulation.md) are
the commands a newcomer copies. This test runs each ``dphypo`` command of every such block, page by page, in order,
in a temporary directory per page that holds only a copy of ``landscapes/`` (what a clone ships; a fresh clone's
view), and fails if one exits non-zero. Pages run as separate tests, so the test processes share them out.
Installs (``pip``) and the test command itself are not run (this test is part of it).
As the README says under its set-up commands, sizes are reduced here so the test stays short: ``--epochs 1``,
``--repeats`` at most 5, ``--seeds 1`` and a 2 × 2 grid for ``landscape build``, and ``--workers 1`` for a
``simulate`` or ``landscape build`` that names no ``--workers`` or ``--executor`` (at these sizes a pool of every
core only adds its workers' start-up; the pools are tested in tests/simulation); the commands are otherwise
exactly the README's (same options, same files, same order, so a command that depends on an earlier one's output
— a resumed journal, a release directory already in use — is checked as a newcomer would meet it).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: The pages whose commands run, README first (its first command is the main job).
PAGES = [README, ROOT / "docs" / "guide.md", ROOT / "docs" / "accounting.md", ROOT / "docs" / "simulation.md"]
#: The size reductions the README announces for this test (option → value; repeats are capped, not raised).
REDUCED = {"--epochs": "1", "--seeds": "1"}
MAX_REPEATS = 5
SMALL_GRID = ["--lr-grid", "0.1,1", "--clip-grid", "0.5,1"]


def readme_commands(text: str) -> list[list[str]]:
    """The ``dphypo`` commands of the README's bash blocks, in order (``&&`` chains split, installs dropped)."""
    blocks = re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M)
    commands = []
    for block in blocks:
        for line in block.splitlines():
            for part in line.split("&&"):
                words = shlex.split(part, comments=True)
                if words and words[0].endswith("dphypo"):
                    commands.append(["dphypo", *words[1:]])
    return commands


def reduced(command: list[str]) -> list[str]:
    """``command`` with the announced size reductions (only options the command already takes are changed)."""
    out = list(command)
    for k, word in enumerate(out[:-1]):
        if word in REDUCED:
            out[k + 1] = REDUCED[word]
        if word == "--repeats":
            out[k + 1] = str(min(int(out[k + 1]), MAX_REPEATS))
    subcommand = out[1] if len(out) > 1 else ""
    if subcommand in ("tune", "landscape") and "--epochs" not in out:
        out += ["--epochs", "1"]
    if subcommand == "landscape":
        out += [] if "--seeds" in out else ["--seeds", "1"]
        out += SMALL_GRID
    if subcommand in ("simulate", "landscape") and not {"--workers", "--executor"} & set(out):
        out += ["--workers", "1"]  # in this process: a pool of all cores only adds start-up at these sizes
    return out


def test_the_readme_lists_the_commands_this_test_runs() -> None:
    assert readme_commands(README.read_text())[0] == ["dphypo", "tune"]  # the main job on the default comes first
    commands = [c for page in PAGES for c in readme_commands(page.read_text())]
    names = {command[1] for command in commands}
    assert {"tune", "release", "account", "calibrate", "simulate", "landscape", "plot", "plan"} <= names
    assert not [c for c in commands if any("[" in word or "NAME" in word or "HOST" in word for word in c)]


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_readme_command_runs_as_printed_in_order(page: Path, tmp_path: Path) -> None:
    shutil.copytree(ROOT / "landscapes", tmp_path / "landscapes",
                    ignore=shutil.ignore_patterns("*.partial.jsonl"))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    for command in readme_commands(page.read_text()):
        argv = [sys.executable, "-m", "dphypo", *reduced(command)[1:]]
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"{shlex.join(command)} exited {done.returncode}:\n{done.stderr[-2000:]}"
