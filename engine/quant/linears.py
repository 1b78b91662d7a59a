"""Weight-only int8 and int4 linears on torch's native CPU kernels (``engine/quant/quant.py`` uses them).

Decoding one token reads every weight once, so its speed is bound by bytes read: int8 halves them
against bf16, int4 quarters them. The matrix products run in torch's own fused kernels, which read
the packed weights and dequantize in registers:

- ``int8``: symmetric, one scale per output row; ``aten._weight_int8pack_mm``.
- ``int4``: asymmetric, a scale and a zero per group of ``INT4_GROUP_SIZE`` input columns;
  ``aten._convert_weight_to_int4pack_for_cpu`` packs once, ``aten._weight_int4pack_mm_for_cpu``
  multiplies. The kernel computes ``w = (q - 8) · scale + zero`` with ``q`` in 0..15, so a group
  with minimum ``m`` and step ``s`` stores ``zero = m + 8·s``. Weights whose zeros are all 0 (a GGUF's
  Q4_0 blocks) keep scales only and run on the native ``miaohui::int4_sym_mm`` where it is built and the CPU
  has AVX-512 (``Int4SymLinear``, ``engine/native/library.py``): the same products bit for bit, fewer bytes.
- By default a model's weights are held instead in the tiled layouts of the int8-activation kernels where they
  are built (``engine/quant/tiled.py``, subclasses of these; ``engine/quant/quant.py``'s ``int8_module`` and
  ``int4_module`` choose): decode then quantizes activations to int8 per block of 32, as llama.cpp does, not
  bit-exact against the aten kernels (``engine/quant/precision.py``'s ``INT8_ACTIVATIONS``; ``MIAOHUI_NATIVE=0``
  keeps the modules here).

Both kernels are fast for a few rows (decode) and slow for many (measured on a 2-core AVX-512 Xeon: a
256-row product took ~10× bf16's GEMM). Above ``kernel_rows`` rows (a prompt) a layer's weight is
dequantized for that call and multiplied with the dense GEMM; the dequantized copy is dropped
after the call, so resident memory stays quantized. Dequantizing int4 needs the kernel's packed
layout, which depends on the CPU's kernel build (blocks of 64 rows on AVX-512, 32 on AVX2): it is
found at pack time by unpacking a round trip, and if no known layout matches, prefill uses the kernel.

Both take activations in bf16 (their fast path; fp32 activations measured 15-30× slower), so the
loader gives int8/int4 models bf16 activations and KV cache. The lm_head (and the embedding, which
reads the same rows when tied) stays int8 in the int4 scheme, as GGUF's Q4 files commonly keep it at
higher precision: the output projection is where 4 bits cost most quality.

Written by hand rather than with torchao (0.18, evaluated side by side, docs/BENCHMARK.md): its CPU
int4 weight-only path is a prototype tensor subclass over these same aten ops, and its int8
weight-only linear measured 4.5× slower per call than ``_weight_int8pack_mm`` on this CPU; a tensor
subclass would also have to be unwrapped again by the fast path (``engine/executor/fastpath.py``).
Owns these modules; not the model rewrite (``engine/quant/quant.py``), not loading (``engine/models/loader.py``) nor the fast
path's use of them.
"""

from __future__ import annotations

import logging
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from engine.inputs import INT4_GROUP_SIZE
from engine.native import library as native

log = logging.getLogger(__name__)

_INT4_BLOCKS = (64, 32)  # row-block sizes of the CPU int4 packing seen in torch's kernels (AVX-512, AVX2)


