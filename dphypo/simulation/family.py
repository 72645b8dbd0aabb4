"""Landscape families: one grid and one DP-SGD mechanism measured at several noise multipliers σ.

An equal-ε comparison of a uniform and an adaptive (GP) search runs each arm at its own σ: the adaptive arm pays
for adaptivity, so for the same total ε each of its runs needs more noise (:mod:`dphypo.simulation.equal_epsilon`
computes both σ). A :class:`LandscapeFamily` holds member landscapes built at several σ on the same grid with the
same mechanism, and gives the landscape at any σ between its smallest and largest member (:meth:`LandscapeFamily.at`);
it never extrapolates.

How :meth:`LandscapeFamily.at` fills the gap between members (an algorithm choice, not a theorem):

1. Per grid point, the members' means are projected onto the sequences that are non-increasing in σ (for a
   ``'minimize'`` landscape, non-decreasing): more noise never helps *in expectation*, so a member mean that
   beats a less noisy member's is seed noise. The projection is weighted least squares with weights 1/std²
   (isotonic regression, the L2 projection onto the closed convex cone of monotone sequences; Robertson, Wright &
   Dykstra 1988, *Order Restricted Statistical Inference*, Ch. 1), the solution pool-adjacent-violators computes.
   It is evaluated here by the equivalent min-max formula over block averages, vectorised over the grid.
   Grid points whose members are already monotone keep their means bit for bit.
2. Mean and std are interpolated linearly in log σ between the two neighbouring members (the std is not
   projected: it is the spread of a single observed score, not a trend).

Interpolation is linear between monotone values, so the landscape at σ is monotone in σ at every grid point.

**Heterogeneous families** (issue #25). Members built with privacy grids (``dphypo landscape build --batch-size-grid
... --epochs-grid ...``, :mod:`dphypo.simulation.builder`) state the *reference* σ_ref as ``metadata['sigma']``
and every (batch size, epochs) setting's σ_i in ``metadata['plan']``; the reference's (q, steps) and the settings'
are shared (:func:`is_heterogeneous`). Members then differ in σ_ref, and each σ_i is an increasing function of
σ_ref (:func:`~dphypo.privacy.heterogeneous.dominating_sigma`: more noise in the reference allows more in every
candidate), so "more noise never helps" holds along σ_ref too, and the same projection and interpolation in
log σ_ref apply. ``plan`` and ``plan_profile_slack`` are member keys; the landscape :meth:`LandscapeFamily.at`
returns between members has no plan of its own (its σ_i are those :func:`~dphypo.privacy.heterogeneous
.plan_heterogeneous` gives at that σ_ref, which the interpolation approximates).
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from dphypo.privacy.validation import check_positive
from dphypo.simulation.landscapes import Landscape, load_landscape

__all__ = ["MEMBER_KEYS", "LandscapeFamily", "is_heterogeneous", "load_family", "nonincreasing_fit"]

#: Metadata keys that describe one member's build or its σ rather than the shared mechanism; members may differ in
#: these (``spec_digest`` hashes the build spec, σ included). Every other key must be equal across members.
MEMBER_KEYS: frozenset[str] = frozenset({
    "sigma", "failed_runs", "seconds_per_run_mean", "build_wall_seconds_last_session", "built_by", "spec_digest",
    "seed_std_mean",
    # how the runs were trained (Opacus or the vectorised engine): the same DP-SGD mechanism either way
    # (dphypo.simulation.builder), so a family may mix them (the shipped MNIST-subset member predates the key)
    "engine",
    # a heterogeneous member's σ_i per setting (they follow from its σ_ref)
    "plan", "plan_profile_slack",
    # written by LandscapeFamily.at, so a landscape taken from a family can join another family
    "interpolated", "member_sigmas", "family_sigmas", "isotonic_adjusted_points",
})

# A std of 0 would give an infinite weight; flooring it keeps the projection finite and lets an exact member
# dominate every block it is pooled into (its weight exceeds any real member's by many orders of magnitude).
_STD_FLOOR = 1e-9
# A σ this close (relatively) to a member's is that member: calibrated σ round-trip through JSON and text.
_SIGMA_RTOL = 1e-12


def is_heterogeneous(metadata: Mapping[str, Any]) -> bool:
    """Whether landscape (or family) metadata describes a build with privacy axes (each setting at its own σ_i).

    Such metadata states ``privacy_axes``, the ``reference`` run's (q, steps) and the ``settings``' (q, steps);
    ``sigma``, ``batch_size`` and ``epochs`` are then the reference's.

    Raises:
        ValueError: ``privacy_axes`` without the ``reference`` or ``settings`` it needs.
    """
    if "privacy_axes" not in metadata:
        return False
    missing = [key for key in ("reference", "settings") if not isinstance(metadata.get(key), Mapping | list)]
    if missing:
        raise ValueError(f"metadata with privacy_axes must state {missing} (built by dphypo landscape build "
                         "--batch-size-grid/--epochs-grid)")
    return True


def _member_sigma(landscape: Landscape, index: int) -> float:
    sigma = landscape.metadata.get("sigma")
    if isinstance(sigma, bool) or not isinstance(sigma, int | float) or not (math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"member {index} needs metadata['sigma'], a finite number > 0, got {sigma!r}")
    return float(sigma)


def _mechanism_part(metadata: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in metadata.items() if key not in MEMBER_KEYS}


def _check_same(first: Landscape, other: Landscape, label: str) -> None:
    """Raise a one-line ValueError naming the first way ``other`` differs from ``first`` (σ aside)."""
    if other.axis_names != first.axis_names:
        raise ValueError(f"{label} has axis_names {other.axis_names!r}, member 0 has {first.axis_names!r}")
    if other.axis_scales != first.axis_scales:
        raise ValueError(f"{label} has axis_scales {other.axis_scales!r}, member 0 has {first.axis_scales!r}")
    for name, a, b in zip(first.axis_names, first.axis_values, other.axis_values, strict=True):
        if a.shape != b.shape or not np.array_equal(a, b):
            raise ValueError(f"{label} has a different axis_{name} ({b.size} values from {b[0]:g} to {b[-1]:g}) "
                             f"than member 0 ({a.size} values from {a[0]:g} to {a[-1]:g})")
    if other.direction != first.direction:
        raise ValueError(f"{label} has direction {other.direction!r}, member 0 has {first.direction!r}")
    mine, theirs = _mechanism_part(first.metadata), _mechanism_part(other.metadata)
    for key in sorted(set(mine) | set(theirs)):
        if key not in theirs or key not in mine:
            where = "lacks" if key not in theirs else "has an extra"
            raise ValueError(f"{label} {where} mechanism metadata key {key!r} "
                             f"(member 0: {mine.get(key, '<missing>')!r})")
        if mine[key] != theirs[key]:
            raise ValueError(f"{label} has metadata[{key!r}]={theirs[key]!r}, member 0 has {mine[key]!r}; a family "
                             "shares everything but sigma")


def nonincreasing_fit(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Weighted isotonic regression onto non-increasing sequences along axis 0, batched over the other axes.

    The weighted least-squares projection (Robertson, Wright & Dykstra 1988, Ch. 1), via the min-max formula
    ``fit_i = min_{s ≤ i} max_{t ≥ i} Av(s..t)`` with ``Av`` the weighted average of a block; it equals what
    pool-adjacent-violators returns. Cost O(K³) per series, meant for a handful of family members. Series that
    are already non-increasing are returned unchanged (bit for bit).

    Args:
        values: Shape ``(K, ...)``: K points of each series along axis 0.
        weights: Shape ``(K, ...)``, every weight finite and > 0.

    Returns:
        The fit, shape ``(K, ...)``, non-increasing along axis 0.
    """
    values, weights = np.asarray(values, dtype=np.float64), np.asarray(weights, dtype=np.float64)
    if values.ndim < 1 or values.shape != weights.shape or values.shape[0] < 1:
        raise ValueError(f"values and weights must share a shape (K, ...) with K >= 1, got {values.shape} and "
                         f"{weights.shape}")
    if not (np.all(np.isfinite(values)) and np.all(np.isfinite(weights)) and np.all(weights > 0)):
        raise ValueError("values must be finite and weights finite and > 0")
    k = values.shape[0]
    index = np.arange(k)
    # in_block[s, t, j]: member j lies in the block s..t (empty when s > t). Sums over explicit members (not
    # differences of cumulative sums) so that a dominant weight cannot cancel the others away.
    in_block = ((index[:, None, None] <= index[None, None, :]) & (index[None, None, :] <= index[None, :, None]))
    in_block = in_block.astype(np.float64)
    total = np.tensordot(in_block, weights, axes=(2, 0))  # (K_s, K_t, ...)
    weighted = np.tensordot(in_block, weights * values, axes=(2, 0))
    empty = total == 0.0
    average = np.where(empty, 0.0, weighted / np.where(empty, 1.0, total))
    extra = (1,) * (values.ndim - 1)
    s, t, i = (index.reshape((k, 1, 1, *extra)), index.reshape((1, k, 1, *extra)),
               index.reshape((1, 1, k, *extra)))
    blocks = average[:, :, None]  # (K_s, K_t, K_i, ...)
    inner = np.where(t >= i, blocks, -np.inf).max(axis=1)  # (K_s, K_i, ...): max over t ≥ i
    fit = np.where(s[:, 0] <= i[:, 0], inner, np.inf).min(axis=0)  # (K_i, ...): min over s ≤ i
    monotone = np.all(np.diff(values, axis=0) <= 0.0, axis=0)
    return np.where(monotone, values, fit)


