"""A vision-language model folder loaded for Miaohui: which family it is, the model and its processor, and the language
part as a causal LM the fast path reads (issue 44).

Owns ``VISION_FAMILIES`` (the ``model_type`` values of config.json taken as vision-language models: LLaVA-1.5,
LLaVA-OneVision, Idefics3 / SmolVLM, Qwen2.5-VL, Qwen3-VL, Gemma 3; where each keeps its language model, the layout
of its prefill when it is not plain causal 1-D (``engine.vision.layouts``), and a typed ``Refusal`` slot for a family
whose language part the fast path does not compute: none today), ``vision_family``
(from config.json, no torch), ``load_vision_model`` (``LoadSpec`` in, ``VisionModel`` out) and ``LanguageView`` (the
language model and head seen as a ``*ForCausalLM``: ``.model``, ``.lm_head``, ``.config``, what
``engine.executor.fastpath.FastRunner`` and ``engine.quant.quant.quantize_model`` read).

The load is ``engine.models.loader.load_model`` itself (its file-safety checks, device, cancel, one-line errors),
given transformers' ``AutoModelForImageTextToText`` and ``AutoProcessor`` as its readers, always in a float type: the
vision tower and projector stay in it (bf16 where the CPU computes bf16 natively or on a GPU, else fp32:
``engine.quant.precision.device_float_name``). int8/int4 then quantize the language part alone, on the same cached
path as the text families (``engine.quant.quantize_step.native``): the vision tower is a few hundred million
parameters run once per image, the language part billions run once per token. ``auto`` is the device's float type
(the text families' quality bar measures text alone; it is not applied here).

Does not own a turn with images (``engine.vision.turn``), reading image files (``engine.vision.image_input``) or the
fast step itself (``engine.generate``).
"""

from __future__ import annotations

import dataclasses
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from engine.errors import BadInputError, ImageError
from engine.executor.refusal import Refusal
from engine.inputs import NATIVE_QUANTIZED, LoadSpec


class NoVisionError(ImageError):
    """An image was given to a model without a vision tower: refused before anything is computed."""


@dataclass(frozen=True)
class VisionFamily:
    """One vision-language family: its config's ``model_type``, the attribute of ``model.model`` holding the language
    model, ``refusal`` when its language part does not run on the fast path (the turn then runs transformers'
    own forward over its cache, ``engine.vision.plain_turn``; no family today), and ``layout`` when its prefill is not
    plain causal 1-D."""

    model_type: str
    text_attr: str = "language_model"
    refusal: Refusal | None = None
    layout: str | None = None  # "blocks" (Gemma 3) or "mrope" (Qwen2.5-VL): engine.vision.layouts


VISION_FAMILIES: dict[str, VisionFamily] = {family.model_type: family for family in (
    VisionFamily("llava"), VisionFamily("llava_onevision"),
    VisionFamily("idefics3", text_attr="text_model"), VisionFamily("smolvlm", text_attr="text_model"),
    VisionFamily("qwen2_5_vl", layout="mrope"),
    VisionFamily("qwen3_vl", layout="mrope"),
    VisionFamily("gemma3", layout="blocks"),
)}


def vision_family(folder: Path) -> VisionFamily | None:
    """The family of the model folder's config.json, or None for a text-only model (or no readable config)."""
    try:
        config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return VISION_FAMILIES.get(config.get("model_type")) if isinstance(config, dict) else None


def require_vision(family: VisionFamily | None, name: str) -> VisionFamily:
    """``family``, or ``NoVisionError`` when the model has none: what a caller asks before taking an image."""
    if family is None:
        raise NoVisionError(f"{name}: this model has no vision: load a vision-language model (LLaVA, "
                            f"LLaVA-OneVision, SmolVLM/Idefics3, Qwen2.5-VL, Qwen3-VL, Gemma 3) to send images")
    return family


class LanguageView:
    """The language model and head of a vision-language model seen as a ``*ForCausalLM``: ``model`` (the decoder
    layers, norm, rotary embedding, token embedding), ``lm_head`` (read and written through to the whole model, so
    quantizing it replaces the whole model's head) and ``config`` (the text config). Holds no weights of its own."""

    def __init__(self, whole: Any, family: VisionFamily) -> None:
        self.whole = whole
        self.model = getattr(whole.model, family.text_attr)
        self.config = whole.config.get_text_config()
        self.hf_device_map = None

    @property
    def lm_head(self) -> Any:
        return self.whole.lm_head

    @lm_head.setter
    def lm_head(self, module: Any) -> None:
        self.whole.lm_head = module

    def get_input_embeddings(self) -> Any:
        return self.model.embed_tokens

    def parameters(self) -> Iterator[Any]:
        yield from self.model.parameters()
        yield from self.whole.lm_head.parameters()

    @property
    def device(self) -> Any:
        return next(self.model.parameters()).device


@dataclass(frozen=True)
class VisionModel:
    """A loaded vision-language model: ``loaded`` (an ``engine.models.model.LoadedModel`` of the whole model, its
    tokenizer and facts), ``processor`` (transformers' own: images and chat messages to ids and pixels), ``family``,
    ``language`` (``LanguageView``) and ``precision`` (of the language part's projections)."""

    loaded: Any
    processor: Any
    family: VisionFamily
    language: LanguageView
    precision: str

    @property
    def model(self) -> Any:
        return self.loaded.model

    @property
    def tokenizer(self) -> Any:
        return self.loaded.tokenizer

    @property
    def facts(self) -> Any:
        """The whole model's ``ModelFacts`` (what the lab's results and the window's panels describe a model by)."""
        return self.loaded.facts


