r"""A record is in the training split or the validation split, not both: the search's bound under a per-record split.

docs/proofs/split.md (Theorem S) proves, for add/remove-one neighbours and a split that assigns every record to
train / validation / test by a rule that depends on that record alone (:class:`SplitRule`):

* ``kind="hash"`` (a keyed hash of a record identifier, or any fixed function of the record): the whole search's
  privacy profile is at most ``max(δ_train(ε), δ_val(ε))`` and its RDP curve at most
  ``max(ε_train(α), ε_val(α))``;
* ``kind="draw"`` (an independent draw per record from the search's secret randomness with public probabilities
  ``p_train, p_val, p_test``): also the mixture ``p_train·δ_train(ε) + p_val·δ_val(ε)``, and in RDP
  ``(1/(α−1))·log(p_train·e^{(α−1)ε_train(α)} + p_val·e^{(α−1)ε_val(α)} + p_test)`` (joint convexity of the
  hockey-stick divergence and of ``e^{(α−1)D_α}``, both f-divergences: KRW 2024 Lemma 2.3).

Here ``δ_train``/``ε_train`` bound the **whole search** with the record in training: every run's DP-SGD, composed or
selected exactly as the search composes or selects its runs, each score release being post-processing; and
``δ_val``/``ε_val`` the whole search with the record in validation: every score release, composed or selected
likewise, training being independent of the record. The test side contributes nothing (at ε ≥ 0) when nothing
computed on the test split is released (assumption (T), §6.2). Every size the sides' bounds use (sampling rate,
steps, the score's divisor) must be a public nominal value fixed before the split (assumption (N), §5).

**Never** apply the mixture to one run and then compose or select: one split serves every run, so the record's side
is shared by all of them, and a per-run mixture composed k times is not a bound (docs/proofs/split.md §6.1;
``tests/privacy/test_split.py`` shows a counterexample). The per-run *maximum* is a valid per-run curve for any
selection theorem (Corollary S2) but looser than the maximum of the two whole-search bounds.

Pure numpy/scipy; no torch, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from dphypo.privacy.profiles import PrivacyProfile, _check_delta
from dphypo.privacy.rdp import RdpCurve

__all__ = ["SPLIT_BOUNDS", "SPLIT_KINDS", "SplitBound", "SplitProfile", "SplitRule", "split_epsilon", "split_rdp"]

SplitKind = Literal["draw", "hash"]
SplitBound = Literal["max", "mixture"]

#: The per-record rules Theorem S covers (docs/proofs/split.md §2).
SPLIT_KINDS: tuple[str, ...] = ("draw", "hash")
#: The two bounds of Theorem S: the worse side (any covered rule) and the mixture (``kind="draw"`` only).
SPLIT_BOUNDS: tuple[str, ...] = ("max", "mixture")

_SUM_TOLERANCE = 1e-9


@dataclass(frozen=True)
class SplitRule:
    """The public description of a per-record train / validation / test split (what the accountant may use).

    Args:
        kind: ``"draw"``: record i's side is an independent draw with probabilities ``(train, val, test)`` from the
            search's secret randomness; ``"hash"``: a keyed hash of a record identifier (a fixed function of the
            record: an adversary may know the side, so only the ``"max"`` bound holds).
        train: Public probability (``"draw"``) or nominal share (``"hash"``) of the training side, in (0, 1).
        val: Same for the validation side, in (0, 1).
        test: Same for the test side, in [0, 1); ``train + val + test == 1``.

    Raises:
        ValueError: An unknown kind, a share outside its range, or shares that do not sum to 1.
    """

    kind: str
    train: float
    val: float
    test: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in SPLIT_KINDS:
            raise ValueError(f"kind must be one of {', '.join(SPLIT_KINDS)}, got {self.kind!r}")
        for name in ("train", "val", "test"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise ValueError(f"{name} must be a number, got {value!r}")
            value = float(value)
            low_ok = value >= 0.0 if name == "test" else value > 0.0
            if not (math.isfinite(value) and low_ok and value < 1.0):
                where = "[0, 1)" if name == "test" else "(0, 1)"
                raise ValueError(f"{name} must be in {where}, got {value!r}")
            object.__setattr__(self, name, value)
        total = self.train + self.val + self.test
        if abs(total - 1.0) > _SUM_TOLERANCE:
            raise ValueError(f"train + val + test must be 1, got {self.train!r} + {self.val!r} + {self.test!r}")

    def check_bound(self, bound: str) -> None:
        """Refuse a bound this rule does not support (the mixture needs a secret independent draw)."""
        if bound not in SPLIT_BOUNDS:
            raise ValueError(f"bound must be one of {', '.join(SPLIT_BOUNDS)}, got {bound!r}")
        if bound == "mixture" and self.kind != "draw":
            raise ValueError(
                f"the mixture bound needs a secret independent draw per record (kind='draw'), got kind={self.kind!r}: "
                "with a keyed hash an adversary may know the record's side, so only bound='max' holds"
            )

    def describe(self) -> dict[str, float | str]:
        """JSON-ready description (what a release names as its split rule)."""
        # shares rounded to 12 digits: 1 - 0.2 - 0.2 prints as 0.6, not 0.6000000000000001 (a description only)
        return {"kind": self.kind, "train": round(self.train, 12), "val": round(self.val, 12),
                "test": round(self.test, 12)}


def _check_sides(train: object, val: object, rule: object, bound: str, kind: type) -> None:
    if not isinstance(rule, SplitRule):
        raise ValueError(f"rule must be a SplitRule, got {rule!r}")
    for name, value in (("train", train), ("val", val)):
        if not isinstance(value, kind):
            raise ValueError(f"{name} must be a {kind.__name__} of the whole search with the record on that side, "
                             f"got {value!r}")
    rule.check_bound(bound)


def split_rdp(train: RdpCurve, val: RdpCurve, rule: SplitRule, *, bound: SplitBound = "max") -> RdpCurve:
    r"""RDP curve of a whole search under a per-record split (docs/proofs/split.md, Theorem S).

    ``max``: ``ε(α) = max(ε_train(α), ε_val(α))``. ``mixture`` (``rule.kind == "draw"``):
    ``ε(α) = log(p_t e^{(α−1)ε_train(α)} + p_v e^{(α−1)ε_val(α)} + p_test) / (α−1)``, never above the max.

    Args:
        train: RDP curve of the whole search with the record in the training split (its runs' DP-SGD, composed or
            selected as the search does; scores are post-processing).
        val: RDP curve of the whole search with the record in the validation split (its score releases only), on
            the same orders.
        rule: The split rule.
        bound: ``"max"`` (any rule) or ``"mixture"`` (``kind="draw"`` only).

    Returns:
        The curve, shape ``(K,)`` like the inputs; ``event`` is ``None`` (no ``DpEvent`` describes a maximum or
        mixture of two mechanisms), ``pure_epsilon`` the larger pure ε when both sides have one.

    Raises:
        ValueError: Non-curves, different orders, a bad rule or a bound the rule does not support.
    """
    _check_sides(train, val, rule, bound, RdpCurve)
    if train.orders.shape != val.orders.shape or not np.array_equal(train.orders, val.orders):
        raise ValueError("train and val must share the same orders; build them on one order grid")
    pure = None
    if train.pure_epsilon is not None and val.pure_epsilon is not None:
        pure = max(train.pure_epsilon, val.pure_epsilon)  # H_{e^ε} of each side is 0 at ε ≥ its pure ε
    if bound == "max":
        eps = np.maximum(train.epsilons, val.epsilons)
        label = f"split max({train.label}; {val.label})"
    else:
        a1 = train.orders - 1.0
        terms = [a1 * train.epsilons + math.log(rule.train), a1 * val.epsilons + math.log(rule.val)]
        if rule.test > 0.0:
            terms.append(np.full_like(a1, math.log(rule.test)))
        with np.errstate(over="ignore", invalid="ignore"):
            eps = np.logaddexp.reduce(np.stack(terms), axis=0) / a1
        # never above the max (rounding), never negative; inf stays inf
        eps = np.clip(eps, 0.0, np.maximum(train.epsilons, val.epsilons))
        label = f"split mixture {rule.train:g}·({train.label}) + {rule.val:g}·({val.label})"
    return RdpCurve(train.orders, eps, pure, label, None)


@dataclass(frozen=True, eq=False)
class SplitProfile(PrivacyProfile):
    """Privacy profile of a whole search under a per-record split (docs/proofs/split.md, Theorem S).

    ``δ(ε) = max(δ_train(ε), δ_val(ε))`` (``bound="max"``) or ``p_train·δ_train(ε) + p_val·δ_val(ε) +
    p_test·(1 − e^ε)₊`` (``bound="mixture"``, ``rule.kind == "draw"``; the last term, the test side's, vanishes at
    ε ≥ 0, where the selection bounds evaluate profiles).

    Args:
        train: Profile (both directions) of the whole search with the record in training.
        val: Profile (both directions) of the whole search with the record in validation.
        rule: The split rule.
        bound: ``"max"`` or ``"mixture"``.

    Raises:
        ValueError: Non-profiles, a bad rule or a bound the rule does not support.
    """

    train: PrivacyProfile
    val: PrivacyProfile
    rule: SplitRule
    bound: str = "max"
    name: str = field(default="")

    def __post_init__(self) -> None:
        _check_sides(self.train, self.val, self.rule, self.bound, PrivacyProfile)

    @property
    def label(self) -> str:
        """Human-readable description of the bound."""
        if self.name:
            return self.name
        if self.bound == "max":
            return f"split max({self.train.label}; {self.val.label})"
        return f"split mixture {self.rule.train:g}·({self.train.label}) + {self.rule.val:g}·({self.val.label})"

    def delta(self, epsilon: np.ndarray | float) -> np.ndarray:
        """δ(ε) of the symmetric profile (both directions), shape of ``epsilon``."""
        t = np.asarray(self.train.delta(epsilon), dtype=np.float64)
        v = np.asarray(self.val.delta(epsilon), dtype=np.float64)
        if self.bound == "max":
            out = np.maximum(t, v)
        else:  # the test side's pair is (M(D), M(D)): H_{e^ε} = (1 − e^ε)₊, zero at ε ≥ 0
            eps = np.asarray(epsilon, dtype=np.float64)
            out = self.rule.train * t + self.rule.val * v + self.rule.test * np.maximum(0.0, -np.expm1(eps))
        return np.clip(out, 0.0, 1.0)

    def epsilon(self, delta: float) -> float:
        """Smallest ε ≥ 0 with δ(ε) ≤ ``delta``: ``max`` of the sides' ε exactly; the mixture by root finding."""
        if self.bound == "max":
            _check_delta(delta)
            return max(self.train.epsilon(delta), self.val.epsilon(delta))
        return super().epsilon(delta)


def split_epsilon(train: PrivacyProfile, val: PrivacyProfile, rule: SplitRule, delta: float, *,
                  bound: SplitBound = "max") -> float:
    """ε at ``delta`` of :class:`SplitProfile` ``(train, val, rule, bound)``: the whole search's ε under the split."""
    return SplitProfile(train, val, rule, bound).epsilon(delta)
