"""Names of the 0.1 layout a user may have typed fail with one line naming their replacement (issue #13)."""

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


@pytest.mark.parametrize(("old", "new"), [("SearchPrivacy", "SearchSpec"), ("PrivacyConfig", "PrivacyPlan")])
def test_an_old_top_level_name_names_the_new_one(old: str, new: str) -> None:
    with pytest.raises(AttributeError, match=f"^dphypo.{old} was renamed dphypo.{new}$"):
        getattr(dphypo, old)
    assert getattr(dphypo, new).__name__ == new


def test_unknown_modules_and_names_still_fail_plainly() -> None:
    with pytest.raises(ModuleNotFoundError, match=r"No module named .dphypo\.nonexistent."):
        importlib.import_module("dphypo.nonexistent")
    with pytest.raises(AttributeError, match="has no attribute 'nonexistent'"):
        dphypo.nonexistent  # noqa: B018


def test_every_public_name_resolves() -> None:
    for name in dphypo.__all__:
        assert getattr(dphypo, name) is not None, name
