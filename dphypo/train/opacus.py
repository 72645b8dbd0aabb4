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
    "check_grad_sample_mode",
    "csprng_available",
    "drop_non_finite_examples",
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


#: Opacus's per-sample gradient modes dphypo lets a run choose (the mechanism and ε are the same in each). Ghost
#: clipping is not among them: its second backward pass sums every record's rescaled loss, so a record whose gradient
#: is not finite makes the whole update non-finite (0 · ∞), and one record would decide the run's failure outside ε
#: (privacy rule 5); the modes here materialise per-example gradients, which :func:`drop_non_finite_examples` cleans.
GRAD_SAMPLE_MODES = ("hooks", "functorch", "ew")


def check_grad_sample_mode(grad_sample_mode: str) -> None:
    """Refuse a per-sample gradient mode outside :data:`GRAD_SAMPLE_MODES`, in one line (ghost clipping: why).

    Raises:
        ValueError: Ghost clipping, or an unknown mode.
    """
    if grad_sample_mode == "ghost":
        raise ValueError("grad_sample_mode='ghost' is refused: ghost clipping's second backward pass sums every "
                         "record's loss, so one record with a non-finite gradient makes the whole update non-finite "
                         "and decides the run's failure outside epsilon (privacy rule 5); use 'hooks', 'functorch' "
                         "or 'ew'")
    if grad_sample_mode not in GRAD_SAMPLE_MODES:
        raise ValueError(f"grad_sample_mode must be one of {GRAD_SAMPLE_MODES}, got {grad_sample_mode!r}")


def drop_non_finite_examples(optimizer: Any) -> None:
    """Make a record whose per-example gradient is not finite contribute zero before Opacus clips (in place).

    Opacus's clip factor ``min(1, C / (‖g_i‖ + 1e-6))`` is 0 for an infinite norm and NaN for a NaN one, and
    ``0 · ∞ = NaN``: one record with an overflowing loss would make the noisy sum, hence the run's "failure", a
    function of that record alone, which neither DP-SGD nor the score release bounds. Zeroing the record's
    per-example gradients (every parameter's, so its total norm is 0) keeps each record's clipped term within norm C,
    so the mechanism and its ε are unchanged, and a run then fails only when its released noisy update is not finite.

    Args:
        optimizer: Opacus's ``DPOptimizer`` (its ``clip_and_accumulate`` is wrapped on this instance).
    """
    import torch

    clip_and_accumulate = optimizer.clip_and_accumulate

    def finite_rows(grad_sample: Any) -> Any:
        return torch.isfinite(grad_sample.reshape(len(grad_sample), -1)).all(1)

    def zero_rows(grad_sample: Any, keep: Any) -> None:
        grad_sample.copy_(torch.where(keep.view(-1, *([1] * (grad_sample.dim() - 1))), grad_sample, 0))

    def cleaned() -> None:
        params = [p for p in optimizer.params if getattr(p, "grad_sample", None) is not None]
        parts = [p.grad_sample if isinstance(p.grad_sample, list) else [p.grad_sample] for p in params]
        for batch in zip(*parts, strict=True):  # one entry per accumulated physical batch
            if not batch or len(batch[0]) == 0:
                continue
            keep = finite_rows(batch[0])
            for grad_sample in batch[1:]:
                keep = keep & finite_rows(grad_sample)
            if not bool(keep.all()):
                for grad_sample in batch:
                    zero_rows(grad_sample, keep)
        clip_and_accumulate()

    optimizer.clip_and_accumulate = cleaned


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
    expected_batch_size: int | None = None,
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
        grad_sample_mode: One of :data:`GRAD_SAMPLE_MODES`.
        expected_batch_size: The divisor of the noisy gradient sum (``loss_reduction="mean"``), from public sizes;
            replaces Opacus's ``int(len(dataset) · sample_rate)``, which uses the realised training-set size (a
            per-record split's or a subsample's depends on the data: docs/proofs/split.md §5). ``None``: Opacus's.

    Returns:
        ``(engine, module, optimizer, dp_loader)`` as wrapped by Opacus; the optimizer drops a record whose
        per-example gradient is not finite before clipping (:func:`drop_non_finite_examples`).

    Raises:
        ValueError: A mode outside :data:`GRAD_SAMPLE_MODES` (ghost clipping, with the reason).
        RuntimeError: Opacus's loader yields another number of batches than ``steps_per_epoch``.
    """
    import torch
    from opacus import PrivacyEngine

    check_grad_sample_mode(grad_sample_mode)
    if secure_mode:
        require_csprng()
    device = next(iter(module.parameters())).device
    noise = None if noise_seed is None else torch.Generator(device=device).manual_seed(noise_seed)
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
            grad_sample_mode=grad_sample_mode,
        )
    module, optimizer, dp_loader = made
    if expected_batch_size is not None:
        if not (isinstance(expected_batch_size, int) and expected_batch_size >= 1):
            raise ValueError(f"expected_batch_size must be a positive integer, got {expected_batch_size!r}")
        optimizer.expected_batch_size = expected_batch_size  # the public divisor, not the realised length's
    drop_non_finite_examples(optimizer)
    if sampling_seed is not None:  # Opacus builds the Poisson sampler from data_loader.generator (global RNG if None)
        sampling = torch.Generator().manual_seed(sampling_seed)
        dp_loader.batch_sampler.generator = sampling
        dp_loader.generator = sampling
    if len(dp_loader) != steps_per_epoch:  # a changed Opacus convention would void the mechanism's arithmetic
        raise RuntimeError(
            f"Opacus's DPDataLoader yields {len(dp_loader)} batches per epoch, the mechanism expected "
            f"{steps_per_epoch}; this Opacus version samples differently from what dphypo accounts for"
        )
    return engine, module, optimizer, dp_loader


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
