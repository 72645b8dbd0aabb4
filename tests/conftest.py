"""Test-wide settings: one torch thread (see dphypo._threads), no GUI backend for matplotlib, and a session cache.

The calibration cache (:mod:`dphypo.api.calibration_cache`) lives in a temporary folder for the whole session (set
before anything is imported, so subprocess CLI tests inherit it): the suite never writes to the user's
``~/.cache``, and a calibration repeated across tests is computed once per session.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

_CACHE = tempfile.mkdtemp(prefix="dphypo-test-cache-")
os.environ["DPHYPO_CACHE_DIR"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
