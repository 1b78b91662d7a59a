"""A runner's KV rows out and back in: what a snapshot (``engine.generate.kv_snapshot``, which names dtypes with this module's ``dtype_name``) or another session's shared
prefix (``engine.serve``) is made of.

``export_rows(runner, n)`` gives the rows of the first ``n`` cached positions by name, as views of the live cache
(valid until the runner's next forward: copy or import them before); ``import_rows(runner, ids, rows)`` makes a
runner hold ``ids`` with those rows in place of its cache, bit for bit what it would have computed, so the next
prompt reuses the common prefix exactly as an in-memory reuse would. Layouts:

- the fast runner (``engine.executor.fastpath.FastRunner``, dense cache): "k" and "v", each (layers, kv_heads, n,
  head_dim), read from (a shared prefix's rows joined first, ``engine.executor.kv_blocks``) and copied into its
  preallocated buffers (as ``engine.executor.batched`` reads them: kept
  out of ``fastpath`` so that module stays the forward passes' alone). An 8-bit cache (``kv_precision="int8"``,
  ``engine.executor.kv_cache.Int8KVCache``) gives its stored bytes as they are: "k" and "v" int8 (layers, kv_heads,
  n, head_dim) and "k_scale"/"v_scale" fp16 (layers, kv_heads, n), so a restored cache holds exactly the values
  the session attended to (nothing re-quantized);
- the plain runner (``engine.executor.runner.ModelRunner``): "k.<layer>"/"v.<layer>", its own ``export_kv`` /
  ``import_kv`` (the one module that touches transformers' cache internals).

A ``SlotRunner`` (``engine.serve.batching``) is looked through to the runner it wraps. Owns no file format.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from engine.executor.fastpath import FastRunner

DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16", torch.int8: "int8",
               torch.uint8: "uint8"}


def dtype_name(dtype: torch.dtype) -> str:
    """A dtype's short name in snapshot headers and row records (``bf16``, ``int8``)."""
    return DTYPE_NAMES.get(dtype, str(dtype).removeprefix("torch."))


def _inner(runner: Any) -> Any:
    return getattr(runner, "inner", runner)


def runner_kind(runner: Any) -> str:
    """"fast" or "plain": whose layout ``export_rows`` gives and ``import_rows`` takes."""
    return "fast" if isinstance(_inner(runner), FastRunner) else "plain"


def _dense(runner: FastRunner) -> bool:
    return getattr(runner, "_kv8", None) is None and getattr(runner, "kv_precision", "auto") in ("auto", None)


def kv_precision(runner: Any) -> str | None:
    """The element type the runner's cache holds (bf16, fp32, int8...), None when the runner does not say."""
    inner = _inner(runner)
    if isinstance(inner, FastRunner):
        return dtype_name(inner._k.dtype) if _dense(inner) else str(getattr(inner, "kv_precision", "int8"))
    return None


INT8_NAMES = ("k", "v", "k_scale", "v_scale")


def export_rows(runner: Any, n: int | None = None) -> dict[str, torch.Tensor]:
    """The rows of the first ``n`` cached positions (default: all), views of the live cache; {} when the runner
    cannot give them exactly (no cache, sliding or recurrent layers in the plain runner)."""
    inner = _inner(runner)
    if isinstance(inner, FastRunner):
        if inner._kv8 is not None:
            count = len(inner._ids) if n is None else max(0, min(n, len(inner._ids)))
            kv = inner._kv8
            return dict(zip(INT8_NAMES, (kv.k[:, :, :count], kv.v[:, :, :count], kv.k_scale[:, :, :count],
                                         kv.v_scale[:, :, :count])))
        if not _dense(inner):
            return {}
        count = len(inner._ids) if n is None else max(0, min(n, len(inner._ids)))
        k, v = inner._kv.rows(count)  # views; after a shared prefix, the pool's rows and the own ones joined
        return {"k": k, "v": v}
    export = getattr(inner, "export_kv", None)
    return export(n) if export is not None else {}


def import_rows(runner: Any, ids: Sequence[int], rows: dict[str, torch.Tensor]) -> None:
    """Make ``runner`` hold ``ids`` with ``rows`` (``export_rows``' layout for its kind, any device) in place of what
    it caches. ``ValueError``, the cache unchanged, when they do not fit (another layout, geometry or dtype)."""
    inner = _inner(runner)
    if not isinstance(inner, FastRunner):
        if not hasattr(inner, "import_kv"):
            raise ValueError("this runner cannot restore KV rows")
        inner.import_kv(ids, rows)
        return
    w, n = inner._w, len(ids)
    shape = (len(w.layers), w.kv_heads, n, w.head_dim)
    if inner._kv8 is not None:
        _import_int8(inner, ids, rows, shape)
        return
    if not _dense(inner):
        raise ValueError(f"a {inner.kv_precision} KV cache does not restore snapshots")
    if set(rows) != {"k", "v"} or any(tuple(t.shape) != shape or t.dtype != inner._k.dtype for t in rows.values()):
        raise ValueError("KV rows do not fit this cache: "
                         f"{[(name, tuple(t.shape), str(t.dtype)) for name, t in rows.items()]}, not {shape}")
    inner.reset()  # a shared prefix is released: the rows go to the runner's own buffers from position 0
    inner._ensure(n)
    with torch.inference_mode():
        inner._k[:, :, :n].copy_(rows["k"])
        inner._v[:, :, :n].copy_(rows["v"])
    inner._ids = [int(i) for i in ids]
    inner._dirty = False


def _import_int8(inner: FastRunner, ids: Sequence[int], rows: dict[str, torch.Tensor], shape: tuple[int, ...]) -> None:
    """``import_rows`` for an 8-bit cache: int8 K and V (``shape``), fp16 scales (``shape`` less head_dim)."""
    kv = inner._kv8
    wanted = {"k": (shape, torch.int8), "v": (shape, torch.int8), "k_scale": (shape[:-1], kv.scale.dtype),
              "v_scale": (shape[:-1], kv.scale.dtype)}
    if set(rows) != set(wanted) or any(tuple(rows[name].shape) != size or rows[name].dtype != dtype
                                       for name, (size, dtype) in wanted.items()):
        raise ValueError("KV rows do not fit this 8-bit cache: "
                         f"{[(name, tuple(t.shape), str(t.dtype)) for name, t in rows.items()]}")
    n = len(ids)
    inner.reset()
    inner._ensure(n)
    with torch.inference_mode():
        kv.k[:, :, :n].copy_(rows["k"])
        kv.v[:, :, :n].copy_(rows["v"])
        kv.k_scale[:, :, :n].copy_(rows["k_scale"])
        kv.v_scale[:, :, :n].copy_(rows["v_scale"])
    inner._ids = [int(i) for i in ids]
    inner._dirty = False
