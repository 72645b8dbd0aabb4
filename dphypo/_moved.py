"""Modules of the flat 0.1 layout, and where they live now: importing an old path fails with one line naming it.

Installed by ``dphypo/__init__.py`` as a meta-path finder, so ``import dphypo.landscapes`` raises
``ModuleNotFoundError: dphypo.landscapes moved to dphypo.simulation.landscapes`` instead of a bare "No module".
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Sequence
from types import ModuleType

__all__ = ["MOVED_MODULES", "install"]

MOVED_MODULES: dict[str, str] = {
    "dphypo.tuner": "dphypo.search.tuner",
    "dphypo.storage": "dphypo.search.storage",
    "dphypo.executors": "dphypo.search.execution",
    "dphypo.surrogate": "dphypo.strategies.surrogate",
    "dphypo.landscapes": "dphypo.simulation.landscapes",
    "dphypo.synthetic": "dphypo.simulation.synthetic",
    "dphypo.simulate": "dphypo.simulation.simulate",
    "dphypo.studies": "dphypo.simulation.studies",
    "dphypo.plots": "dphypo.visualization",
    "dphypo.train.build": "dphypo.simulation.builder",
    "dphypo.privacy.audit": "dphypo.testing.audit",
    "dphypo.privacy.distributions": "dphypo.privacy.run_counts",
    "dphypo.privacy.binomial": "dphypo.privacy.run_counts",
    "dphypo.train.private": "dphypo.train.plan (DPSGDPlan) and dphypo.train.opacus (make_private)",
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
