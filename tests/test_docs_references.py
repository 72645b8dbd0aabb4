"""Every ``dphypo.…`` name the docs mention in backticks exists (a refactor cannot leave a stale reference)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests._names import resolve

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", ROOT / "landscapes" / "README.md", *(ROOT / "docs").rglob("*.md")])
#: A dotted dphypo name inside backticks, e.g. `dphypo.search.loop.projected_density` (trailing "()" allowed).
NAME = re.compile(r"`(dphypo(?:\.[A-Za-z_][A-Za-z0-9_]*)+)(?:\(\))?`")


def _references() -> list[tuple[str, str]]:
    return sorted({(doc.relative_to(ROOT).as_posix(), m) for doc in DOCS for m in NAME.findall(doc.read_text())})


def test_the_docs_mention_dphypo_names() -> None:
    assert len(_references()) > 20


@pytest.mark.parametrize(("doc", "name"), _references())
def test_a_name_the_docs_mention_exists(doc: str, name: str) -> None:
    try:
        resolve(name)
    except (ImportError, AttributeError) as exc:
        pytest.fail(f"{doc} mentions `{name}`, which does not exist ({exc})")


#: A repository path the docs point to, e.g. `dphypo/strategies/surrogate.py` or tests/search/test_faults.py.
PATH = re.compile(r"\b((?:dphypo|tests|benchmarks|notebooks)/[A-Za-z0-9_./]+\.(?:py|ipynb))\b")


def _paths() -> list[tuple[str, str]]:
    return sorted({(doc.relative_to(ROOT).as_posix(), m) for doc in DOCS for m in PATH.findall(doc.read_text())})


@pytest.mark.parametrize(("doc", "path"), _paths())
def test_a_file_the_docs_point_to_exists(doc: str, path: str) -> None:
    assert (ROOT / path).is_file(), f"{doc} points to {path}, which does not exist"
