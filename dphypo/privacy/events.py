r"""What a privacy bound is a bound *of*: dp_accounting ``DpEvent``\ s, kept in one canonical form.

Every :class:`~dphypo.privacy.rdp.RdpCurve` and every :class:`~dphypo.privacy.profiles.PrivacyProfile` carries
``event``, the ``dp_accounting.dp_event.DpEvent`` of the mechanism it bounds (``None``: unknown), so that two bounds
can be checked to describe the same mechanism (:func:`~dphypo.privacy.accountant.check_same_mechanism`) and so that
a mechanism can be handed to dp_accounting's own accountants unchanged. The events dphypo builds:

* one DP-SGD run (:func:`dpsgd_event`): ``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(σ)),
  steps)``, the event dp_accounting's accountants take for DP-SGD (Mironov, Talwar & Zhang 2019);
* the Gaussian mechanism (:func:`gaussian_event`): ``GaussianDpEvent(σ/Δ)``. dp_accounting's ``noise_multiplier``
  is the noise std *relative to the L2 sensitivity* Δ, so a std σ on a sensitivity-Δ statistic is
  ``GaussianDpEvent(σ/Δ)`` (the privacy of the Gaussian mechanism depends on σ/Δ only: Mironov 2017,
  Proposition 7; Balle & Wang 2018, Theorem 8); a score count has Δ = 1;
* an ε-DP mechanism of no further description: :class:`PureDpEvent` (dphypo's own event; dp_accounting's
  accountants do not know it);
* a data-independent mechanism: ``NoOpDpEvent()``;
* sequential composition (:func:`compose_events`) and repetition (:func:`repeat_event`).

**Canonical form.** dp_accounting compares events by value (attrs equality, checked on nested compositions in
0.5.0 and 0.6.0) but not up to rewriting: ``ComposedDpEvent([a, ComposedDpEvent([b, c])])`` differs from
``ComposedDpEvent([a, b, c])``, ``SelfComposedDpEvent(a, 1)`` from ``a``, and a ``ComposedDpEvent`` holding a
tuple from one holding the same events in a list. :func:`canonical_event` rewrites an event into one form, so that
the same mechanism built in a different grouping gives an equal event: nested compositions are flattened (the order
is kept: composition is not treated as commutative), no-ops are dropped, adjacent repeats of one event are merged
into one ``SelfComposedDpEvent`` (so ``a + a`` = ``a.repeated(2)``, and DP-SGD runs of s₁ and s₂ steps compose to
the run of s₁ + s₂ steps), a one-fold ``SelfComposedDpEvent`` is its event, and nested self-compositions multiply.
A repeated *composite* stays one block: ``(a + b).repeated(2)`` is ``SelfComposedDpEvent(a + b, 2)``, not
``a + b + a + b`` (the same mechanism, a different event).

Equality is structural, never semantic: ``PoissonSampledDpEvent(q, ComposedDpEvent([G(σ₁), G(σ₂)]))`` and the
same event with the one equivalent Gaussian are different events, as are ``GaussianDpEvent(1.0)`` and
``LaplaceDpEvent(1.0)``. An unknown mechanism is never equal to anything (it is ``None``, and callers refuse it).

References (docs/references.md): Mironov 2017 arXiv:1702.07476; Mironov, Talwar & Zhang 2019 arXiv:1908.10530;
Balle & Wang 2018 arXiv:1805.06530 (versions unverified); dp_accounting ``dp_event.py`` (0.5.0, 0.6.0).
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import attr
from dp_accounting import dp_event
from dp_accounting.dp_event import DpEvent

from dphypo.privacy.validation import check_positive, check_positive_int

__all__ = [
    "PureDpEvent",
    "canonical_event",
    "check_event",
    "compose_events",
    "describe_event",
    "dpsgd_event",
    "event_description",
    "gaussian_event",
    "is_library_event",
    "repeat_event",
]


@attr.s(frozen=True, slots=True, auto_attribs=True)
class PureDpEvent(DpEvent):
    """An ε-DP mechanism of no further description (the order-∞ RDP bound ε; Mironov 2017, Definition 3).

    dphypo's own ``DpEvent``: dp_accounting has no event for "some ε-DP mechanism" (its ``LaplaceDpEvent`` is one
    particular ε-DP mechanism, with a tighter RDP curve), so its accountants refuse this one.

    Attributes:
        epsilon: ε ≥ 0.
    """

    epsilon: float


def dpsgd_event(sigma: float, sample_rate: float, steps: int) -> DpEvent:
    """One DP-SGD run: ``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(σ)), steps)``, canonical.

    The event dp_accounting's RDP and PLD accountants take for DP-SGD (Poisson-subsampled Gaussian with noise
    multiplier σ, composed ``steps`` times; Mironov, Talwar & Zhang 2019). With one step it is the bare
    ``PoissonSampledDpEvent`` (:func:`canonical_event`).

    Args:
        sigma: Noise multiplier σ > 0 (noise std / clipping norm).
        sample_rate: Poisson sampling rate q ∈ (0, 1].
        steps: Number of steps ≥ 1.

    Returns:
        The event.
    """
    step = dp_event.PoissonSampledDpEvent(float(sample_rate), dp_event.GaussianDpEvent(float(sigma)))
    return repeat_event(step, int(steps))


def gaussian_event(sigma: float, sensitivity: float = 1.0) -> DpEvent:
    """The Gaussian mechanism with noise std σ on a statistic of L2 sensitivity Δ: ``GaussianDpEvent(σ/Δ)``.

    dp_accounting's ``GaussianDpEvent.noise_multiplier`` is the std relative to the sensitivity (its accountants
    assume Δ = 1), and the mechanism's privacy depends on σ/Δ only (Mironov 2017, Proposition 7; Balle & Wang
    2018, Theorem 8), so the ratio describes it exactly.

    Args:
        sigma: Noise std σ > 0.
        sensitivity: L2 sensitivity Δ > 0.

    Returns:
        The event.
    """
    check_positive("sigma", sigma)
    check_positive("sensitivity", sensitivity)
    return dp_event.GaussianDpEvent(float(sigma) / float(sensitivity))


def check_event(event: Any) -> DpEvent | None:
    """Validate an event (a ``DpEvent`` or ``None``) and return its canonical form (:func:`canonical_event`).

    Raises:
        ValueError: ``event`` is neither a ``dp_accounting.dp_event.DpEvent`` nor ``None``.
    """
    if event is None:
        return None
    if not isinstance(event, DpEvent):
        raise ValueError(f"event must be a dp_accounting DpEvent or None, got {event!r}")
    return canonical_event(event)


def canonical_event(event: DpEvent) -> DpEvent:
    """The canonical form of ``event`` (module docstring): equal for the same mechanism built in another grouping.

    Args:
        event: Any ``DpEvent``; events nested in other events (e.g. a ``PoissonSampledDpEvent``'s) are rewritten
            too.

    Returns:
        An equal-or-rewritten event; an already canonical event is returned as is.

    Raises:
        ValueError: A ``SelfComposedDpEvent`` with a negative count.
    """
    if isinstance(event, dp_event.ComposedDpEvent):
        return compose_events(*event.events)
    if isinstance(event, dp_event.SelfComposedDpEvent):
        return _repeat(canonical_event(event.event), event.count)
    changes = {field.name: canonical_event(value) for field in attr.fields(type(event))
               if isinstance(value := getattr(event, field.name), DpEvent)}
    if not changes or all(changes[name] is getattr(event, name) for name in changes):
        return event
    return attr.evolve(event, **changes)


def compose_events(*events: DpEvent | None) -> DpEvent | None:
    """Sequential composition, canonical (flattened, in order; ``None`` if any part is unknown).

    Args:
        *events: The parts, in the order they run.

    Returns:
        ``ComposedDpEvent([...])`` of the parts (one part: itself; none, or only no-ops: ``NoOpDpEvent()``).
    """
    if any(e is None for e in events):
        return None
    runs: list[tuple[DpEvent, int]] = []
    for event in events:
        for base, count in _runs(canonical_event(event)):
            if runs and runs[-1][0] == base:
                runs[-1] = (base, runs[-1][1] + count)
            else:
                runs.append((base, count))
    parts = [base if count == 1 else dp_event.SelfComposedDpEvent(base, count) for base, count in runs]
    if not parts:
        return dp_event.NoOpDpEvent()
    return parts[0] if len(parts) == 1 else dp_event.ComposedDpEvent(parts)


def repeat_event(event: DpEvent | None, count: int) -> DpEvent | None:
    """``count``-fold composition of ``event`` with itself: ``SelfComposedDpEvent(event, count)``, canonical.

    Args:
        event: The event (``None``: unknown, returned as is).
        count: Number of repetitions ≥ 1.

    Returns:
        The event (``count == 1``: ``event`` itself; a self-composition's count is multiplied).
    """
    check_positive_int("count", count)
    return None if event is None else _repeat(canonical_event(event), int(count))


def _repeat(event: DpEvent, count: int) -> DpEvent:
    """``SelfComposedDpEvent(event, count)`` for a canonical ``event``, canonical."""
    if count < 0:
        raise ValueError(f"a SelfComposedDpEvent count must be >= 0, got {count!r}")
    if count == 0 or isinstance(event, dp_event.NoOpDpEvent):
        return dp_event.NoOpDpEvent()
    if count == 1:
        return event
    if isinstance(event, dp_event.SelfComposedDpEvent):
        return dp_event.SelfComposedDpEvent(event.event, event.count * count)
    return dp_event.SelfComposedDpEvent(event, count)


def _runs(event: DpEvent) -> list[tuple[DpEvent, int]]:
    """A canonical event as ``(base, count)`` runs: the parts of a composition, a self-composition as one run."""
    if isinstance(event, dp_event.NoOpDpEvent):
        return []
    if isinstance(event, dp_event.ComposedDpEvent):
        return [run for part in event.events for run in _runs(part)]
    if isinstance(event, dp_event.SelfComposedDpEvent):
        return [(event.event, int(event.count))]
    return [(event, 1)]


def is_library_event(event: DpEvent | None) -> bool:
    """Whether ``event`` is one whose RDP curve dphypo computes itself by tested formulas.

    DP-SGD (through dp_accounting), the Gaussian mechanism, :class:`PureDpEvent`, the no-op, and compositions and
    repetitions of these: the events :func:`~dphypo.privacy.adaptive.check_theorem_b_curve` trusts.
    """
    if isinstance(event, (dp_event.GaussianDpEvent, PureDpEvent, dp_event.NoOpDpEvent)):
        return True
    if isinstance(event, dp_event.PoissonSampledDpEvent):
        return isinstance(event.event, dp_event.GaussianDpEvent)
    if isinstance(event, dp_event.SelfComposedDpEvent):
        return is_library_event(event.event)
    if isinstance(event, dp_event.ComposedDpEvent):
        return all(is_library_event(part) for part in event.events)
    return False


def describe_event(event: DpEvent | None, *, exact: bool = False) -> str:
    """A one-line human-readable description, e.g. ``DP-SGD(σ=1.1, q=0.0588, steps=170) + Gaussian(σ=7.18)``.

    Args:
        event: The event (``None``: ``"unknown"``).
        exact: Print every number in full (``repr``) instead of 3 significant digits (for two events that differ
            beyond the third digit).

    Returns:
        The description.
    """
    if event is None:
        return "unknown"

    def num(x: Any) -> str:
        if isinstance(x, numbers.Integral) and not isinstance(x, bool):
            return str(int(x))
        if isinstance(x, numbers.Real):
            return repr(float(x)) if exact else f"{float(x):.3g}"
        return repr(x)

    def dpsgd(step: Any, steps: int) -> str | None:
        if isinstance(step, dp_event.PoissonSampledDpEvent) and isinstance(step.event, dp_event.GaussianDpEvent):
            return (f"DP-SGD(σ={num(step.event.noise_multiplier)}, q={num(step.sampling_probability)}, "
                    f"steps={num(steps)})")
        return None

    def show(e: Any, nested: bool = False) -> str:
        if isinstance(e, dp_event.NoOpDpEvent):
            return "data-independent"
        if isinstance(e, dp_event.ComposedDpEvent):
            text = " + ".join(show(part, True) for part in e.events) or "data-independent"
            return f"({text})" if nested and len(e.events) > 1 else text
        if isinstance(e, dp_event.SelfComposedDpEvent):
            return dpsgd(e.event, e.count) or f"{num(e.count)} × {show(e.event, True)}"
        one_step = dpsgd(e, 1)
        if one_step is not None:
            return one_step
        if isinstance(e, dp_event.GaussianDpEvent):
            return f"Gaussian(σ={num(e.noise_multiplier)})"
        if isinstance(e, PureDpEvent):
            return f"pure-DP(ε={num(e.epsilon)})"
        if isinstance(e, DpEvent) and attr.has(type(e)):
            name = type(e).__name__.removesuffix("DpEvent")
            fields = ", ".join(f"{f.name}={show(getattr(e, f.name))}" for f in attr.fields(type(e)))
            return f"{name}({fields})"
        if isinstance(e, (list, tuple)):
            return "[" + ", ".join(show(x) for x in e) + "]"
        return num(e)

    return show(event)


def event_description(event: DpEvent | None) -> dict[str, Any] | None:
    """An exact, JSON-ready description of ``event``: ``{"type": module.Class, field: value, ...}``, recursively.

    What a journal seals for a curve or a profile (:meth:`~dphypo.privacy.profiles.PrivacyProfile.describe`):
    equal events give equal descriptions in every process; numbers are kept exactly (non-finite ones as the strings
    ``"inf"``, ``"-inf"``, ``"nan"``, which JSON lacks).

    Args:
        event: The event, or ``None`` (unknown).

    Returns:
        The description, or ``None``.

    Raises:
        TypeError: A field holds a value with no exact JSON description.
    """
    if event is None:
        return None
    kind = type(event)
    out: dict[str, Any] = {"type": f"{kind.__module__}.{kind.__qualname__}"}
    for field in attr.fields(kind):
        out[field.name] = _json_value(getattr(event, field.name), f"{kind.__name__}.{field.name}")
    return out


def _json_value(value: Any, where: str) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, DpEvent):
        return event_description(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        return number if math.isfinite(number) else str(number)
    if isinstance(value, (list, tuple)):
        return [_json_value(item, f"{where}[{k}]") for k, item in enumerate(value)]
    raise TypeError(f"{where} has no exact JSON description, got {value!r}")