class QuantizedLinear(nn.Module):
    """A linear whose weight is stored quantized. ``forward`` accepts (..., in) activations.

    ``bias`` (None, or (out,) in the activation dtype, as the checkpoint had it) stays dense beside the packed
    weight and is added after the product: ``kernel`` is the product alone, so a caller that calls it
    directly (the fast path) adds the bias itself."""

    in_features: int
    out_features: int
    bias: torch.Tensor | None
    # Up to this many rows per call go through the packed kernel; more are dequantized first. Where the two
    # cost the same, measured on projections of the default model (2 threads, AVX-512): int8 at 16-32 rows,
    # int4 at 64-128 (its unpacking costs more).
    kernel_rows = 8

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("bias", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])  # (n, in)
        if rows.dtype != self.dtype:
            rows = rows.to(self.dtype)
        if rows.shape[0] <= self.kernel_rows or not self.can_dequantize:
            out = self.kernel(rows)
        else:
            out = F.linear(rows, self.dequantize())
        if self.bias is not None:
            out = out.add_(self.bias)  # a fresh tensor; an fp32 bias is added in fp32 and rounded once
        return out.view(*x.shape[:-1], self.out_features)

    @property
    def dtype(self) -> torch.dtype:
        raise NotImplementedError

    @property
    def can_dequantize(self) -> bool:
        return True

    def kernel(self, rows: torch.Tensor) -> torch.Tensor:
        """(n, in) in ``dtype`` → (n, out) through the packed kernel."""
        raise NotImplementedError

    def dequantize(self) -> torch.Tensor:
        """The weight as a dense (out, in) tensor in ``dtype`` (a temporary copy)."""
        raise NotImplementedError

    def bound_kernel(self) -> Callable[[torch.Tensor], torch.Tensor]:
        """``kernel`` as a plain function of the rows with this module's buffers bound in: what a decode step
        calls ~120 times per token, ~2 µs cheaper a call than reading three buffers through ``nn.Module``
        attribute lookup (measured). The function keeps the buffers alive, not the module."""
        raise NotImplementedError

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self.buffers())

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"


