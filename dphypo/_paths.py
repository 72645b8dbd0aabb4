"""Writability checks for output paths, run before any data is read or any noise calibrated.

A private search spends its budget when it trains; an output path that turns out to be unusable *after* that
loses the release (a file where a directory is expected, a read-only or virtual file system, an empty name).
These checks create and remove a probe in the nearest existing folder, so they prove that the path can be
written, and leave nothing behind.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

__all__ = ["check_output_dir", "check_output_file"]


def check_output_dir(path: str | os.PathLike[str], option: str) -> Path:
    """Refuse an output folder that cannot be created and written; nothing is left behind.

    Args:
        path: The folder (it may not exist yet; its missing parents are created and removed again).
        option: How the user named it (``"--out"``), for the message.

    Returns:
        The path.

    Raises:
        ValueError: Empty, an existing file, under a file, or not writable; one line naming ``option``.
    """
    folder = _non_empty(path, option)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{option} must be a directory, but {str(folder)!r} is a file")
    missing = _missing_folders(folder, option)
    try:
        for created in missing:
            created.mkdir()
        _probe(folder)
    except OSError as exc:
        raise ValueError(f"{option} {str(folder)!r} cannot be written ({_reason(exc)})") from exc
    finally:
        for created in reversed(missing):
            _remove_quietly(created)
    return folder


def check_output_file(path: str | os.PathLike[str], option: str, *, create_parents: bool = False) -> Path:
    """Refuse an output file that cannot be written (an existing file is kept as it is).

    Args:
        path: The file (it may exist: a journal is resumed, a figure replaced).
        option: How the user named it (``"--journal"``), for the message.
        create_parents: Whether missing folders above it will be created (probed, then removed again); else
            its folder must exist.

    Returns:
        The path.

    Raises:
        ValueError: Empty, a folder, in a missing folder, or not writable; one line naming ``option``.
    """
    file = _non_empty(path, option)
    if file.is_dir():
        raise ValueError(f"{option} must be a file, but {str(file)!r} is a directory")
    parent = file.parent
    if create_parents:
        check_output_dir(parent, option)
    elif not parent.is_dir():
        what = "is a file" if parent.exists() else "does not exist"
        raise ValueError(f"{option} {str(file)!r}: its directory {str(parent)!r} {what}")
    try:
        if file.exists():
            with open(file, "ab"):  # opening to append writes nothing, but fails where writing would
                pass
        elif parent.is_dir():
            _probe(parent)
    except OSError as exc:
        raise ValueError(f"{option} {str(file)!r} cannot be written ({_reason(exc)})") from exc
    return file


def _non_empty(path: str | os.PathLike[str], option: str) -> Path:
    if not os.fspath(path).strip():
        raise ValueError(f"{option} must name a path, got an empty string")
    return Path(path)


def _missing_folders(folder: Path, option: str) -> list[Path]:
    """The folders from the nearest existing ancestor down to ``folder`` that do not exist (top first)."""
    missing: list[Path] = []
    current = folder
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    if current.exists() and not current.is_dir():
        raise ValueError(f"{option} {str(folder)!r} cannot be created: {str(current)!r} is a file")
    return missing[::-1]


def _probe(folder: Path) -> None:
    handle, name = tempfile.mkstemp(prefix=".dphypo-probe-", dir=folder)
    os.close(handle)
    os.unlink(name)


def _remove_quietly(folder: Path) -> None:
    with contextlib.suppress(OSError):
        folder.rmdir()


def _reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__
