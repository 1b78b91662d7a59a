"""A vision family's own positions and attention mask for its prompt's prefill on the fast path (issue 44): what
``engine.executor.fastpath.FastRunner.prefill(layout=...)`` reads, and the RoPE offset its decode then keeps.

Owns ``ImageBlocks`` (Gemma 3: each run of an image's tokens attends to itself both ways during prefill, on global
and sliding layers alike, as transformers' ``create_masks_for_vision_model`` builds it: sliding-window AND (causal
OR same block); a chunk never ends inside a block, since a block's first rows need its last) and ``MRope`` (Qwen2.5-VL:
3-D positions from the model's own ``get_rope_index``, turned into (cos, sin) rows by its own rotary embedding; text
after the images continues at position + ``delta``, where ``delta`` = the largest position + 1 - the prompt's length;
Qwen3-VL too, with its deepstack features added to the image tokens' hidden states after its first layers),
and ``layout_for`` (the family's layout for one prompt, or None when the plain causal 1-D prefill is already right).

Does not own the runner, the prompt (``engine.vision.turn``) or the vision tower's forward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch


@dataclass(frozen=True)
class ImageBlocks:
    """Runs [start, end) of prompt positions whose tokens see each other both ways (Gemma 3's image tokens)."""

    blocks: tuple[tuple[int, int], ...]
    delta: int = 0

    def chunk_end(self, start: int, end: int) -> int:
        for first, last in self.blocks:
            if first < end < last:
                return last
        return end

    def ropes(self, start: int, end: int, dtype: torch.dtype) -> None:
        return None

    def after_layer(self, index: int, start: int, x: torch.Tensor) -> torch.Tensor:
        return x

    def allowed(self, start: int, end: int, device: torch.device) -> torch.Tensor | None:
        extra = None
        for first, last in self.blocks:
            if last <= start or first >= end:
                continue
            if extra is None:
                extra = torch.zeros(end - start, end, dtype=torch.bool, device=device)
            extra[max(first, start) - start:min(last, end) - start, first:last] = True
        return extra


@dataclass(frozen=True)
class MRope:
    """Qwen2.5-VL's (cos, sin) rows per RoPE kind for every prompt position ((n, rotary dim), sin with rotate_half's
    sign folded in, as ``engine.executor.rope_tables`` keeps them) and the decode offset ``delta``."""

    cos: tuple[torch.Tensor, ...]
    sin: tuple[torch.Tensor, ...]
    delta: int
    visual: torch.Tensor | None = None  # (n,) bool: the image tokens' positions (Qwen3-VL's deepstack)
    deepstack: tuple[torch.Tensor, ...] = ()  # per early layer: (image tokens, d) added after it to those positions

    def chunk_end(self, start: int, end: int) -> int:
        return end

    def after_layer(self, index: int, start: int, x: torch.Tensor) -> torch.Tensor:
        """Qwen3-VL: the layer's deepstack features added to the chunk's image tokens, as transformers adds them."""
        if index >= len(self.deepstack) or self.visual is None:
            return x
        rows = self.visual[start:start + x.shape[0]]
        if not bool(rows.any()):
            return x
        before = int(self.visual[:start].sum())  # the chunk's first image token's index among all of them
        features = self.deepstack[index][before:before + int(rows.sum())]
        x = x.clone()
        x[rows] = x[rows] + features.to(x.dtype)
        return x

    def ropes(self, start: int, end: int, dtype: torch.dtype) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(cos[start:end, None].to(dtype), sin[start:end, None].to(dtype))
                for cos, sin in zip(self.cos, self.sin)]

    def allowed(self, start: int, end: int, device: torch.device) -> None:
        return None


def image_blocks(token_types: torch.Tensor) -> ImageBlocks | None:
    """The runs of 1s in ``token_types`` (n,) (Gemma 3's processor marks an image's tokens so), or None for none."""
    flags = [bool(v) for v in token_types.tolist()]
    blocks, first = [], None
    for index, flag in enumerate([*flags, False]):
        if flag and first is None:
            first = index
        elif not flag and first is not None:
            blocks.append((first, index))
            first = None
    return ImageBlocks(tuple(blocks)) if blocks else None


@torch.inference_mode()
def mrope(whole: Any, language: Any, inputs: Mapping[str, Any], taken: Mapping[str, Any] | None = None) -> MRope | None:
    """``whole``'s 3-D positions for the prompt ``inputs`` (its processor's tensors: input_ids, mm_token_type_ids,
    image_grid_thw) as RoPE rows; None without an image (text positions are then 1-D, the runner's own tables).
    ``taken``: what the family's forward gave its language model (``engine.vision.turn.encode_all``): Qwen3-VL's
    ``visual_pos_masks`` and ``deepstack_visual_embeds``."""
    if inputs.get("image_grid_thw") is None:
        return None
    device = language.device
    ids = inputs["input_ids"].to(device)
    positions, deltas = whole.model.get_rope_index(
        ids, mm_token_type_ids=inputs["mm_token_type_ids"].to(device),
        image_grid_thw=inputs["image_grid_thw"].to(device), attention_mask=None)  # (3, 1, n), (1, 1)
    probe = torch.empty(1, dtype=next(language.model.parameters()).dtype, device=device)
    cos, sin = language.model.rotary_emb(probe, positions)  # (1, n, rotary dim): the sections already recomposed
    half = cos.shape[-1] // 2
    folded = torch.cat((-sin[0, :, :half], sin[0, :, half:]), dim=-1)
    deepstack = tuple((taken or {}).get("deepstack_visual_embeds") or ())
    visual = (taken or {}).get("visual_pos_masks")
    return MRope((cos[0].contiguous(),), (folded.contiguous(),), int(deltas.reshape(-1)[0]),
                 None if visual is None else visual[0].to(device), deepstack)


def layout_for(vision: Any, inputs: Mapping[str, Any],
               taken: Mapping[str, Any] | None = None) -> ImageBlocks | MRope | None:
    """The family's layout for one prompt (see the module docstring); None for a plain causal, 1-D one. ``taken``:
    the language model's inputs from the family's forward (Qwen3-VL's deepstack; ``engine.vision.turn.encode_all``)."""
    kind = vision.family.layout
    if kind == "blocks" and inputs.get("token_type_ids") is not None:
        return image_blocks(inputs["token_type_ids"][0])
    if kind == "mrope":
        return mrope(vision.model, vision.language, inputs, taken)
    return None


__all__ = ["ImageBlocks", "MRope", "image_blocks", "layout_for", "mrope"]
