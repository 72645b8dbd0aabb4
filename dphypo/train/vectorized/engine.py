"""The vectorised DP-SGD engine: K candidates of one model trained in one pass over stacked parameters.

See :mod:`dphypo.train.vectorized` for the mechanism and how it matches Opacus.
"""

from __future__ import annotations

import itertools
import math
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor, nn

from dphypo._threads import torch_threads
from dphypo.privacy.validation import check_non_negative_int, check_positive, check_positive_int, is_real
from dphypo.train.mechanism import INIT_STREAM, NOISE_STREAM, SAMPLING_STREAM, DPSGDMechanism, run_stream_seed
from dphypo.train.models import MODELS, make_model
from dphypo.train.vectorized.batches import (
    epoch_masks,
    expected_batch_size,
    pack,
    physical_batch_size,
    poisson_rate,
)
from dphypo.train.vectorized.layers import ParameterFree, StackedModel, compile_model

__all__ = [
    "CLIP_EPS",
    "CPU_MEMORY_BYTES",
    "CPU_PASS_SIZE",
    "Booked",
    "Candidate",
    "CandidateResult",
    "EngineOptions",
    "PassResult",
    "VectorizedDPSGD",
    "check_model",
    "default_pass_size",
    "example_bytes",
]

#: Default number of candidates per pass on a CPU.
CPU_PASS_SIZE = 32
#: Default memory budget of one chunk on a CPU (bytes): small enough to keep a chunk's working set near the caches.
CPU_MEMORY_BYTES = 128 * 2**20
#: Opacus's guard in the clip factor ``min(1, C / (norm + 1e-6))`` (``DPOptimizer.clip_and_accumulate``).
CLIP_EPS = 1e-6

ModelSpec = str | Callable[[int], nn.Module]



@dataclass(frozen=True)
class Candidate:
    """One candidate of a pass: its hyperparameters and its secret run seed.

    Args:
        lr: Learning rate > 0 of plain SGD.
        clip: Per-example clipping norm C > 0.
        seed: The run seed sᵢ (secret: the caller derives it from the search's secret entropy, e.g. ``run.seed``).
            The engine derives the candidate's initialisation, Poisson-sampling and noise streams from it with
            :func:`~dphypo.train.mechanism.run_stream_seed` and the ``*_STREAM`` ids, exactly as the Opacus path does.
        momentum: SGD momentum in [0, 1) (0: plain SGD, dphypo's default).
    """

    lr: float
    clip: float
    seed: int = field(repr=False)  # secret: kept out of logs and reprs
    momentum: float = 0.0

    def __post_init__(self) -> None:
        check_positive("lr", self.lr)
        check_positive("clip", self.clip)
        check_non_negative_int("seed", self.seed)
        if not (is_real(self.momentum) and 0 <= float(self.momentum) < 1):
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum!r}")
        object.__setattr__(self, "lr", float(self.lr))
        object.__setattr__(self, "clip", float(self.clip))
        object.__setattr__(self, "seed", int(self.seed))
        object.__setattr__(self, "momentum", float(self.momentum))


@dataclass(frozen=True, kw_only=True)
class EngineOptions:
    """How a pass runs (none of these changes any candidate's result, only speed and memory).

    Args:
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ... (default: CUDA when available, else CPU).
        physical_batch_size: Padded examples per candidate per chunk (default: :func:`~.batches.physical_batch_size`
            from n, q, K and the model's per-example memory). A larger Poisson batch runs in several chunks.
        memory_bytes: Memory budget of one chunk (default: 128 MiB on CPU, which keeps the working set small; on
            CUDA 40 % of the free memory when the engine is built, at most 16 GiB).
        threads: Torch intra-op threads during a pass (default :func:`~dphypo._threads.default_threads`).
    """

    device: str | None = None
    physical_batch_size: int | None = None
    memory_bytes: int | None = None
    threads: int | None = None

    def __post_init__(self) -> None:
        if self.device is not None:
            torch.device(self.device)  # raises on a malformed device string
        for name in ("physical_batch_size", "memory_bytes", "threads"):
            value = getattr(self, name)
            check_positive_int(name, value, optional=True)


