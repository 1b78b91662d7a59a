"""What a loaded model is: the model, its tokenizer and its facts.

Plain frozen data shared by the loader (which builds it), the session (which generates with it),
the lab, the benchmark and the GUI (which reads ``facts`` only). Owns the model-card arithmetic
(KV bytes per token in the GQA and no-GQA forms, the V·d + 12·L·d² parameter estimate); owns no loading
and no generation.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from engine.inputs import kv_bytes_per_token


@dataclass(frozen=True)
class AutoChoice:
    """Why ``auto`` picked a quantized precision on a CPU (engine/quant/auto_quant.py).

    ``agreement`` is the teacher-forced top-1 agreement with the float model on the fixed quality text,
    ``bar`` the least ``precision`` had to reach; ``rejected`` the faster candidates that missed their bar,
    as (precision, agreement). ``measured_now`` is False when the verdict was remembered from an earlier load.
    """

    precision: str  # int4 | int8 | the float type when every candidate missed its bar
    reference: str  # the float type it was compared with: bf16 | fp32
    agreement: float | None  # None when no candidate met its bar
    bar: float | None
    rejected: tuple[tuple[str, float], ...] = ()
    measured_now: bool = False


@dataclass(frozen=True)
class ModelFacts:
    """Architecture facts and sizes of a loaded model."""

    name: str
    source: str  # folder, file or repo id it was loaded from
    architecture: str  # e.g. "LlamaForCausalLM"
    layers: int
    hidden_size: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab_size: int
    context_length: int
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
    # The runner a conversation with a KV cache gets (engine/generate/runners.py): "fast" or "plain", and for
    # plain the one line saying why ("model_type gemma3_text not on the fast path yet: ..."). None: not known.
    runner: str | None = None
    runner_reason: str | None = None
    # The fast runner's int8/int4 decode step: "native" (one C++ call per token, engine/generate/native_step.py) or
    # "python: <why not>"; None for the plain runner and float weights.
    decode_step: str | None = None
    # The KV cache's precision (engine.inputs.KV_PRECISIONS): "auto" keeps it in the activations' dtype
    # (``kv_dtype_bytes`` per element); "int8" is one byte per element plus a scale per head and position.
    kv_precision: str = "auto"

    @property
    def kv_bytes_per_token(self) -> int:
        """2 (K and V) × layers × kv_heads × head_dim × bytes per element (int8: 1 byte, plus a 2-byte scale per
        KV head; ``engine.inputs.kv_bytes_per_token``)."""
        return kv_bytes_per_token(self.layers, self.kv_heads, self.head_dim, self.kv_dtype_bytes, self.kv_precision)

    @property
    def kv_bytes_per_token_no_gqa(self) -> int:
        """2 × layers × d_model × bytes: what the cache would cost without GQA (docs/DESIGN.md §Metrics)."""
        if self.kv_precision == "int8":  # a scale per query head then, as a KV head would have
            return kv_bytes_per_token(self.layers, self.heads, self.hidden_size // self.heads, 1, "int8")
        return 2 * self.layers * self.hidden_size * self.kv_dtype_bytes

    @property
    def param_estimate(self) -> int:
        """The rule-of-thumb estimate V·d + 12·L·d² (embeddings + attention and MLP blocks)."""
        return self.vocab_size * self.hidden_size + 12 * self.layers * self.hidden_size ** 2

    @property
    def attention_kind(self) -> str:
        if self.kv_heads == 1:
            return "MQA"
        return "GQA" if self.kv_heads < self.heads else "MHA"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(kv_bytes_per_token=self.kv_bytes_per_token,
                    kv_bytes_per_token_no_gqa=self.kv_bytes_per_token_no_gqa,
                    param_estimate=self.param_estimate, attention_kind=self.attention_kind)
        return data


@dataclass(frozen=True)
class LoadedModel:
    """A model ready to generate. Built by ``engine.models.loader.load_model``; owned by one thread."""

    model: Any  # transformers PreTrainedModel, in eval mode
    tokenizer: Any  # transformers tokenizer with a chat template
    facts: ModelFacts
    eos_token_ids: tuple[int, ...]  # every end token from generation config and template
