"""Resolve a dotted dphypo name (module, class, function or attribute) the way a reader of the docs would."""

from __future__ import annotations

import importlib


def resolve(dotted: str) -> object:
    """Import the longest importable module prefix of ``dotted`` and walk the remaining attributes.

    Raises:
        ImportError: No prefix of ``dotted`` is a module.
        AttributeError: A remaining part is not an attribute.
    """
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:end]))
        except ModuleNotFoundError:
            continue
        for attr in parts[end:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(f"cannot import any prefix of {dotted!r}")
