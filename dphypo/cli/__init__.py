"""The ``dphypo`` command line (typer + rich): ``main`` is the console entry point, ``run`` its testable core."""

from __future__ import annotations

from dphypo.cli.main import app, main, run

__all__ = ["app", "main", "run"]
