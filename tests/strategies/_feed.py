"""Feeding a strategy session a growing list of observations, as tests like to write them.

Sessions observe incrementally (``observe(index, score)``, then ``density()``); tests often hold the whole history
and ask for the density after each prefix. :func:`density_after` observes the part of ``observations`` the session
has not seen yet (it must extend what it has seen) and returns the next density.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_SEEN = "_test_seen"


def density_after(session: object, observations: Sequence[tuple[int, float]]) -> np.ndarray:
    """The session's density after ``observations`` (a prefix of them already observed through this helper)."""
    seen: list[tuple[int, float]] = getattr(session, _SEEN, [])
    new = list(observations)
    assert [(i, float(y)) for i, y in new[: len(seen)]] == [(i, float(y)) for i, y in seen], \
        "observations must extend what the session has seen"
    for index, score in new[len(seen):]:
        session.observe(index, score)  # type: ignore[attr-defined]
    setattr(session, _SEEN, new)
    return session.density()  # type: ignore[attr-defined]


def batch_densities_after(batch: object, indices: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """A batch session's densities after each member's first t runs (``indices``/``scores`` of shape (B, t))."""
    members = np.arange(indices.shape[0])
    done = getattr(batch, _SEEN, 0)
    for j in range(done, indices.shape[1]):
        batch.observe(members, indices[:, j], scores[:, j])  # type: ignore[attr-defined]
    setattr(batch, _SEEN, indices.shape[1])
    return batch.densities(members)[0]  # type: ignore[attr-defined]