@dataclass(frozen=True)
class Booked:
    """The privacy a candidate's training booked, in the shape of an Opacus accountant history.

    ``history`` is ``[(noise_multiplier, sample_rate, steps)]`` as Opacus's ``RDPAccountant`` records it, and
    :attr:`accountant` returns ``self``, so :func:`dphypo.train.mechanism.check_budget` accepts the object as an engine
    (``run.engines.append(result.booked)``; ``run.check_budget()``).
    """

    history: tuple[tuple[float, float, int], ...]

    @property
    def accountant(self) -> Booked:
        """``self`` (Opacus's ``engine.accountant.history`` access path)."""
        return self


@dataclass(frozen=True, eq=False)
class CandidateResult:
    """One candidate's outcome.

    Attributes:
        candidate: The candidate.
        state_dict: Trained parameters (CPU tensors, the template's parameter names): load them into the model
            (:meth:`VectorizedDPSGD.module`).
        failed: A data failure (its noisy update made the parameters non-finite): the candidate was frozen there; it
            must score worst and not be retried (privacy rule 5). Its ``state_dict`` and ``correct`` mean nothing.
        failure: What failed and when (``None`` unless ``failed``).
        correct: Correct validation predictions (0 when ``failed``): the count to privatise with
            :meth:`DPSGDMechanism.private_score` / :func:`~dphypo.train.mechanism.private_accuracy`.
        booked: The noisy steps the candidate took (``mechanism.steps`` unless it failed earlier).
    """

    candidate: Candidate
    state_dict: dict[str, Tensor] = field(repr=False)
    failed: bool
    failure: str | None
    correct: int
    booked: Booked


@dataclass(frozen=True, eq=False)
class PassResult:
    """A pass of K candidates.

    Attributes:
        results: One per candidate, in the order given.
        physical_batch_size: Padded examples per candidate per chunk.
        chunks: Chunks run in total (≥ steps unless some steps had only empty batches).
        seconds: Wall time of the pass.
        device: Where it ran.
    """

    results: tuple[CandidateResult, ...]
    physical_batch_size: int
    chunks: int
    seconds: float
    device: str


def _builder(model: ModelSpec, num_classes: int) -> Callable[[int], nn.Module]:
    if isinstance(model, str):
        if model not in MODELS:
            raise ValueError(f"model must be one of {', '.join(MODELS)} or a callable seed -> nn.Module, got {model!r}")
        name = model
        return lambda seed: make_model(name, num_classes=num_classes, seed=seed)
    if not callable(model):
        raise ValueError(f"model must be a model name or a callable seed -> nn.Module, got {model!r}")
    return model


def _meta_template(build: Callable[[int], nn.Module]) -> nn.Module:
    """The architecture without values: built on the meta device (no memory, no random draws are used)."""
    with torch.device("meta"):
        return build(secrets.randbits(63))  # any seed: meta tensors hold no values


def _resolve_device(device: str | None) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def check_model(model: ModelSpec, *, num_classes: int = 10) -> None:
    """Refuse a model the engine cannot train, in one line naming the module (nothing is allocated or drawn).

    Args:
        model: A name of :data:`~dphypo.train.models.MODELS` or a builder ``seed -> nn.Module``.
        num_classes: Output size of a named model.

    Raises:
        ValueError: An unknown name, or a module :func:`~dphypo.train.vectorized.layers.compile_model` refuses.
    """
    compile_model(_meta_template(_builder(model, num_classes)), torch.device("cpu"))


def _as_tensor(array: np.ndarray | Tensor, name: str) -> Tensor:
    if isinstance(array, Tensor):
        return array.detach()
    if isinstance(array, np.ndarray):
        return torch.from_numpy(np.array(array, copy=True))
    raise ValueError(f"{name} must be a numpy array or a tensor, got {type(array).__name__}")


#: Largest candidate (parameter count) whose memory estimate runs on one real CPU example rather than on the meta
#: device: a meta-device op's first call imports torch's meta registrations and decompositions (~1.5 s of CPU per
#: process, paid by every training process, issue #30.10), while one example of a model this small costs at most
#: 16 MB and milliseconds. The estimate counts elements only, so both devices give the same number (tested).
_CPU_ESTIMATE_PARAMS = 2**22