@dataclass(frozen=True, eq=False)
class LandscapeFamily:
    """Landscapes of one grid and one mechanism at several noise multipliers σ; the landscape at any σ in range.

    Members are validated and sorted by σ on construction. They must agree on the grid (axis names, values and
    scales), the direction and every metadata key outside :data:`MEMBER_KEYS` (dataset, model, epochs,
    batch_size, score_noise, seeds, data_seed, ...), and each must state a distinct ``metadata['sigma']``.

    Attributes:
        members: The member landscapes, at least 2, sorted by increasing σ.
    """

    members: tuple[Landscape, ...]

    def __post_init__(self) -> None:
        members = tuple(self.members)
        if len(members) < 2:
            raise ValueError(f"a landscape family needs at least 2 members, got {len(members)}")
        for i, member in enumerate(members):
            if not isinstance(member, Landscape):
                raise ValueError(f"member {i} must be a Landscape, got {type(member).__name__}")
        sigmas = [_member_sigma(m, i) for i, m in enumerate(members)]
        for i, member in enumerate(members[1:], start=1):
            _check_same(members[0], member, f"member {i} (sigma={sigmas[i]:g})")
        order = sorted(range(len(members)), key=lambda i: sigmas[i])
        for a, b in itertools.pairwise(order):
            if sigmas[a] == sigmas[b]:
                raise ValueError(f"members {a} and {b} both have sigma={sigmas[a]:g}; one member per sigma")
        object.__setattr__(self, "members", tuple(members[i] for i in order))

    def __repr__(self) -> str:
        first = self.members[0]
        axes = " x ".join(f"{n}[{len(v)}]" for n, v in zip(first.axis_names, first.axis_values, strict=True))
        return f"LandscapeFamily({axes}, sigmas={[round(s, 6) for s in self.sigmas]})"

    @property
    def sigmas(self) -> tuple[float, ...]:
        """Member σ, strictly increasing."""
        return tuple(float(m.metadata["sigma"]) for m in self.members)

    @property
    def sigma_range(self) -> tuple[float, float]:
        """``(smallest σ, largest σ)``: where :meth:`at` is defined."""
        return self.sigmas[0], self.sigmas[-1]

    @property
    def mechanism_metadata(self) -> dict[str, Any]:
        """The metadata every member shares (everything outside :data:`MEMBER_KEYS`; no σ). A fresh copy."""
        return _mechanism_part(self.members[0].metadata)

    @cached_property
    def projected_means(self) -> np.ndarray:
        """Member means after the isotonic projection in σ, shape ``(K, *grid shape)``; read-only."""
        means = np.stack([m.mean for m in self.members])
        weights = 1.0 / np.maximum(np.stack([m.std for m in self.members]), _STD_FLOOR) ** 2
        # More noise never helps in expectation: non-increasing accuracy, non-decreasing loss.
        sign = 1.0 if self.members[0].direction == "maximize" else -1.0
        fit = sign * nonincreasing_fit(sign * means, weights)
        fit.flags.writeable = False
        return fit

    @cached_property
    def isotonic_adjusted_points(self) -> int:
        """Grid points where the projection moved at least one member's mean."""
        means = np.stack([m.mean for m in self.members])
        return int(np.sum(np.any(self.projected_means != means, axis=0)))

    def at(self, sigma: float) -> Landscape:
        """The landscape at noise multiplier ``sigma`` (method in the module docstring).

        Args:
            sigma: σ within :attr:`sigma_range` (a member's σ returns its projected means and its std).

        Returns:
            A landscape on the family's grid. Its metadata is :attr:`mechanism_metadata` plus ``sigma``,
            ``interpolated`` (false exactly at a member's σ), ``member_sigmas`` (the one or two members used),
            ``family_sigmas`` and ``isotonic_adjusted_points``.

        Raises:
            ValueError: ``sigma`` is not a finite number > 0 or lies outside :attr:`sigma_range`.
        """
        if isinstance(sigma, bool) or not isinstance(sigma, int | float | np.floating | np.integer):
            raise ValueError(f"sigma must be a number, got {sigma!r}")
        sigma = float(sigma)
        check_positive("sigma", sigma)
        sigmas = np.array(self.sigmas)
        low, high = self.sigma_range
        close = np.isclose(sigmas, sigma, rtol=_SIGMA_RTOL, atol=0.0)
        if not close.any() and not (low <= sigma <= high):
            raise ValueError(f"sigma={sigma!r} is outside the family's range [{low:g}, {high:g}]; build a member "
                             "there")
        first = self.members[0]
        if close.any():
            k = int(np.argmax(close))
            mean, std, used, sigma = self.projected_means[k], self.members[k].std, [self.sigmas[k]], self.sigmas[k]
        else:
            k = int(np.searchsorted(sigmas, sigma)) - 1  # sigmas[k] < sigma < sigmas[k + 1]
            w = (math.log(sigma) - math.log(sigmas[k])) / (math.log(sigmas[k + 1]) - math.log(sigmas[k]))
            mean = (1.0 - w) * self.projected_means[k] + w * self.projected_means[k + 1]
            std = (1.0 - w) * self.members[k].std + w * self.members[k + 1].std
            used = [self.sigmas[k], self.sigmas[k + 1]]
        metadata = {**self.mechanism_metadata, "sigma": sigma, "interpolated": len(used) == 2, "member_sigmas": used,
                    "family_sigmas": list(self.sigmas), "isotonic_adjusted_points": self.isotonic_adjusted_points}
        return Landscape(mean, std, first.axis_names, first.axis_values, first.axis_scales, first.direction,
                         metadata)


def load_family(paths: Sequence[str | os.PathLike[str]]) -> LandscapeFamily:
    """Load member landscapes (:func:`~dphypo.simulation.landscapes.load_landscape`) into a family.

    Args:
        paths: The members' ``.npz`` files, any order, at least 2.

    Returns:
        The family.

    Raises:
        ValueError: A file is invalid (its message names it) or the members do not form a family (the message
            names the files).
    """
    if isinstance(paths, str | bytes | os.PathLike):
        raise ValueError(f"paths must be a sequence of landscape files, got the single path {paths!r}")
    paths = list(paths)
    synthetic = [os.fspath(p) for p in paths if os.fspath(p).startswith("synthetic:")]
    if synthetic:  # a synthetic landscape has no σ, so it cannot be a member of a family over σ
        raise ValueError(f"a landscape family needs real landscape files built at different σ (dphypo landscape "
                         f"build --sigma ...); {synthetic[0]!r} is synthetic and has no σ")
    members = tuple(load_landscape(p) for p in paths)
    try:
        return LandscapeFamily(members)
    except ValueError as err:
        names = ", ".join(f"{i}: {os.fspath(p)}" for i, p in enumerate(paths))
        raise ValueError(f"{err} (members {names})") from None
