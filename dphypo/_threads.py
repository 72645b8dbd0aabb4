"""One intra-op thread by default.

On small shared machines two OpenMP threads spin-wait on each other's barriers and made BoTorch fits and
DP-SGD steps 3-15x slower (see ``shared/notes/machine-and-install.md`` section 0). Parallelism in dphypo comes
from processes, so every module that imports torch calls :func:`limit_torch_threads` first. Users who want
more threads set ``DPHYPO_TORCH_THREADS``.
"""

from __future__ import annotations

import os

_DONE = False


def limit_torch_threads() -> None:
    """Set torch's intra-op thread count once per process (default 1, or ``$DPHYPO_TORCH_THREADS``)."""
    global _DONE
    if _DONE:
        return
    import torch

    n = int(os.environ.get("DPHYPO_TORCH_THREADS", "1"))
    if n < 1:
        raise ValueError(f"DPHYPO_TORCH_THREADS must be a positive integer, got {n}")
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    _DONE = True
