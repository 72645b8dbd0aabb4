"""The Opacus glue of a DP-SGD run: one seeded ``PrivacyEngine``, quiet warnings, the secure-mode check.

Opacus and torch are imported only inside :func:`attach_engine`; the plan (:mod:`dphypo.train.plan`) decides the
numbers and checks them, and documents the Opacus conventions its arithmetic follows. Nothing here imports the
rest of :mod:`dphypo.train`.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dphypo.search.plan import RunHandle

__all__ = ["attach_engine", "csprng_available", "make_private", "quiet_opacus", "require_csprng"]


@contextmanager
def quiet_opacus() -> Iterator[None]:
    """Silence Opacus's benign warnings *locally* (not via the global filter list).

    "Secure RNG turned off" (we document ``secure_mode=False``) and torch's "Full backward hook is firing ..."
    (Opacus's hooks mode on a first layer whose input does not require grad) say nothing actionable here.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Secure RNG turned off")
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        yield


def make_private(
    run: RunHandle, module: Any, optimizer: Any, data_loader: Any, *, max_grad_norm: float
) -> tuple[Any, Any, Any]:
    """Wrap a model for DP-SGD exactly as ``run.plan`` says (:meth:`dphypo.train.DPSGDPlan.make_private`).

    The same as ``run.make_private(...)``; see the plan's method for the seeding and the checks.

    Raises:
        ValueError: The run has no plan.
    """
    if run.plan is None:
        raise ValueError("run.plan must be a DPSGDPlan to train with DP-SGD (pass plan= to the Tuner), got None")
    return run.plan.make_private(run, module, optimizer, data_loader, max_grad_norm=max_grad_norm)


def attach_engine(
    module: Any,
    optimizer: Any,
    data_loader: Any,
    *,
    sigma: float,
    max_grad_norm: float,
    secure_mode: bool,
    noise_seed: int | None,
    sampling_seed: int | None,
    steps_per_epoch: int,
) -> tuple[Any, Any, Any, Any]:
    """One Opacus ``PrivacyEngine`` (RDP accountant, Poisson sampling) around a model, seeded as given.

    Args:
        module: The model.
        optimizer: A torch optimizer over its parameters.
        data_loader: The training loader (its length sets Opacus's sampling rate ``1 / len(data_loader)``).
        sigma: Noise multiplier.
        max_grad_norm: Per-example clipping norm.
        secure_mode: Opacus's CSPRNG for noise and batches (then nothing is seeded).
        noise_seed: Seed of the noise generator (``None`` in secure mode).
        sampling_seed: Seed of the Poisson sampler (``None`` in secure mode).
        steps_per_epoch: Batches per epoch the caller's accounting expects of Opacus's ``DPDataLoader``.

    Returns:
        ``(engine, module, optimizer, dp_loader)`` as wrapped by Opacus.

    Raises:
        RuntimeError: Opacus's loader yields another number of batches than ``steps_per_epoch``.
    """
    import torch
    from opacus import PrivacyEngine

    if secure_mode:
        require_csprng()
    device = next(iter(module.parameters())).device
    noise = None if noise_seed is None else torch.Generator(device=device).manual_seed(noise_seed)
    with quiet_opacus():
        engine = PrivacyEngine(accountant="rdp", secure_mode=secure_mode)
        module, optimizer, dp_loader = engine.make_private(
            module=module,
            optimizer=optimizer,
            data_loader=data_loader,
            noise_multiplier=sigma,
            max_grad_norm=float(max_grad_norm),
            poisson_sampling=True,
            noise_generator=noise,
        )
    if sampling_seed is not None:  # Opacus builds the Poisson sampler from data_loader.generator (global RNG if None)
        sampling = torch.Generator().manual_seed(sampling_seed)
        dp_loader.batch_sampler.generator = sampling
        dp_loader.generator = sampling
    if len(dp_loader) != steps_per_epoch:  # a changed Opacus convention would void the plan's arithmetic
        raise RuntimeError(
            f"Opacus's DPDataLoader yields {len(dp_loader)} batches per epoch, the plan expected "
            f"{steps_per_epoch}; this Opacus version samples differently from what dphypo accounts for"
        )
    return engine, module, optimizer, dp_loader


def csprng_available() -> bool:
    """Whether Opacus's secure mode can run here (its CSPRNG, ``torchcsprng``, is importable)."""
    import importlib.util

    return importlib.util.find_spec("torchcsprng") is not None


def require_csprng() -> None:
    """Raise a one-line ``ValueError`` unless :func:`csprng_available`."""
    if not csprng_available():
        raise ValueError(
            "secure_mode needs Opacus's CSPRNG package torchcsprng, which is not importable here (no wheel for "
            "this torch on PyPI); install a torchcsprng built for your torch, or run without secure mode "
            "(docs/privacy.md says what that means)"
        )