def example_bytes(
    model: StackedModel, input_shape: Sequence[int], dtype: torch.dtype, *, device: str | None = None
) -> int:
    """Estimated memory of one example of one candidate through forward, backward and the per-example rules.

    Computed from shapes alone (a dry run on one example): every intermediate activation three times (value,
    gradient, temporaries), what each layer keeps for its per-example rule, its scratch, and a factor 2 margin.

    Args:
        model: The compiled model.
        input_shape: One example's shape.
        dtype: The inputs' dtype.
        device: ``"cpu"`` or ``"meta"`` for the dry run (default: ``"cpu"`` up to :data:`_CPU_ESTIMATE_PARAMS`
            parameters, else ``"meta"``, which allocates nothing); the number is the same on both.

    Returns:
        Bytes per example per candidate.
    """
    if device is None:
        device = "cpu" if sum(math.prod(s) for s in model.shapes) <= _CPU_ESTIMATE_PARAMS else "meta"
    x = torch.zeros((1, *input_shape), dtype=dtype, device=device)
    params = [torch.zeros((1, *s), device=device) for s in model.shapes]
    total = x.numel()
    h = x
    i = 0
    with torch.enable_grad():
        for layer in model.layers:
            if isinstance(layer, ParameterFree):
                h = layer.module(h)
                total += 3 * h.numel()
                continue
            z, saved = layer.forward(h, params[i : i + layer.n_params], 1)
            i += layer.n_params
            layer.norms2(saved, torch.zeros_like(z), 1)
            total += 3 * z.numel() + layer.scratch_numel(saved, h)
            total += sum(t.numel() for t in saved.values() if isinstance(t, Tensor) and t is not h)
            h = z
    return int(2 * 4 * total)


