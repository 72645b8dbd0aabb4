"""An on-disk cache of calibrated noise multipliers, keyed by the description of what was calibrated.

A calibrated σ depends only on the mechanism's description (its sampling rate, steps and score noise, the search's
run-count law and density bounds or the two-stage design, the target (ε, δ), the accountant and its theorem), so a
calibration done once need not be repeated: ``dphypo tune`` with the same settings, a planner candidate seen
before, a test that calibrates the default again. The entry is found by the SHA-256 of a canonical JSON of that
description, :data:`ACCOUNTING_VERSION`, dphypo's and dp_accounting's versions (:func:`cache_key`).

**A cache entry is never trusted.** :func:`cached_sigmas` re-certifies a cached σ by one evaluation of the
accountant at full precision (the caller's ``certify``, which returns the report at that σ when it meets the target)
before it is used, and that report is what is printed; an entry that fails, cannot be read, or is not a list of
finite positive numbers is ignored and the calibration recomputed (and the entry rewritten). So a corrupt, stale or
tampered cache can cost time, never a wrong ε. (It can cost noise: a cached σ larger than needed still certifies;
only the calibration itself is tested for minimality.)

Where: ``$DPHYPO_CACHE_DIR``, else ``$XDG_CACHE_HOME/dphypo``, else ``~/.cache/dphypo`` (:func:`cache_dir`), one
small JSON file per entry under ``calibration/``, written atomically (a temporary file renamed into place). A cache
folder that cannot be written is silently not used (a calibration never fails for it). ``DPHYPO_CACHE_DIR=off``
disables the cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import tempfile
from collections.abc import Callable, Mapping
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from dphypo.privacy import PrivacyReport, RepeatAndSelect
    from dphypo.privacy.calibration import CalibrationResult
    from dphypo.train.mechanism import DPSGDMechanism

__all__ = ["ACCOUNTING_VERSION", "cache_dir", "cache_key", "cached_calibration", "cached_sigmas", "read_entry",
           "write_entry"]

#: Bumped whenever an accountant, a theorem or a calibration rule changes what σ a description calibrates to (part of
#: every key, so older entries are simply not found).
ACCOUNTING_VERSION = 1

#: ``DPHYPO_CACHE_DIR`` value that turns the cache off.
DISABLED = "off"

_R = TypeVar("_R")


def cache_dir() -> Path | None:
    """The calibration cache folder: ``$DPHYPO_CACHE_DIR``, ``$XDG_CACHE_HOME/dphypo`` or ``~/.cache/dphypo``.

    Returns:
        ``<folder>/calibration``, or ``None`` when ``DPHYPO_CACHE_DIR=off``.
    """
    explicit = os.environ.get("DPHYPO_CACHE_DIR")
    if explicit == DISABLED:
        return None
    if explicit:
        root = Path(explicit)
    elif os.environ.get("XDG_CACHE_HOME"):
        root = Path(os.environ["XDG_CACHE_HOME"]) / "dphypo"
    else:
        root = Path.home() / ".cache" / "dphypo"
    return root / "calibration"


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:  # pragma: no cover - dphypo and its dependency are installed
        return None


def _versions() -> dict[str, Any]:
    return {"accounting_version": ACCOUNTING_VERSION, "dphypo": _version("dphypo"),
            "dp_accounting": _version("dp-accounting")}


def cache_key(description: Mapping[str, Any]) -> str:
    """The SHA-256 (hex) of the canonical JSON of ``description`` and the accounting versions.

    Args:
        description: JSON-ready (numbers, strings, lists, mappings; floats are written exactly by ``repr``).

    Returns:
        64 hex characters.

    Raises:
        ValueError: A non-finite number or a value JSON cannot hold.
    """
    try:
        canonical = json.dumps({"description": description, **_versions()}, sort_keys=True, separators=(",", ":"),
                               allow_nan=False)
    except TypeError as exc:
        raise ValueError(f"description must be JSON-ready, got {description!r}: {exc}") from exc
    return hashlib.sha256(canonical.encode()).hexdigest()


def _path(key: str) -> Path | None:
    folder = cache_dir()
    return None if folder is None else folder / f"{key}.json"


def read_entry(key: str) -> tuple[float, ...] | None:
    """The σ stored under ``key``, or ``None`` when absent, unreadable or malformed (never raises).

    Returns:
        The stored noise multipliers: finite and positive.
    """
    path = _path(key)
    if path is None:
        return None
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
        sigmas = tuple(float(s) for s in entry["sigmas"]) if entry.get("key") == key else ()
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    if not sigmas or not all(math.isfinite(s) and s > 0.0 for s in sigmas):
        return None
    return sigmas


def write_entry(key: str, sigmas: tuple[float, ...], description: Mapping[str, Any]) -> None:
    """Store ``sigmas`` under ``key`` atomically (temporary file, then rename); a folder that fails is skipped."""
    path = _path(key)
    if path is None:
        return
    payload = json.dumps({"key": key, "sigmas": [float(s) for s in sigmas], "description": description},
                         sort_keys=True, allow_nan=False)
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{key[:16]}.", suffix=".tmp")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as stream:
                stream.write(payload)
            os.replace(temporary, path)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(temporary)


def cached_sigmas(
    description: Mapping[str, Any],
    compute: Callable[[], tuple[tuple[float, ...], _R]],
    certify: Callable[[tuple[float, ...]], _R | None],
) -> tuple[tuple[float, ...], _R]:
    """Calibrated σ from the cache, re-certified, else computed and stored.

    Args:
        description: What σ depends on (the mechanism, the search, the target (ε, δ), the accountant), JSON-ready.
        compute: The calibration: ``(sigmas, report)``, the report at full precision meeting the target.
        certify: One full-precision accounting at the given σ: its report when it meets the target, else ``None``.

    Returns:
        ``(sigmas, report)``: a certified cached entry, or ``compute()``'s result (then stored).
    """
    key = cache_key(description)
    cached = read_entry(key)
    if cached is not None:
        report = certify(cached)
        if report is not None:
            return cached, report
    sigmas, report = compute()
    write_entry(key, tuple(float(s) for s in sigmas), description)
    return sigmas, report


def cached_calibration(
    epsilon: float,
    delta: float,
    search: RepeatAndSelect,
    mechanism: DPSGDMechanism,
    *,
    profiles: bool,
    max_lost: int = 0,
    adaptive_theorem: str = "B",
    profile_for: Callable[[DPSGDMechanism], Any] | None = None,
    cache: bool = True,
) -> CalibrationResult:
    """:func:`~dphypo.privacy.calibrate_sigma` of one DP-SGD run's search, coarse to fine, through the cache.

    The per-run curve is ``mechanism`` at σ (:meth:`~dphypo.train.DPSGDMechanism.rdp`), on
    :data:`~dphypo.privacy.calibration.COARSE_ORDERS` for the coarse search; with ``profiles`` (a uniform search)
    also its privacy profile (``profile_for``; PLDs at
    :data:`~dphypo.privacy.calibration.COARSE_DISCRETIZATION` for the coarse search). A cached σ is returned with the
    report of one full-precision accounting there (``evaluations`` 1).

    Under a per-record split (``mechanism.split_rule``) every evaluation is Theorem S's bound (docs/proofs/split.md:
    each side, the training part and the score part, by every valid bound, PLDs of each part for a uniform search;
    :func:`~dphypo.privacy.split_account.account_split`), and the cache key names the rule, so a σ calibrated for
    one split rule is never found for another (nor for the sum).

    Args:
        epsilon: Total ε.
        delta: δ.
        search: T's law and the density bounds.
        mechanism: The per-run mechanism (its σ is ignored).
        profiles: Use the profile bounds too (uniform searches only: the accountant ignores them otherwise).
        max_lost: Lost attempts charged up front.
        adaptive_theorem: The bound for C > c.
        profile_for: The profile of a mechanism at its σ, or a ``ProfileSkipped`` (required with ``profiles``; e.g.
            :func:`dphypo.api.search.profile_or_skipped`).
        cache: Use the on-disk cache.

    Returns:
        The calibration.
    """
    import dataclasses

    from dphypo.privacy import PrivacyAccounting, calibrate_sigma
    from dphypo.privacy.calibration import COARSE_DISCRETIZATION, COARSE_ORDERS, CalibrationResult
    from dphypo.privacy.profiles import profile_or_skipped

    if profiles and profile_for is None:
        raise ValueError("profile_for must be given with profiles=True (the profile of a mechanism at its sigma)")

    def at(sigma: float) -> DPSGDMechanism:
        return dataclasses.replace(mechanism, sigma=sigma)

    options: dict[str, Any] = {"max_lost": max_lost, "adaptive_theorem": adaptive_theorem,
                               "coarse_curve_for_sigma": lambda s: at(s).rdp(COARSE_ORDERS)}
    rule = mechanism.split_rule
    if rule is not None:  # Theorem S: each part with its own PLD (a uniform search), never the run's summed PLD
        options["split_for_sigma"] = lambda s: _split_at(at(s), profiles)
        options["coarse_split_for_sigma"] = lambda s: _split_at(at(s), profiles, COARSE_ORDERS, COARSE_DISCRETIZATION)
    elif profiles:
        assert profile_for is not None
        profile_of = profile_for
        options["profile_for_sigma"] = lambda s: profile_of(at(s))
        options["coarse_profile_for_sigma"] = lambda s: profile_or_skipped(lambda: at(s).profile(COARSE_DISCRETIZATION))
    result: CalibrationResult | None = None

    def compute() -> tuple[tuple[float, ...], PrivacyReport]:
        nonlocal result
        result = calibrate_sigma(epsilon, delta, search, lambda s: at(s).rdp(), **options)
        return (result.sigma,), result.report

    def certify(sigmas: tuple[float, ...]) -> PrivacyReport | None:
        if len(sigmas) != 1:
            return None
        split = None if rule is None else _split_at(at(sigmas[0]), profiles)
        profile = profile_for(at(sigmas[0])) if profile_for is not None and profiles and rule is None else None
        report = PrivacyAccounting(search, at(sigmas[0]).rdp(), delta, profile=profile, max_lost=max_lost,
                                   adaptive_theorem=adaptive_theorem, split=split).account()
        return report if report.epsilon <= epsilon else None

    if not cache:
        compute()
        assert result is not None
        return result
    description = {"calibration": "single-stage", "epsilon": float(epsilon), "delta": float(delta),
                   "search": search.describe(), "run_count": repr(search.run_count), "max_lost": int(max_lost),
                   "adaptive_theorem": adaptive_theorem, "profiles": bool(profiles),
                   "mechanism": {"sample_rate": mechanism.sample_rate, "steps": mechanism.steps,
                                 "score_noise": mechanism.score_noise}}
    if rule is not None:  # only then: a permutation split's key (the sum) stays what it was
        description.update(split_rule=rule.describe(), split_bound="max")
    sigmas, report = cached_sigmas(description, compute, certify)
    if result is not None:  # computed now
        return result
    return CalibrationResult(sigmas[0], report, sigmas[0] * 1e-4, 1)


def _split_at(mechanism: DPSGDMechanism, profiles: bool, orders: Any = None, discretization: float | None = None
              ) -> Any:
    """The two parts (training, score) of ``mechanism``'s run under its per-record split, with PLDs if ``profiles``."""
    from dphypo.privacy.dpsgd_run import RUN_PROFILE_DISCRETIZATION
    from dphypo.privacy.split_account import split_parts

    assert mechanism.split_rule is not None
    return split_parts(mechanism.sigma, mechanism.sample_rate, mechanism.steps, score_noise=mechanism.score_noise,
                       rule=mechanism.split_rule, orders=orders, profiles=profiles,
                       discretization=RUN_PROFILE_DISCRETIZATION if discretization is None else discretization)
