"""Torch's intra-op thread count for dphypo's own torch work, set reversibly.

On small shared machines two OpenMP threads spin-wait on each other's barriers and made BoTorch fits and
DP-SGD steps 3-15x slower (see ``shared/notes/machine-and-install.md`` section 0). Parallelism in dphypo comes
from processes, so dphypo's own torch work (training a candidate, fitting a surrogate) runs inside
:func:`torch_threads`, which restores the caller's count afterwards: a user's own training in the same process
keeps its threads. Users who want more threads for dphypo's work set ``DPHYPO_TORCH_THREADS``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

__all__ = ["default_threads", "torch_threads"]


def default_threads() -> int:
    """``$DPHYPO_TORCH_THREADS`` (a positive integer), else 1."""
    text = os.environ.get("DPHYPO_TORCH_THREADS", "1")
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"DPHYPO_TORCH_THREADS must be a positive integer, got {text!r}")
    return n


@contextlib.contextmanager
def torch_threads(n: int | None = None) -> Iterator[int]:
    """Run the block with torch's intra-op thread count set to ``n``, then restore the previous count.

    Nestable (each level restores what it found), and restored on an exception too.

    Args:
        n: Threads, ≥ 1 (default :func:`default_threads`: ``$DPHYPO_TORCH_THREADS`` or 1).

    Yields:
        The count in force inside the block.

    Example:
        >>> import torch
        >>> before = torch.get_num_threads()
        >>> with torch_threads(1):
        ...     torch.get_num_threads()
        1
        >>> torch.get_num_threads() == before
        True
    """
    if n is None:
        n = default_threads()
    elif isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    import torch

    previous = torch.get_num_threads()
    if previous != n:
        torch.set_num_threads(n)
    try:
        yield n
    finally:
        if torch.get_num_threads() != previous:
            torch.set_num_threads(previous)
