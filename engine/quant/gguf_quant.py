"""A GGUF's weights loaded as what they are: its 4-bit blocks become int4 weights, its Q8_0 blocks int8.

transformers loads a GGUF by dequantizing every tensor to float; the int8/int4 path
(``engine/quant/quant.py``) would then quantize those floats again, rounding twice. Here the loader's
float model is only the skeleton: each projection is rebuilt from the file's own blocks.

- ``Q4_0`` (``w = (q - 8)·d``), ``Q4_1`` (``w = q·d + m``) and ``Q4_K`` (blocks of 32 inside 256-weight
  super-blocks, ``w = q·d·sc - dmin·mn``) are groups of 32 with 16 levels, which is the int4 kernel's format:
  it computes ``w = (q - 8)·scale + zero``, so the 4-bit codes are kept as they are and
  ``scale = d``, ``zero = 0`` (Q4_0); ``scale = d``, ``zero = m + 8·d`` (Q4_1);
  ``scale = d·sc``, ``zero = 8·d·sc - dmin·mn`` (Q4_K). Exact in fp32; the kernel keeps scales and zeros
  in bf16 (its fast path), which rounds them to 8 significant bits (tests/engine/quant/test_gguf_quant.py).
- ``Q8_0`` has one scale per block of 32, the int8 kernel one per output row: its values are re-scaled to
  the row's largest step (exactly what quantizing the dequantized row per channel gives), an error of at
  most half that step per weight, and none in a row's largest-scaled blocks.
- Any other type (Q5_*, Q6_K, F16, ...) is dequantized to fp32 from the file and quantized once to what was
  asked for; asked for a float precision, transformers dequantizes as before. Either way the load says so:
  ``load_note`` (the loaded model's ``facts.load_note``, and a log line).

Projection biases (Qwen2's q/k/v, F32 in llama.cpp's files) are read from the file as they are and kept in
fp32 beside the kernel, as ``quantize_model`` keeps a checkpoint's.

llama.cpp stores a Llama's q and k rows permuted for its RoPE; transformers un-permutes them when it
dequantizes. Rows are independent in both formats, so the same permutation (transformers' own tensor
processor) is applied to the raw rows of blocks. Before anything is replaced, layer 0's projections and the
lm_head rebuilt from the blocks are compared with transformers' dequantized weights; a model that does not
match (an unknown processor, layout or name) falls back to quantizing the dequantized weights, as before.

Owns reading a GGUF's block bytes (its header through ``engine.shapes.gguf_header``), the block → kernel mapping, the precision ``auto``
kernel a GGUF's blocks map onto as they are (``blocks_precision``, by engine/quant/precision.py's rule, which
decides when ``auto`` keeps them) and the note. Not the modules or the model rewrite
(``engine/quant/quant.py``), nor loading (``engine/models/loader.py``).
"""

from __future__ import annotations

import logging
import math
import mmap
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from engine.inputs import INT4_GROUP_SIZE
from engine.shapes.gguf_header import NeedMoreBytes, parse
from engine.quant import precision
from engine.quant.quant import (QuantizedLinear, int4_codes, int4_module, int8_module, projection_groups,
                                quantize_model)

log = logging.getLogger(__name__)

QT = GGMLQuantizationType
INT4_EXACT = tuple(QT[name] for name in sorted(precision.INT4_BLOCKS))  # kept as int4, codes unchanged
INT8_BLOCKS = tuple(QT[name] for name in sorted(precision.INT8_BLOCKS))  # kept as int8, re-scaled per row
_FLOATS = (QT.F32, QT.F16, QT.BF16)
_HEAD_ROWS_CHECKED = 1024  # of the lm_head's (vocabulary) rows compared with transformers' at each load
PROJECTIONS = precision.GGUF_PROJECTIONS


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    qtype: GGMLQuantizationType
    shape: tuple[int, ...]  # torch order: (rows, columns) for a matrix
    start: int  # byte offset in the file
    nbytes: int


