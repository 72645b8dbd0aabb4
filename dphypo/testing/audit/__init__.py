r"""Exact audit of DP-HyPO's privacy theorems on small discrete instances (pure numpy/scipy, no I/O).

The team trusts this package instead of the paper's proof of Theorem 1 (whose Lemma A.5 uses
``P⁺(≤y) = P⁺(<y) + P⁺(y)`` for suprema over S_{C,c}, where only ``≤`` holds in general). For an instance

* Λ finite (candidates λ), prior π⁽⁰⁾ over Λ, bounds 0 < c ≤ 1 ≤ C;
* base mechanisms given as explicit distributions ``P[λ, y]`` (on D) and ``P′[λ, y]`` (on D′) over an ordered
  score set Y, all entries > 0;
* a deterministic update rule: a finite automaton over outputs whose state fixes the next density
  π⁽ʲ⁺¹⁾ ∈ S_{C,c}(π⁽⁰⁾) (DP-HyPO Framework 1; the first draw uses π⁽⁰⁾);
* T ~ TNB(θ, γ) (DP-HyPO §3.2),

it computes the *exact* distribution of the released best pair o = (λ, y) on D and on D′, with rigorous
intervals for the truncation of T, and compares the exact Rényi divergences (both directions) with
:func:`~dphypo.privacy.tuning.dphypo_theorem1` and the exact max divergence with
:func:`~dphypo.privacy.tuning.dphypo_theorem2`.

Outputs are encoded ``o = y·L + λ`` (L = |Λ|): the total order "score first, ties by candidate index" is
the integer order, so "best" is ``max``. The release reveals λ (Papernot & Steinke 2022, Assumption 2).

Modules (everything public is re-exported here; import from ``dphypo.testing.audit``):

* :mod:`~dphypo.testing.audit._instance`: the instance ingredients (:class:`FixedT`,
  :class:`BaseMechanisms`, :class:`UpdateRule`, :class:`AuditInstance`, :data:`AUDIT_ORDERS`);
* :mod:`~dphypo.testing.audit._engine`: the exact output law with rigorous truncation intervals
  (:func:`output_distribution`), divergence bounds (:func:`renyi_bounds`, :func:`max_divergence_bounds`) and
  the audit itself (:func:`audit_instance`, :class:`AuditResult`);
* :mod:`~dphypo.testing.audit.rules`: update-rule families (:func:`automaton_rule`, :func:`uniform_rule`,
  :func:`lookup_table_rule`, :func:`adversarial_rule`, :func:`history_rule`,
  :func:`softmax_projected_rule`) and :func:`vertex_density`;
* :mod:`~dphypo.testing.audit.generate`: random instances and base-mechanism constructions
  (:func:`random_instance`);
* :mod:`~dphypo.testing.audit.lemma`: Lemma A.5's first display checked pointwise (:func:`lemma_a5_check`,
  :class:`LemmaA5Check`);
* :mod:`~dphypo.testing.audit.flag`: the three-candidate "flag" lower-bound construction of
  ``docs/proofs/adaptive.md`` (Section 8), not re-exported (import it from its module).

The tolerances (``FLOAT_SLACK``, ``VIOLATION_RTOL``, ``VIOLATION_ATOL``, ``DENSITY_ATOL``) and the type
aliases ``Verdict`` and ``RunCount`` are importable from here too (explicit ``X as X`` re-exports, not in
``__all__``).
"""

from __future__ import annotations

from dphypo.testing.audit._engine import FLOAT_SLACK as FLOAT_SLACK
from dphypo.testing.audit._engine import VIOLATION_ATOL as VIOLATION_ATOL
from dphypo.testing.audit._engine import VIOLATION_RTOL as VIOLATION_RTOL
from dphypo.testing.audit._engine import (
    AuditResult,
    OutputInterval,
    audit_instance,
    max_divergence_bounds,
    output_distribution,
    renyi_bounds,
)
from dphypo.testing.audit._engine import Verdict as Verdict
from dphypo.testing.audit._instance import (
    AUDIT_ORDERS,
    AuditInstance,
    BaseMechanisms,
    FixedT,
    UpdateRule,
)
from dphypo.testing.audit._instance import DENSITY_ATOL as DENSITY_ATOL
from dphypo.testing.audit._instance import RunCount as RunCount
from dphypo.testing.audit.generate import random_instance
from dphypo.testing.audit.lemma import LEMMA_A5_TARGET, LemmaA5Check, lemma_a5_check, lemma_a5_counterexample
from dphypo.testing.audit.rules import (
    adversarial_rule,
    automaton_rule,
    history_rule,
    lookup_table_rule,
    softmax_projected_rule,
    uniform_rule,
    vertex_density,
)

__all__ = [
    "AUDIT_ORDERS",
    "LEMMA_A5_TARGET",
    "AuditInstance",
    "AuditResult",
    "BaseMechanisms",
    "FixedT",
    "LemmaA5Check",
    "OutputInterval",
    "UpdateRule",
    "adversarial_rule",
    "audit_instance",
    "automaton_rule",
    "history_rule",
    "lemma_a5_check",
    "lemma_a5_counterexample",
    "lookup_table_rule",
    "max_divergence_bounds",
    "output_distribution",
    "random_instance",
    "renyi_bounds",
    "softmax_projected_rule",
    "uniform_rule",
    "vertex_density",
]
