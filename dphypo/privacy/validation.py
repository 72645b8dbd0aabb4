"""Argument checks shared by every layer: one ``check_*`` per kind of value, one wording per kind.

Each check raises ``ValueError(f"{name} must be ..., got {value!r}")`` naming the parameter and echoing the
offending value, eagerly, before anything is computed, sampled or trained. ``name`` is the caller's parameter
name (the CLI passes its option, e.g. ``"--seed"``, or lets :func:`dphypo.cli.common.option_names` rename it).

The module lives in :mod:`dphypo.privacy`, the lowest layer (pure Python here), so that every other layer can import
it. Booleans are refused wherever a number is expected (``True`` is an ``int`` to Python, never a count or a
rate to a user), and numpy scalars are accepted wherever Python numbers are.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, TypeGuard

__all__ = [
    "check_delta",
    "check_int_at_least",
    "check_non_negative",
    "check_non_negative_int",
    "check_positive",
    "check_positive_int",
    "check_probability",
    "check_theta",
    "is_integer",
    "is_real",
]


def is_integer(value: Any) -> TypeGuard[numbers.Integral]:
    """Whether ``value`` is an integer (Python or numpy), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value: Any) -> TypeGuard[numbers.Real]:
    """Whether ``value`` is a real number (Python or numpy, integer or float; NaN and ±inf included), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _as_float(value: Any) -> float:
    """``value`` as a float: NaN for a non-number, inf for an int too large for a float (both pass no check)."""
    if not is_real(value):
        return math.nan
    try:
        return float(value)
    except OverflowError:  # an int of over 308 digits, of either sign: no check accepts an infinite value
        return math.inf


def _require(holds: bool, name: str, value: Any, requirement: str, *, optional: bool = False) -> None:
    """Raise the one message of every check unless ``holds`` (or ``value`` is an allowed ``None``)."""
    if holds or (optional and value is None):
        return
    raise ValueError(f"{name} must be {requirement}{' or None' if optional else ''}, got {value!r}")


def check_positive_int(name: str, value: Any, *, optional: bool = False) -> None:
    """Refuse anything but an integer ≥ 1 (a count: runs, repeats, workers, a batch).

    Args:
        name: The parameter's name, for the message.
        value: The value to check.
        optional: ``None`` is allowed too (the message then says "or None").

    Raises:
        ValueError: ``"{name} must be a positive integer, got {value!r}"``.
    """
    _require(is_integer(value) and int(value) >= 1, name, value, "a positive integer", optional=optional)


def check_non_negative_int(name: str, value: Any, *, optional: bool = False) -> None:
    """Refuse anything but an integer ≥ 0 (a seed, a number of lost attempts).

    Args:
        name: The parameter's name, for the message.
        value: The value to check.
        optional: ``None`` is allowed too (the message then says "or None").

    Raises:
        ValueError: ``"{name} must be a non-negative integer, got {value!r}"``.
    """
    _require(is_integer(value) and int(value) >= 0, name, value, "a non-negative integer", optional=optional)


def check_int_at_least(name: str, value: Any, minimum: int) -> None:
    """Refuse anything but an integer ≥ ``minimum`` (steps ≥ 1, a grid of ≥ 10 points, ...).

    Args:
        name: The parameter's name, for the message.
        value: The value to check.
        minimum: The smallest value allowed.

    Raises:
        ValueError: ``"{name} must be an integer >= {minimum}, got {value!r}"``.
    """
    _require(is_integer(value) and int(value) >= minimum, name, value, f"an integer >= {minimum}")


def check_positive(name: str, value: Any, *, optional: bool = False) -> None:
    """Refuse anything but a finite number > 0 (a noise multiplier, a target ε, a learning rate).

    Args:
        name: The parameter's name, for the message.
        value: The value to check.
        optional: ``None`` is allowed too (the message then says "or None").

    Raises:
        ValueError: ``"{name} must be a finite number > 0, got {value!r}"``.
    """
    x = _as_float(value)
    _require(math.isfinite(x) and x > 0, name, value, "a finite number > 0", optional=optional)


def check_non_negative(name: str, value: Any, *, optional: bool = False) -> None:
    """Refuse anything but a finite number ≥ 0 (an ε that may be 0, a noise that may be off).

    Args:
        name: The parameter's name, for the message.
        value: The value to check.
        optional: ``None`` is allowed too (the message then says "or None").

    Raises:
        ValueError: ``"{name} must be a finite number >= 0, got {value!r}"``.
    """
    x = _as_float(value)
    _require(math.isfinite(x) and x >= 0, name, value, "a finite number >= 0", optional=optional)


def check_probability(name: str, value: Any, *, allow_one: bool = False) -> None:
    """Refuse anything but a number in (0, 1), or in (0, 1] with ``allow_one`` (γ, δ, a sampling rate).

    Args:
        name: The parameter's name, for the message.
        value: The value to check (NaN is refused: it is in no interval).
        allow_one: 1 is allowed (a sampling rate of 1 samples every record).

    Raises:
        ValueError: ``"{name} must be in (0, 1), got {value!r}"`` (``(0, 1]`` with ``allow_one``).
    """
    x = _as_float(value)  # NaN for a non-number: in no interval
    _require(x > 0 and (x <= 1 if allow_one else x < 1), name, value, f"in (0, 1{']' if allow_one else ')'}")


def check_delta(delta: Any) -> None:
    """Refuse a target δ that is not in (0, 1).

    Raises:
        ValueError: ``"delta must be in (0, 1), got {delta!r}"``.
    """
    check_probability("delta", delta)


def check_theta(theta: Any) -> None:
    """Refuse a truncated-negative-binomial shape θ that is not a finite number > −1.

    Raises:
        ValueError: ``"theta must be a finite number > -1, got {theta!r}"``.
    """
    x = _as_float(theta)
    _require(math.isfinite(x) and x > -1, "theta", theta, "a finite number > -1")