class GGUFFile:
    """A GGUF's metadata and tensor table (``engine.shapes.gguf_header.parse``, the one header reader), its data
    memory-mapped, nothing read yet. Metadata arrays are their ``ArrayInfo`` (length and item type) only.

    Not ``gguf.GGUFReader``, which builds an object for every token of the vocabulary (2.5 s on the default
    model's file against ~0.1 s); the loader's safety check has already bounded the file.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        with open(self.path, "rb") as handle:  # struct reads from a plain mmap: ~10× faster than from numpy's
            blob = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        self._blob = np.frombuffer(blob, dtype=np.uint8)  # the tensors' bytes, read only when asked for
        try:
            header = parse(blob, self.path.name)
        except NeedMoreBytes:
            raise ValueError(f"{self.path.name}: the GGUF header runs past the end of the file") from None
        self.metadata: dict[str, Any] = dict(header.fields)
        self.tensors: dict[str, GGUFTensor] = {
            t.name: GGUFTensor(t.name, QT[t.quant], tuple(reversed(t.shape)), header.header_bytes + t.offset, t.nbytes)
            for t in header.tensors}

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    def raw(self, name: str) -> np.ndarray:
        """A matrix's bytes as (rows, bytes per row), a view of the file."""
        info = self.tensors[name]
        rows = math.prod(info.shape[:-1])
        return self._blob[info.start:info.start + info.nbytes].reshape(rows, info.nbytes // rows)

    def projection_types(self) -> Counter:
        """How many of the decoder's projection matrices (q, k, v, o, gate, up, down) have each type (their
        biases not counted)."""
        return Counter(t.qtype.name for t in self.tensors.values()
                       if t.name.startswith("blk.") and t.name.endswith(".weight") and t.name.split(".")[2] in PROJECTIONS)


# ---------------------------------------------------------------- blocks → kernel formats


def int4_from_blocks(raw: np.ndarray, qtype: GGMLQuantizationType) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(rows, bytes) of Q4_0/Q4_1/Q4_K blocks → codes (rows, columns) uint8 in 0..15 and per-32-group fp32
    ``scale`` and ``zero`` (rows, columns/32) such that ``w = (q - 8)·scale + zero``."""
    _, block_bytes = GGML_QUANT_SIZES[qtype]
    rows = raw.shape[0]
    blocks = torch.from_numpy(np.array(raw)).view(rows, -1, block_bytes)  # (rows, blocks, bytes), a copy

    def f16(part: torch.Tensor) -> torch.Tensor:  # (..., 2) bytes → (...) fp32
        return part.contiguous().view(torch.float16).squeeze(-1).float()

    def nibbles(qs: torch.Tensor) -> torch.Tensor:  # (..., 16·k) → (..., 32·k): low nibbles first, then high
        return torch.cat([qs & 0xF, qs >> 4], dim=-1)

    if qtype == QT.Q4_0:
        d, q = f16(blocks[..., :2]), nibbles(blocks[..., 2:])
        scale, zero = d, torch.zeros_like(d)
    elif qtype == QT.Q4_1:
        d, m, q = f16(blocks[..., :2]), f16(blocks[..., 2:4]), nibbles(blocks[..., 4:])
        scale, zero = d, m + 8.0 * d
    elif qtype == QT.Q4_K:
        from gguf.quants import Q4_K

        d, dmin = f16(blocks[..., :2])[..., None], f16(blocks[..., 2:4])[..., None]  # (rows, blocks, 1)
        sc, mn = Q4_K.get_scale_min(blocks[..., 4:16].reshape(-1, 12).numpy())  # (rows·blocks, 8) each
        sc = torch.from_numpy(sc.astype(np.float32)).view(rows, -1, 8)
        mn = torch.from_numpy(mn.astype(np.float32)).view(rows, -1, 8)
        qs = blocks[..., 16:].reshape(rows, -1, 4, 32)  # 4 × 32 bytes: sub-blocks 2i (low) and 2i+1 (high)
        q = torch.stack([qs & 0xF, qs >> 4], dim=3).reshape(rows, -1, 256)
        scale = d * sc
        zero = 8.0 * scale - dmin * mn
    else:
        raise ValueError(f"{qtype.name} is not a 4-bit type with blocks of 32")
    return q.reshape(rows, -1), scale.reshape(rows, -1), zero.reshape(rows, -1)


def dequantize(raw: np.ndarray, qtype: GGMLQuantizationType) -> torch.Tensor:
    """(rows, bytes) of any type → (rows, columns) fp32: Q8_0 here (``q·d``, exact in fp32, ~10× faster than
    numpy), any other type with gguf's own dequantization."""
    if qtype == QT.Q8_0:
        blocks = torch.from_numpy(np.array(raw)).view(raw.shape[0], -1, 34)  # fp16 d, then 32 int8
        d = blocks[..., :2].contiguous().view(torch.float16).float()  # (rows, blocks, 1)
        return (blocks[..., 2:].contiguous().view(torch.int8).float() * d).view(raw.shape[0], -1)
    from gguf.quants import dequantize as gguf_dequantize

    return torch.from_numpy(np.ascontiguousarray(gguf_dequantize(np.array(raw), qtype), dtype=np.float32))


def int4_from_codes(q: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor,
                    group: int = INT4_GROUP_SIZE) -> torch.Tensor:
    """The fp32 weight the int4 kernel computes from codes, scales and zeros (a reference for checks)."""
    rows, columns = q.shape
    w = (q.view(rows, columns // group, group).float() - 8.0) * scale[..., None] + zero[..., None]
    return w.view(rows, columns)


# ---------------------------------------------------------------- the precision and the note


def block_facts(file: GGUFFile) -> precision.GGUFBlocks:
    """This file's projection blocks as its tensor table lists them, for ``engine.quant.precision``'s block rule."""
    arch = file.architecture
    biases = tuple(t.qtype.name for t in file.tensors.values()
                   if t.name.startswith("blk.") and t.name.endswith(".bias") and t.name.split(".")[2] in PROJECTIONS)
    return precision.GGUFBlocks(tuple(file.projection_types().items()), file.metadata.get(f"{arch}.block_count"),
                                biases, arch)


def blocks_precision(file: GGUFFile) -> str | None:
    """The int kernel this file's projection blocks map onto as they are (int4 | int8), or None: the block rule."""
    return block_facts(file).kept()


def float_note(file: GGUFFile, float_name: str) -> str:
    counts = Counter(t.qtype.name for t in file.tensors.values())
    kinds = ", ".join(f"{n} {name}" for name, n in counts.most_common())
    return f"GGUF weights ({kinds}) dequantized to {float_name}"


def _summary(done: Counter) -> str:
    return "; ".join(f"{n} {what}" for what, n in done.most_common())


# ---------------------------------------------------------------- the model rewrite


class _Source:
    """The rows of one quantized module: GGUF tensors in transformers' row order."""

    def __init__(self, file: GGUFFile, model: Any) -> None:
        from gguf import MODEL_ARCH_NAMES, get_tensor_name_map
        from transformers.modeling_gguf_pytorch_utils import (TENSOR_PROCESSORS, Gemma2TensorProcessor,
                                                              LlamaTensorProcessor, TensorProcessor)

        arch = file.architecture
        processor_class = TENSOR_PROCESSORS.get(arch, TensorProcessor)
        # Gemma 2/3's processor only takes 1 from the norm weights: projections pass through it unchanged.
        if processor_class not in (TensorProcessor, LlamaTensorProcessor, Gemma2TensorProcessor):
            raise ValueError(f"transformers converts {arch} tensors with {processor_class.__name__}")
        found = [key for key, value in MODEL_ARCH_NAMES.items() if value == arch]
        if not found:
            raise ValueError(f"gguf does not know the architecture {arch!r}")
        self.file = file
        self.processor = processor_class(config={
            "num_attention_heads": file.metadata.get(f"{arch}.attention.head_count"),
            "num_key_value_heads": file.metadata.get(f"{arch}.attention.head_count_kv")})
        names = get_tensor_name_map(found[0], model.config.num_hidden_layers)
        qualified = {id(module): name for name, module in model.named_modules()}
        inner = model.model
        tied = model.lm_head.weight.data_ptr() == inner.embed_tokens.weight.data_ptr()

        def gguf_name(module: Any) -> str | None:
            name = names.get_name(qualified[id(module)])
            return f"{name}.weight" if name and f"{name}.weight" in file.tensors else None

        self.names: dict[str, list[str | None]] = {
            key: [gguf_name(getattr(parent, a)) for a in attrs] for key, parent, attrs in projection_groups(model)}
        missing = [key for key, names_found in self.names.items() if None in names_found]
        if missing:  # checked before any module is replaced: a load never stops half-rewritten
            raise ValueError(f"no tensor in the file for {missing[0]}")
        # Each projection's bias tensor in the file (None: it has none); only the projections' own.
        self.biases: dict[str, list[str | None]] = {
            key: [_bias_name(name, file) for name in names_found] for key, names_found in self.names.items()}
        # The lm_head and embedding fall back to what transformers loaded if the file names them otherwise.
        self.names["lm_head"] = [gguf_name(inner.embed_tokens if tied else model.lm_head)]
        self.names["embed"] = [gguf_name(inner.embed_tokens)]

    def bias(self, key: str, sizes: list[int], done: Counter) -> torch.Tensor | None:
        """The fp32 bias of module ``key`` from the file (zeros for a member without one; members of ``sizes``
        outputs), or None when none of its tensors has a bias."""
        names = self.biases.get(key) or []
        if not any(names):
            return None
        parts = []
        for name, size in zip(names, sizes):
            if name is None:
                parts.append(torch.zeros(size))
                continue
            info = self.file.tensors[name]
            values = dequantize(self.file.raw(name).reshape(1, -1), info.qtype).reshape(-1)
            if values.numel() != size:
                raise ValueError(f"{name}: {values.numel()} values for {size} outputs")
            parts.append(values)
            done[f"{info.qtype.name} biases kept in fp32"] += 1
        return torch.cat(parts)

    def rows(self, name: str) -> np.ndarray:
        """The tensor's raw rows, permuted as transformers permutes its dequantized rows."""
        raw = self.file.raw(name)
        permuted = self.processor.process(weights=raw, name=name).weights
        if permuted.shape != raw.shape:
            raise ValueError(f"{name}: transformers' processor changes its shape")
        return np.array(permuted)  # a writable copy: the file is mapped read-only

    def exact_int4(self, info: GGUFTensor, kind: str, group: int) -> bool:
        return kind == "int4" and info.qtype in INT4_EXACT and group == INT4_GROUP_SIZE

    def build(self, key: str, kind: str, dense: torch.Tensor, group: int, dtype: torch.dtype,
              done: Counter) -> QuantizedLinear:
        """The module ``key`` of ``kind`` from the file's tensors, noting in ``done`` what was done to each."""
        codes, floats = [], []
        for name in self.names.get(key) or [None]:
            info = self.file.tensors[name] if name else None
            if info is None:  # a lm_head or embedding the file names otherwise: what transformers loaded
                w, what = dense.float(), f"weights re-quantized to {kind}"
            elif self.exact_int4(info, kind, group):
                codes.append(int4_from_blocks(self.rows(name), info.qtype))
                done[f"{info.qtype.name} kept 4-bit (int4, exact)"] += 1
                continue
            else:
                w = dequantize(self.rows(name), info.qtype)
                if info.qtype in INT8_BLOCKS and kind == "int8":
                    what = f"{info.qtype.name} re-scaled to per-row int8"
                elif info.qtype in _FLOATS:
                    what = f"{info.qtype.name} quantized to {kind}"
                else:
                    what = f"{info.qtype.name} dequantized and re-quantized to {kind}"
            done[what] += 1
            if kind == "int4":
                codes.append(int4_codes(w, group))
            else:
                floats.append(w)
        if kind == "int8":
            return int8_module(torch.cat(floats), dtype)
        q, scale, zero = (torch.cat(column) for column in zip(*codes))
        return int4_module(q, scale, zero, group, dtype)

    def values(self, key: str, kind: str, group: int, limit: int | None = None) -> torch.Tensor | None:
        """The fp32 weights of ``key`` as the file holds them (each tensor's first ``limit`` rows), through the
        int4 mapping where it applies."""
        parts = []
        for name in self.names.get(key) or [None]:
            if name is None:
                return None
            info, rows = self.file.tensors[name], self.rows(name)[:limit]
            parts.append(int4_from_codes(*int4_from_blocks(rows, info.qtype), group)
                         if self.exact_int4(info, kind, group) else dequantize(rows, info.qtype))
        return torch.cat(parts)


def quantize_from_gguf(model: Any, precision: str, file: GGUFFile, group: int = INT4_GROUP_SIZE) -> str | None:
    """Rewrite ``model`` (loaded from ``file`` by transformers) with int8/int4 modules built from the file's
    blocks; returns the load note, or None, having changed nothing, when this model cannot be mapped."""
    try:
        source = _Source(file, model)
        _check(model, precision, source, group)
    except (ValueError, KeyError, AttributeError) as exc:
        log.warning("GGUF blocks not used (%s): quantizing the dequantized weights instead", exc)
        return None
    dtype = model.model.embed_tokens.weight.dtype
    done: Counter = Counter()
    sizes = {key: [getattr(parent, a).out_features for a in attrs] for key, parent, attrs in projection_groups(model)}
    biases = {key: source.bias(key, sizes[key], done) for key in sizes}  # read (and checked) before any change
    built = quantize_model(model, precision, group,
                           make=lambda key, dense, kind: source.build(key, kind, dense, group, dtype, done))
    for key, bias in biases.items():
        if bias is not None:  # the file's fp32 values, not the loader's copy in the model's dtype
            built[key].bias = bias
    return "GGUF weights: " + _summary(done)


def _bias_name(weight_name: str | None, file: GGUFFile) -> str | None:
    name = weight_name[:-len(".weight")] + ".bias" if weight_name and weight_name.endswith(".weight") else None
    return name if name in file.tensors else None


def _check(model: Any, precision: str, source: _Source, group: int) -> None:
    """Raise ValueError unless layer 0's projections and the lm_head read from the blocks equal the weights
    transformers dequantized (to the rounding of their dtype), before the model is touched: a wrong name,
    row permutation or block layout shows as differences of the weights' own size."""
    checks = [(key, parent, attrs, precision, None) for key, parent, attrs in projection_groups(model)
              if key.startswith("layers.0.")]
    checks.append(("lm_head", model, ("lm_head",), "int8", _HEAD_ROWS_CHECKED))  # rows are not permuted
    for key, parent, attrs, kind, limit in checks:
        dense = torch.cat([getattr(parent, a).weight[:limit] for a in attrs]).float()
        values = source.values(key, kind, group, limit)
        if values is None:
            continue
        if values.shape != dense.shape:
            raise ValueError(f"{key}: {tuple(values.shape)} from the file, {tuple(dense.shape)} loaded")
        if not bool(((values - dense).abs() <= 2.0 ** -7 * dense.abs() + 1e-6).all()):
            raise ValueError(f"{key} differs from transformers' weights")


__all__ = ["GGUFFile", "GGUFTensor", "INT4_EXACT", "INT8_BLOCKS", "block_facts", "blocks_precision", "float_note", "int4_from_blocks",
           "int4_from_codes", "dequantize", "quantize_from_gguf"]
