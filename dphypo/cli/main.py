"""The ``dphypo`` command line.

Every command prints a readable table, or exactly one JSON object with ``--json``. Invalid input exits with
status 2 and a one-line ``error: ...`` message naming the parameter (no traceback). ``dphypo`` alone prints the
help and exits with status 0.
"""

from __future__ import annotations

import sys

import typer

from dphypo.cli import journal, plan, plot, privacy, search, simulate  # noqa: F401  (registers the commands)
from dphypo.cli.common import app
from dphypo.exceptions import DphypoError

__all__ = ["app", "main", "run"]


def _one_line(text: str) -> str:
    return " ".join(text.split())


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit status; user errors become one ``error:`` line on stderr (status 2)."""
    try:
        status = app(args=argv, prog_name="dphypo", standalone_mode=False)
    except (DphypoError, ValueError, TypeError) as exc:  # every error dphypo raises on purpose, one line each
        typer.echo(f"error: {_one_line(str(exc))}", err=True)
        return 2
    except OSError as exc:  # a file that cannot be read or written, an unreachable cluster: the user's setup
        typer.echo(f"error: {_one_line(str(exc)) or type(exc).__name__}", err=True)
        return 2
    except typer.Exit as exc:
        return int(exc.exit_code or 0)
    except typer.Abort as exc:
        # click turns an EOFError raised anywhere inside a command (e.g. numpy reading an empty file) into Abort,
        # exactly as it does Ctrl-C; only a real interrupt is "aborted".
        if isinstance(exc.__context__, EOFError):
            detail = _one_line(str(exc.__context__)) or "no data left"
            typer.echo(f"error: unexpected end of input ({detail}); is an input file empty or truncated?", err=True)
            return 2
        typer.echo("error: aborted", err=True)
        return 130
    except Exception as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # `dphypo` alone: the help is already printed
            return 0
        # Usage errors from click (vendored by recent typer): they carry their own one-line message.
        if hasattr(exc, "format_message"):
            typer.echo(f"error: {_one_line(exc.format_message())}", err=True)
            return int(getattr(exc, "exit_code", 2) or 2)
        raise
    return status if isinstance(status, int) else 0


def main() -> None:
    """Console-script entry point."""
    sys.exit(run())


if __name__ == "__main__":
    main()
