"""Axes that change a run's privacy: batch size (→ Poisson rate q), epochs (→ steps) and the noise multiplier σ.

A :class:`~dphypo.space.SearchSpace` declares them with ``privacy_roles={axis name: role}``. Every grid point then
has its own DP-SGD settings, so its own per-run privacy: the privacy layer gives each distinct setting its own
noise multiplier σ_i, dominated by one common reference (:mod:`dphypo.privacy.heterogeneous`; Koskela, Redberg &
Wang 2024, Sec. 6.2). This module checks the declarations (one line naming the axis, before anything runs) and
turns the grid into its distinct privacy settings.

Roles:

* ``"batch_size"``: the expected batch size b, an integer ≥ 1 (q = 1 / ⌈n_train / b⌉ with Opacus's rounding,
  :func:`~dphypo.privacy.heterogeneous.opacus_sample_rate`);
* ``"epochs"``: the number of epochs, an integer ≥ 1 (steps = epochs × batches per epoch,
  :func:`~dphypo.privacy.heterogeneous.opacus_steps`);
* ``"noise_multiplier"``: σ itself, a finite number > 0 (optional: a candidate then runs at the larger of its σ
  value and the σ_i its (q, steps) needs to stay under the reference; what part B of issue #25 wires).

Pure numpy; no torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from dphypo.privacy.heterogeneous import CandidateRun
from dphypo.privacy.validation import is_integer, is_real
from dphypo.space.axes import Axis

__all__ = ["INTEGER_ROLES", "PRIVACY_ROLES", "candidate_runs", "check_privacy_roles", "role_value", "settings_of"]

#: Every privacy role an axis can play, in the order :meth:`SearchSpace.privacy_settings` lists them.
PRIVACY_ROLES = ("batch_size", "epochs", "noise_multiplier")
#: Roles whose values must be integers ≥ 1.
INTEGER_ROLES = ("batch_size", "epochs")


def check_privacy_roles(axes: Mapping[str, Axis], roles: Mapping[str, str] | None) -> dict[str, str]:
    """Validate ``privacy_roles`` against the axes: known names and roles, each role once, valid values.

    Args:
        axes: The space's axes.
        roles: axis name → role (``None``: no privacy-affecting axis).

    Returns:
        The roles as a plain dict, in axis order.

    Raises:
        ValueError: An unknown axis or role, a role given twice, or a value the role cannot take (0, negative,
            non-integer batch size or epochs; σ ≤ 0), in one line naming the axis.
    """
    if roles is None:
        return {}
    if not isinstance(roles, Mapping):
        raise TypeError(f"privacy_roles must be a mapping from axis name to role, got {roles!r}")
    for name, role in roles.items():
        if name not in axes:
            raise ValueError(f"privacy_roles names an unknown axis {name!r}; the axes are {tuple(axes)}")
        if role not in PRIVACY_ROLES:
            raise ValueError(f"privacy_roles[{name!r}] must be one of {PRIVACY_ROLES}, got {role!r}")
    taken = list(roles.values())
    for role in PRIVACY_ROLES:
        if taken.count(role) > 1:
            names = [n for n, r in roles.items() if r == role]
            raise ValueError(f"privacy role {role!r} must be played by one axis, got {names}")
    for name, role in roles.items():
        _check_values(name, role, axes[name])
    return {name: roles[name] for name in axes if name in roles}


def _check_values(name: str, role: str, axis: Axis) -> None:
    """Every value of ``axis`` is one ``role`` can take (one line naming the axis and the first bad value)."""
    for value in axis.values:
        if role in INTEGER_ROLES:
            integral = is_integer(value) or (is_real(value) and math.isfinite(float(value))
                                             and float(value).is_integer())
            if not integral or float(value) < 1:  # type: ignore[arg-type]
                raise ValueError(f"axis {name!r} ({role}) must hold integers >= 1, got {value!r}")
        elif not (is_real(value) and math.isfinite(float(value)) and float(value) > 0):
            raise ValueError(f"axis {name!r} ({role}) must hold finite numbers > 0, got {value!r}")


def role_value(role: str, value: Any) -> int | float:
    """A privacy axis value as the role uses it: an int for batch size and epochs, a float for σ."""
    return int(value) if role in INTEGER_ROLES else float(value)


def candidate_runs(
    settings: tuple[dict[str, int | float], ...], n_train: int, *, batch_size: int | None = None,
    epochs: int | None = None,
) -> tuple[CandidateRun, ...]:
    """The privacy layer's candidate (q, steps) of every distinct privacy setting of a space.

    Args:
        settings: :meth:`~dphypo.space.SearchSpace.privacy_settings`' settings (role → value).
        n_train: Training examples (the private training split's size).
        batch_size: The batch size of every candidate when no axis plays ``"batch_size"``.
        epochs: The epochs of every candidate when no axis plays ``"epochs"``.

    Returns:
        One :class:`~dphypo.privacy.heterogeneous.CandidateRun` per setting, named by its values.

    Raises:
        ValueError: A role with neither an axis nor a fixed value, or a batch size above ``n_train`` (named).
    """
    out = []
    for setting in settings:
        batch = setting.get("batch_size", batch_size)
        n_epochs = setting.get("epochs", epochs)
        if batch is None or n_epochs is None:
            missing = "batch_size" if batch is None else "epochs"
            raise ValueError(f"{missing} must be given when no axis plays the {missing!r} role")
        name = ", ".join(f"{role}={value:g}" for role, value in setting.items()) or "every candidate"
        out.append(CandidateRun.from_batch(n_train, int(batch), int(n_epochs), name=name))
    return tuple(out)


def settings_of(roles: Mapping[str, str], columns: Mapping[str, np.ndarray]) -> tuple[
        tuple[dict[str, int | float], ...], np.ndarray]:
    """The distinct privacy settings of a grid and each point's setting (:meth:`SearchSpace.privacy_settings`).

    Args:
        roles: axis name → role, in axis order.
        columns: axis name → its value at every grid point, shape ``(n,)``.

    Returns:
        ``(settings, point_setting)``: the distinct settings (role → value, in first-seen grid order) and, shape
        ``(n,)``, the index of each grid point's setting.
    """
    names = list(roles)
    n = len(next(iter(columns.values()))) if columns else 0
    if not names:
        return ({},), np.zeros(n, dtype=np.int64)
    table = np.stack([np.asarray(columns[name], dtype=np.float64) for name in names], axis=1)
    _, first, inverse = np.unique(table, axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first)  # first-seen grid order, so setting 0 is grid point 0's
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    settings = tuple({roles[name]: role_value(roles[name], table[first[k], j]) for j, name in enumerate(names)}
                     for k in order)
    return settings, rank[np.asarray(inverse).reshape(-1)].astype(np.int64)
