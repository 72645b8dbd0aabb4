"""Test-wide settings: one torch thread (see dphypo._threads), no GUI backend for matplotlib, and a session cache.

The calibration cache (:mod:`dphypo.api.calibration_cache`) lives in a temporary folder for the whole session (set
before anything is imported, so subprocess CLI tests inherit it): the suite never writes to the user's
``~/.cache``, and a calibration repeated across tests is computed once per session. The folder is made by the
process that starts the session and shared by its pytest-xdist workers (they inherit the controller's environment
and are told apart by ``PYTEST_XDIST_WORKER``), so a calibration done by one test process is a cache hit in the
other and in every CLI subprocess. Entries are written atomically (a temporary file renamed into place), so two
processes writing the same entry is safe. Tests of a cold calibration set their own empty ``DPHYPO_CACHE_DIR``
(``monkeypatch.setenv``, tests/api/test_calibration_cache.py).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

#: The session's shared cache folder, inherited by the xdist workers from the process that made it.
_SHARED = "DPHYPO_TEST_SESSION_CACHE"

if os.environ.get("PYTEST_XDIST_WORKER") and os.path.isdir(os.environ.get(_SHARED, "")):
    _CACHE = os.environ[_SHARED]  # the controller's folder (it removes it when the session ends)
else:
    _CACHE = tempfile.mkdtemp(prefix="dphypo-test-cache-")
    os.environ[_SHARED] = _CACHE
    atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
os.environ["DPHYPO_CACHE_DIR"] = _CACHE
