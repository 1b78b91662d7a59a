"""A short list of real chat models to move to from the 135M demo, ranked for this machine.

The default model is for watching the engine work, not for answers. ``CURATED`` names the instruction-tuned
models people run on a laptop or a desktop CPU in the families the fast decoder step computes
(``engine.executor.families.FAMILIES``; ``tests/engine/library/test_curated.py`` holds the list to that):
Qwen2.5 and Qwen3 (the first choice for Chinese), Gemma 3, Llama 3.2, Phi-4-mini and SmolLM2. Each entry
carries the architecture numbers of its published ``config.json`` (the fields ``engine.library.arch.from_config``
reads), so the list is ranked without touching the network.

``recommend(memory, bandwidth)`` judges each entry as the Models window and ``engine models recommended`` show
it: the fit estimate (``engine.library.fit.estimate``) at the precision the engine would use on this device
(what ``auto`` would load, by the loader's own policy, ``engine.quant.precision.choose_precision``: int4 on
a CPU, the GPU's float type where it fits), and the seeds' decode ceiling, tokens/s ≤ memory bandwidth ÷ bytes read per
token (the weights plus the KV cache at the judged context), when a measured bandwidth is given. The order:
models that fit, then tight, then the rest; within a verdict the fastest first (the fewest bytes read per token,
so the order is the same before the bandwidth is measured). Owns the list
and the ranking; measuring the bandwidth is ``engine.bench.membw``'s and downloading is ``engine.library.download``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from engine.library import arch as arch_mod
from engine.library import fit
from engine.library.arch import Architecture

# A reply reads comfortably when it streams at least this fast (a little faster than people read).
COMFORTABLE_TOKENS_PER_S = 10.0
RECOMMEND_CONTEXT = 4096  # the context the fit and the ceiling are judged at


@dataclass(frozen=True)
class Curated:
    """One model of the list: its Hub id, a human name, why it is there, its published architecture."""

    repo: str
    name: str
    note: str  # one line: what it is good for
    config: Mapping[str, Any]  # the fields of its config.json the estimate needs
    gated: bool = False  # the owners grant access first (a license to accept on the Hub)

    @property
    def arch(self) -> Architecture:
        return arch_mod.from_config(self.config, f"{self.repo} (curated)")

    @property
    def model_type(self) -> str:
        return str(self.config["model_type"])


def _qwen2(layers: int, hidden: int, heads: int, kv: int, inner: int) -> dict[str, Any]:
    return {"model_type": "qwen2", "num_hidden_layers": layers, "hidden_size": hidden, "num_attention_heads": heads,
            "num_key_value_heads": kv, "intermediate_size": inner, "vocab_size": 151936,
            "max_position_embeddings": 32768, "tie_word_embeddings": True}


def _qwen3(layers: int, hidden: int, heads: int, inner: int, tied: bool = True) -> dict[str, Any]:
    return {"model_type": "qwen3", "num_hidden_layers": layers, "hidden_size": hidden, "num_attention_heads": heads,
            "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": inner, "vocab_size": 151936,
            "max_position_embeddings": 40960, "tie_word_embeddings": tied}


def _llama32(layers: int, hidden: int, heads: int, head_dim: int) -> dict[str, Any]:
    return {"model_type": "llama", "num_hidden_layers": layers, "hidden_size": hidden, "num_attention_heads": heads,
            "num_key_value_heads": 8, "head_dim": head_dim, "intermediate_size": 8192, "vocab_size": 128256,
            "max_position_embeddings": 131072, "tie_word_embeddings": True}


CURATED: tuple[Curated, ...] = (
    Curated("Qwen/Qwen2.5-0.5B-Instruct", "Qwen2.5 0.5B Instruct",
            "the smallest that answers in Chinese and English; fast anywhere", _qwen2(24, 896, 14, 2, 4864)),
    Curated("Qwen/Qwen2.5-1.5B-Instruct", "Qwen2.5 1.5B Instruct",
            "good everyday answers in Chinese and English on a laptop CPU", _qwen2(28, 1536, 12, 2, 8960)),
    Curated("Qwen/Qwen2.5-3B-Instruct", "Qwen2.5 3B Instruct",
            "noticeably better answers; wants a desktop CPU or a GPU", _qwen2(36, 2048, 16, 2, 11008)),
    Curated("Qwen/Qwen3-1.7B", "Qwen3 1.7B", "thinks before answering (can be switched off); strong in Chinese",
            _qwen3(28, 2048, 16, 6144)),
    Curated("Qwen/Qwen3-4B", "Qwen3 4B", "a reasoning model that holds its own on maths and code",
            _qwen3(36, 2560, 32, 9728)),
    Curated("google/gemma-3-1b-it", "Gemma 3 1B IT", "Google’s small multilingual chat model",
            {"model_type": "gemma3_text", "num_hidden_layers": 26, "hidden_size": 1152, "num_attention_heads": 4,
             "num_key_value_heads": 1, "head_dim": 256, "intermediate_size": 6912, "vocab_size": 262144,
             "max_position_embeddings": 32768, "tie_word_embeddings": True}, gated=True),
    Curated("meta-llama/Llama-3.2-1B-Instruct", "Llama 3.2 1B Instruct", "Meta’s small model; English first",
            _llama32(16, 2048, 32, 64), gated=True),
    Curated("meta-llama/Llama-3.2-3B-Instruct", "Llama 3.2 3B Instruct", "Meta’s 3B: better English answers",
            _llama32(28, 3072, 24, 128), gated=True),
    Curated("microsoft/Phi-4-mini-instruct", "Phi-4 mini Instruct", "Microsoft’s 3.8B: strong reasoning for its size",
            {"model_type": "phi3", "num_hidden_layers": 32, "hidden_size": 3072, "num_attention_heads": 24,
             "num_key_value_heads": 8, "intermediate_size": 8192, "vocab_size": 200064,
             "max_position_embeddings": 131072, "tie_word_embeddings": True}),
    Curated("HuggingFaceTB/SmolLM2-1.7B-Instruct", "SmolLM2 1.7B Instruct",
            "the default model’s big sibling (same tokenizer); English",
            {"model_type": "llama", "num_hidden_layers": 24, "hidden_size": 2048, "num_attention_heads": 32,
             "num_key_value_heads": 32, "intermediate_size": 8192, "vocab_size": 49152,
             "max_position_embeddings": 8192, "tie_word_embeddings": True}),
)


@dataclass(frozen=True)
class Recommendation:
    """One curated model judged for this machine."""

    model: Curated
    estimate: fit.FitEstimate
    bytes_per_token: int  # weights + the KV cache at the judged context: what one decode step reads
    ceiling_tokens_per_s: float | None  # bandwidth ÷ bytes_per_token; None without a measured bandwidth

    @property
    def comfortable(self) -> bool:
        return self.ceiling_tokens_per_s is not None and self.ceiling_tokens_per_s >= COMFORTABLE_TOKENS_PER_S

    def to_dict(self) -> dict[str, Any]:
        e = self.estimate
        return {"repo": self.model.repo, "name": self.model.name, "note": self.model.note, "gated": self.model.gated,
                "model_type": self.model.model_type, "params": e.params, "precision": e.precision,
                "context": e.context, "weights_bytes": e.weights_bytes, "total_bytes": e.total_bytes,
                "verdict": e.verdict, "bytes_per_token": self.bytes_per_token,
                "ceiling_tokens_per_s": self.ceiling_tokens_per_s, "comfortable": self.comfortable}


def judge(model: Curated, memory: fit.Memory, bandwidth: float | None,
          context: int = RECOMMEND_CONTEXT) -> Recommendation:
    """``model``'s fit and decode ceiling on ``memory`` (bandwidth in bytes/s, or None)."""
    arch = model.arch  # every entry is sized in int4 and bf16 (tests/engine/library/test_curated.py)
    # "auto": the loader's own policy (engine/quant/precision.py) picks the precision, as a load would.
    estimate = fit.estimate(arch, model=model.repo, context=min(context, arch.context_length),
                            precision="auto", memory=memory)
    per_token = estimate.weights_bytes + estimate.kv_bytes
    ceiling = bandwidth / per_token if bandwidth else None
    return Recommendation(model, estimate, per_token, ceiling)


def recommend(memory: fit.Memory | None = None, bandwidth: float | None = None,
              context: int = RECOMMEND_CONTEXT) -> list[Recommendation]:
    """Every curated model judged for ``memory`` (default: this machine's), best first (see the module docstring)."""
    memory = memory or fit.machine_memory()
    judged = [judge(model, memory, bandwidth, context) for model in CURATED]

    # What fits, then how fast: the ceiling is bandwidth ÷ bytes read per token, so fewer bytes a token is faster
    # whether or not the bandwidth was measured (the same order either way). It was "comfortable ones largest
    # first" once, and the tab showed a ≤ 11 tok/s model above a ≤ 27 tok/s one under a "then how fast" caption.
    return sorted(judged, key=lambda r: (fit.VERDICTS.index(r.estimate.verdict), r.bytes_per_token))
