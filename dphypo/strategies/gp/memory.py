"""Memory of the GP posterior on the grid: the bound per member that batch sizes are chosen by.

Pure Python (no torch), so that a caller can size its batches before it loads the GP stack. The bound follows from
:mod:`dphypo.strategies.gp.posterior`'s compression: a member's factor V holds at most min(t, 2u) + 1 rows of n
float64s after t runs with u ≤ min(n, t) distinct points.
"""

from __future__ import annotations

__all__ = ["FACTOR_COPIES", "FIT_CHUNK_COPIES", "POSTERIOR_CHUNK", "factor_bytes", "job_bytes", "max_rows"]

#: Members whose grid posteriors a fit computes at once (:func:`dphypo.strategies.gp.fit.fit_surrogate`): its
#: (chunk, u, n) cross-covariance temporaries are bounded by the chunk, not by the batch.
POSTERIOR_CHUNK = 8
#: (chunk, u, n) float64 temporaries alive at once in a chunk's posterior (cross-covariances, the solved rows and
#: a product-kernel intermediate).
FIT_CHUNK_COPIES = 3

#: Peak copies of the widest factor a session holds at once, per row bound: the factor's capacity (rows grow by half
#: again, 1.5), the new buffer while it grows (1.5 more, the old one still alive), and a fit's posterior factor
#: before it is put into the session (1).
FACTOR_COPIES = 4.0


def max_rows(size: int, observations: int) -> int:
    """Most rows of V a member holds after ``observations`` runs on a grid of ``size`` points (module docstring).

    min(t, 2u) + 1 with u ≤ min(n, t) distinct points: ``min(t, 2n) + 1``.
    """
    return min(int(observations), 2 * int(size)) + 1


def factor_bytes(size: int, observations: int) -> int:
    """Peak bytes of one member's GP posterior state on a grid of n = ``size`` points after t runs.

    8·n·(FACTOR_COPIES·(min(t, 2n) + 1) + 4): the factor V in its copies (:data:`FACTOR_COPIES`) plus the mean,
    variance, one new row and its prior column (n float64s each). O(n·min(t, n)), never the (2n, n) of a factor
    that only compresses at n.
    """
    return 8 * int(size) * int(FACTOR_COPIES * max_rows(size, observations) + 4)


def job_bytes(members: int, size: int, observations: int) -> int:
    """Peak bytes of the GP state of one batched session: ``members`` members plus one fit chunk's temporaries.

    members·:func:`factor_bytes` + 8·n·(min(t, n) + 1)·POSTERIOR_CHUNK·FIT_CHUNK_COPIES (a fit has u ≤ min(t, n)
    distinct training points).
    """
    chunk = 8 * int(size) * (min(int(observations), int(size)) + 1) * POSTERIOR_CHUNK * FIT_CHUNK_COPIES
    return int(members) * factor_bytes(size, observations) + chunk