class Int8Linear(QuantizedLinear):
    """Per-output-row symmetric int8: ``w[r] ≈ q[r] · scale[r]`` with q in -127..127."""

    kernel_rows = 24

    def __init__(self, qweight: torch.Tensor, scales: torch.Tensor) -> None:
        super().__init__()
        self.out_features, self.in_features = qweight.shape
        self.register_buffer("qweight", qweight)  # (out, in) int8
        self.register_buffer("scales", scales)  # (out,) in the activation dtype

    @classmethod
    def from_dense(cls, weight: torch.Tensor, dtype: torch.dtype = torch.bfloat16) -> "Int8Linear":
        w = weight.detach().float()  # (out, in)
        scales = (w.abs().amax(dim=1) / 127.0).clamp_min(1e-12)  # (out,)
        q = torch.round(w / scales[:, None]).clamp_(-127, 127).to(torch.int8)
        return cls(q.contiguous(), scales.to(dtype))

    @property
    def dtype(self) -> torch.dtype:
        return self.scales.dtype

    def kernel(self, rows: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int8pack_mm(rows, self.qweight, self.scales)

    def bound_kernel(self) -> Callable[[torch.Tensor], torch.Tensor]:
        op, qweight, scales = torch.ops.aten._weight_int8pack_mm.default, self.qweight, self.scales
        return lambda rows: op(rows, qweight, scales)

    def dequantize(self) -> torch.Tensor:
        return self.qweight.to(self.dtype).mul_(self.scales[:, None])

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows ``ids`` of the dequantized weight: (n,) → (n, in), for an embedding that shares it."""
        return self.qweight[ids].to(self.dtype) * self.scales[ids, None]

    def row(self, index: int) -> torch.Tensor:
        """Row ``index`` as (1, in), by slicing: no index tensor to build per decode step."""
        return self.qweight[index:index + 1].to(self.dtype) * self.scales[index:index + 1, None]


class Int4Linear(QuantizedLinear):
    """Group-wise asymmetric int4 in the CPU kernel's packed layout."""

    kernel_rows = 96

    def __init__(self, packed: torch.Tensor, scales_and_zeros: torch.Tensor, group: int, out_features: int,
                 in_features: int, block: int | None) -> None:
        super().__init__()
        self.out_features, self.in_features, self.group, self.block = out_features, in_features, group, block
        self.register_buffer("packed", packed)  # (out, in/2) uint8, the kernel's layout
        self.register_buffer("scales_and_zeros", scales_and_zeros)  # (in/group, out, 2) in the activation dtype

    @classmethod
    def from_dense(cls, weight: torch.Tensor, group: int = INT4_GROUP_SIZE,
                   dtype: torch.dtype = torch.bfloat16) -> "Int4Linear":
        return cls.from_codes(*int4_codes(weight, group), group, dtype)

    @classmethod
    def from_codes(cls, q: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, group: int = INT4_GROUP_SIZE,
                   dtype: torch.dtype = torch.bfloat16) -> "Int4Linear":
        """From 0..15 codes (out, in) and per-group (out, in/group) ``scale`` and ``zero`` of the kernel's
        ``w = (q - 8) · scale + zero``: how ``engine/quant/gguf_quant.py`` brings a GGUF's 4-bit blocks."""
        out_features, in_features = q.shape
        if in_features % group or out_features % 16:
            raise ValueError(f"int4 needs in % {group} == 0 and out % 16 == 0, got {tuple(q.shape)}")
        scales_and_zeros = torch.stack([scale.t(), zero.t()], dim=-1).to(dtype).contiguous()  # (groups, out, 2)
        q = q.to(torch.int32).contiguous()
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
        block = next((b for b in _INT4_BLOCKS
                      if (unpacked := _unpack(packed, b, out_features, in_features)) is not None
                      and torch.equal(unpacked, q)), None)
        if block is None:
            log.info("int4 packing layout not recognised for %s: prefill uses the kernel", tuple(q.shape))
        if block == Int4SymLinear.block_rows and not zero.any() and (op := native.int4_sym()) is not None:
            blocked = scale.to(dtype).view(out_features // block, block, -1).transpose(1, 2).contiguous()
            return Int4SymLinear(packed, blocked, group, out_features, in_features, op)
        return cls(packed, scales_and_zeros, group, out_features, in_features, block)

    @property
    def dtype(self) -> torch.dtype:
        return self.scales_and_zeros.dtype

    @property
    def can_dequantize(self) -> bool:
        return self.block is not None

    def kernel(self, rows: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int4pack_mm_for_cpu(rows, self.packed, self.group, self.scales_and_zeros)

    def bound_kernel(self) -> Callable[[torch.Tensor], torch.Tensor]:
        op = torch.ops.aten._weight_int4pack_mm_for_cpu.default
        packed, group, scales_and_zeros = self.packed, self.group, self.scales_and_zeros
        return lambda rows: op(rows, packed, group, scales_and_zeros)

    def dequantize(self) -> torch.Tensor:
        """The dense (out, in) weight as a transposed view of a fresh contiguous (in, out) tensor.

        Built column-block-wise from the packed bytes so that no step transposes single elements: in the
        kernel's layout each byte at (row block, column, j) holds rows j and j + block/2 of that block, so
        the low and high nibbles of a (blocks, in, block/2) view, permuted to (in, blocks, block/2), are
        runs of block/2 consecutive output rows of the transposed weight. Per-group scales then broadcast
        along contiguous rows. A GEMM reads the transposed view as fast as a contiguous (out, in) weight,
        and every value is ``(q - 8) · scale + zero`` computed in fp32 and rounded once to ``dtype`` (measured on
        the default model's projections: 2.4-2.8× faster than unpacking to (out, in) first, which spent
        most of its time on an element-wise transpose).
        """
        assert self.block is not None
        half, groups = self.block // 2, self.in_features // self.group
        blocks = self.out_features // self.block
        tiles = self.packed.view(blocks, self.in_features, half)
        w = torch.empty(self.in_features, blocks, 2, half, dtype=self.dtype)
        for index, nibble in enumerate((tiles & 0xF, tiles >> 4)):
            # q - 8 is in -8..7: exact in int8, and one byte-wide pass instead of a bf16-wide one.
            w[:, :, index].copy_(nibble.view(torch.int8).sub_(8).permute(1, 0, 2))
        scales_and_zeros = self.scales_and_zeros.permute(2, 0, 1).contiguous()  # (2, groups, out)
        grouped = w.view(groups, self.group, self.out_features)
        # One pass, computed in fp32 and rounded once: 20% faster than mul_ then add_ in bf16 (measured).
        torch.addcmul(scales_and_zeros[1][:, None], grouped, scales_and_zeros[0][:, None], out=grouped)
        return w.view(self.in_features, self.out_features).t()


class Int4SymLinear(Int4Linear):
    """Symmetric int4 (every zero 0: a GGUF's Q4_0 blocks) on the native kernel ``miaohui::int4_sym_mm``
    (``engine/native/library.py``): aten's packed codes as ``Int4Linear`` keeps them, and bf16 scales only, (out/64,
    in/group, 64) blocked by the packing's 64-row blocks: 4.5 bits per weight instead of 5. Its products equal
    ``Int4Linear``'s with zeros 0 bit for bit; ``scales_and_zeros`` is built on demand (prefill's dequantization,
    the quantized-weight cache), never kept."""

    block_rows = 64  # the AVX-512 packing's row blocks: the only layout the native kernel reads

    def __init__(self, packed: torch.Tensor, scales: torch.Tensor, group: int, out_features: int, in_features: int,
                 op: Callable[..., torch.Tensor]) -> None:
        QuantizedLinear.__init__(self)
        self.out_features, self.in_features, self.group, self.block = out_features, in_features, group, 64
        self.register_buffer("packed", packed)  # (out, in/2) uint8, aten's AVX-512 layout
        self.register_buffer("scales", scales)  # (out/64, in/group, 64) in the activation dtype
        self._op = op

    @property
    def scales_and_zeros(self) -> torch.Tensor:  # type: ignore[override]
        scale = self.scales.transpose(1, 2).reshape(self.out_features, -1).t()  # (groups, out)
        return torch.stack([scale, torch.zeros_like(scale)], dim=-1).contiguous()  # (groups, out, 2)

    @property
    def dtype(self) -> torch.dtype:
        return self.scales.dtype

    def kernel(self, rows: torch.Tensor) -> torch.Tensor:
        return self._op(rows, self.packed, self.scales, self.group)

    def bound_kernel(self) -> Callable[[torch.Tensor], torch.Tensor]:
        op, packed, scales, group = self._op, self.packed, self.scales, self.group
        return lambda rows: op(rows, packed, scales, group)


def int4_codes(weight: torch.Tensor, group: int = INT4_GROUP_SIZE) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Quantize a dense (out, in) weight: 0..15 codes (out, in) int32 and per-group (out, in/group) fp32
    scales and zeros, each group from its minimum ``m`` in steps ``s`` = range / 15, so zero = m + 8·s."""
    out_features, in_features = weight.shape
    if in_features % group:
        raise ValueError(f"int4 needs in % {group} == 0, got {tuple(weight.shape)}")
    w = weight.detach().float().view(out_features, in_features // group, group)  # (out, groups, group)
    low, high = w.amin(dim=-1), w.amax(dim=-1)  # (out, groups)
    scale = ((high - low) / 15.0).clamp_min(1e-12)
    q = torch.round((w - low[..., None]) / scale[..., None]).clamp_(0, 15).to(torch.int32)
    zero = low + 8.0 * scale  # the kernel computes (q - 8) · scale + zero
    return q.view(out_features, in_features), scale, zero


def _unpack(packed: torch.Tensor, block: int, out_features: int, in_features: int) -> torch.Tensor | None:
    """The 0..15 values of a packed int4 weight, for the layout of ``block`` rows: each byte at
    (row block, column, j) holds row j in its low nibble and row j + block/2 in its high one."""
    if out_features % block:
        return None
    tiles = packed.view(out_features // block, in_features, block // 2)  # (blocks, in, block/2)
    values = torch.cat([tiles & 0xF, tiles >> 4], dim=-1)  # (blocks, in, block)
    return values.transpose(1, 2).reshape(out_features, in_features)


__all__ = ["QuantizedLinear", "Int8Linear", "Int4Linear", "Int4SymLinear", "int4_codes"]
