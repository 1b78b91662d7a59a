"""The quantizing step of a load, after the float weights are in memory: int8/int4 asked for, or ``auto``'s bar.

``native`` rewrites the model with the int kernels' weights (engine/quant/quant.py): a GGUF's from its own
blocks (engine/quant/gguf_quant.py), else from the cache of an earlier load when it has them
(engine/quant/quant_cache.py). ``auto`` applies ``auto``'s quality bar (engine/quant/auto_quant.py) where
engine/quant/precision.py's policy says it applies.
Owns the choice between those paths and their one-line errors; engine/models/loader.py owns the load around
them. Importing this module loads no torch, for the same reason as the loader (see its note after the
imports): the modules that do are imported inside the functions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from engine.errors import BadInputError
from engine.quant.precision import AutoChoice


def native(model: Any, precision: str, device: str, folder: Path, gguf_file: str | None,
           gguf: Any = None) -> tuple[bool, str]:
    """Quantize ``model`` in place to ``precision`` (int8 | int4). Returns (from the cache, load note)."""
    if device != "cpu":
        raise BadInputError(f"{precision} uses torch's CPU kernels: use --device cpu, or bnb-int8 / nf4 on a GPU")
    from engine.quant.quant_cache import quantize_cached  # lazy: torch

    files = [folder / gguf_file] if gguf_file else sorted(folder.glob("*.safetensors"))
    try:
        if gguf is not None:
            from engine.quant.gguf_quant import quantize_from_gguf  # lazy: torch and gguf

            note = quantize_from_gguf(model, precision, gguf)
            if note is not None:
                return False, note
        hit = quantize_cached(model, precision, files)
        return hit, f"GGUF weights dequantized, then quantized to {precision}" if gguf is not None else ""
    except ValueError as exc:
        raise BadInputError(f"cannot load this model in {precision}: {exc}") from None


def auto(model: Any, tokenizer: Any, files: list[Path], float_name: str, reload: Callable[[], Any],
         measuring: Callable[[], None], cache: bool = True) -> tuple[Any, AutoChoice]:
    """``auto``'s quality step, where engine/quant/precision.py's policy applies it: the model to use (``model``
    quantized, or ``reload()``'s float weights) and the verdict; ``cache``: auto_quant.choose's."""
    from engine.quant import auto_quant  # lazy: torch

    return auto_quant.choose(model, tokenizer, files, float_name, reload, measuring, cache)


def remembered(files: list[Path], float_name: str) -> AutoChoice | None:
    """``auto``'s verdict where earlier loads' measurements already decide it (no weights read), else None."""
    from engine.quant import auto_quant  # lazy: torch

    return auto_quant.remembered(files, float_name)


__all__ = ["native", "auto", "remembered"]
