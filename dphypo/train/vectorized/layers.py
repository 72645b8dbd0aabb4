"""Candidate-stacked layers: one forward pass for K parameter sets, and each layer's per-example gradient rule.

Layouts (all tensors live on the engine's device):

* **activations** are *folded*: shape ``(K * B, *features)``, candidate-major (rows ``k*B .. k*B + B - 1`` are
  candidate k's B examples), so parameter-free layers (activations, pooling, ``Flatten``) run unchanged on them and
  no computation ever mixes two rows;
* **parameters** are *stacked*: shape ``(K, *p.shape)`` for each parameter ``p`` of the template module.

Each parametrised layer computes its output ``z`` from its input with the K parameter sets, remembers what its
per-example gradient needs, and, given ``g = ∂L/∂z`` (``L`` = the sum of the per-example losses, so row ``i`` of
``g`` is example i's own output gradient), returns

* ``norms2``: each example's squared gradient norm over the layer's parameters, shape ``(K, B)``;
* ``sums``: the clip-weighted sums ``Σ_i c_i ∇_p ℓ_i`` for each of its parameters, shapes ``(K, *p.shape)``.

These are the per-example gradient rules of Opacus's ``GradSampleModule`` (Yousefpour et al. 2021), with the
ghost-norm identity ``‖g_i a_iᵀ‖_F = ‖g_i‖ ‖a_i‖`` for a linear layer on one vector per example (Goodfellow
2015; Li et al. 2022, "Large language models can be strong differentially private learners") and the Gram-matrix
form for sequences; the clipped sums are weighted matrix products, so no per-example gradient of a linear layer
is ever materialised. A convolution's per-example weight gradient is ``g_i`` times its input patches (Opacus's
unfold rule), with the patches read channels-last (several times faster on CPU than ``F.unfold``).

Only the backward pass to the layer outputs uses autograd (``torch.autograd.grad`` of the summed loss with respect
to each parametrised layer's output); no parameter gradient is ever formed by autograd. On CPU, ``nn.MaxPool2d``
runs through the channels-last kernel with an index scatter for its gradient (bit-for-bit torch's NCHW results,
2-3 times faster).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["ParameterFree", "StackedLayer", "StackedModel", "compile_model", "supported_modules"]

#: Parameter-free modules that act on each example separately (in any layout that keeps dim 0 the batch).
_PARAMETER_FREE: tuple[type[nn.Module], ...] = (
    nn.Identity,
    nn.ReLU,
    nn.ReLU6,
    nn.LeakyReLU,
    nn.ELU,
    nn.SELU,
    nn.CELU,
    nn.GELU,
    nn.SiLU,
    nn.Mish,
    nn.Tanh,
    nn.Sigmoid,
    nn.Hardtanh,
    nn.Hardswish,
    nn.Hardsigmoid,
    nn.Softplus,
    nn.Softsign,
    nn.Tanhshrink,
    nn.LogSigmoid,
    nn.MaxPool1d,
    nn.MaxPool2d,
    nn.AvgPool1d,
    nn.AvgPool2d,
    nn.AdaptiveAvgPool1d,
    nn.AdaptiveAvgPool2d,
    nn.AdaptiveMaxPool1d,
    nn.AdaptiveMaxPool2d,
    nn.Flatten,
    nn.Unflatten,
    nn.Dropout,
    nn.Softmax,
    nn.LogSoftmax,
)


def _sq_norm(x: Tensor, dim: int) -> Tensor:
    """Squared Euclidean norm along ``dim`` (``vector_norm`` is several times faster than ``square().sum()`` on CPU)."""
    return torch.linalg.vector_norm(x, dim=dim).square()


def supported_modules() -> str:
    """The supported module types, as one comma-separated line (for error messages and docs)."""
    names = ["Linear", "Conv2d", "Embedding", "GroupNorm", "LayerNorm", "Sequential"]
    names += [m.__name__ for m in _PARAMETER_FREE]
    return ", ".join(names)


class StackedLayer:
    """One parametrised layer of the template, evaluated for K candidates at once (see the module docstring).

    Attributes:
        name: The module's dotted name in the template (for messages).
        n_params: How many of the template's parameters this layer owns (consecutive, in ``parameters()`` order).
    """

    name: str
    n_params: int

    def forward(self, h: Tensor, params: Sequence[Tensor], k: int) -> tuple[Tensor, dict[str, Any]]:
        """The layer's output for K candidates.

        Args:
            h: Folded input, shape ``(K * B, *in_features)``.
            params: This layer's stacked parameters, each ``(K, *p.shape)``.
            k: K.

        Returns:
            ``(z, saved)``: the folded output ``(K * B, *out_features)`` and what :meth:`norms2` / :meth:`sums` need.
        """
        raise NotImplementedError

    def norms2(self, saved: dict[str, Any], g: Tensor, k: int) -> Tensor:
        """Per-example squared gradient norm over this layer's parameters, shape ``(K, B)``.

        Args:
            saved: What :meth:`forward` returned (may be extended for :meth:`sums`).
            g: ``∂L/∂z``, the folded output gradient (same shape as ``z``).
            k: K.
        """
        raise NotImplementedError

    def sums(self, saved: dict[str, Any], g: Tensor, c: Tensor, k: int) -> list[Tensor]:
        """``Σ_i c_i ∇_p ℓ_i`` for each parameter ``p`` of the layer, each of shape ``(K, *p.shape)``.

        Args:
            saved: As passed to :meth:`norms2` (called first).
            g: ``∂L/∂z`` (folded).
            c: Per-example weights (the clip factors, 0 for padding rows), shape ``(K, B)``.
            k: K.
        """
        raise NotImplementedError

    def scratch_numel(self, saved: dict[str, Any], h: Tensor) -> int:
        """Transient elements per example that :meth:`norms2` allocates beyond ``saved`` (for memory planning)."""
        return 0


class _Linear(StackedLayer):
    def __init__(self, name: str, module: nn.Linear) -> None:
        self.name = name
        self.d_in, self.d_out = module.in_features, module.out_features
        self.bias = module.bias is not None
        self.n_params = 2 if self.bias else 1

    def forward(self, h: Tensor, params: Sequence[Tensor], k: int) -> tuple[Tensor, dict[str, Any]]:
        a = h.reshape(k, -1, self.d_in)  # (K, B*S, in)
        weight_t = params[0].transpose(1, 2)  # (K, in, out)
        z = torch.baddbmm(params[1].unsqueeze(1), a, weight_t) if self.bias else torch.bmm(a, weight_t)
        return z.view(*h.shape[:-1], self.d_out), {"a": a}

    def norms2(self, saved: dict[str, Any], g: Tensor, k: int) -> Tensor:
        a: Tensor = saved["a"]
        b = g.shape[0] // k
        s = a.shape[1] // b  # positions per example (1 for a plain feature vector)
        if s == 1:  # ghost norm: ‖g aᵀ‖² = ‖g‖² ‖a‖², bias ‖g‖²
            gsq = _sq_norm(g.reshape(k, b, self.d_out), -1)
            asq = _sq_norm(a, -1)
            return (asq + 1.0) * gsq if self.bias else asq * gsq
        gs = g.reshape(k * b, s, self.d_out)
        as_ = a.reshape(k * b, s, self.d_in)
        if self.d_in * self.d_out <= s * s * (self.d_in + self.d_out):  # materialise each example's gradient
            grad = torch.bmm(gs.transpose(1, 2), as_)  # (K*B, out, in)
            saved["grad"] = grad
            n2 = _sq_norm(grad.view(k * b, -1), -1)
        else:  # Gram form: ‖Σ_t g_t a_tᵀ‖² = Σ_{t,u} (a_t·a_u)(g_t·g_u)
            n2 = (torch.bmm(as_, as_.transpose(1, 2)) * torch.bmm(gs, gs.transpose(1, 2))).sum((1, 2))
        if self.bias:
            gb = gs.sum(1)  # (K*B, out)
            saved["gb"] = gb
            n2 = n2 + _sq_norm(gb, -1)
        return n2.view(k, b)

    def sums(self, saved: dict[str, Any], g: Tensor, c: Tensor, k: int) -> list[Tensor]:
        a: Tensor = saved["a"]
        b = c.shape[1]
        gc: Tensor | None = None
        if "grad" in saved:
            grad: Tensor = saved["grad"]
            w = torch.bmm(c.unsqueeze(1), grad.view(k, b, -1)).view(k, self.d_out, self.d_in)
        else:
            gc = (g.reshape(k, b, -1, self.d_out) * c.view(k, b, 1, 1)).view(k, -1, self.d_out)
            w = torch.bmm(gc.transpose(1, 2), a)
        if not self.bias:
            return [w]
        if "gb" in saved:  # several positions per example: the bias gradients were summed in norms2
            gb: Tensor = saved["gb"]
            return [w, torch.bmm(c.unsqueeze(1), gb.view(k, b, self.d_out)).view(k, self.d_out)]
        assert gc is not None  # one position per example: gc is (K, B, out)
        return [w, gc.sum(1)]


def _pair(value: int | tuple[int, ...]) -> tuple[int, int]:
    if isinstance(value, int):
        return value, value
    return int(value[0]), int(value[1])


class _Conv2d(StackedLayer):
    def __init__(self, name: str, module: nn.Conv2d) -> None:
        self.name = name
        if module.padding_mode != "zeros":
            raise ValueError(f"module {name!r} (Conv2d) has padding_mode={module.padding_mode!r}; only 'zeros' is "
                             "supported by the vectorised engine")
        self.kernel = _pair(module.kernel_size)
        self.stride = _pair(module.stride)
        self.dilation = _pair(module.dilation)
        if isinstance(module.padding, str):
            if module.padding == "valid":
                self.padding = (0, 0)
            else:  # "same" (stride 1): torch pads dilation*(k-1) in total, the extra one on the right if odd
                totals = [d * (kk - 1) for d, kk in zip(self.dilation, self.kernel, strict=True)]
                if any(t % 2 for t in totals):
                    raise ValueError(f"module {name!r} (Conv2d) uses padding='same' with an asymmetric padding; "
                                     "give the padding as integers")
                self.padding = (totals[0] // 2, totals[1] // 2)
        else:
            self.padding = _pair(module.padding)
        self.groups = module.groups
        self.c_in, self.c_out = module.in_channels, module.out_channels
        self.bias = module.bias is not None
        self.n_params = 2 if self.bias else 1

    def _conv_kwargs(self) -> dict[str, Any]:
        return {"stride": self.stride, "padding": self.padding, "dilation": self.dilation, "groups": self.groups}

    def forward(self, h: Tensor, params: Sequence[Tensor], k: int) -> tuple[Tensor, dict[str, Any]]:
        b = h.shape[0] // k
        weight = params[0]
        bias = params[1] if self.bias else None
        kwargs = self._conv_kwargs()
        if k == 1:
            z = F.conv2d(h, weight[0], None if bias is None else bias[0], **kwargs)
        else:
            z = torch.cat([
                F.conv2d(h[i * b : (i + 1) * b], weight[i], None if bias is None else bias[i], **kwargs)
                for i in range(k)
            ])
        return z, {"h": h}

    def _patches(self, h: Tensor) -> Tensor:
        """Each output position's input patch, channels last: ``(N, L, kh * kw * c_in)`` in (i, j, c) order.

        A strided view of the zero-padded, channels-last input copied once: contiguous runs of ``kw * c_in``
        values, several times faster on CPU than ``F.unfold`` (whose (c, i, j) order reads one value at a time).
        """
        (kh, kw), (sh, sw), (dh, dw), (ph, pw) = self.kernel, self.stride, self.dilation, self.padding
        if ph or pw:
            h = F.pad(h, (pw, pw, ph, ph))
        h = h.contiguous(memory_format=torch.channels_last)
        n, c, height, width = h.shape
        ho = (height - dh * (kh - 1) - 1) // sh + 1
        wo = (width - dw * (kw - 1) - 1) // sw + 1
        s_n, s_c, s_h, s_w = h.stride()
        view = h.as_strided((n, ho, wo, kh, kw, c), (s_n, s_h * sh, s_w * sw, s_h * dh, s_w * dw, s_c))
        return view.reshape(n, ho * wo, kh * kw * c)

    def _per_example(self, saved: dict[str, Any], g: Tensor) -> Tensor:
        """Each example's weight gradient, flattened: ``(N, c_out, D)``.

        ``D`` is in (i, j, c) order for ``groups == 1`` (patches rule), (c, i, j) order otherwise (Opacus's
        unfold rule); :meth:`sums` returns the weight's own layout either way.
        """
        h: Tensor = saved["h"]
        n = h.shape[0]
        gs = g.reshape(n, self.c_out, -1)
        if self.groups == 1:
            return torch.bmm(gs, self._patches(h))
        cols = F.unfold(h, self.kernel, dilation=self.dilation, padding=self.padding, stride=self.stride)
        length = cols.shape[-1]
        cols = cols.view(n * self.groups, -1, length)
        gs = gs.reshape(n * self.groups, -1, length)
        return torch.bmm(gs, cols.transpose(1, 2)).view(n, self.c_out, -1)

    def scratch_numel(self, saved: dict[str, Any], h: Tensor) -> int:
        cols = F.unfold(h[:1], self.kernel, dilation=self.dilation, padding=self.padding, stride=self.stride)
        return int(2 * cols.numel())  # the patches, and the padded channels-last input (at most as large)

    def norms2(self, saved: dict[str, Any], g: Tensor, k: int) -> Tensor:
        n = g.shape[0]
        grad = self._per_example(saved, g)
        saved["grad"] = grad
        n2 = _sq_norm(grad.view(n, -1), -1)
        if self.bias:
            gb = g.reshape(n, self.c_out, -1).sum(-1)
            saved["gb"] = gb
            n2 = n2 + _sq_norm(gb, -1)
        return n2.view(k, n // k)

    def sums(self, saved: dict[str, Any], g: Tensor, c: Tensor, k: int) -> list[Tensor]:
        b = c.shape[1]
        grad: Tensor = saved["grad"]
        w = torch.bmm(c.unsqueeze(1), grad.view(k, b, -1))
        if self.groups == 1:  # (i, j, c) order -> the weight's (c, i, j)
            w = w.view(k, self.c_out, *self.kernel, self.c_in).permute(0, 1, 4, 2, 3)
        out = [w.reshape(k, self.c_out, self.c_in // self.groups, *self.kernel)]
        if self.bias:
            gb: Tensor = saved["gb"]
            out.append(torch.bmm(c.unsqueeze(1), gb.view(k, b, self.c_out)).view(k, self.c_out))
        return out


class _GroupNorm(StackedLayer):
    def __init__(self, name: str, module: nn.GroupNorm) -> None:
        self.name = name
        self.groups, self.channels, self.eps = module.num_groups, module.num_channels, module.eps
        self.n_params = 2

    def forward(self, h: Tensor, params: Sequence[Tensor], k: int) -> tuple[Tensor, dict[str, Any]]:
        xhat = F.group_norm(h, self.groups, None, None, self.eps)
        shape = (k, -1, self.channels, int(math.prod(h.shape[2:])))
        z = torch.addcmul(params[1].view(k, 1, self.channels, 1), xhat.view(shape), params[0].view(k, 1, -1, 1))
        return z.view(h.shape), {"xhat": xhat}

    def norms2(self, saved: dict[str, Any], g: Tensor, k: int) -> Tensor:
        xhat: Tensor = saved["xhat"]
        n = g.shape[0]
        gs = g.reshape(n, self.channels, -1)
        gw = (gs * xhat.reshape(n, self.channels, -1)).sum(-1)
        gb = gs.sum(-1)
        saved["gw"], saved["gb"] = gw, gb
        return (_sq_norm(gw, -1) + _sq_norm(gb, -1)).view(k, n // k)

    def sums(self, saved: dict[str, Any], g: Tensor, c: Tensor, k: int) -> list[Tensor]:
        b = c.shape[1]
        cw = c.unsqueeze(1)
        gw: Tensor = saved["gw"]
        gb: Tensor = saved["gb"]
        return [torch.bmm(cw, gw.view(k, b, -1)).view(k, -1), torch.bmm(cw, gb.view(k, b, -1)).view(k, -1)]


class _LayerNorm(StackedLayer):
    def __init__(self, name: str, module: nn.LayerNorm) -> None:
        self.name = name
        self.shape = tuple(module.normalized_shape)
        self.size = int(math.prod(self.shape))
        self.eps = module.eps
        self.bias = module.bias is not None
        self.n_params = 2 if self.bias else 1

    def forward(self, h: Tensor, params: Sequence[Tensor], k: int) -> tuple[Tensor, dict[str, Any]]:
        xhat = F.layer_norm(h, self.shape, None, None, self.eps)
        flat = xhat.reshape(k, -1, self.size)
        weight = params[0].reshape(k, 1, self.size)
        z = torch.addcmul(params[1].reshape(k, 1, self.size), flat, weight) if self.bias else flat * weight
        return z.view(h.shape), {"xhat": xhat}

    def norms2(self, saved: dict[str, Any], g: Tensor, k: int) -> Tensor:
        xhat: Tensor = saved["xhat"]
        n = g.shape[0]
        gs = g.reshape(n, -1, self.size)
        gw = (gs * xhat.reshape(n, -1, self.size)).sum(1)
        saved["gw"] = gw
        n2 = _sq_norm(gw, -1)
        if self.bias:
            gb = gs.sum(1)
            saved["gb"] = gb
            n2 = n2 + _sq_norm(gb, -1)
        return n2.view(k, n // k)

    def sums(self, saved: dict[str, Any], g: Tensor, c: Tensor, k: int) -> list[Tensor]:
        b = c.shape[1]
        cw = c.unsqueeze(1)
        gw: Tensor = saved["gw"]
        out = [torch.bmm(cw, gw.view(k, b, -1)).view(k, *self.shape)]
        if self.bias:
            gb: Tensor = saved["gb"]
            out.append(torch.bmm(cw, gb.view(k, b, -1)).view(k, *self.shape))
        return out


class _Embedding(StackedLayer):
    def __init__(self, name: str, module: nn.Embedding) -> None:
        self.name = name
        for attr, bad in (("padding_idx", None), ("max_norm", None), ("scale_grad_by_freq", False), ("sparse", False)):
            if getattr(module, attr) != bad:
                raise ValueError(f"module {name!r} (Embedding) sets {attr}={getattr(module, attr)!r}, which the "
                                 "vectorised engine does not support (Opacus's per-example rule ignores it)")
        self.vocab, self.dim = module.num_embeddings, module.embedding_dim
        self.n_params = 1

    def forward(self, h: Tensor, params: Sequence[Tensor], k: int) -> tuple[Tensor, dict[str, Any]]:
        if h.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"module {self.name!r} (Embedding) needs integer inputs, got {h.dtype}")
        offset = (torch.arange(k, device=h.device) * self.vocab).view(k, *([1] * h.dim()))
        idx = (h.reshape(k, -1, *h.shape[1:]).long() + offset).view(h.shape)
        z = F.embedding(idx, params[0].reshape(k * self.vocab, self.dim))
        return z, {"idx": idx}

    def norms2(self, saved: dict[str, Any], g: Tensor, k: int) -> Tensor:
        idx: Tensor = saved["idx"]
        n = g.shape[0]
        gs = g.reshape(n, -1, self.dim)
        if gs.shape[1] == 1:
            return _sq_norm(gs.reshape(n, -1), -1).view(k, n // k)
        ids = idx.reshape(n, -1)
        same = (ids.unsqueeze(2) == ids.unsqueeze(1)).to(g.dtype)  # rows hit by two positions add up
        return (same * torch.bmm(gs, gs.transpose(1, 2))).sum((1, 2)).view(k, n // k)

    def sums(self, saved: dict[str, Any], g: Tensor, c: Tensor, k: int) -> list[Tensor]:
        idx: Tensor = saved["idx"]
        n = g.shape[0]
        gc = (g.reshape(n, -1, self.dim) * c.reshape(n, 1, 1)).reshape(-1, self.dim)
        out = g.new_zeros((k * self.vocab, self.dim)).index_add_(0, idx.reshape(-1), gc)
        return [out.view(k, self.vocab, self.dim)]


class _MaxPool2dIndices(torch.autograd.Function):
    """``max_pool2d`` computed by the channels-last CPU kernel, its gradient scattered through the argmax indices.

    Bit-for-bit the values and gradients of ``F.max_pool2d`` on NCHW input (the same first-maximum tie rule, the
    same accumulation order), 2-3 times faster on CPU, where torch's NCHW kernel is slow for small images.
    """

    @staticmethod
    def forward(ctx: Any, x: Tensor, pool: nn.MaxPool2d) -> Tensor:
        y, idx = F.max_pool2d(x.contiguous(memory_format=torch.channels_last), pool.kernel_size, pool.stride,
                              pool.padding, pool.dilation, ceil_mode=pool.ceil_mode, return_indices=True)
        ctx.save_for_backward(idx.contiguous())
        ctx.in_shape = x.shape
        return y.contiguous()

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, None]:
        (idx,) = ctx.saved_tensors
        n, c, h, w = ctx.in_shape
        planes = g.new_zeros((n * c, h * w)).scatter_add_(1, idx.view(n * c, -1), g.reshape(n * c, -1))
        return planes.view(n, c, h, w), None


class _FastMaxPool2d(nn.Module):
    """:class:`_MaxPool2dIndices` in place of an ``nn.MaxPool2d`` (CPU, 4-D inputs)."""

    def __init__(self, pool: nn.MaxPool2d) -> None:
        super().__init__()
        self.pool = pool

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() != 4 or x.shape[0] == 0:
            return self.pool(x)
        out: Tensor = _MaxPool2dIndices.apply(x, self.pool)  # type: ignore[no-untyped-call]
        return out


@dataclass(frozen=True, eq=False)
class ParameterFree:
    """A parameter-free module applied as is to folded activations (it acts on each example separately)."""

    name: str
    module: nn.Module


@dataclass(eq=False)
class StackedModel:
    """The template module compiled for K candidates: its layers in order and its parameters' names and shapes.

    Attributes:
        layers: :class:`StackedLayer` and :class:`ParameterFree` entries in forward order.
        names: The template's parameter names in ``parameters()`` order (Opacus's order of noise draws).
        shapes: Their shapes.
    """

    layers: list[StackedLayer | ParameterFree]
    names: list[str]
    shapes: list[torch.Size]
    offsets: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        sizes = [int(math.prod(s)) for s in self.shapes]
        self.offsets = [sum(sizes[:i]) for i in range(len(sizes) + 1)]

    @property
    def n_params(self) -> int:
        """Total scalar parameters of one candidate."""
        return self.offsets[-1]

    def views(self, flat: Tensor) -> list[Tensor]:
        """Stacked parameter views ``(K, *shape)`` into a flat ``(K, n_params)`` buffer."""
        k = flat.shape[0]
        return [
            flat[:, self.offsets[i] : self.offsets[i + 1]].view(k, *shape) for i, shape in enumerate(self.shapes)
        ]

    def forward(
        self, x: Tensor, params: Sequence[Tensor], k: int, *, record: bool
    ) -> tuple[Tensor, list[tuple[StackedLayer, dict[str, Any], Tensor]]]:
        """Run the K candidates on folded inputs.

        Args:
            x: Folded inputs ``(K * B, *input_shape)``.
            params: Stacked parameters in ``parameters()`` order.
            k: K.
            record: Keep each parametrised layer's output (made to require grad) and saved tensors, for
                :meth:`norms2`/:meth:`sums` after a backward pass.

        Returns:
            ``(output, records)``: folded output and ``(layer, saved, z)`` per parametrised layer (empty without
            ``record``).
        """
        h = x
        records: list[tuple[StackedLayer, dict[str, Any], Tensor]] = []
        i = 0
        for layer in self.layers:
            if isinstance(layer, ParameterFree):
                h = layer.module(h)
                continue
            z, saved = layer.forward(h, params[i : i + layer.n_params], k)
            i += layer.n_params
            if record:
                if not z.requires_grad:  # the first parametrised layer: the graph starts at its output
                    z.requires_grad_(True)
                records.append((layer, saved, z))
            h = z
        return h, records


def _flatten(module: nn.Module, prefix: str) -> list[tuple[str, nn.Module]]:
    if isinstance(module, nn.Sequential):
        out: list[tuple[str, nn.Module]] = []
        for child_name, child in module.named_children():
            out += _flatten(child, f"{prefix}.{child_name}" if prefix else child_name)
        return out
    return [(prefix, module)]


def _refuse(name: str, module: nn.Module, why: str) -> ValueError:
    label = name or "<model>"
    return ValueError(f"module {label!r} ({type(module).__name__}) is not supported by the vectorised DP-SGD engine: "
                      f"{why}; supported: {supported_modules()}")


def compile_model(template: nn.Module, device: torch.device) -> StackedModel:
    """Compile a template module into a :class:`StackedModel`, or refuse it with a one-line ``ValueError``.

    Accepted: ``nn.Linear``, ``nn.Conv2d`` (zero padding), ``nn.Embedding`` (no padding_idx / max_norm /
    scale_grad_by_freq / sparse), ``nn.GroupNorm``, ``nn.LayerNorm``, the parameter-free layers of
    :func:`supported_modules` (``Dropout`` only with ``p=0``: a random mask would need its own secret stream;
    ``Flatten``/``Unflatten``/``Softmax``/``LogSoftmax`` only on dims ≥ 1, which never mix examples), and
    ``nn.Sequential`` of these. Refused: anything with buffers (``BatchNorm*``, whose batch statistics mix
    examples), recurrent layers, custom modules, frozen parameters.

    Args:
        template: The model (its parameter values are not read: a meta-device module is fine).
        device: Where the engine will run (chooses per-layer rules).

    Returns:
        The compiled model.
    """
    layers: list[StackedLayer | ParameterFree] = []
    names: list[str] = []
    shapes: list[torch.Size] = []
    for name, module in _flatten(template, ""):
        if any(True for _ in module.buffers()):
            raise _refuse(name, module, "it has buffers (e.g. batch statistics, which mix examples)")
        params = list(module.named_parameters())
        if any(not p.requires_grad for _, p in params):
            raise _refuse(name, module, "it has frozen parameters")
        layer: StackedLayer | ParameterFree
        if type(module) is nn.Linear:
            layer = _Linear(name, module)
        elif type(module) is nn.Conv2d:
            layer = _Conv2d(name, module)
        elif type(module) is nn.Embedding:
            layer = _Embedding(name, module)
        elif type(module) is nn.GroupNorm:  # without affine parameters it is parameter-free and per-example
            layer = _GroupNorm(name, module) if module.affine else ParameterFree(name, module)
        elif type(module) is nn.LayerNorm:
            layer = _LayerNorm(name, module) if module.elementwise_affine else ParameterFree(name, module)
        elif type(module) in _PARAMETER_FREE:
            _check_parameter_free(name, module)
            fast = isinstance(module, nn.MaxPool2d) and device.type == "cpu" and not module.return_indices
            layer = ParameterFree(name, _FastMaxPool2d(module) if isinstance(module, nn.MaxPool2d) and fast
                                  else module)
        else:
            raise _refuse(name, module, "unknown module type")
        if isinstance(layer, StackedLayer) and len(params) != layer.n_params:
            raise _refuse(name, module, f"expected {layer.n_params} parameters, found {len(params)}")
        for pname, p in params:
            names.append(f"{name}.{pname}" if name else pname)
            shapes.append(p.shape)
        layers.append(layer)
    expected = [n for n, _ in template.named_parameters()]
    if names != expected:  # parameter order must be Opacus's (parameters() order) for the noise draws
        raise ValueError(f"the template's parameters are not in layer order ({expected} vs {names}); the vectorised "
                         "engine needs an nn.Sequential whose modules own their parameters")
    return StackedModel(layers, names, shapes)


def _check_parameter_free(name: str, module: nn.Module) -> None:
    if isinstance(module, nn.Dropout) and module.p != 0:
        raise _refuse(name, module, f"Dropout(p={module.p}) draws a random mask that would need its own secret "
                      "stream (use p=0)")
    if isinstance(module, nn.Flatten) and (module.start_dim < 1 or module.end_dim == 0):
        raise _refuse(name, module, "it may flatten the batch dimension (give start_dim >= 1)")
    if isinstance(module, nn.Unflatten) and module.dim == 0:
        raise _refuse(name, module, "it unflattens the batch dimension")
    if isinstance(module, nn.Softmax | nn.LogSoftmax) and (module.dim is None or module.dim == 0):
        raise _refuse(name, module, "it normalises over the batch dimension (give dim >= 1)")
