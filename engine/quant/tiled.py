"""int4 and int8 weights in the tiled layouts of the int8-activation kernels (``miaohui::q4_q8_mm``,
``miaohui::q8_q8_mm``, engine/native/q8act.cpp, built and loaded by engine/native/library.py), and the modules that
run on them: ``Int4Q8Linear`` and ``Int8Q8Linear``.

The contract (issue 25): a decode product quantizes its activations to int8 per block of 32 (d = max|x|/127,
nearest even) and sums integer products, as llama.cpp does; it is not bit-exact against the bf16-activation aten
kernels, and its quality is measured instead (docs/BENCHMARK.md). Prefill (more than ``kernel_rows`` rows) dequantizes
the weight (``miaohui::q4_dense``) and runs the dense GEMM on bf16 activations, or runs every row on the kernel where
the fast runner measured that faster on this CPU (engine/executor/prefill_forms.py).

Layouts (the C++ file's header has the byte order): int4 codes in tiles of 16 output rows, 256 bytes per tile and
block of 32 input columns, with fp16 scales (and, asymmetric, fp16 offsets ``m``: ``w = q·s + m``; a weight
whose zeros are all 0, a GGUF's Q4_0, stores none: ``m = -8·s``, 4.5 bits per weight); int8 rows in tiles of 16
with one bf16 scale per row. Output rows are padded to a multiple of 16 with zero weights; the input must be a
multiple of 32. ``from_codes``/``from_int8`` return None where the kernels cannot take a weight, and the caller
(engine/quant/quant.py's ``int4_module``/``int8_module``) keeps the aten module. Owns the layouts, their packing and unpacking, and ``reference``,
the same integer math in torch for tests; not the choice of precision (engine/quant/precision.py).
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F

from engine.native import library as native
from engine.quant.linears import Int4Linear, Int8Linear, QuantizedLinear

TILE = 16  # output rows per tile
BLOCK = 32  # activations per int8 block; the int4 group must be a multiple of it
_FP16_MAX = 65504.0


def int4_enabled(dtype: torch.dtype) -> int | None:
    """The kernels' instruction set for an int4 weight with activations in ``dtype``, or None (aten then)."""
    from engine.quant.precision import INT8_ACTIVATIONS  # the policy says whether decode may use them

    return native.q8act_isa() if INT8_ACTIVATIONS and dtype in (torch.bfloat16, torch.float32) else None


def int8_enabled(dtype: torch.dtype) -> int | None:
    """As ``int4_enabled`` for int8 weights. The kernel reads their per-row scales as bf16: an fp32 model's scales
    are rounded to bf16 once (``Int8Q8Linear``), so its head runs on the kernel too and the decode step stays native
    on a CPU without native bf16, where the model computes in fp32 (until 2026-12-07 its head kept aten's int8 and
    the whole step fell back to Python: 32 against ~100 tok/s for the default model on an AVX2-only EPYC)."""
    return int4_enabled(dtype)


