"""One base for every exception dphypo raises on purpose (``dphypo.exceptions``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import dphypo
import dphypo.exceptions as exceptions
from dphypo.exceptions import DphypoError

PACKAGE = Path(dphypo.__file__).parent


def _exception_classes() -> dict[str, str]:
    """Public classes defined under dphypo/ that derive from an exception: ``{name: file}``.

    A class counts when one of its bases is named ``Exception``, ``...Error`` or is itself such a class (found by
    walking the sources to a fixed point), so a subclass of a dphypo exception is found too.
    """
    classes: list[tuple[str, list[str], str]] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                bases = [b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in node.bases]
                classes.append((node.name, bases, str(path.relative_to(PACKAGE.parent))))
    found: dict[str, str] = {}
    changed = True
    while changed:
        changed = False
        for name, bases, where in classes:
            if name not in found and any(b == "Exception" or b.endswith("Error") or b in found for b in bases):
                found[name] = where
                changed = True
    return {name: where for name, where in found.items() if not name.startswith("_")}


@pytest.mark.parametrize("name", exceptions.__all__)
def test_every_listed_exception_is_a_dphypo_error(name: str) -> None:
    cls = getattr(exceptions, name)
    assert isinstance(cls, type) and issubclass(cls, DphypoError)


def test_every_exception_class_defined_in_dphypo_is_listed() -> None:
    defined = _exception_classes()
    assert {"DphypoError", "JournalError", "WorkerLost", "CalibrationError"} <= set(defined)  # the walk works
    missing = {name: where for name, where in defined.items() if name not in exceptions.__all__}
    assert not missing, f"exception classes not listed in dphypo.exceptions.__all__: {missing}"


def test_the_old_builtin_bases_still_catch_them() -> None:
    assert issubclass(exceptions.CalibrationError, ValueError)
    assert issubclass(exceptions.JournalMismatch, ValueError)
    assert issubclass(exceptions.JournalError, RuntimeError)
    assert issubclass(exceptions.LostAttemptsExceeded, RuntimeError)
    assert issubclass(exceptions.DataNotFoundError, FileNotFoundError)
    assert issubclass(exceptions.BudgetExceeded, RuntimeError)


def test_the_cli_reports_any_dphypo_error_in_one_line(monkeypatch, capsys) -> None:
    import importlib

    cli_main = importlib.import_module("dphypo.cli.main")  # the package re-exports a function named main

    def fail(**kwargs: object) -> None:
        raise exceptions.BudgetExceeded("the run spent more privacy than planned:\n  at order 2")

    monkeypatch.setattr(cli_main, "app", fail)
    assert cli_main.run(["tune"]) == 2
    assert capsys.readouterr().err == "error: the run spent more privacy than planned: at order 2\n"