def load_vision_model(spec: LoadSpec, progress: Any = None, cancel: threading.Event | None = None) -> VisionModel:
    """Load ``spec``'s vision-language model folder (see the module docstring). ``NoVisionError`` for a text-only
    folder; ``BadInputError`` for a precision this path does not take (bnb, int8/int4 on a family that is not on the
    fast path); every load failure one ``EngineError`` line, as ``load_model``'s."""
    from engine.models.loader import activation_dtype_name, load_model, resolve_device, resolve_source

    source = resolve_source(spec.model)
    family = require_vision(vision_family(source.folder), source.name)
    if source.gguf_file:
        raise BadInputError("a vision model from GGUF (a language GGUF plus an mmproj GGUF) is not supported yet: "
                            "use the model's Hugging Face folder")
    quantized = spec.precision in NATIVE_QUANTIZED
    if spec.precision not in ("auto", "fp32", "bf16", "fp16", *NATIVE_QUANTIZED):
        raise BadInputError(f"{spec.precision} is not available for vision models: auto, fp32, bf16, fp16, int8, int4")
    if quantized and family.refusal is not None:
        raise BadInputError(f"{spec.precision} needs the fast path for the language part, and {family.model_type} "
                            f"is not on it ({family.refusal}): load it in bf16 or fp32")
    from engine.quant.precision import device_float_name

    device = resolve_device(spec.device)
    float_name = activation_dtype_name(spec, device, spec.precision) if quantized or spec.precision != "auto" \
        else device_float_name(device)
    held: dict[str, Any] = {}

    def read_model(folder: str, **kwargs: Any) -> Any:
        return _read_model(folder, **kwargs)

    def read_processor(folder: str, **kwargs: Any) -> Any:
        from transformers import AutoProcessor

        try:
            held["processor"] = AutoProcessor.from_pretrained(folder, **kwargs)
        except (AttributeError, ImportError, TypeError) as exc:
            import importlib.util

            if importlib.util.find_spec("torchvision") is None:  # transformers 5.25 fails obscurely without it
                raise BadInputError(f"{family.model_type}'s processor needs torchvision (it holds a video "
                                    f"processor), which is not installed") from exc
            raise
        return held["processor"].tokenizer

    loaded = load_model(dataclasses.replace(spec, precision=float_name), progress, cancel,
                        from_pretrained=read_model, tokenizer_from_pretrained=read_processor)
    language = LanguageView(loaded.model, family)
    precision = float_name
    if quantized:
        from engine.quant import quantize_step

        quantize_step.native(language, spec.precision, device, source.folder, None)
        # the whole model's head is now the language part's quantized one: transformers must not tie it back
        loaded.model.config.tie_word_embeddings = False
        loaded.model._tied_weights_keys = None
        precision = spec.precision
    loaded = dataclasses.replace(loaded, facts=_facts(loaded, language, family, precision, spec.kv_precision))
    return VisionModel(loaded=loaded, processor=held["processor"], family=family, language=language,
                       precision=precision)


def _read_model(folder: str, **kwargs: Any) -> Any:
    from engine.errors import CorruptModelError
    from transformers import AutoModelForImageTextToText

    model, info = AutoModelForImageTextToText.from_pretrained(folder, output_loading_info=True, **kwargs)
    missing = sorted(info.get("missing_keys") or []) + sorted(info.get("mismatched_keys") or [])
    if missing:  # as the text loader: a model with random weights filled in is refused, not run
        raise CorruptModelError(f"corrupt or incomplete: {folder}: {len(missing)} weights missing or of the wrong "
                                f"shape (e.g. {missing[0]})")
    return model


def _facts(loaded: Any, language: LanguageView, family: VisionFamily, precision: str, kv_precision: str) -> Any:
    """The whole model's facts (parameters and bytes of the vision tower included), with the runner and precision of
    its language part: what a turn runs per token."""
    from engine.executor.runners import choose_runner
    from engine.models.facts import build_facts

    facts = loaded.facts
    whole = build_facts(loaded.model, facts.name, facts.source, precision, facts.kv_dtype_bytes, facts.load_note)
    choice = choose_runner(language) if family.refusal is None else None
    reason = family.refusal if choice is None else choice.reason
    runner = "fast" if choice is not None and choice.runner == "fast" else "plain"
    if kv_precision != "auto" and runner != "fast":
        raise BadInputError(f"an {kv_precision} KV cache needs the fast runner, and this model's language part gets "
                            f"the plain one: {reason}")
    step = None
    if runner == "fast" and precision in NATIVE_QUANTIZED:  # as build_facts says it for a text model
        from engine.executor import native_step
        from engine.executor.llama_fused import weights_for

        weights = weights_for(language)
        why = native_step.why_not(weights, weights.final_norm.dtype, kv_precision != "int8")
        step = "native" if why is None else f"python: {why}"
    return dataclasses.replace(whole, runner=runner, runner_reason=None if reason is None else reason.detail,
                               kv_precision=kv_precision, decode_step=step)


__all__ = ["NoVisionError", "VisionFamily", "VISION_FAMILIES", "vision_family", "require_vision", "LanguageView",
           "VisionModel", "load_vision_model"]
