"""The ``dphypo`` command line.

Every command prints a readable table, or exactly one JSON object with ``--json``. Invalid input exits with
status 2 and a one-line ``error: ...`` message naming the parameter (no traceback).
"""

from __future__ import annotations

import sys

import typer

from dphypo import _cli_journal, _cli_plot, _cli_privacy, _cli_search, _cli_simulate  # noqa: F401  (registers the commands)
from dphypo._cli_common import app
from dphypo.storage import JournalError

__all__ = ["app", "main", "run"]


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit status; user errors become one ``error:`` line on stderr (status 2)."""
    try:
        status = app(args=argv, prog_name="dphypo", standalone_mode=False)
    except (ValueError, TypeError, JournalError) as exc:
        typer.echo(f"error: {' '.join(str(exc).split())}", err=True)
        return 2
    except typer.Exit as exc:
        return int(exc.exit_code or 0)
    except typer.Abort:
        typer.echo("error: aborted", err=True)
        return 130
    except Exception as exc:
        # Usage errors from click (vendored by recent typer): they carry their own one-line message.
        if hasattr(exc, "format_message"):
            typer.echo(f"error: {' '.join(exc.format_message().split())}", err=True)
            return int(getattr(exc, "exit_code", 2) or 2)
        raise
    return status if isinstance(status, int) else 0


def main() -> None:
    """Console-script entry point."""
    sys.exit(run())


if __name__ == "__main__":
    main()
