"""``dphypo tune --out``: the release folder, written all at once and never over another search's release.

The released model (``released_model.pt`` and its ``released_model.json``) and ``release.json`` (its ε) are first
written to a temporary sibling folder (:func:`staging_folder`), then moved into place in one step
(:func:`publish`): a kill at any moment leaves either no release or a complete one, never a model without its ε.
Before a search starts, :func:`check_out_is_free` refuses an ``--out`` that holds the release of another search and
accepts one that holds this very search's (a journaled search run again: same journal, same release).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import shutil
from pathlib import Path
from typing import Any

import typer

__all__ = ["MODEL_FILE", "RELEASE_FILE", "RELEASE_FILES", "check_out_is_free", "publish", "staging_folder"]

#: The released model's weights, its metadata sidecar, and the release (what ``--out`` holds).
MODEL_FILE, MODEL_SIDECAR, RELEASE_FILE = "released_model.pt", "released_model.json", "release.json"
RELEASE_FILES = frozenset({MODEL_FILE, MODEL_SIDECAR, RELEASE_FILE})
_RENAME_EXCHANGE = 2  # renameat2(2) flag: swap two paths atomically (Linux ≥ 3.15)
_AT_FDCWD = -100


def staging_folder(out: Path) -> Path:
    """A new, empty temporary folder beside ``out`` (same file system, so it can be renamed into place).

    A leftover of an interrupted save to the same ``out`` is removed first: it was never published.
    """
    staging = out.parent / f".{out.name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    return staging


def publish(staging: Path, out: Path) -> None:
    """Move the release written in ``staging`` into ``out`` in one step.

    ``out`` missing or empty: ``staging`` is renamed to it (atomic). ``out`` holding only release files (the same
    search's release, :func:`check_out_is_free`): the two folders are swapped atomically (``renameat2`` with
    ``RENAME_EXCHANGE``; where the system lacks it, by two renames, the old release kept beside ``out`` until the
    second one) and the old one removed. ``out`` holding other files too (a folder the user shares with other
    work): each file is renamed into it, ``release.json`` last, so the model is never there without its ε from a
    release that was not there before.
    """
    if out.is_dir() and not any(out.iterdir()):
        out.rmdir()
    if not out.exists():
        os.replace(staging, out)
        return
    if {entry.name for entry in out.iterdir()} <= RELEASE_FILES:
        if not _exchange(staging, out):
            old = out.parent / f".{out.name}.replaced"
            shutil.rmtree(old, ignore_errors=True)
            os.replace(out, old)
            os.replace(staging, out)
            staging = old
        shutil.rmtree(staging)
        return
    for name in (MODEL_FILE, MODEL_SIDECAR, RELEASE_FILE):  # release.json last: it is what makes the release
        if (staging / name).exists():
            os.replace(staging / name, out / name)
    shutil.rmtree(staging)


def _exchange(first: Path, second: Path) -> bool:
    """Swap two paths atomically (Linux ``renameat2(RENAME_EXCHANGE)``); ``False`` where that is unavailable."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
    return renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE) == 0


def check_out_is_free(out: Path, journal: str | None) -> None:
    """Refuse an ``--out`` holding another search's release (before any data is read); accept this search's own.

    The release in ``out`` is this search's when ``journal`` holds a finished search whose release (hyperparameters,
    noisy score, ε, and the model's SHA-256 once recorded) is the one in ``release.json``: running the same command
    again replays the search and rewrites the same release. A ``released_model.pt`` without ``release.json`` (an
    interrupted save of an older dphypo: a model with no ε) is replaced, with a warning.

    Raises:
        ValueError: ``out`` holds a release of another search (or one this run cannot tell apart without
            ``--journal``), in one line naming ``--out``.
    """
    existing = out / RELEASE_FILE
    if not existing.exists():
        if (out / MODEL_FILE).exists():
            typer.echo(f"warning: --out {str(out)!r} holds {MODEL_FILE} without {RELEASE_FILE} (a save that was "
                       "interrupted: a model with no ε); it will be replaced by this search's release", err=True)
        return
    where = f"--out {str(out)!r} already holds the release"
    if journal is None:
        raise ValueError(f"{where} of a search (release.json); without --journal this run cannot tell whether it is "
                         "the same search: choose another --out, move that release away, or rerun with the --journal "
                         "that made it")
    released = _journal_release(journal)
    if released is None:
        raise ValueError(f"{where} of another search (release.json): the search in --journal {journal!r} has "
                         "released nothing yet; choose another --out or move that release away first")
    if not _same_release(_read_json(existing), released):
        raise ValueError(f"{where} of another search (release.json: not the release in --journal {journal!r}); "
                         "choose another --out or move that release away first")


def _journal_release(journal: str) -> dict[str, Any] | None:
    """The release of the search in ``journal``, or ``None`` (no journal yet, or a search that has not finished)."""
    path = Path(journal)
    if not path.is_file() or path.stat().st_size == 0:
        return None
    from dphypo.search.storage import SQLiteJournal

    with SQLiteJournal.open(path, read_only=True) as opened:
        return opened.release()


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _same_release(written: dict[str, Any], released: dict[str, Any]) -> bool:
    """Whether ``release.json`` (``written``) holds the journal's release: the same run, score, ε and model."""
    release, privacy = written.get("release") or {}, written.get("privacy") or {}
    if not isinstance(release, dict) or not isinstance(privacy, dict):
        return False
    if released.get("model_sha256") and release.get("model_sha256") != released["model_sha256"]:
        return False
    return (release.get("params") == released.get("params") and release.get("score") == released.get("score")
            and privacy.get("epsilon") == released.get("epsilon"))
