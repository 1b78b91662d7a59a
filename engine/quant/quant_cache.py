"""int8/int4 weights cached on disk, so a second load skips quantizing.

After ``engine/quant/quant.py`` quantizes a model, its packed weights are written to one safetensors file in
``<data dir>/cache/quantized/`` (not beside the model: a model folder may be read-only or part of the
Hugging Face cache). The file's name is a hash of everything its contents depend on:

- the source weights: each weights file's name, size and modification time (a changed file is a new key);
- the precision and the int4 group size;
- the kernel layout: torch's version and the CPU kernel build it dispatches to (``get_cpu_capability``),
  since the int4 packing differs between AVX-512 and AVX2 builds;
- whether int4/int8 are held in the tiled layouts of the int8-activation kernels (engine/quant/tiled.py), which
  depends on the built library, the CPU and ``MIAOHUI_NATIVE``: switching it names another file, never misreads;
- ``FORMAT``, bumped whenever what is stored changes (2: the tiled layouts; 3: an fp32 model's int8 head tiled too,
  its scales rounded to bf16).

A cache file is never trusted beyond its key: one that cannot be read, lacks a module, or whose shapes
do not match the model's is ignored and rewritten. Writes go to a temporary file renamed into place, so
a crash leaves the old file or none. Owns the key, the file and its checks; not quantization itself.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any, Sequence

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from engine import paths
from engine.cpu import native_bf16
from engine.errors import EngineError
from engine.inputs import INT4_GROUP_SIZE
from engine.quant import tiled
from engine.quant.quant import Int4Linear, Int8Linear, QuantizedLinear, projection_groups, quantize_model

log = logging.getLogger(__name__)

FORMAT = 3


def cache_key(weight_files: Sequence[Path], precision: str, group: int = INT4_GROUP_SIZE,
              dtype: torch.dtype | None = None) -> str:
    """The hash naming the cache file of these weights quantized this way on this torch and CPU build, for a model
    in ``dtype`` (the modules' scales and outputs take it: an fp32 model's file read by a bf16 one broke decode)."""
    files = []
    for path in sorted(weight_files):
        stat = path.stat()
        files.append([path.name, stat.st_size, stat.st_mtime_ns])
    identity = {"format": FORMAT, "files": files, "precision": precision, "group": group,
                "torch": torch.__version__, "cpu_kernels": torch.backends.cpu.get_cpu_capability(),
                # the dtype the modules are built for follows it (engine.cpu: bf16 where native, else fp32); a file
                # written under the other choice (MIAOHUI_CPU_BF16 flipped, as CI's second pass does) broke decode
                "native_bf16": native_bf16(), "dtype": str(dtype) if dtype is not None else None,
                "tiled": tiled.int4_enabled(torch.bfloat16) is not None}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:32]


def cache_folder() -> Path:
    return paths.data_dir() / "cache" / "quantized"


def quantize_cached(model: Any, precision: str, weight_files: Sequence[Path],
                    group: int = INT4_GROUP_SIZE, write: bool = True) -> bool:
    """Quantize ``model`` in place, from the cache when it holds these weights; returns True on a hit.

    A miss quantizes and then writes the cache (unless ``write`` is False: a model no later load will be, such as
    ``auto``'s fp32 measurement where quantized loads compute in bf16); any trouble with the cache costs only the
    time to quantize, never the load.
    """
    try:
        dtype = model.model.embed_tokens.weight.dtype  # what _check_fits builds the modules for
        path = cache_folder() / f"{cache_key(weight_files, precision, group, dtype)}.safetensors"
    except (OSError, EngineError) as exc:  # no usable data folder: quantize without a cache
        log.info("quantized-weight cache unavailable: %s", exc)
        quantize_model(model, precision, group)
        return False
    stored = _read(path)
    if stored is not None:
        make = _from_cache(*stored)
        try:
            _check_fits(model, precision, make)  # every module, before the model is touched
        except _Mismatch as exc:
            log.warning("quantized-weight cache %s does not fit this model (%s): rebuilding it", path.name, exc)
        else:
            quantize_model(model, precision, group, make=make)
            return True
    built = quantize_model(model, precision, group)
    if write:
        _write(path, built)
    return False


class _Mismatch(ValueError):
    """A cached module is missing or has the wrong shape."""


def _check_fits(model: Any, precision: str, make: Any) -> None:
    """Raise _Mismatch unless the cache holds every module ``quantize_model`` would build, in the right shape."""
    meta = torch.empty(0, dtype=model.model.embed_tokens.weight.dtype)  # the dtype the modules are built for
    for key, parent, names in projection_groups(model):
        rows = sum(getattr(parent, name).out_features for name in names)
        make(key, meta.new_empty((rows, getattr(parent, names[0]).in_features), device="meta"), precision)
    make("lm_head", model.lm_head.weight.to("meta"), "int8")
    inner = model.model
    if model.lm_head.weight.data_ptr() != inner.embed_tokens.weight.data_ptr():
        make("embed", inner.embed_tokens.weight.to("meta"), "int8")


def _read(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]] | None:
    if not path.is_file():
        return None
    try:
        with safe_open(str(path), framework="pt") as handle:
            metadata = handle.metadata() or {}
            layout = json.loads(metadata.get("layout", "null"))
            if metadata.get("format") != str(FORMAT) or not isinstance(layout, dict):
                raise ValueError("unknown format")
            # Cloned: get_tensor's tensors can be views of the file's mapping, gone once it is closed
            # (a kernel reading one crashed the process).
            tensors = {name: handle.get_tensor(name).clone() for name in handle.keys()}
    except Exception as exc:  # noqa: BLE001  (a damaged cache is rebuilt, whatever the damage)
        log.warning("quantized-weight cache %s is unreadable (%s): rebuilding it", path.name, exc)
        return None
    return tensors, layout


def _from_cache(tensors: dict[str, torch.Tensor], layout: dict[str, Any]):
    def make(key: str, weight: torch.Tensor, kind: str) -> QuantizedLinear:
        out_features, in_features = weight.shape
        entry = layout.get(key)
        if not isinstance(entry, dict) or entry.get("kind") != kind:
            raise _Mismatch(f"{key} missing")
        if entry.get("layout") == "tiled":
            return _tiled(key, entry, kind, out_features, in_features, weight.dtype)
        if kind == "int8":
            q, scales = tensors.get(f"{key}.qweight"), tensors.get(f"{key}.scales")
            if q is None or scales is None or tuple(q.shape) != (out_features, in_features) \
                    or q.dtype != torch.int8 or tuple(scales.shape) != (out_features,):
                raise _Mismatch(f"{key} shape")
            return Int8Linear(q, scales)
        packed, sz = tensors.get(f"{key}.packed"), tensors.get(f"{key}.scales_and_zeros")
        group = entry.get("group")
        if packed is None or sz is None or not isinstance(group, int) or group <= 0 or in_features % group \
                or tuple(packed.shape) != (out_features, in_features // 2) \
                or tuple(sz.shape) != (in_features // group, out_features, 2):
            raise _Mismatch(f"{key} shape")
        block = entry.get("block")
        return Int4Linear(packed, sz, group, out_features, in_features, block if isinstance(block, int) else None)

    def _tiled(key: str, entry: dict[str, Any], kind: str, out_features: int, in_features: int,
               dtype: torch.dtype) -> QuantizedLinear:
        isa = tiled.int4_enabled(dtype) if kind == "int4" else tiled.int8_enabled(dtype)
        count = -(-out_features // tiled.TILE)
        if isa is None:
            raise _Mismatch(f"{key}: the int8-activation kernels do not run here")
        if kind == "int8":
            tiles, scales = tensors.get(f"{key}.tiles"), tensors.get(f"{key}.scales")
            if tiles is None or scales is None or tuple(tiles.shape) != (count, in_features // 4, 64) \
                    or tiles.dtype != torch.int8 or tuple(scales.shape) != (out_features,) or scales.dtype != dtype:
                raise _Mismatch(f"{key} shape")
            return tiled.Int8Q8Linear(tiles, scales, out_features, isa)
        codes, scales, group = tensors.get(f"{key}.codes"), tensors.get(f"{key}.scales"), entry.get("group")
        blocks = in_features // tiled.BLOCK
        if codes is None or scales is None or not isinstance(group, int) or group <= 0 or in_features % group \
                or tuple(codes.shape) != (count, blocks, 256) or codes.dtype != torch.uint8 \
                or tuple(scales.shape[:2]) != (count, blocks) or scales.shape[2:] not in ((1, 16), (2, 16)) \
                or scales.dtype != torch.float16:
            raise _Mismatch(f"{key} shape")
        return tiled.Int4Q8Linear(codes, scales, group, out_features, in_features, dtype, isa)

    return make


def _write(path: Path, built: dict[str, QuantizedLinear]) -> None:
    tensors: dict[str, torch.Tensor] = {}
    layout: dict[str, Any] = {}
    for key, module in built.items():
        if isinstance(module, tiled.Int8Q8Linear):
            tensors[f"{key}.tiles"], tensors[f"{key}.scales"] = module.tiles, module.scales
            layout[key] = {"kind": "int8", "layout": "tiled"}
        elif isinstance(module, tiled.Int4Q8Linear):
            tensors[f"{key}.codes"], tensors[f"{key}.scales"] = module.codes, module.scales
            layout[key] = {"kind": "int4", "layout": "tiled", "group": module.group}
        elif isinstance(module, Int8Linear):
            tensors[f"{key}.qweight"], tensors[f"{key}.scales"] = module.qweight, module.scales
            layout[key] = {"kind": "int8"}
        elif isinstance(module, Int4Linear):
            tensors[f"{key}.packed"], tensors[f"{key}.scales_and_zeros"] = module.packed, module.scales_and_zeros
            layout[key] = {"kind": "int4", "group": module.group, "block": module.block}
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(temporary),
                  metadata={"format": str(FORMAT), "layout": json.dumps(layout)})
        os.replace(temporary, path)
    except OSError as exc:  # a full or read-only disk costs the next load its time, nothing else
        log.warning("could not write the quantized-weight cache %s: %s", path, exc)
        temporary.unlink(missing_ok=True)


__all__ = ["FORMAT", "cache_key", "cache_folder", "quantize_cached"]
