"""The Opacus glue of a DP-SGD run: one seeded ``PrivacyEngine``, quiet warnings, the secure-mode check.

Opacus and torch are imported only inside :func:`attach_engine`; the mechanism (:mod:`dphypo.train.mechanism`) decides
the numbers and checks them, and documents the Opacus conventions its arithmetic follows. Nothing here imports the
rest of :mod:`dphypo.train`.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = [
    "GRAD_SAMPLE_MODES",
    "attach_engine",
    "csprng_available",
    "memory_safe_loader",
    "quiet_opacus",
    "require_csprng",
]


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


#: Opacus's per-sample gradient modes dphypo lets a run choose (the mechanism and ε are the same in each).
GRAD_SAMPLE_MODES = ("hooks", "functorch", "ew", "ghost")


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
    grad_sample_mode: str = "hooks",
    criterion: Any = None,
) -> tuple[Any, Any, Any, Any, Any]:
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
        grad_sample_mode: One of :data:`GRAD_SAMPLE_MODES` (``"ghost"``: fast gradient clipping, with ``criterion``).
        criterion: The loss module (``"ghost"`` only; Opacus returns it wrapped).

    Returns:
        ``(engine, module, optimizer, criterion, dp_loader)`` as wrapped by Opacus (``criterion`` is ``None``
        unless ghost clipping).

    Raises:
        RuntimeError: Opacus's loader yields another number of batches than ``steps_per_epoch``.
    """
    import torch
    from opacus import PrivacyEngine

    if secure_mode:
        require_csprng()
    device = next(iter(module.parameters())).device
    noise = None if noise_seed is None else torch.Generator(device=device).manual_seed(noise_seed)
    options: dict[str, Any] = {"grad_sample_mode": grad_sample_mode}
    if criterion is not None:
        options["criterion"] = criterion
    with quiet_opacus():
        engine = PrivacyEngine(accountant="rdp", secure_mode=secure_mode)
        made = engine.make_private(
            module=module,
            optimizer=optimizer,
            data_loader=data_loader,
            noise_multiplier=sigma,
            max_grad_norm=float(max_grad_norm),
            poisson_sampling=True,
            noise_generator=noise,
            **options,
        )
    if criterion is not None:
        module, optimizer, criterion, dp_loader = made
    else:
        module, optimizer, dp_loader = made
    if sampling_seed is not None:  # Opacus builds the Poisson sampler from data_loader.generator (global RNG if None)
        sampling = torch.Generator().manual_seed(sampling_seed)
        dp_loader.batch_sampler.generator = sampling
        dp_loader.generator = sampling
    if len(dp_loader) != steps_per_epoch:  # a changed Opacus convention would void the mechanism's arithmetic
        raise RuntimeError(
            f"Opacus's DPDataLoader yields {len(dp_loader)} batches per epoch, the mechanism expected "
            f"{steps_per_epoch}; this Opacus version samples differently from what dphypo accounts for"
        )
    return engine, module, optimizer, criterion, dp_loader


def memory_safe_loader(dp_loader: Any, optimizer: Any, max_physical_batch_size: int, contexts: list[Any]) -> Any:
    """Opacus's ``BatchMemoryManager`` around a DP loader: Poisson batches in chunks of at most the given size.

    The optimizer takes one (noisy) step per logical Poisson batch, so the mechanism is unchanged. The manager is
    a context; it is entered here and appended to ``contexts``, which the run's check exits after the run.

    Args:
        dp_loader: Opacus's ``DPDataLoader``.
        optimizer: Opacus's ``DPOptimizer``.
        max_physical_batch_size: Largest physical batch.
        contexts: Where the entered manager is kept.

    Returns:
        The loader to iterate.
    """
    from opacus.utils.batch_memory_manager import BatchMemoryManager

    manager = BatchMemoryManager(data_loader=dp_loader, max_physical_batch_size=max_physical_batch_size,
                                 optimizer=optimizer)
    loader = manager.__enter__()
    contexts.append(manager)
    return loader


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
