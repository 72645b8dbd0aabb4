"""Test-wide settings: one torch thread (see dphypo._threads) and no GUI backend for matplotlib."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