class VectorizedDPSGD:
    """Train K candidates of one model with DP-SGD in one vectorised pass; each is exactly an Opacus run.

    Args:
        model: A name of :data:`~dphypo.train.models.MODELS` or a callable ``seed -> nn.Module`` building the
            model with a seeded initialisation (as :func:`~dphypo.train.models.make_model` does); it must compile
            (:func:`~dphypo.train.vectorized.layers.compile_model`), else a one-line ``ValueError`` names the module.
        mechanism: The DP-SGD mechanism (σ, batch size, epochs; ``mechanism.secure_mode`` is refused: no CSPRNG here).
        x_train: Training inputs ``(n, *input_shape)`` (float32 images, or integer tokens for an Embedding).
        y_train: Labels ``(n,)``.
        x_val: Validation inputs ``(m, *input_shape)``.
        y_val: Labels ``(m,)``.
        num_classes: Output size of a named model.
        options: Device, chunk size, memory budget, threads.
        nominal_n_train: Accept ``len(x_train) != mechanism.n_train`` (``mechanism.n_train`` is a public nominal
            size: the subsampled-tuning protocol of :meth:`~dphypo.train.objective.DPSGDObjective.with_subset`, or a
            per-record split, docs/proofs/split.md §5): the Poisson masks run over the realised records at the
            mechanism's rate, and the rate, step count and divisor ``mechanism.expected_batch_size`` =
            ``int(mechanism.n_train * mechanism.sample_rate)`` stay the mechanism's, whatever the realised size.

    Raises:
        ValueError: An unsupported model (one line naming the module), a secure-mode mechanism, or mismatched data.
    """

    def __init__(
        self,
        model: ModelSpec,
        mechanism: DPSGDMechanism,
        x_train: np.ndarray | Tensor,
        y_train: np.ndarray | Tensor,
        x_val: np.ndarray | Tensor,
        y_val: np.ndarray | Tensor,
        *,
        num_classes: int = 10,
        options: EngineOptions | None = None,
        nominal_n_train: bool = False,
    ) -> None:
        if not isinstance(mechanism, DPSGDMechanism):
            raise ValueError(f"mechanism must be a DPSGDMechanism, got {mechanism!r}")
        if mechanism.secure_mode:
            raise ValueError("the vectorised engine has no cryptographically secure generator: run secure-mode "
                             "mechanisms through Opacus (DPSGDObjective)")
        self.mechanism = mechanism
        self.options = options or EngineOptions()
        self.device = _resolve_device(self.options.device)
        self._build = _builder(model, num_classes)
        self.model = compile_model(_meta_template(self._build), self.device)
        xt, yt = _as_tensor(x_train, "x_train"), _as_tensor(y_train, "y_train")
        xv, yv = _as_tensor(x_val, "x_val"), _as_tensor(y_val, "y_val")
        if len(xt) != len(yt) or len(xv) != len(yv):
            raise ValueError(f"inputs and labels differ in length: train {len(xt)} vs {len(yt)}, val {len(xv)} vs "
                             f"{len(yv)}")
        if xt.shape[1:] != xv.shape[1:]:
            raise ValueError(f"x_train and x_val have different example shapes {tuple(xt.shape[1:])} and "
                             f"{tuple(xv.shape[1:])}")
        if len(xt) == 0:
            raise ValueError("x_train is empty")
        if not nominal_n_train and len(xt) != mechanism.n_train:
            raise ValueError(f"len(x_train) = {len(xt)} but mechanism.n_train = {mechanism.n_train}; build the "
                             "mechanism with DPSGDMechanism.from_splits (or pass nominal_n_train=True for a subsample)")
        self.n = len(xt)
        self.input_shape = tuple(xt.shape[1:])
        # Row n is the public padding example (zeros): padded rows never touch a private record.
        self._x = torch.cat([xt, xt.new_zeros((1, *self.input_shape))]).to(self.device)
        self._y = torch.cat([yt.long(), yt.new_zeros(1).long()]).to(self.device)
        self._xv = xv.to(self.device)
        self._yv = yv.long().to(self.device)
        self.example_bytes = example_bytes(self.model, self.input_shape, xt.dtype)
        if self.options.memory_bytes is not None:
            self.memory_bytes = int(self.options.memory_bytes)
        elif self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            self.memory_bytes = int(min(0.4 * free, 16 * 2**30))
        else:
            self.memory_bytes = CPU_MEMORY_BYTES
        self.rate = poisson_rate(mechanism.batches_per_epoch)
        # the divisor from the public n_train (equal to Opacus's int(len(x_train) * q) when the sizes agree)
        self.divisor = expected_batch_size(mechanism.n_train, mechanism.sample_rate)
        if self.divisor < 1:
            raise ValueError(f"Opacus's expected batch size int({mechanism.n_train} * {mechanism.sample_rate:g}) is 0 "
                             "for this mechanism")

    # -- public helpers ------------------------------------------------------------------------------------------

    def blocks(self, k: int) -> list[slice]:
        """How a pass of ``k`` candidates is split into blocks that share a chunk (public quantities only).

        As many candidates per block as fit in the memory budget with a typical Poisson batch each (mean + 3 sd);
        the blocks are as equal as possible. Small models run all K candidates in one block; large ones fewer, so a
        chunk's working set stays cache-sized on a CPU.
        """
        q = self.rate
        typical = math.ceil(self.n * q + 3 * math.sqrt(self.n * q * (1 - q)))
        size = int(max(1, min(k, self.memory_bytes // (max(1, typical) * self.example_bytes))))
        count = math.ceil(k / size)
        bounds = [round(i * k / count) for i in range(count + 1)]
        return [slice(lo, hi) for lo, hi in itertools.pairwise(bounds)]

    def physical_batch_size(self, k: int) -> int:
        """Padded examples per candidate per chunk for a pass of ``k`` candidates (public quantities only)."""
        if self.options.physical_batch_size is not None:
            return int(self.options.physical_batch_size)
        block = max(b.stop - b.start for b in self.blocks(k))
        return physical_batch_size(self.n, self.rate, block, example_bytes=self.example_bytes,
                                   memory_bytes=self.memory_bytes)

    def module(self, result: CandidateResult) -> nn.Module:
        """A plain ``nn.Module`` (CPU, eval mode) holding a candidate's trained parameters."""
        module = self._build(run_stream_seed(result.candidate.seed, INIT_STREAM))
        module.load_state_dict(result.state_dict)
        return module.eval()

    # -- a pass ---------------------------------------------------------------------------------------------------

    def run(self, candidates: Sequence[Candidate]) -> PassResult:
        """Train the candidates in one pass and count their correct validation predictions.

        Args:
            candidates: K ≥ 1 candidates (each with its own lr, clip, momentum and secret seed).

        Returns:
            The pass's results, in the order of ``candidates``.
        """
        candidates = list(candidates)
        if not candidates or not all(isinstance(c, Candidate) for c in candidates):
            raise ValueError("candidates must be a non-empty sequence of Candidate")
        start = time.perf_counter()
        with torch_threads(self.options.threads), torch.no_grad():
            state = _PassState(self, candidates)
            chunks = self._train(state)
            correct = self._evaluate(state)
        results = state.results(correct)
        return PassResult(results=results, physical_batch_size=state.rows, chunks=chunks,
                          seconds=time.perf_counter() - start, device=str(self.device))

    def clipped_sums(self, candidates: Sequence[Candidate], masks: Tensor) -> dict[str, Tensor]:
        """The sums of clipped per-example gradients at the candidates' initial parameters, for given batches.

        The first half of a DP-SGD step without noise (for checks against Opacus's ``clip_and_accumulate``).

        Args:
            candidates: K candidates (their initialisation and clipping norms are used).
            masks: ``(K, n)`` bool: candidate k's batch.

        Returns:
            Parameter name -> ``(K, *shape)`` CPU tensor of ``Σ_{i in batch} min(1, C / (‖g_i‖ + 1e-6)) g_i``.
        """
        candidates = list(candidates)
        if masks.shape != (len(candidates), self.n) or masks.dtype != torch.bool:
            raise ValueError(f"masks must be a ({len(candidates)}, {self.n}) bool tensor, got {tuple(masks.shape)} "
                             f"{masks.dtype}")
        with torch_threads(self.options.threads), torch.no_grad():
            s = _PassState(self, candidates)
            packs = self._pack(s, masks.unsqueeze(0).cpu())
            s.sums.zero_()
            self._accumulate(s, packs, 0)
            sums = s.sums.cpu()
        return dict(zip(self.model.names, self.model.views(sums), strict=True))

    def _pack(self, s: _PassState, masks: Tensor) -> list[tuple[slice, Tensor, Tensor, list[int]]]:
        """Each block's packed chunks of a ``(T, K, n)`` block of masks, index tensors on the device."""
        packs = []
        for block in s.blocks:
            index, valid, chunks = pack(masks[:, block], s.rows, self.n)
            packs.append((block, index.to(self.device, non_blocking=True), valid.to(self.device, non_blocking=True),
                          chunks))
        return packs

    def _accumulate(self, s: _PassState, packs: list[tuple[slice, Tensor, Tensor, list[int]]], t: int) -> int:
        """Add step ``t``'s clipped sums of every block to ``s.sums``; returns the number of chunks run."""
        rows = s.rows
        count = 0
        for block, index, valid, chunks in packs:
            for c in range(chunks[t]):
                part = slice(c * rows, (c + 1) * rows)
                idx = index[t, :, part].reshape(-1)
                self._chunk(s, block, self._x.index_select(0, idx), self._y.index_select(0, idx), valid[t, :, part])
            count += chunks[t]
        return count

    def _train(self, s: _PassState) -> int:
        mechanism = self.mechanism
        total_chunks = 0
        step = 0
        for _ in range(mechanism.epochs):
            for masks in epoch_masks(s.sampling, self.n, self.rate, mechanism.steps_per_epoch):
                packs = self._pack(s, masks)
                for t in range(masks.shape[0]):
                    s.sums.zero_()
                    total_chunks += self._accumulate(s, packs, t)
                    s.step(step)
                    step += 1
        return total_chunks

    def _chunk(self, s: _PassState, block: slice, x: Tensor, y: Tensor, valid: Tensor) -> None:
        """Clip-weighted gradient sums of one chunk of a block of candidates, added to ``s.sums``.

        A record whose per-example gradient (or its norm) is not finite contributes zero, as if it were padding: its
        row is replaced by the public padding example and the chunk is computed again. Rows are independent, so the
        other records' terms are unchanged; every record's term still has norm ≤ C, so the sensitivity (and ε) of
        the noisy sum is unchanged, and a single record can no longer make the update non-finite (privacy rule 5:
        a candidate fails only when its released noisy update does, :meth:`_PassState.step`).

        Args:
            s: The pass.
            block: The candidates of the chunk.
            x: Folded inputs ``(k * b, *input_shape)`` (k candidates of the block, b padded rows each).
            y: Labels ``(k * b,)``.
            valid: ``(k, b)``: real (selected) rows; the others are padding with weight 0.
        """
        k, b = valid.shape
        vf = valid.to(s.flat.dtype)
        params = s.block_params[block.start]
        with torch.enable_grad():
            logits, records = self.model.forward(x, params, k, record=True)
            logits = torch.where(valid.reshape(-1, 1), logits.view(k * b, -1), 0.0)
            # Per-example cross-entropy, log-sum-exp minus the label's logit (F.cross_entropy's log_softmax is
            # several times slower on CPU for few classes)
            losses = (torch.logsumexp(logits, 1) - logits.gather(1, y.unsqueeze(1)).squeeze(1)).view(k, b)
            grads = torch.autograd.grad((losses * vf).sum(), [z for _, _, z in records])
        norms2 = sum((layer.norms2(saved, g, k) for (layer, saved, _), g in zip(records, grads, strict=True)),
                     torch.zeros_like(vf))
        dropped = valid & ~torch.isfinite(norms2)
        if bool(dropped.any()):  # rare: recompute without those records (0 · NaN would poison the whole sum)
            keep = ~dropped.reshape(-1)  # each pass drops ≥ 1 valid row, so this recursion ends
            x = torch.where(keep.view(-1, *([1] * (x.dim() - 1))), x, self._x[self.n])
            y = torch.where(keep, y, self._y[self.n])
            self._chunk(s, block, x, y, valid & ~dropped)
            return
        factor = (s.clip[block].unsqueeze(1) / (norms2.sqrt() + CLIP_EPS)).clamp(max=1.0) * vf
        i = 0
        sums = s.block_sums[block.start]
        for (layer, saved, _), g in zip(records, grads, strict=True):
            for total, part in zip(sums[i : i + layer.n_params], layer.sums(saved, g, factor, k), strict=True):
                total.add_(part)
            i += layer.n_params

    def _evaluate(self, s: _PassState) -> Tensor:
        """Correct validation predictions per candidate, block by block, shape ``(K,)``."""
        m = len(self._yv)
        correct = torch.zeros(s.k, dtype=torch.int64, device=self.device)
        for block in s.blocks:
            k = block.stop - block.start
            params = s.block_params[block.start]
            rows = max(1, min(m, self.memory_bytes // (k * self.example_bytes)))
            for start in range(0, m, rows):
                xb = self._xv[start : start + rows]
                x = xb.unsqueeze(0).expand(k, *xb.shape).reshape(k * len(xb), *xb.shape[1:])
                logits, _ = self.model.forward(x, params, k, record=False)
                hits = logits.view(k, len(xb), -1).argmax(-1) == self._yv[start : start + rows]
                correct[block] += hits.sum(1)
        return correct


class _PassState:
    """The stacked state of one pass: parameters, sums, noise, generators, failures."""

    def __init__(self, engine: VectorizedDPSGD, candidates: list[Candidate]) -> None:
        self.engine = engine
        self.candidates = candidates
        self.k = k = len(candidates)
        device = engine.device
        model = engine.model
        self.rows = engine.physical_batch_size(k)
        flats = []
        for c in candidates:  # initialisation exactly as the Opacus path: make_model(seed=run_stream_seed(s, INIT))
            module = engine._build(run_stream_seed(c.seed, INIT_STREAM))
            named = list(module.named_parameters())
            if [n for n, _ in named] != model.names or [p.shape for _, p in named] != model.shapes:
                raise ValueError("the model builder returned a module whose parameters differ from the template's")
            flats.append(torch.cat([p.detach().reshape(-1) for _, p in named]))
        self.flat = torch.stack(flats).to(device)  # (K, P)
        self.params = model.views(self.flat)
        self.sums = torch.zeros_like(self.flat)
        self.blocks = engine.blocks(k)
        self.block_params = {b.start: [p[b] for p in self.params] for b in self.blocks}
        self.block_sums = {b.start: model.views(self.sums[b]) for b in self.blocks}
        self.noise = torch.empty_like(self.flat)
        offsets = model.offsets
        self.noise_slices = [
            [self.noise[i, offsets[j] : offsets[j + 1]] for j in range(len(model.shapes))] for i in range(k)
        ]
        self.momentum = torch.tensor([c.momentum for c in candidates], dtype=self.flat.dtype, device=device)
        self.buffer = torch.zeros_like(self.flat) if any(c.momentum for c in candidates) else None
        self.lr = torch.tensor([c.lr for c in candidates], dtype=self.flat.dtype, device=device)
        self.clip = torch.tensor([c.clip for c in candidates], dtype=self.flat.dtype, device=device)
        self.std = [engine.mechanism.sigma * c.clip for c in candidates]  # Opacus: noise_multiplier * max_grad_norm
        self.sampling = [torch.Generator().manual_seed(run_stream_seed(c.seed, SAMPLING_STREAM)) for c in candidates]
        self.noise_generators = [
            torch.Generator(device=device).manual_seed(run_stream_seed(c.seed, NOISE_STREAM)) for c in candidates
        ]
        self.active = torch.ones(k, dtype=torch.bool, device=device)
        self.failure = torch.full((k,), -1, dtype=torch.int64, device=device)  # step whose noisy update was non-finite
        self.steps = torch.zeros(k, dtype=torch.int64, device=device)

    def step(self, step: int) -> None:
        """Noise, Opacus's division by the expected batch size, the SGD update.

        A candidate fails when its updated parameters are not finite. That is decided from the step's DP output (the
        noisy sum, post-processed by the update) and never from raw per-example values (privacy rule 5): the noisy
        sum of finite terms of norm ≤ C is finite, so only the released update itself can overflow. The failed step
        used the data and is booked; the candidate is frozen there (the Opacus path raises after the same step).
        """
        for gen, std, slices in zip(self.noise_generators, self.std, self.noise_slices, strict=True):
            for piece in slices:  # per parameter, in parameters() order: Opacus's draws, call for call
                piece.normal_(0.0, std, generator=gen)
        grad = (self.sums + self.noise) / self.engine.divisor
        if self.buffer is not None:
            self.buffer.mul_(self.momentum.unsqueeze(1)).add_(grad)
            grad = self.buffer
        updated = self.flat - self.lr.unsqueeze(1) * grad
        self.steps += self.active
        newly = self.active & ~torch.isfinite(updated).all(1)
        self.failure = torch.where(newly, step, self.failure)
        self.active &= ~newly
        self.flat.copy_(torch.where(self.active.unsqueeze(1), updated, self.flat))

    def results(self, correct: Tensor) -> tuple[CandidateResult, ...]:
        engine = self.engine
        flat = self.flat.cpu()
        active = self.active.cpu().tolist()
        failure_step = self.failure.cpu().tolist()
        steps = self.steps.cpu().tolist()
        counts = correct.cpu().tolist()
        views = engine.model.views(flat)
        spe = engine.mechanism.steps_per_epoch
        out = []
        for i, c in enumerate(self.candidates):
            failure = None
            if failure_step[i] >= 0:
                failure = (f"non-finite model parameters after the noisy update of step {failure_step[i]} "
                           f"(epoch {failure_step[i] // spe})")
            failed = not active[i]
            state = {name: v[i].clone() for name, v in zip(engine.model.names, views, strict=True)}
            booked = Booked(((engine.mechanism.sigma, engine.mechanism.sample_rate,
                              int(steps[i])),) if steps[i] else ())
            out.append(CandidateResult(candidate=c, state_dict=state, failed=failed, failure=failure,
                                       correct=0 if failed else int(counts[i]), booked=booked))
        return tuple(out)


def default_pass_size(
    model: ModelSpec | nn.Module,
    mechanism: DPSGDMechanism,
    input_shape: Sequence[int],
    *,
    device: str | None = None,
    num_classes: int = 10,
    memory_bytes: int | None = None,
    max_size: int = 256,
) -> int:
    """How many candidates to train per pass.

    On CPU: :data:`CPU_PASS_SIZE` (32; beyond it the per-candidate time stops falling on small models). On CUDA:
    as many as fit in 60 % of the free memory (``torch.cuda.mem_get_info``) or ``memory_bytes``, counting six
    copies of the parameters per candidate (parameters, sums, noise, momentum, update temporaries) and a chunk of
    ``mean + 4 sd`` Poisson examples, capped at ``max_size``. Public quantities only.

    Args:
        model: A model name, a builder ``seed -> nn.Module``, or a module (only its architecture is read).
        mechanism: The DP-SGD mechanism.
        input_shape: One example's shape.
        device: As :class:`EngineOptions` (default CUDA when available).
        num_classes: Output size of a named model.
        memory_bytes: Memory to fill instead of the free memory.
        max_size: Upper bound.

    Returns:
        K ≥ 1.
    """
    dev = _resolve_device(device)
    if dev.type != "cuda":
        return min(CPU_PASS_SIZE, max_size)
    template = model if isinstance(model, nn.Module) else _meta_template(_builder(model, num_classes))
    compiled = compile_model(template, dev)
    per_example = example_bytes(compiled, input_shape, torch.float32)
    budget = memory_bytes if memory_bytes is not None else 0.6 * torch.cuda.mem_get_info(dev)[0]
    q = poisson_rate(mechanism.batches_per_epoch)
    rows = mechanism.n_train * q + 4 * math.sqrt(mechanism.n_train * q * (1 - q)) + 1
    per_candidate = 6 * 4 * compiled.n_params + rows * per_example
    return int(max(1, min(max_size, budget // per_candidate)))

