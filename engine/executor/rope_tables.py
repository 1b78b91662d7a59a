"""The fast runner's RoPE tables, from the model's own rotary embedding: ``rope_tables`` and ``context_rope``.

Owns turning a model's ``rotary_emb`` into the (positions, rotary dim) cos and sin tables
``engine.executor.fastpath.FastRunner`` indexes per step (sin with rotate_half's sign folded in, see
``engine.executor.llama_fused.rotate``; narrower than the head under partial rotary), one per RoPE kind (Gemma 3's
global and local bases), and the two RoPE types whose frequencies depend on the sequence length:

- "longrope" (Phi-3.5/4-mini): transformers picks the short or the long factors per forward call, the long ones
  once its last position passes original_max_position_embeddings, and keys cached before keep their rotation.
  So there are two sets of tables; the runner picks one per call the same way.
- "dynamic" (NTK): the default frequencies up to max_position_embeddings, new ones for every length past it,
  so the runner's context stops there.

Does not own the runner, its cache or the forward passes.
"""

from __future__ import annotations

from typing import Any

import torch

Tables = tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]  # (cos per kind, sin per kind)


def context_rope(config: Any, limit: int) -> tuple[int, int | None]:
    """(the runner's context, longrope's original_max_position_embeddings or None) for a model's config and the
    context the runner was asked for."""
    rope = getattr(config, "rope_parameters", None) or {}
    rope_type = rope.get("rope_type") if isinstance(rope, dict) else None
    context = getattr(config, "max_position_embeddings", None)
    if rope_type == "dynamic" and context:
        limit = min(int(limit), int(context))
    long_after = int(rope["original_max_position_embeddings"]) if rope_type == "longrope" else None
    return int(limit), long_after


def rope_tables(rotary: Any, kinds: tuple[str | None, ...], capacity: int, long_after: int | None,
                probe: torch.Tensor) -> tuple[Tables, Tables | None]:
    """(tables, longrope's long tables or None) for positions 0..capacity-1; ``probe`` gives dtype and device."""
    _tables(rotary, kinds, probe, 1, 1)  # a one-position call first: a "dynamic" RoPE run past its context resets
    if long_after is None:
        return _tables(rotary, kinds, probe, capacity, capacity), None
    # The model's RoPE picks the set by the last position it is given: the short set for the positions up to
    # original_max_position_embeddings (the only ones read with it), the long one from a call that passes it.
    long = _tables(rotary, kinds, probe, max(capacity, long_after + 1), capacity)
    short = _tables(rotary, kinds, probe, min(capacity, long_after), capacity)
    full = tuple(tuple(torch.cat((s, l[s.shape[0]:])) for s, l in zip(table, long_table))
                 for table, long_table in zip(short, long))
    return (full[0], full[1]), long


def _tables(rotary: Any, kinds: tuple[str | None, ...], probe: torch.Tensor, positions: int, keep: int) -> Tables:
    """The first ``keep`` rows of the tables from one call of the model's rotary embedding over 0..positions-1."""
    ids = torch.arange(positions, device=probe.device)[None]  # (1, positions)
    cos_tables, sin_tables = [], []
    for kind in kinds:
        # (1, positions, rotary dim): the head dim, or its rotated part with partial rotary
        cos, sin = rotary(probe, ids) if kind is None else rotary(probe, ids, kind)
        half = cos.shape[-1] // 2
        cos_tables.append(cos[0, :keep].contiguous())
        sin_tables.append(torch.cat((-sin[0, :keep, :half], sin[0, :keep, half:]), dim=-1).contiguous())
    return tuple(cos_tables), tuple(sin_tables)


__all__ = ["Tables", "context_rope", "rope_tables"]
