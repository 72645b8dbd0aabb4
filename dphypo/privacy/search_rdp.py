r"""The RDP curve of a whole search from the one theorem that covers its (run-count family, C, c).

The dispatcher :func:`tuning_rdp` sits above both the published theorems (:mod:`dphypo.privacy.tuning`) and the
proven adaptive bounds (:mod:`dphypo.privacy.adaptive`) so that neither of those modules imports the other's
caller: TNB T goes to :func:`~dphypo.privacy.adaptive.adaptive_rdp` (Theorem A of ``docs/proofs/adaptive.md`` for
C > c, Papernot & Steinke 2022 (arXiv:2110.03620v2) Theorem 2 for C = c = 1), Poisson T with C = c = 1 to
Papernot-Steinke Theorem 6, and Poisson T with C > c is refused (DP-HyPO, arXiv:2306.05734v2, states no Poisson
theorem).
"""

from __future__ import annotations

from dphypo.privacy.adaptive import adaptive_rdp, check_adaptive_theorem
from dphypo.privacy.errors import DphypoError
from dphypo.privacy.rdp import RdpCurve
from dphypo.privacy.run_counts import Poisson, RunCountDistribution, TruncatedNegativeBinomial
from dphypo.privacy.tuning import TuningRdp, check_density_bounds, papernot_steinke_theorem6

__all__ = ["AdaptivePoissonError", "tuning_rdp"]


class AdaptivePoissonError(DphypoError, ValueError):
    """An adaptive search (C > c) with Poisson T: no theorem covers it, so no ε is reported."""


def tuning_rdp(
    base: RdpCurve,
    run_count: RunCountDistribution,
    C: float = 1.0,
    c: float = 1.0,
    *,
    adaptive_theorem: str = "A",
) -> TuningRdp:
    """The RDP curve of a search, from the one theorem that covers (run-count family, C, c).

    TNB T: for C > c, Theorem A of ``docs/proofs/adaptive.md`` (:func:`~dphypo.privacy.adaptive.theorem_a`,
    proven, default) or, with ``adaptive_theorem="published"``, DP-HyPO Theorem 1 as printed (its proof has a
    gap; the statement is implied by Theorem A); for C = c = 1, Papernot & Steinke 2022 Theorem 2 either way.

    Raises:
        AdaptivePoissonError: Poisson T with C > c (no theorem).
        TypeError: An unsupported run-count distribution.
        ValueError: ``adaptive_theorem`` is not ``"A"`` or ``"published"``.
    """
    check_adaptive_theorem(adaptive_theorem)
    check_density_bounds(C, c)
    if isinstance(run_count, TruncatedNegativeBinomial):
        return adaptive_rdp(base, run_count, C, c, adaptive_theorem)
    if isinstance(run_count, Poisson):
        if c < C:
            raise AdaptivePoissonError(
                f"an adaptive search (C={C:g} > c={c:g}) with Poisson T has no privacy theorem: DP-HyPO "
                "proves Theorem 1 for truncated negative binomial T only (its Poisson remark gives no "
                "statement); use --runs negbin/geometric/logarithmic, or C = c = 1 for a uniform search"
            )
        return papernot_steinke_theorem6(base, run_count)
    raise TypeError(f"no tuning theorem for run-count distribution {run_count!r}")
