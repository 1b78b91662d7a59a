"""What a loaded transformers model holds, measured: the numbers behind ``ModelFacts``.

Owns reading a live model: exact parameter count (tied weights once, 4-bit weights by their
unpacked shape), bytes of weights as loaded (parameters, buffers and quantisation scales), the
linear layers bitsandbytes quantises, every end-of-reply token id, and which runner the model gets and why
(asked of ``engine.executor.runners.choose_runner``, so ``engine info`` and ``chat --json`` report it). Loads nothing (that is
``engine.models.loader``) and does no card arithmetic (that is ``engine.shapes.shape``).
"""

from __future__ import annotations

from typing import Any

from engine.errors import BadInputError
from engine.models.model import AutoChoice, ModelFacts
from engine.shapes.shape import Shape

# torch and engine.quant.quant (which imports torch) are imported inside the functions that use them: the loader
# imports this module and must load no torch before its file checks (tests/engine/cli/test_info.py). Every
# function here is handed a live model, so torch is loaded by then and the import is a dictionary lookup.

# Token strings chat templates use to end a turn or a document. Only those present in the
# model's vocabulary are used as stop tokens.
TEMPLATE_END_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<|end|>",
                       "<end_of_turn>", "</s>")


def count_params(model: Any) -> int:
    """Exact parameter count; tied weights once; 4-bit weights by their unpacked shape; the weights of
    engine/quant/quant.py's int8/int4 linears (buffers, not parameters) by their logical shape, and their biases."""
    from engine.quant.quant import ProjectionSlice, QuantizedLinear  # lazy: see the note after the imports

    total = 0
    for param in model.parameters():  # parameters() already yields a tied tensor once
        state = getattr(param, "quant_state", None)
        total += state.shape.numel() if state is not None else param.numel()
    seen: set[int] = set()
    for module in model.modules():  # a tied table is one module reached twice: counted once
        if isinstance(module, QuantizedLinear) and not isinstance(module, ProjectionSlice) and id(module) not in seen:
            seen.add(id(module))
            total += module.out_features * module.in_features
            total += module.bias.numel() if module.bias is not None else 0  # a bias kept dense beside the kernel
    return total


def quantizable_shapes(model: Any) -> list[tuple[int, int]]:
    """(out, in) of every linear layer bitsandbytes quantises: all but the output head. A model already in
    int8/int4 (engine/quant/quant.py) counts its quantized projections (q|k|v and gate|up once each, fused: the
    same totals), so its estimates for the other precisions stay what they were before it was quantized."""
    import torch  # lazy: see the note after the imports

    from engine.quant.quant import ProjectionSlice, QuantizedEmbedding, QuantizedLinear  # lazy: imports torch

    head = model.get_output_embeddings()
    tables = {id(m.table) for m in model.modules() if isinstance(m, QuantizedEmbedding)}
    shapes = []
    for module in model.modules():
        if (isinstance(module, (torch.nn.Linear, QuantizedLinear)) and not isinstance(module, ProjectionSlice)
                and module is not head and id(module) not in tables):  # a slice's fused module is counted once
            shapes.append((module.out_features, module.in_features))
    return shapes


def _tensor_bytes(tensor: Any) -> int:
    return tensor.numel() * tensor.element_size()


def weights_bytes(model: Any) -> int:
    """Bytes held by parameters, buffers and quantisation scales, each tensor counted once."""
    import torch  # lazy: see the note after the imports

    seen: set[int] = set()
    total = 0

    def add(tensor: Any) -> None:
        nonlocal total
        if isinstance(tensor, torch.Tensor) and tensor.data_ptr() not in seen and tensor.device.type != "meta":
            seen.add(tensor.data_ptr())
            total += _tensor_bytes(tensor)

    for param in model.parameters():
        add(param)
        add(getattr(param, "SCB", None))  # int8: one fp32 scale per row
        state = getattr(param, "quant_state", None)
        if state is not None:  # 4-bit: per-block absmax (and, double-quantised, its own scales)
            add(state.absmax)
            nested = getattr(state, "state2", None)
            if nested is not None:
                add(nested.absmax)
                add(getattr(nested, "code", None))
    for buffer in model.buffers():
        add(buffer)
    return total


