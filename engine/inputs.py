"""The validated inputs of the engine, one home for each: the precisions and devices a model can be loaded in,
the KV cache's precision (and its bytes per token), what to load (``LoadSpec``) and how to sample
(``SamplingConfig``). The loader, the command lines and the window all use these; a bad value raises
``BadInputError`` (one line) when the object is built.

Two families of quantized weights, named for what they are:
- ``int8`` / ``int4``: weight-only quantization on torch's native kernels (``engine/quant/quant.py``): fewer
  bytes per weight to read, so decoding one token is faster — the reason to pick them.
- ``bnb-int8`` (LLM.int8()), ``nf4``, ``fp4``: bitsandbytes. They save memory and load checkpoints
  already quantized with bitsandbytes, but their kernels are built for training and memory, not for
  batch-1 speed: on a CPU they decode several times slower than bf16.

Imports nothing heavy, so the window (which never imports torch) can use it. Owns names, rules and one-line
explanations; not how a model is loaded (``engine/models/loader.py``) or a token chosen
(``engine/generate/sampling.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.errors import BadInputError

FLOATS = ("fp32", "bf16", "fp16")
NATIVE_QUANTIZED = ("int8", "int4")  # engine/quant/quant.py
BNB_QUANTIZED = ("bnb-int8", "nf4", "fp4")  # bitsandbytes through transformers' BitsAndBytesConfig
PRECISIONS = ("auto",) + FLOATS + NATIVE_QUANTIZED + BNB_QUANTIZED

DEVICES = ("auto", "cpu", "cuda")
COMPUTE_DTYPES = FLOATS  # what bitsandbytes may compute in
MAX_TOP_LOGPROBS = 20  # candidates the token inspector and the API may ask for per token

INT4_GROUP_SIZE = 32  # weights sharing one scale and zero in int4: GGUF Q4_0/Q4_1's block size

# The KV cache's precision (``--kv``, ``LoadSpec.kv_precision``): ``auto`` keeps it in the activations' dtype (bf16,
# fp16 or fp32, as the model computes), ``int8`` stores one byte per element plus an fp16 scale per layer, KV head
# and position (``engine/executor/kv_cache.py``; the fast runner only): about half the bytes of a 16-bit cache.
KV_PRECISIONS = ("auto", "int8")
KV_SCALE_BYTES = 2  # one fp16 scale per (layer, KV head, position) for K and for V in an int8 cache
KV_EXPLANATIONS = {
    "auto": "the KV cache in the model's activations dtype (bf16, fp16 or fp32): exact",
    "int8": "8-bit KV cache with a scale per head and position: about half the KV bytes of 16-bit, fast runner only",
}


def check_kv_precision(value: object) -> str:
    """``value`` if it names a KV cache precision, else ``BadInputError`` (one line)."""
    if value not in KV_PRECISIONS:
        raise BadInputError(f"unknown KV cache precision {value!r}: choose {' or '.join(KV_PRECISIONS)}")
    return str(value)


EXPLANATIONS = {
    "auto": ("on a CPU the fastest of int4 and int8 that agrees with the float model on at least 90% / 98% of "
             "next tokens (measured once per model; models under 50M parameters stay float), a GGUF of "
             "Q4_0/Q4_1/Q4_K or Q8_0 blocks keeps them; on a GPU bf16 where native, else fp16 (nf4 if too big)"),
    "fp32": "32-bit floats: exact reference, 4 bytes per weight",
    "bf16": "16-bit brain floats: 2 bytes per weight",
    "fp16": "16-bit floats: 2 bytes per weight",
    "int8": "8-bit weights, one scale per output row, native kernel: ~1 byte per weight, faster decoding",
    "int4": (f"4-bit weights in groups of {INT4_GROUP_SIZE} with a scale and zero each, native kernel: "
             "~0.6 byte per weight, fastest decoding"),
    "bnb-int8": "bitsandbytes LLM.int8(): saves memory, slow at batch 1 on a CPU",
    "nf4": "bitsandbytes 4-bit NormalFloat: saves memory, slow at batch 1 on a CPU",
    "fp4": "bitsandbytes 4-bit float: saves memory, slow at batch 1 on a CPU",
}


@dataclass(frozen=True)
class LoadSpec:
    """What to load and how. Invalid values raise ``BadInputError`` on construction."""

    model: str = "default"  # "default" | folder | path to a .gguf file | repo id in the local HF cache
    precision: str = "auto"  # one of engine.inputs.PRECISIONS
    device: str = "auto"  # auto | cpu | cuda
    allow_remote_code: bool = False  # running a model folder's own Python is opt-in (Fault 10)
    # bnb-int8/nf4/fp4: dtype of the 4-bit matmuls and of every unquantised part (embeddings, norms,
    # activations, hence the KV cache). None: the device's float dtype (bf16 where native, else fp32).
    # int8/int4 always compute in bf16 on a CPU: their kernels' fast path (engine/quant/quant.py).
    bnb_compute_dtype: str | None = None
    bnb_double_quant: bool = True  # quantise the 4-bit scales too: ~0.4 bit/param less, negligible cost
    offload: bool = False  # CUDA only: accelerate device_map="auto" puts what does not fit in CPU memory
    offload_gpu_bytes: int | None = None  # with offload: GPU memory accelerate may use (None: all free memory)
    attn_implementation: str | None = None  # None: transformers' default (sdpa); "eager" to capture attention
    kv_precision: str = "auto"  # one of KV_PRECISIONS: int8 needs the fast runner (refused at load otherwise)

    def __post_init__(self) -> None:
        check_kv_precision(self.kv_precision)
        if self.precision not in PRECISIONS:
            raise BadInputError(f"unknown precision {self.precision!r}: choose one of {', '.join(PRECISIONS)}")
        if self.device not in DEVICES:
            raise BadInputError(f"unknown device {self.device!r}: choose one of {', '.join(DEVICES)}")
        if self.offload_gpu_bytes is not None and self.offload_gpu_bytes <= 0:
            raise BadInputError("the offload GPU memory cap must be a positive number of bytes")
        if self.bnb_compute_dtype not in (None,) + COMPUTE_DTYPES:
            raise BadInputError(f"unknown compute dtype {self.bnb_compute_dtype!r}: choose fp32, bf16 or fp16")


# What the engine accepts for each numeric sampling setting (inclusive; ``None``: no bound), so also every value
# the OpenAI-compatible server may pass on (``engine/serve/schemas.py``: top_p may be any 0 < p <= 1, temperature
# 0..2, top_k and max_tokens unbounded); ``SamplingConfig`` refuses what lies outside, and top_p and
# repetition_penalty exclude their lower bound 0.
SAMPLING_LIMITS: dict[str, tuple[float | None, float | None]] = {
    "temperature": (0.0, 10.0),
    "top_p": (0.0, 1.0),
    "top_k": (0, None),
    "repetition_penalty": (0.0, 10.0),
    "max_new_tokens": (1, None),
}
# The window's spin boxes (``app/state/settings.py``, ``app/widgets/settings_dialog.py``): each inside SAMPLING_LIMITS,
# tighter where a spin box needs finite ends (QSpinBox holds a C int) or a step it can show (top_p 0.01), and
# repetition_penalty from 0.5, below which a penalty rewards repeating. The seed's -1 means "a fresh one each
# reply" (``SamplingConfig.seed`` None).
SAMPLING_RANGES: dict[str, tuple[int, int] | tuple[float, float]] = {
    "temperature": (0.0, 10.0),
    "top_p": (0.01, 1.0),
    "top_k": (0, 100_000),
    "repetition_penalty": (0.5, 10.0),
    "max_new_tokens": (1, 32_768),
    "seed": (-1, 2**31 - 1),
}
# The seed ``engine chat`` / ``engine complete`` use when ``--seed`` is not given: sampled, yet two runs print the
# same text (the window draws a fresh seed per reply instead, unless the user sets one).
CLI_DEFAULT_SEED = 0


@dataclass(frozen=True)
class SamplingConfig:
    """Per-request generation settings. Invalid values raise ``BadInputError`` on construction.

    Its defaults are THE defaults of the window (``app.state.settings.ChatSettings``) and the command lines
    (``engine.cli.replies``), so one prompt gets the same kind of answer from both. They are low: the small
    default model (SmolLM2-135M-Instruct, whose model card recommends a low temperature) rambles when sampled
    hot and loops on one phrase without a repetition penalty; a mild 1.1 stops that without bending its wording
    much. The server keeps the OpenAI API's own defaults (temperature and top_p 1.0) where a request omits them.
    """

    temperature: float = 0.2  # 0 means greedy (argmax), the deterministic mode tests use
    top_p: float = 0.9  # 1.0 disables nucleus filtering
    top_k: int = 50  # 0 disables top-k filtering
    repetition_penalty: float = 1.1  # 1.0 disables it (and skips its per-step scatter/gather)
    max_new_tokens: int = 512
    seed: int | None = None  # None: a fresh random seed per request
    use_kv_cache: bool = True  # False recomputes the whole sequence every step (the lab's KV-cache experiment)
    top_logprobs: int = 0  # candidates reported per token for the inspector, 0..20 (0 costs nothing)
    prefill_chunk: int = 256  # prompt tokens per forward during prefill; a cancel is seen between chunks

    def __post_init__(self) -> None:
        def bad(name: str, value: object, rule: str) -> BadInputError:
            return BadInputError(f"{name} must be {rule} (got {value!r})")

        def is_int(value: object) -> bool:
            return isinstance(value, int) and not isinstance(value, bool)

        def is_num(value: object) -> bool:
            return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value  # not NaN

        low, high = SAMPLING_LIMITS["temperature"]
        if not is_num(self.temperature) or not low <= self.temperature <= high:
            raise bad("temperature", self.temperature, f"between {low:g} and {high:g}")
        low, high = SAMPLING_LIMITS["top_p"]
        if not is_num(self.top_p) or not low < self.top_p <= high:
            raise bad("top_p", self.top_p, f"greater than {low:g} and at most {high:g}")
        if not is_int(self.top_k) or self.top_k < SAMPLING_LIMITS["top_k"][0]:
            raise bad("top_k", self.top_k, "a whole number ≥ 0 (0 disables it)")
        low, high = SAMPLING_LIMITS["repetition_penalty"]
        if not is_num(self.repetition_penalty) or not low < self.repetition_penalty <= high:
            raise bad("repetition_penalty", self.repetition_penalty, f"greater than {low:g} and at most {high:g}")
        if not is_int(self.max_new_tokens) or self.max_new_tokens < SAMPLING_LIMITS["max_new_tokens"][0]:
            raise bad("max_new_tokens", self.max_new_tokens, "a whole number ≥ 1")
        if self.seed is not None and (not is_int(self.seed) or not 0 <= self.seed < 2**63):
            raise bad("seed", self.seed, "a whole number ≥ 0, or empty")
        if not isinstance(self.use_kv_cache, bool):
            raise bad("use_kv_cache", self.use_kv_cache, "true or false")
        if not is_int(self.top_logprobs) or not 0 <= self.top_logprobs <= MAX_TOP_LOGPROBS:
            raise bad("top_logprobs", self.top_logprobs, f"between 0 and {MAX_TOP_LOGPROBS}")
        if not is_int(self.prefill_chunk) or self.prefill_chunk < 1:
            raise bad("prefill_chunk", self.prefill_chunk, "a whole number ≥ 1")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


SPECULATION_METHODS = ("prompt-lookup", "draft", "self")  # engine/speculate/drafters.py
MAX_DRAFT_TOKENS = 32  # more drafted tokens per step than this cannot pay: acceptance compounds per position
MODEL_MAX_DRAFT = 12  # a draft model's bound (engine.speculate.length picks within it by measured costs)


@dataclass(frozen=True)
class SpeculationConfig:
    """Speculative decoding (``engine/speculate``): who drafts and how much. Invalid values raise ``BadInputError``.

    ``method``: ``prompt-lookup`` (n-grams of the conversation so far), ``draft`` (``draft_model``, a smaller model
    with the same tokenizer) or ``self`` (the loaded model's int4 copy). ``max_draft`` bounds the adaptive draft
    length (it starts at ``start_draft``; None: ``draft_cap``, the method's own bound: prompt lookup drafts cost no
    forward pass, so a passage that keeps matching may draft up to ``MAX_DRAFT_TOKENS``); when fewer than
    ``off_below`` drafted tokens per step are accepted over the recent steps drafting pauses (the off-switch), for
    longer each time it pays no better.
    """

    method: str = "prompt-lookup"
    draft_model: str | None = None
    max_draft: int | None = None
    start_draft: int = 4
    off_below: float = 0.3

    def __post_init__(self) -> None:
        if self.method not in SPECULATION_METHODS:
            raise BadInputError(f"unknown speculation {self.method!r}: choose prompt-lookup, draft:MODEL or self")
        if self.method == "draft" and not self.draft_model:
            raise BadInputError("draft speculation needs a model: draft:MODEL (a folder or repo id)")
        if self.method != "draft" and self.draft_model is not None:
            raise BadInputError(f"{self.method} speculation takes no draft model")
        for name in ("max_draft", "start_draft"):
            value = getattr(self, name)
            if name == "max_draft" and value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_DRAFT_TOKENS:
                raise BadInputError(f"{name} must be a whole number from 1 to {MAX_DRAFT_TOKENS} (got {value!r})")
        if self.start_draft > self.draft_cap:
            raise BadInputError(f"start_draft ({self.start_draft}) must not exceed max_draft ({self.draft_cap})")
        if not isinstance(self.off_below, (int, float)) or isinstance(self.off_below, bool) \
                or not 0.0 <= self.off_below < 1.0:
            raise BadInputError(f"off_below must be from 0 to below 1 (got {self.off_below!r})")

    @property
    def draft_cap(self) -> int:
        """The longest draft: ``max_draft``, or the method's own (lookup ``MAX_DRAFT_TOKENS``, models
        ``MODEL_MAX_DRAFT``: each drafted token costs them a forward of the drafter)."""
        if self.max_draft is not None:
            return self.max_draft
        return MAX_DRAFT_TOKENS if self.method == "prompt-lookup" else MODEL_MAX_DRAFT

    @classmethod
    def parse(cls, text: str) -> "SpeculationConfig":
        """``prompt-lookup`` | ``draft:MODEL`` | ``self`` (the command lines' ``--speculative``)."""
        text = text.strip()
        if text.startswith("draft:"):
            return cls(method="draft", draft_model=text[len("draft:"):].strip() or None)
        if text == "draft":
            return cls(method="draft")  # refused with the line saying a model is needed
        return cls(method=text)


__all__ = ["KV_PRECISIONS", "KV_SCALE_BYTES", "KV_EXPLANATIONS", "check_kv_precision",
           "FLOATS", "NATIVE_QUANTIZED", "BNB_QUANTIZED", "PRECISIONS", "DEVICES", "COMPUTE_DTYPES", "INT4_GROUP_SIZE",
           "MAX_TOP_LOGPROBS", "EXPLANATIONS", "SAMPLING_LIMITS", "SAMPLING_RANGES", "CLI_DEFAULT_SEED", "LoadSpec",
           "SamplingConfig", "SPECULATION_METHODS", "MAX_DRAFT_TOKENS", "SpeculationConfig"]
