"""What a loaded model is: the model, its tokenizer and its facts.

Plain frozen data shared by the loader (which builds it), the session (which generates with it),
the lab, the benchmark and the GUI (which reads ``facts`` only). ``ModelFacts`` holds the model's ``Shape``
(``engine.shapes.shape``, which owns the arithmetic: KV bytes per token in the GQA and no-GQA forms, the
V·d + 12·L·d² parameter estimate) beside what a load measured; owns no loading and no generation.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from engine.quant.precision import AutoChoice  # auto's verdict, which the precision policy owns
from engine.shapes.shape import Shape

# The shape's dimensions ``ModelFacts`` shows as its own: keyword arguments of its constructor, properties, and keys
# of ``to_dict`` (after name, source and architecture, as before it held a shape).
SHAPE_KEYS = ("layers", "hidden_size", "heads", "kv_heads", "head_dim", "vocab_size", "context_length")


@dataclass(frozen=True, init=False)
class ModelFacts:
    """Architecture facts and sizes of a loaded model: its shape, and what the load measured and chose."""

    name: str
    source: str  # folder, file or repo id it was loaded from
    architecture: str  # e.g. "LlamaForCausalLM"
    shape: Shape  # layers, widths, heads, vocab, context: read with ``facts.layers`` etc. too
    params: int  # exact count, tied weights counted once
    weights_bytes: int  # bytes of parameters and buffers as loaded (quantized size for int8/nf4)
    precision: str  # fp32 | bf16 | fp16 | int8 | nf4 | fp4
    device: str  # "cpu" | "cuda" | "cuda:0" ...
    kv_dtype_bytes: int  # bytes per element of the KV cache (activations dtype)
    device_map: dict[str, str] | None = field(default=None)  # accelerate split, when offloading
    # How the weights were read when that is worth a line: a GGUF's blocks kept or dequantized
    # (engine/quant/gguf_quant.py). Empty otherwise.
    load_note: str = ""
    auto_choice: AutoChoice | None = None  # set when `auto` weighed int4/int8 against the quality bar
    # The runner a conversation with a KV cache gets (engine/executor/runners.py): "fast" or "plain", and for
    # plain the one line saying why ("model_type gemma3_text not on the fast path yet: ..."). None: not known.
    runner: str | None = None
    runner_reason: str | None = None
    # The fast runner's int8/int4 decode step: "native" (one C++ call per token, engine/executor/native_step.py) or
    # "python: <why not>"; None for the plain runner and float weights.
    decode_step: str | None = None
    # The KV cache's precision (engine.inputs.KV_PRECISIONS): "auto" keeps it in the activations' dtype
    # (``kv_dtype_bytes`` per element); "int8" is one byte per element plus a scale per head and position.
    kv_precision: str = "auto"

    def __init__(self, *, name: str, source: str, architecture: str, params: int, weights_bytes: int, precision: str,
                 device: str, kv_dtype_bytes: int, shape: Shape | None = None, layers: int | None = None,
                 hidden_size: int | None = None, heads: int | None = None, kv_heads: int | None = None,
                 head_dim: int | None = None, vocab_size: int | None = None, context_length: int | None = None,
                 device_map: dict[str, str] | None = None, load_note: str = "", auto_choice: AutoChoice | None = None,
                 runner: str | None = None, runner_reason: str | None = None, decode_step: str | None = None,
                 kv_precision: str = "auto") -> None:
        """``shape``, or its dimensions (``SHAPE_KEYS``, ``context_length`` optional), or both (the dimensions named
        replace the shape's): callers that know only the numbers a card shows need not build a ``Shape``."""
        dims = dict(layers=layers, hidden_size=hidden_size, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                    vocab_size=vocab_size, context_length=context_length)
        given = {key: value for key, value in dims.items() if value is not None}
        if shape is None:
            shape = Shape(**given)  # a missing dimension is Shape's TypeError, as a missing field was
        elif given:  # dataclasses.replace(facts, kv_heads=1) hands both: the dimensions named win
            shape = replace(shape, **given)
        values = dict(name=name, source=source, architecture=architecture, shape=shape, params=params,
                      weights_bytes=weights_bytes, precision=precision, device=device, kv_dtype_bytes=kv_dtype_bytes,
                      device_map=device_map, load_note=load_note, auto_choice=auto_choice, runner=runner,
                      runner_reason=runner_reason, decode_step=decode_step, kv_precision=kv_precision)
        for key, value in values.items():
            object.__setattr__(self, key, value)

    @property
    def layers(self) -> int:
        return self.shape.layers

    @property
    def hidden_size(self) -> int:
        return self.shape.hidden_size

    @property
    def heads(self) -> int:
        return self.shape.heads

    @property
    def kv_heads(self) -> int:
        return self.shape.kv_heads

    @property
    def head_dim(self) -> int:
        return self.shape.head_dim

    @property
    def vocab_size(self) -> int:
        return self.shape.vocab_size

    @property
    def context_length(self) -> int:
        return self.shape.context_length

    @property
    def kv_bytes_per_token(self) -> int:
        """2 (K and V) × layers × kv_heads × head_dim × bytes per element (int8: 1 byte, plus a 2-byte scale per
        KV head; ``Shape.kv_bytes_per_token``)."""
        return self.shape.kv_bytes_per_token(self.kv_dtype_bytes, self.kv_precision)

    @property
    def kv_bytes_per_token_no_gqa(self) -> int:
        """2 × layers × d_model × bytes: what the cache would cost without GQA (docs/DESIGN.md §Metrics)."""
        return self.shape.kv_bytes_per_token_no_gqa(self.kv_dtype_bytes, self.kv_precision)

    @property
    def param_estimate(self) -> int:
        """The rule-of-thumb estimate V·d + 12·L·d² (embeddings + attention and MLP blocks)."""
        return self.shape.param_estimate

    @property
    def attention_kind(self) -> str:
        return self.shape.attention_kind

    def to_dict(self) -> dict[str, Any]:
        """Flat, as before ``ModelFacts`` held a shape: the shape's ``SHAPE_KEYS`` after name, source and
        architecture, then the rest and the derived numbers (``engine info --json``, ``chat --json``)."""
        data = asdict(self)
        shape = data.pop("shape")
        ordered = {key: data.pop(key) for key in ("name", "source", "architecture")}
        ordered.update({key: shape[key] for key in SHAPE_KEYS})
        ordered.update(data)
        ordered.update(kv_bytes_per_token=self.kv_bytes_per_token,
                       kv_bytes_per_token_no_gqa=self.kv_bytes_per_token_no_gqa,
                       param_estimate=self.param_estimate, attention_kind=self.attention_kind)
        return ordered


def facts_keys() -> tuple[str, ...]:
    """The keys of ``ModelFacts.to_dict`` before the derived numbers, in order (``RemoteFacts`` mirrors them)."""
    names = [f.name for f in fields(ModelFacts)]
    at = names.index("shape")
    return (*names[:at], *SHAPE_KEYS, *names[at + 1:])


@dataclass(frozen=True)
class LoadedModel:
    """A model ready to generate. Built by ``engine.models.loader.load_model``; owned by one thread."""

    model: Any  # transformers PreTrainedModel, in eval mode
    tokenizer: Any  # transformers tokenizer with a chat template
    facts: ModelFacts
    eos_token_ids: tuple[int, ...]  # every end token from generation config and template
