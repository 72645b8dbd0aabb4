"""The common base of every exception dphypo raises on purpose (a leaf module: it imports nothing).

It lives in :mod:`dphypo.privacy` because that layer imports nothing else from dphypo; :mod:`dphypo.exceptions`
re-exports it with every public exception class, so ``except dphypo.exceptions.DphypoError`` catches them all.
"""

from __future__ import annotations

__all__ = ["DphypoError"]


class DphypoError(Exception):
    """Base class of the exceptions dphypo raises on purpose.

    Subclasses keep a second built-in base where callers used to catch that (e.g. ``ValueError`` for invalid
    privacy parameters), so ``except ValueError`` still works.
    """
