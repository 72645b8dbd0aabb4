r"""The RDP curves of a whole search from the theorems that cover its (run-count family, C, c).

The dispatcher sits above both the published theorems (:mod:`dphypo.privacy.tuning`) and the proven bounds
(:mod:`dphypo.privacy.adaptive`) so that neither of those modules imports the other's caller.
:func:`rdp_bounds` lists every valid RDP bound by method name:

* TNB T, C = c = 1: ``"rdp"`` (Papernot & Steinke 2022, arXiv:2110.03620v2, Theorem 2 as printed) and, with the
  default ``adaptive_theorem="B"``, ``"rdp-theorem-b"`` (Theorem B of ``docs/proofs/adaptive.md`` at C = c = 1;
  skipped when its curve check refuses the per-run curve). ``"A"`` and ``"published"`` reproduce the accounting
  before Theorem B became the default (results recorded then name their theorem, and stay reproducible);
* TNB T, C > c: one bound, Theorem B (default, ``"rdp-theorem-b"``), or on request Theorem A (``"rdp-theorem-a"``)
  or DP-HyPO Theorem 1 as printed (``"rdp-published-thm1"``);
* Poisson T, C = c = 1: ``"rdp"`` (Papernot-Steinke Theorem 6; Theorem B is proven for TNB T only);
* Poisson T, C > c: refused (DP-HyPO, arXiv:2306.05734v2, states no Poisson theorem, nor does
  ``docs/proofs/adaptive.md``).

:func:`tuning_rdp` is the order-wise minimum of those curves: the curve that composes (RDP adds order by order,
and the minimum of valid bounds is valid at every order), used by lost-attempt charging and subsampled tuning.
"""

from __future__ import annotations

import math

import numpy as np

from dphypo.privacy.adaptive import adaptive_rdp, check_adaptive_theorem, rdp_method_name, uniform_theorem_b
from dphypo.privacy.errors import DphypoError
from dphypo.privacy.rdp import RdpCurve
from dphypo.privacy.run_counts import Poisson, RunCountDistribution, TruncatedNegativeBinomial
from dphypo.privacy.tuning import TuningRdp, check_density_bounds, papernot_steinke_theorem6

__all__ = ["AdaptivePoissonError", "rdp_bounds", "tuning_rdp"]


class AdaptivePoissonError(DphypoError, ValueError):
    """An adaptive search (C > c) with Poisson T: no theorem covers it, so no ε is reported."""


def rdp_bounds(
    base: RdpCurve,
    run_count: RunCountDistribution,
    C: float = 1.0,
    c: float = 1.0,
    *,
    adaptive_theorem: str = "B",
) -> dict[str, TuningRdp]:
    """Every valid RDP curve of a search, by method name (module docstring), each within its proven scope.

    Args:
        base: Per-candidate RDP curve (both directions).
        run_count: Distribution of T.
        C: Upper density-ratio bound ≥ 1.
        c: Lower density-ratio bound in (0, 1].
        adaptive_theorem: ``"B"`` (default: Theorem B for C > c, and Theorem B at C = c = 1 next to
            Papernot-Steinke for a uniform search), ``"A"`` or ``"published"`` (that bound for C > c, and
            Papernot-Steinke alone for a uniform search: the accounting before Theorem B was the default).

    Returns:
        ``{method: curve}``, at least one entry.

    Raises:
        AdaptivePoissonError: Poisson T with C > c (no theorem).
        TypeError: An unsupported run-count distribution.
        ValueError: An unknown ``adaptive_theorem``, or Theorem B for C > c with a per-run curve it refuses.
    """
    check_adaptive_theorem(adaptive_theorem)
    check_density_bounds(C, c)
    if isinstance(run_count, TruncatedNegativeBinomial):
        if c < C:
            return {rdp_method_name(True, adaptive_theorem): adaptive_rdp(base, run_count, C, c, adaptive_theorem)}
        out = {"rdp": adaptive_rdp(base, run_count, 1.0, 1.0)}
        sharp = uniform_theorem_b(base, run_count) if adaptive_theorem == "B" else None
        if sharp is not None:
            out["rdp-theorem-b"] = sharp
        return out
    if isinstance(run_count, Poisson):
        if c < C:
            raise AdaptivePoissonError(
                f"an adaptive search (C={C:g} > c={c:g}) with Poisson T has no privacy theorem: DP-HyPO "
                "proves Theorem 1 for truncated negative binomial T only (its Poisson remark gives no "
                "statement), and so do Theorems A and B; use --runs negbin/geometric/logarithmic, or C = c = 1 "
                "for a uniform search"
            )
        return {"rdp": papernot_steinke_theorem6(base, run_count)}
    raise TypeError(f"no tuning theorem for run-count distribution {run_count!r}")


def tuning_rdp(
    base: RdpCurve,
    run_count: RunCountDistribution,
    C: float = 1.0,
    c: float = 1.0,
    *,
    adaptive_theorem: str = "B",
) -> TuningRdp:
    """The RDP curve of a search that composes: the order-wise minimum of :func:`rdp_bounds`.

    TNB T: for C > c, Theorem B of ``docs/proofs/adaptive.md`` (default), or on request Theorem A or DP-HyPO
    Theorem 1 as printed (its proof has a gap; the statement is implied by Theorem A); for C = c = 1 the minimum
    of Papernot & Steinke 2022 Theorem 2 and Theorem B at C = c = 1 (Theorem 2 alone with ``"A"`` or
    ``"published"``). Poisson T, C = c = 1: Papernot-Steinke Theorem 6. When one bound is below the others at
    every order it is returned as is (its theorem label kept).

    Raises:
        AdaptivePoissonError: Poisson T with C > c (no theorem).
        TypeError: An unsupported run-count distribution.
        ValueError: ``adaptive_theorem`` is not ``"B"``, ``"A"`` or ``"published"``.
    """
    bounds = list(rdp_bounds(base, run_count, C, c, adaptive_theorem=adaptive_theorem).values())
    for tuned in bounds:
        if all(np.all(tuned.curve.epsilons <= other.curve.epsilons) for other in bounds):
            return tuned
    eps = np.min([t.curve.epsilons for t in bounds], axis=0)
    pures = [t.curve.pure_epsilon for t in bounds if t.curve.pure_epsilon is not None]
    label = "order-wise minimum of " + "; ".join(t.curve.label for t in bounds)
    curve = RdpCurve(base.orders, eps, min(pures) if pures else None, label).monotone()
    theorem = "order-wise minimum of " + "; ".join(t.theorem for t in bounds)
    return TuningRdp(curve, math.nan, math.nan, theorem)
