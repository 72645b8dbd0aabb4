"""What every journal shares (dphypo/search/storage/base.py): a changed configuration is refused by field."""

from __future__ import annotations

import pytest

from dphypo.search.storage import JournalMismatch, SQLiteJournal
from tests.search.storage._helpers import CONFIG, _sealed


def test_a_changed_configuration_is_refused_naming_the_fields(tmp_path) -> None:
    _sealed(tmp_path / "j.db").close()
    changed = {**CONFIG, "seed": 8, "privacy": {**CONFIG["privacy"], "C": 1.5}}
    with SQLiteJournal.open(tmp_path / "j.db") as journal, pytest.raises(JournalMismatch) as err:
        journal.verify(changed)
    assert "privacy.C" in str(err.value) and "seed" in str(err.value) and "runs" not in str(err.value)

