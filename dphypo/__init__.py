"""dphypo: adaptive differentially private hyperparameter optimisation (DP-HyPO).

Heavy submodules (torch, BoTorch, Opacus) are imported lazily, so ``import dphypo`` and the accounting stay fast.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
