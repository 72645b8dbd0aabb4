"""Names this version renamed or moved fail with one line naming their replacement (issue #21)."""

from __future__ import annotations

import importlib
import re

import pytest

import dphypo
from dphypo._moved import MOVED_MODULES


@pytest.mark.parametrize("old", sorted(MOVED_MODULES))
def test_an_old_module_path_names_the_new_one(old: str) -> None:
    new = MOVED_MODULES[old]
    with pytest.raises(ModuleNotFoundError, match=f"^{re.escape(old)} moved to {re.escape(new)}$"):
        importlib.import_module(old)
    for module in re.findall(r"dphypo(?:\.\w+)+", new):
        importlib.import_module(module)  # every new path named exists


@pytest.mark.parametrize(("old", "new"), [("PrivacyPlan", "PrivacyAccounting"), ("SearchSpec", "RepeatAndSelect")])
def test_an_old_top_level_name_names_the_new_one(old: str, new: str) -> None:
    with pytest.raises(AttributeError, match=f"^dphypo.{old} was renamed dphypo.{new}$"):
        getattr(dphypo, old)
    assert getattr(dphypo, new).__name__ == new


@pytest.mark.parametrize(("module", "old", "new"), [
    ("dphypo.train", "DPSGDPlan", "dphypo.train.DPSGDMechanism"),
    ("dphypo.search.storage", "SealedPlan", "dphypo.search.storage.SealedSearch"),
    ("dphypo.search.storage", "plan_digest", "dphypo.search.storage.seal_digest"),
    ("dphypo.strategies", "GPUCBSession", "dphypo.strategies.GPSession"),
    ("dphypo.strategies", "oriented_scores", "dphypo.strategies.orient"),
])
def test_an_old_name_in_a_subpackage_names_the_new_one(module: str, old: str, new: str) -> None:
    package = importlib.import_module(module)
    with pytest.raises(AttributeError, match=f"^{re.escape(module)}.{old} was renamed {re.escape(new)}$"):
        getattr(package, old)
    owner, _, name = new.rpartition(".")
    assert getattr(importlib.import_module(owner), name) is not None


def test_unknown_modules_and_names_still_fail_plainly() -> None:
    with pytest.raises(ModuleNotFoundError, match=r"No module named .dphypo\.nonexistent."):
        importlib.import_module("dphypo.nonexistent")
    with pytest.raises(AttributeError, match="has no attribute 'nonexistent'"):
        dphypo.nonexistent  # noqa: B018


def test_every_public_name_resolves() -> None:
    for name in dphypo.__all__:
        assert getattr(dphypo, name) is not None, name
