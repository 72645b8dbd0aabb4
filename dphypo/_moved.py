"""Modules this version moved (issue #21), and where they live now: importing an old path fails with one line naming it.

Installed by ``dphypo/__init__.py`` as a meta-path finder, so ``import dphypo.train.plan`` raises
``ModuleNotFoundError: dphypo.train.plan moved to dphypo.train.mechanism (DPSGDMechanism)`` instead of a bare "No
module".
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Sequence
from types import ModuleType

__all__ = ["MOVED_MODULES", "install"]

MOVED_MODULES: dict[str, str] = {
    "dphypo.strategies.surrogate": "dphypo.strategies.gp.fit",
    "dphypo.strategies.posterior": "dphypo.strategies.gp.posterior",
    "dphypo.strategies.gpucb": "dphypo.strategies.gp.rules (GPUCB) and dphypo.strategies.gp.session (GPSession)",
    "dphypo.strategies.top_set": "dphypo.strategies.gp.rules",
    "dphypo.search.plan": "dphypo.search.records (RunMechanism)",
    "dphypo.train.plan": "dphypo.train.mechanism (DPSGDMechanism)",
    "dphypo.privacy.plan": "dphypo.privacy.accounting (PrivacyAccounting)",
}


class _MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Refuses the old module paths with a message naming the new one (never finds anything else)."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> None:
        new = MOVED_MODULES.get(fullname)
        if new is not None:
            raise ModuleNotFoundError(f"{fullname} moved to {new}", name=fullname)
        return None


def install() -> None:
    """Add the finder once (idempotent)."""
    if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedModuleFinder())