def _tiles(rows: int) -> int:
    return -(-rows // TILE)


def _per_tile(values: torch.Tensor, tiles: int) -> torch.Tensor:
    """(N, G) per-row values → (tiles, G, 16), padded rows 0."""
    padded = F.pad(values, (0, 0, 0, tiles * TILE - values.shape[0]))
    return padded.view(tiles, TILE, -1).permute(0, 2, 1)


def pack_int4(q: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, group: int
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """0..15 codes (N, K) and per-group (N, K/group) ``scale`` and ``zero`` of ``w = (q - 8)·scale + zero`` →
    ``codes`` (tiles, K/32, 256) uint8 and ``scales`` (tiles, K/32, 1 or 2, 16) fp16 (scale, then offset
    ``m = zero - 8·scale`` unless every zero is 0). Scales beyond fp16's range are clamped to it."""
    out_features, in_features = q.shape
    if group % BLOCK or in_features % group:
        raise ValueError(f"the int8-activation kernel needs groups of a multiple of {BLOCK}, got {group}")
    tiles, blocks = _tiles(out_features), in_features // BLOCK
    padded = F.pad(q.to(torch.uint8), (0, 0, 0, tiles * TILE - out_features))
    # (tile, row, block, chunk, half, j) → (tile, block, chunk, row, j, half): byte 4·row + j of chunk i holds
    # column 8i + j (low nibble) and 8i + 4 + j (high nibble).
    v = padded.view(tiles, TILE, blocks, 4, 2, 4).permute(0, 2, 3, 1, 5, 4)
    codes = (v[..., 0] | (v[..., 1] << 4)).reshape(tiles, blocks, 256).contiguous()
    repeat = group // BLOCK
    s = scale.float().repeat_interleave(repeat, dim=1)
    parts = [s] if not zero.any() else [s, (zero.float() - 8.0 * scale.float()).repeat_interleave(repeat, dim=1)]
    scales = torch.stack([_per_tile(p, tiles) for p in parts], dim=2)
    return codes, scales.clamp(-_FP16_MAX, _FP16_MAX).to(torch.float16).contiguous()


def unpack_int4(codes: torch.Tensor, scales: torch.Tensor, out_features: int
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``pack_int4``'s inverse: codes (N, K) uint8, and per-block (N, K/32) fp32 scale ``s`` and offset ``m``."""
    tiles, blocks = codes.shape[:2]
    nibbles = torch.stack([codes & 0xF, codes >> 4], dim=-1).view(tiles, blocks, 4, TILE, 4, 2)
    q = nibbles.permute(0, 3, 1, 2, 5, 4).reshape(tiles * TILE, blocks * BLOCK)[:out_features]
    per_row = scales.float().permute(0, 3, 1, 2).reshape(tiles * TILE, blocks, -1)[:out_features]  # (N, G, S)
    s = per_row[..., 0]
    m = per_row[..., 1] if per_row.shape[-1] == 2 else -8.0 * s
    return q, s, m


def pack_int8(qweight: torch.Tensor) -> torch.Tensor:
    """(N, K) int8 → (tiles, K/4, 64): byte 4·row + j of column quad i is the row's column 4i + j."""
    out_features, in_features = qweight.shape
    tiles = _tiles(out_features)
    padded = F.pad(qweight, (0, 0, 0, tiles * TILE - out_features))
    return padded.view(tiles, TILE, in_features // 4, 4).permute(0, 2, 1, 3).reshape(tiles, -1, 64).contiguous()


def reference(a: torch.Tensor, codes_or_tiles: torch.Tensor, scales: torch.Tensor, out_features: int
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernels' math in torch, for tests: (fp64 result, fp64 bound of its terms' magnitudes), from activations
    quantized as the kernel does (nearest even of x · (1/d), d = max|x| / 127) and exact integer block sums.
    int4 when ``codes_or_tiles`` is uint8, int8 (per-row ``scales``) when it is int8."""
    x = a.float().view(a.shape[0], -1, BLOCK)  # (rows, G, 32)
    d = x.abs().amax(dim=-1) / 127.0
    inverse = torch.where(d > 0, 1.0 / d, torch.zeros_like(d))
    qa = torch.round(x * inverse[..., None]).to(torch.int64)  # (rows, G, 32)
    if codes_or_tiles.dtype == torch.uint8:
        q, s, m = unpack_int4(codes_or_tiles, scales, out_features)
        dots = torch.einsum("rgj,ngj->rng", qa, q.to(torch.int64).view(out_features, -1, BLOCK))  # (rows, N, G)
        terms = d[:, None].double() * (s.double() * dots.double() + m.double() * qa.sum(-1)[:, None].double())
        return terms.sum(-1), terms.abs().sum(-1)
    w = dense_int8(codes_or_tiles, out_features).to(torch.int64).view(out_features, -1, BLOCK)
    dots = torch.einsum("rgj,ngj->rng", qa, w)
    terms = d[:, None].double() * dots.double() * scales[:out_features].double()[None, :, None]
    return terms.sum(-1), terms.abs().sum(-1)


def dense_int8(tiles: torch.Tensor, out_features: int) -> torch.Tensor:
    """``pack_int8``'s inverse: (N, K) int8."""
    count, quads = tiles.shape[:2]
    return tiles.view(count, quads, TILE, 4).permute(0, 2, 1, 3).reshape(count * TILE, quads * 4)[:out_features]


class Int4Q8Linear(Int4Linear):
    """int4 in the tiled layout on ``miaohui::q4_q8_mm`` (int8 activations per block of 32 for ≤ ``kernel_rows``
    rows; prefill dequantizes). ``packed``/``scales_and_zeros`` of aten's layout are not kept."""

    def __init__(self, codes: torch.Tensor, scales: torch.Tensor, group: int, out_features: int, in_features: int,
                 dtype: torch.dtype, isa: int) -> None:
        QuantizedLinear.__init__(self)
        self.out_features, self.in_features, self.group, self.block = out_features, in_features, group, TILE
        self.register_buffer("codes", codes)  # (tiles, in/32, 256) uint8
        self.register_buffer("scales", scales)  # (tiles, in/32, 1 or 2, 16) fp16
        self._dtype, self.isa = dtype, isa
        # Prefill (more than ``kernel_rows`` rows) dequantizes unless the runner's measured choice puts every row on
        # the kernel (engine/executor/prefill_forms.py: which is faster depends on the CPU, AMX above all).

    @classmethod
    def from_tiled_codes(cls, q: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, group: int,
                         dtype: torch.dtype) -> "Int4Q8Linear | None":
        """From ``Int4Linear.from_codes``' arguments, or None where the kernel cannot run here."""
        isa = int4_enabled(dtype)
        if isa is None or group % BLOCK:
            return None
        codes, scales = pack_int4(q, scale, zero, group)
        return cls(codes, scales, group, q.shape[0], q.shape[1], dtype, isa)

    @property
    def symmetric(self) -> bool:
        return self.scales.shape[2] == 1

    @property
    def dtype(self) -> torch.dtype:
        return self._dtype

    @property
    def can_dequantize(self) -> bool:
        return True

    @property
    def scales_and_zeros(self) -> torch.Tensor:  # type: ignore[override]
        raise AttributeError("Int4Q8Linear keeps its tiled layout, not aten's scales and zeros")

    def kernel(self, rows: torch.Tensor) -> torch.Tensor:
        return torch.ops.miaohui.q4_q8_mm(rows, self.codes, self.scales, self.out_features, self.isa)

    def bound_kernel(self) -> Callable[[torch.Tensor], torch.Tensor]:
        op, codes, scales, n, isa = torch.ops.miaohui.q4_q8_mm.default, self.codes, self.scales, self.out_features, self.isa
        return lambda rows: op(rows, codes, scales, n, isa)

    def dequantize(self) -> torch.Tensor:
        """The dense (out, in) weight, ``q·s + m`` in fp32 rounded once to ``dtype``: a transposed view of a contiguous
        (in, out) tensor (built column-block-wise, as ``Int4Linear.dequantize`` says why), by ``miaohui::q4_dense``
        (the same bits as ``dequantize_reference``, ~7× faster)."""
        if self._dtype in (torch.bfloat16, torch.float32):
            w = torch.ops.miaohui.q4_dense(self.codes, self.scales, self._dtype)
            return w[:, :self.out_features].t()
        return self.dequantize_reference()

    def dequantize_reference(self) -> torch.Tensor:
        """``dequantize`` in torch operations: the reference the native op is tested against, and fp16's form."""
        tiles, blocks = self.codes.shape[:2]
        width = tiles * TILE
        view = self.codes.view(tiles, blocks, 4, TILE, 4)  # (tile, block, chunk, row, j)
        q = torch.empty(blocks, 4, 2, 4, tiles, TILE, dtype=torch.uint8)  # (block, chunk, half, j, tile, row)
        q[:, :, 0].copy_((view & 0xF).permute(1, 2, 4, 0, 3))
        q[:, :, 1].copy_((view >> 4).permute(1, 2, 4, 0, 3))
        per_block = self.scales.float().permute(1, 2, 0, 3).reshape(blocks, -1, width)  # (G, S, tiles·16)
        s = per_block[:, 0]
        m = per_block[:, 1] if per_block.shape[1] == 2 else -8.0 * s
        w = torch.addcmul(m[:, None], q.view(blocks, BLOCK, width), s[:, None]).to(self._dtype)
        return w.view(self.in_features, width)[:, :self.out_features].t()


class Int8Q8Linear(Int8Linear):
    """int8 (per-row scale) in 16-row tiles on ``miaohui::q8_q8_mm``: the head and embedding table, and int8's
    projections. ``rows``/``row`` read the table for an embedding that shares it."""

    def __init__(self, tiles: torch.Tensor, scales: torch.Tensor, out_features: int, isa: int) -> None:
        QuantizedLinear.__init__(self)
        self.out_features, self.in_features = out_features, tiles.shape[1] * 4
        self.register_buffer("tiles", tiles)  # (tiles, in/4, 64) int8
        # (out,) in the model's dtype (bf16, or fp32 on a CPU without native bf16), each a bf16 value: the kernel
        # reads them as bf16, and the dense forms (prefill, an embedding's rows) use the same values
        bf16 = scales.to(torch.bfloat16).contiguous()
        self.register_buffer("scales", bf16.to(scales.dtype))
        self.register_buffer("kernel_scales", bf16, persistent=False)  # the kernel's operand
        self.isa = isa

    @classmethod
    def from_int8(cls, qweight: torch.Tensor, scales: torch.Tensor) -> "Int8Q8Linear | None":
        """From ``Int8Linear``'s (out, in) int8 weight and (out,) scales, or None where the kernel cannot run."""
        isa = int8_enabled(scales.dtype)
        if isa is None or qweight.shape[1] % BLOCK:
            return None
        return cls(pack_int8(qweight), scales.contiguous(), qweight.shape[0], isa)

    @property
    def qweight(self) -> torch.Tensor:  # type: ignore[override]
        return dense_int8(self.tiles, self.out_features)

    def kernel(self, rows: torch.Tensor) -> torch.Tensor:
        return torch.ops.miaohui.q8_q8_mm(rows, self.tiles, self.kernel_scales, self.out_features, self.isa)

    def bound_kernel(self) -> Callable[[torch.Tensor], torch.Tensor]:
        op, tiles, scales, n, isa = (torch.ops.miaohui.q8_q8_mm.default, self.tiles, self.kernel_scales,
                                     self.out_features, self.isa)
        return lambda rows: op(rows, tiles, scales, n, isa)

    def _gather(self, ids: torch.Tensor) -> torch.Tensor:
        table = self.tiles.view(self.tiles.shape[0], -1, TILE, 4)  # (tile, quad, row, j)
        return table[ids // TILE, :, ids % TILE].reshape(-1, self.in_features)

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        return self._gather(ids).to(self.dtype) * self.scales[ids, None]

    def row(self, index: int) -> torch.Tensor:
        table = self.tiles.view(self.tiles.shape[0], -1, TILE, 4)
        q = table[index // TILE, :, index % TILE].reshape(1, self.in_features)
        return q.to(self.dtype) * self.scales[index:index + 1, None]


@contextmanager
def decode_products(model: Any) -> Iterator[None]:
    """Within it, every tiled module computes any number of rows on its kernel (int8 activations), as decode computes
    each position, instead of prefill's dequantized GEMM on bf16 activations: what a quality measure over a whole
    text in one pass (engine/quant/quality.py) must see. Activations are quantized per row, so a row's product is
    the same in a batch of 500 as alone."""
    modules = [m for m in model.modules() if isinstance(m, (Int4Q8Linear, Int8Q8Linear))]
    own = [module.__dict__.get("kernel_rows") for module in modules]  # a module's own setting, or None (the class's)
    for module in modules:
        module.kernel_rows = sys.maxsize
    try:
        yield
    finally:
        for module, rows in zip(modules, own):
            if rows is None:
                del module.kernel_rows  # back to the class's
            else:
                module.kernel_rows = rows


__all__ = ["TILE", "BLOCK", "decode_products", "Int4Q8Linear", "Int8Q8Linear", "pack_int4", "unpack_int4", "pack_int8", "dense_int8",
           "reference", "int4_enabled", "int8_enabled"]
