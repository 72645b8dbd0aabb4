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


#: A test the docs cite, e.g. `tests/search/test_tuner.py::test_every_sampling_density_is_projected`; a bare
#: `::name` in the same line refers to the last file named before it.
CITED = re.compile(r"(tests/[A-Za-z0-9_./]+\.py)?::([A-Za-z_][A-Za-z0-9_]*)")


def _cited_tests() -> list[tuple[str, str, str]]:
    cited = set()
    for doc in DOCS:
        for line in doc.read_text().splitlines():
            current = None
            for path, name in CITED.findall(line):
                current = path or current
                if current is not None:
                    cited.add((doc.relative_to(ROOT).as_posix(), current, name))
    return sorted(cited)


def test_the_docs_cite_tests() -> None:
    assert len(_cited_tests()) > 10


@pytest.mark.parametrize(("doc", "path", "name"), _cited_tests())
def test_a_test_the_docs_cite_exists(doc: str, path: str, name: str) -> None:
    source = ROOT / path
    assert source.is_file(), f"{doc} cites {path}, which does not exist"
    assert re.search(rf"^(?:async )?def {name}\(", source.read_text(), flags=re.M), (
        f"{doc} cites {path}::{name}, which is not a test of that file"
    )
