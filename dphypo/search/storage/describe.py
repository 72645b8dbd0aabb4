"""Canonical, JSON-ready descriptions of configuration values: what a journal seals and compares on resume.

A journal seals a search's configuration before any data is touched and refuses a resume whose configuration
differs (privacy rule 2: T is never redrawn for a *changed* search). Comparing ``repr`` strings breaks that
promise in both directions: an object whose repr carries a memory address (``<... object at 0x7f...>``) never
matches itself in a new process, so a journaled search could never resume, and a repr that abridges its values
(``Grid((0.3, 1, 3, ..., 10))``) can hide a change. :func:`describe` therefore builds the description from the
values themselves and refuses what it cannot describe exactly, instead of falling back to ``repr``.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import math
import numbers
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

import numpy as np

__all__ = ["array_digest", "describe"]


def array_digest(*arrays: np.ndarray) -> str:
    """SHA-256 of float64 arrays' bytes, shapes included (a fingerprint of exact values).

    Args:
        *arrays: Arrays of any shape; each is converted to contiguous float64.

    Returns:
        Hex digest.
    """
    digest = hashlib.sha256()
    for array in arrays:
        values = np.ascontiguousarray(array, dtype=np.float64)
        digest.update(repr(values.shape).encode())
        digest.update(values.tobytes())
    return digest.hexdigest()


def describe(value: Any, where: str = "configuration") -> Any:
    """A canonical JSON-ready description of ``value``, equal for equal configurations in any process.

    Rules, in order: JSON scalars as they are (non-finite floats as the strings ``"nan"``, ``"inf"``,
    ``"-inf"``); numpy scalars as Python numbers; arrays as ``{"shape", "sha256"}``; paths as strings; enums by
    value; an object with a ``describe()`` method by what it returns (described again); mappings and sequences
    element by element; dataclasses as ``{"type": qualified name, field: ...}`` over their ``__init__`` fields;
    functions and classes by qualified name; other objects by their type and instance attributes. Anything else
    (an attribute without such a description, a C object) is refused rather than described by its ``repr``.

    Args:
        value: The configuration value.
        where: Its dotted path, named in the error.

    Returns:
        A value ``json.dumps`` accepts, with no memory addresses.

    Raises:
        TypeError: ``value`` (or a part of it) has no exact description; the message names its path.
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        return number if math.isfinite(number) else str(number)
    if isinstance(value, np.ndarray):
        return {"shape": list(value.shape), "sha256": array_digest(value)}
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, enum.Enum):
        return describe(value.value, where)
    own = getattr(value, "describe", None)
    if callable(own) and not isinstance(value, type):
        return describe(own(), where)
    if isinstance(value, Mapping):
        return {str(key): describe(item, f"{where}.{key}") for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [describe(item, f"{where}[{k}]") for k, item in enumerate(value)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: describe(getattr(value, f.name), f"{where}.{f.name}")
                  for f in dataclasses.fields(value) if f.init}
        return {"type": qualified_name(type(value)), **fields}
    if callable(value) and hasattr(value, "__qualname__"):
        return qualified_name(value)
    if hasattr(value, "__dict__") and not isinstance(value, type):  # a plain object: its type and attributes
        attributes = {key: describe(item, f"{where}.{key}") for key, item in sorted(vars(value).items())}
        return {"type": qualified_name(type(value)), **attributes}
    raise TypeError(
        f"{where} ({type(value).__name__}) has no exact description to seal in a journal; give it a describe() "
        "method returning JSON-ready values, or make it a dataclass"
    )


def qualified_name(target: Any) -> str:
    """``module.QualifiedName`` of a function or class (stable across processes, unlike its repr)."""
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', type(target).__qualname__)}"