def end_token_ids(model: Any, tokenizer: Any) -> tuple[int, ...]:
    """Every id that ends a reply: generation config's, the tokenizer's EOS, template end tokens."""
    ids: list[int] = []

    def add(value: Any) -> None:
        if value is None:
            return
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(item, int) and item >= 0 and item not in ids:
                ids.append(item)

    generation_config = getattr(model, "generation_config", None)
    add(getattr(generation_config, "eos_token_id", None))
    add(getattr(model.config, "eos_token_id", None))
    add(tokenizer.eos_token_id)
    vocab = tokenizer.get_vocab()
    for token in TEMPLATE_END_TOKENS:
        if token in vocab:
            add(vocab[token])
    return tuple(ids)


def build_facts(model: Any, name: str, source: str, precision: str, kv_dtype_bytes: int,
                load_note: str = "", auto_choice: AutoChoice | None = None, kv_precision: str = "auto") -> ModelFacts:
    """Read a loaded model's architecture and sizes into ``ModelFacts``. An int8 ``kv_precision`` needs the fast
    runner (``engine.executor.kv_cache``): for a model the plain runner decodes it is ``BadInputError`` (one line)."""
    config = model.config
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = int(text_config.num_attention_heads)
    hidden = int(text_config.hidden_size)
    head_dim = getattr(text_config, "head_dim", None) or hidden // heads
    device_map = getattr(model, "hf_device_map", None)
    first = next(model.parameters())
    from engine.executor.runners import choose_runner  # lazy: imports torch (see the note after the imports)

    runner = choose_runner(model, use_kv_cache=True)
    if kv_precision != "auto" and runner.runner != "fast":
        raise BadInputError(f"an {kv_precision} KV cache needs the fast runner, and this model gets the plain one: "
                            f"{runner.reason}")
    return ModelFacts(
        name=name,
        source=source,
        architecture=(config.architectures or [type(model).__name__])[0],
        shape=Shape(model_type=str(getattr(text_config, "model_type", "") or ""),
                    layers=int(text_config.num_hidden_layers), hidden_size=hidden, heads=heads,
                    kv_heads=int(getattr(text_config, "num_key_value_heads", None) or heads), head_dim=int(head_dim),
                    vocab_size=int(text_config.vocab_size),
                    context_length=int(getattr(text_config, "max_position_embeddings", 0) or 0)),
        params=count_params(model),
        weights_bytes=weights_bytes(model),
        precision=precision,
        device=str(first.device),
        kv_dtype_bytes=kv_dtype_bytes,
        # accelerate's split, only when it actually spans more than one place.
        device_map={k: str(v) for k, v in device_map.items()} if device_map and len(set(map(str, device_map.values()))) > 1 else None,
        load_note=load_note,
        auto_choice=auto_choice,
        runner=runner.runner,
        runner_reason=None if runner.reason is None else runner.reason.detail,
        kv_precision=kv_precision,
        decode_step=_decode_step(model, runner.runner, precision, kv_precision),
    )


def _decode_step(model: Any, runner: str, precision: str, kv_precision: str) -> str | None:
    """"native" where the fast runner's quantized step runs as one C++ call (engine/executor/native_step.py), else why
    not; None for the plain runner or float weights (the Python step, exact against transformers)."""
    if runner != "fast" or precision not in ("int8", "int4"):
        return None
    from engine.executor import native_step
    from engine.executor.llama_fused import weights_for

    weights = weights_for(model)
    reason = native_step.why_not(weights, weights.final_norm.dtype, kv_precision != "int8")
    return "native" if reason is None else f"python: {reason}"
