"""Poisson batches of K candidates, drawn exactly as Opacus's ``DPDataLoader`` draws them, packed into fixed chunks.

Opacus 1.6 (``opacus/data_loader.py``, ``opacus/utils/uniform_sampler.py``, ``opacus/privacy_engine.py``):

* ``DPDataLoader.from_data_loader(loader)`` samples at rate ``1 / len(loader)`` (``len(loader)`` =
  ``mechanism.batches_per_epoch``), and its ``UniformWithReplacementSampler`` yields ``int(1 / rate)`` batches per epoch
  (``mechanism.steps_per_epoch``), each ``torch.rand(n, generator=g) < rate``: every example independently;
* each epoch, torch's ``DataLoader`` iterator first draws a base seed ``torch.empty((), dtype=torch.int64)
  .random_(generator=g)`` from the same generator (``torch/utils/data/dataloader.py``), then the sampler draws;
* the ``DPOptimizer`` divides the noisy sum by ``expected_batch_size = int(len(dataset) * sample_rate)`` with
  ``sample_rate = 1 / len(dp_loader)`` (``mechanism.sample_rate``, the rate the accountant books).

:func:`epoch_masks` replays these draws call for call on each candidate's own sampling generator, so a candidate
seeded like a run of the Opacus path (``run_stream_seed(seed, SAMPLING_STREAM)``) gets the very same batches.

:func:`physical_batch_size` fixes the padded rows per candidate per chunk from public quantities only (n, the rate,
K, the per-example memory of the model and the memory budget); :func:`pack` spreads each step's Poisson batches
over as many chunks as the largest of them needs: no example is ever dropped.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch import Tensor

__all__ = ["epoch_masks", "expected_batch_size", "pack", "physical_batch_size", "poisson_rate"]

#: Bytes of scratch per mask block (rand floats + bools) per candidate at most.
_MASK_BLOCK_BYTES = 8 * 2**20

#: The fixed cost of one chunk (Python and kernel launches), expressed in bytes of per-example work.
_CHUNK_OVERHEAD_BYTES = 4 * 2**20


def poisson_rate(batches_per_epoch: int) -> float:
    """The rate Opacus's ``DPDataLoader`` samples each example with: ``1 / len(original loader)``."""
    return 1 / batches_per_epoch


def expected_batch_size(n: int, sample_rate: float) -> int:
    """Opacus's divisor of the noisy sum: ``int(len(dataset) * sample_rate)`` (``privacy_engine.make_private``)."""
    return int(n * sample_rate)


def epoch_masks(
    generators: Sequence[torch.Generator], n: int, rate: float, steps: int
) -> Iterator[Tensor]:
    """One epoch of Poisson masks for K candidates, in blocks of steps, each from its candidate's generator.

    Per generator the draws are exactly a ``DPDataLoader`` epoch: the ``DataLoader`` base seed, then one
    ``torch.rand(n) < rate`` per step (``torch.rand(T, n)`` equals T successive ``torch.rand(n)``).

    Args:
        generators: K CPU generators (one per candidate; secret).
        n: Training examples.
        rate: Sampling rate (:func:`poisson_rate`).
        steps: Steps in the epoch.

    Yields:
        Bool masks of shape ``(T, K, n)``, T ≤ steps, covering the epoch's steps in order.
    """
    k = len(generators)
    for g in generators:
        torch.empty((), dtype=torch.int64).random_(generator=g)  # the DataLoader iterator's base seed
    block = max(1, min(steps, _MASK_BLOCK_BYTES // (5 * n)))
    done = 0
    while done < steps:
        t = min(block, steps - done)
        masks = torch.empty((t, k, n), dtype=torch.bool)
        for i, g in enumerate(generators):
            masks[:, i] = torch.rand((t, n), generator=g) < rate
        done += t
        yield masks


def pack(masks: Tensor, rows: int, pad_index: int) -> tuple[Tensor, Tensor, list[int]]:
    """Spread each step's K Poisson batches over fixed-size chunks of ``rows`` examples per candidate.

    Step t needs ``ceil(max_k |batch_{t,k}| / rows)`` chunks (0 when every batch is empty); candidate k's selected
    indices fill its row positions in increasing order, the rest point at ``pad_index`` and are invalid.

    Args:
        masks: ``(T, K, n)`` bool.
        rows: Padded examples per candidate per chunk (≥ 1).
        pad_index: Index of the public padding example.

    Returns:
        ``(index, valid, chunks)``: ``index`` ``(T, K, W)`` int64 and ``valid`` ``(T, K, W)`` bool with
        ``W = max_t chunks[t] * rows``, and ``chunks`` (length T).
    """
    t, k, _ = masks.shape
    counts = masks.sum(-1)  # (T, K)
    chunks = [int(c) for c in (counts.max(1).values + rows - 1) // rows]
    width = max(chunks, default=0) * rows
    index = torch.full((t * k, width), pad_index, dtype=torch.int64)
    valid = torch.zeros((t * k, width), dtype=torch.bool)
    if width:
        row, col = masks.reshape(t * k, -1).nonzero(as_tuple=True)
        flat_counts = counts.view(-1)
        start = torch.cumsum(flat_counts, 0) - flat_counts
        position = torch.arange(row.numel()) - start[row]
        index[row, position] = col
        valid[row, position] = True
    return index.view(t, k, width), valid.view(t, k, width), chunks


def physical_batch_size(
    n: int, rate: float, k: int, *, example_bytes: int, memory_bytes: int
) -> int:
    """Padded examples per candidate per chunk, a function of public quantities only.

    Minimises the expected work per step, ``E[chunks] · (rows + overhead)``, where ``chunks`` is the number of
    chunks the largest of K independent Binomial(n, rate) batches needs, over ``rows`` with
    ``K · rows · example_bytes ≤ memory_bytes``. A batch larger than ``rows`` is processed in several chunks, so
    the choice changes the speed, never the result.

    Args:
        n: Training examples.
        rate: Poisson rate.
        k: Candidates per pass.
        example_bytes: Estimated memory of one example's forward/backward for one candidate.
        memory_bytes: Memory budget of one chunk.

    Returns:
        Rows per candidate per chunk, between 1 and n.
    """
    from scipy.stats import binom

    example_bytes = max(1, int(example_bytes))
    cap = int(max(1, min(n, memory_bytes // (k * example_bytes))))
    overhead = _CHUNK_OVERHEAD_BYTES / (k * example_bytes)
    sf = binom.sf(np.arange(n + 1), n, rate)  # P(batch > m)
    with np.errstate(divide="ignore"):  # sf == 1 gives log1p(-1) = -inf, hence P(max > m) = 1 exactly
        p_max_over = -np.expm1(k * np.log1p(-sf))  # P(max of K batches > m) = 1 - (1 - sf)^K
    options = sorted({*range(1, min(cap, 8) + 1), *range(8, cap + 1, 8), cap})
    best, best_cost = cap, math.inf
    for rows in options:
        expected_chunks = float(p_max_over[0 : n + 1 : rows].sum())
        cost = expected_chunks * (rows + overhead)
        if cost < best_cost * (1 - 1e-9):
            best, best_cost = rows, cost
    return best
