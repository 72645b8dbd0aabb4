"""The GP stack of the adaptive strategies: the model, its fit, its posterior on the grid, the session and the rules.

* :mod:`.model` — BoTorch's default ``SingleTaskGP`` written down as constants (checked against BoTorch in a test);
* :mod:`.likelihood` — replicate-reduced observations and the exact marginal likelihood in closed form;
* :mod:`.fit` — the batched fit (BoTorch's batched L-BFGS-B; BoTorch's ``fit_gpytorch_mll`` as explicit fallback);
* :mod:`.posterior` — the posterior on the grid, conditioned exactly on one observation at a time (low rank:
  O(n·min(t, n)) per member, :mod:`.memory` states the bound);
* :mod:`.session` — :class:`GPSession`: B searches' GPs, observed run by run, refitted on a schedule;
* :mod:`.rules` — :class:`GPUCB` (DP-HyPO Algorithm 3) and :class:`GPTopSet`.

Importing this package does not import torch: :mod:`.rules` and :mod:`.session` load the fit when a session opens.
"""

from __future__ import annotations

from dphypo.strategies.gp.rules import (
    GPUCB,
    GPTopSet,
    check_refit_growth,
    near_best_probability,
    tilted_softmax,
    ucb_scores,
)
from dphypo.strategies.gp.session import GPRule, GPSession

__all__ = [
    "GPUCB",
    "GPRule",
    "GPSession",
    "GPTopSet",
    "check_refit_growth",
    "near_best_probability",
    "tilted_softmax",
    "ucb_scores",
]
