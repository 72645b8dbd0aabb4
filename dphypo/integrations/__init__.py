"""Bridges to other tuning libraries' interfaces; each submodule imports its library only when it is imported.

* :mod:`dphypo.integrations.optuna` — run an Optuna-style ``objective(trial)`` inside dphypo's private search
  (``pip install "dphypo[optuna]"``).

This package imports no optional dependency itself, so ``import dphypo.integrations`` always works.
"""

from __future__ import annotations

__all__: list[str] = []
