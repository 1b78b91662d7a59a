"""``python -m engine bench --families``: engine int4 against llama.cpp on random-weight Q4_0 GGUFs of five
real models' shapes (issue 25's table), one command, anyone can rerun it.

Each family's GGUF is built here with the ``gguf`` package's writer (a runtime dependency already): the
model's architecture numbers (``SHAPES``: layers, width, heads, KV heads, head size, MLP width, vocabulary,
tied head, Qwen2's q/k/v biases, Qwen3/Gemma 3's q/k norms, Gemma 3's post norms and sliding window),
Gaussian weights (std 0.02, seeded), the projections quantized to Q4_0 and the tied token embedding / head
to Q8_0 by ``gguf.quants.quantize``, norms and biases F32. llama.cpp's own ``Q4_0`` recipe keeps the head at
Q6_K, which the ``gguf`` package cannot write (its K-quant quantizers are not implemented); Q8_0 is the
nearest type it can, and what the engine keeps as int8 per row. The tokenizer is the default model's
(byte-level BPE, ChatML template) padded with unreachable filler tokens to the family's vocabulary size, so
both runners render and embed the same ids and the head has the real number of rows. Files are kept in
``<data dir>/cache/bench-families/`` and reused.

Then, per family, in one process: the engine loads the file in ``int4`` (the Q4_0 blocks kept as they are,
``engine.quant.gguf_quant``) on the fast path, llama.cpp runs the same file in its child
(``engine.bench.peer``), optionally (``with_bf16``) the engine in bf16 beside them for the long prompt's TTFT;
warm-up, then ``reps`` repetitions alternated (``engine.bench.core``): decode tok/s after a short prompt and
TTFT of a ~500-token one. Reported per family: medians, int4 ÷ llama.cpp, bytes each reads per token and the
GB/s that makes. Random weights decode as fast as trained ones (every token reads every weight); their
greedy text is noise and is not compared. Never asserts a speed. Owns this comparison and the files' making.
"""

from __future__ import annotations

import gc
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from engine.bench import core
from engine.bench.peer import INSTALL_HINT, NAME as PEER_NAME, PeerError, PeerProcess, installed
from engine.bench.roofline import weights_read_per_token
from engine.bench.scenarios import build_prompts, make_plan, precision_scenarios
from engine.bench.variants import Engine, LlamaCpp, fast_factory
from engine.inputs import LoadSpec

FORMAT = "q4_0-2"  # bump when the files' recipe changes: older files are then rebuilt, not reused


@dataclass(frozen=True)
class Shape:
    """One family's architecture numbers, as its config.json has them (the weights are random)."""

    name: str
    arch: str  # GGUF general.architecture
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    rope_theta: float
    qkv_bias: bool = False  # Qwen2
    qk_norm: bool = False  # Qwen3, Gemma 3
    gemma: bool = False  # Gemma 3: post norms, sliding window
    sliding_window: int = 0


SHAPES: dict[str, Shape] = {s.name: s for s in (
    Shape("llama-3.2-1b", "llama", 16, 2048, 32, 8, 64, 8192, 128256, 500000.0),
    Shape("qwen2.5-0.5b", "qwen2", 24, 896, 14, 2, 64, 4864, 151936, 1000000.0, qkv_bias=True),
    Shape("qwen2.5-1.5b", "qwen2", 28, 1536, 12, 2, 128, 8960, 151936, 1000000.0, qkv_bias=True),
    Shape("qwen3-0.6b", "qwen3", 28, 1024, 16, 8, 128, 3072, 151936, 1000000.0, qk_norm=True),
    Shape("gemma-3-1b", "gemma3", 26, 1152, 4, 1, 256, 6912, 262144, 1000000.0, qk_norm=True, gemma=True,
          sliding_window=512),
)}


def parse_names(text: str | None) -> list[str]:
    """``all`` (or empty) → every family; else the comma-separated names, each one of ``SHAPES``."""
    return core.choose_names(text, list(SHAPES), "family")


def params(shape: Shape) -> int:
    """Parameters of the shape's matrices and embedding (norms and biases left out: < 0.1%)."""
    q, kv = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    per_layer = shape.hidden * (q + 2 * kv) + q * shape.hidden + 3 * shape.hidden * shape.intermediate
    return shape.layers * per_layer + shape.vocab * shape.hidden


# ------------------------------------------------------------------------------------------ the files


def family_folder() -> Path:
    from engine.paths import data_dir

    folder = data_dir() / "cache" / "bench-families"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def padded_tokens(tokenizer: Any, vocab: int) -> tuple[list[str], list[int]]:
    """The tokenizer's tokens by id, then unreachable filler tokens up to ``vocab``; and their GGUF token types
    (3: control, for the special tokens; 1: normal)."""
    tokens = [token for token, _ in sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])]
    if len(tokens) > vocab:
        raise ValueError(f"the tokenizer has {len(tokens)} tokens, more than the family's {vocab}")
    specials = set(tokenizer.all_special_tokens)
    types = [3 if token in specials else 1 for token in tokens]
    fill = vocab - len(tokens)
    return tokens + [f"<|fill{i}|>" for i in range(fill)], types + [1] * fill


def write_gguf(shape: Shape, dest: Path, tokenizer: Any, seed: int = 0) -> Path:
    """Write ``shape`` with random weights as a Q4_0 GGUF at ``dest`` (written to a temporary name first)."""
    import json

    import gguf
    from gguf.quants import quantize

    arch, qt = shape.arch, gguf.GGMLQuantizationType
    part = dest.with_suffix(".part")
    writer = gguf.GGUFWriter(str(part), arch)
    writer.add_name(f"random {shape.name}")
    writer.add_block_count(shape.layers)
    writer.add_context_length(32768)  # every family here has at least 32k: the context sweep reaches 16k on them
    writer.add_embedding_length(shape.hidden)
    writer.add_feed_forward_length(shape.intermediate)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_key_length(shape.head_dim)
    writer.add_value_length(shape.head_dim)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(shape.rope_theta)
    if arch == "llama":
        writer.add_rope_dimension_count(shape.head_dim)
    if shape.sliding_window:
        writer.add_sliding_window(shape.sliding_window)
    writer.add_vocab_size(shape.vocab)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)
    tokens, types = padded_tokens(tokenizer, shape.vocab)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    merges = json.loads(tokenizer.backend_tokenizer.to_str())["model"]["merges"]
    writer.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in merges])
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    writer.add_bos_token_id(tokenizer.bos_token_id if tokenizer.bos_token_id is not None else eos)
    writer.add_eos_token_id(eos)
    writer.add_pad_token_id(eos)
    writer.add_chat_template(tokenizer.chat_template)

    generator = torch.Generator().manual_seed(seed)

    def matrix(rows: int, columns: int, kind: Any = qt.Q4_0) -> Any:
        return quantize((torch.randn(rows, columns, generator=generator) * 0.02).numpy(), kind)

    def add(name: str, data: Any, kind: Any = qt.Q4_0) -> None:
        writer.add_tensor(name, data, raw_dtype=kind)

    def vector(size: int, around: float) -> Any:
        return (around + 0.1 * torch.randn(size, generator=generator)).numpy()

    d, q, kv = shape.hidden, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    add("token_embd.weight", matrix(shape.vocab, d, qt.Q8_0), qt.Q8_0)  # tied: also the head
    writer.add_tensor("output_norm.weight", vector(d, 1.0))
    for i in range(shape.layers):
        b = f"blk.{i}."
        writer.add_tensor(b + "attn_norm.weight", vector(d, 1.0))
        writer.add_tensor(b + "ffn_norm.weight", vector(d, 1.0))
        for name, rows, columns in (("attn_q", q, d), ("attn_k", kv, d), ("attn_v", kv, d),
                                    ("attn_output", d, q), ("ffn_gate", shape.intermediate, d),
                                    ("ffn_up", shape.intermediate, d), ("ffn_down", d, shape.intermediate)):
            add(b + name + ".weight", matrix(rows, columns))
            if shape.qkv_bias and name in ("attn_q", "attn_k", "attn_v"):
                writer.add_tensor(b + name + ".bias", vector(rows, 0.0))
        if shape.qk_norm:
            writer.add_tensor(b + "attn_q_norm.weight", vector(shape.head_dim, 1.0))
            writer.add_tensor(b + "attn_k_norm.weight", vector(shape.head_dim, 1.0))
        if shape.gemma:
            writer.add_tensor(b + "post_attention_norm.weight", vector(d, 1.0))
            writer.add_tensor(b + "post_ffw_norm.weight", vector(d, 1.0))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(part, dest)
    return dest


def family_gguf(shape: Shape, tokenizer: Any, folder: Path | None = None,
                progress: Callable[[str], None] = lambda _m: None) -> Path:
    """The family's GGUF, written once (``folder``: default ``family_folder()``) and reused after."""
    dest = (folder or family_folder()) / f"{shape.name}-{FORMAT}.gguf"
    if not dest.is_file():
        progress(f"writing {dest.name} (random weights, Q4_0)")
        write_gguf(shape, dest, tokenizer)
    return dest


def gguf_bytes_per_token(path: Path) -> int:
    """The bytes of every tensor in the file: what llama.cpp reads per token (the tied embedding is its head)."""
    from engine.shapes.gguf_header import read_file_header

    return sum(t.nbytes for t in read_file_header(path).tensors)


# ---------------------------------------------------------------------------------------- measuring


def measure_family(shape: Shape, tokenizer: Any, tokens: int, reps: int, with_bf16: bool = False,
                   folder: Path | None = None, progress: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """One family: its file (written if needed), the engine int4 and llama.cpp on it (and bf16), alternated."""
    from engine.models.loader import load_model

    path = family_gguf(shape, tokenizer, folder, progress)
    plan = make_plan(False, tokens, reps)
    progress(f"{shape.name}: loading int4")
    start = time.perf_counter()
    int4 = load_model(LoadSpec(model=str(path), precision="int4", device="cpu"))
    load_s = time.perf_counter() - start
    loaded = {"int4": int4}
    if with_bf16:
        progress(f"{shape.name}: loading bf16")
        loaded["bf16"] = load_model(LoadSpec(model=str(path), precision="bf16", device="cpu"))
    prompts = build_prompts(int4.tokenizer, plan, 4096)
    variants: dict[str, Any] = {name: Engine(name, one, fast_factory(False)) for name, one in loaded.items()}
    peer_note = None if installed() else INSTALL_HINT
    peer = None
    if peer_note is None:
        try:
            peer = LlamaCpp(PeerProcess(path, torch.get_num_threads(), 1024), int4.tokenizer)
            variants[PEER_NAME] = peer
        except PeerError as exc:
            peer_note = str(exc)
    try:
        measured = core.measure(variants, precision_scenarios(prompts, plan), plan.reps,
                                lambda m: progress(f"{shape.name}: {m}"))
    finally:
        if peer is not None:
            peer.process.close()
    if peer is not None and peer.note:
        peer_note = peer.note
    figures = core.summarise(measured.runs, {"decode_tok_s": ("tok/s", "higher"), "ttft_long_s": ("s", "lower")},
                             baseline="int4")
    engine_bytes = weights_read_per_token(int4)
    peer_bytes = gguf_bytes_per_token(path)
    decode = figures["decode_tok_s"]["median"]
    runner = variants["int4"].last_runner
    out = {
        "family": shape.name, "architecture": shape.arch, "params": params(shape), "gguf": str(path),
        "gguf_bytes": path.stat().st_size, "load_s": load_s, "load_note": int4.facts.load_note,
        "fastpath": type(runner).__name__ if runner is not None else None,
        "bytes_per_token": {"int4": engine_bytes, PEER_NAME: peer_bytes},
        "decode_tok_s": figures["decode_tok_s"], "ttft_long_s": figures["ttft_long_s"],
        "int4_vs_peer": core.ratio(decode.get("int4"), decode.get(PEER_NAME)),
        "gb_s": {"int4": _gb_s(engine_bytes, decode.get("int4")),
                 PEER_NAME: _gb_s(peer_bytes, decode.get(PEER_NAME))},
        "ttft_int4_vs_bf16": core.ratio(figures["ttft_long_s"]["median"].get("int4"),
                                        figures["ttft_long_s"]["median"].get("bf16")),
        "peer_note": peer_note, "warmup_s": measured.warmup_s,
    }
    del variants, loaded, int4
    gc.collect()
    return out


def _gb_s(per_token: int | None, rate: float | None) -> float | None:
    return per_token * rate / 1e9 if per_token and rate else None


def default_tokenizer() -> Any:
    """The default model's tokenizer, which every family's file borrows (``FileNotFoundError`` before a fetch)."""
    from transformers import AutoTokenizer

    from engine.models.fetch import find_default_model

    folder = find_default_model()
    if folder is None:
        raise FileNotFoundError("the family bench borrows the default model's tokenizer: run `python -m engine fetch`")
    return AutoTokenizer.from_pretrained(folder, local_files_only=True)


def run_families(names: Sequence[str], tokens: int, reps: int, with_bf16: bool = False,
                 progress: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """Every named family in turn; the machine (CPU, load average before and after) beside the rows."""
    from engine.bench.run import machine_description

    tokenizer = default_tokenizer()
    machine = machine_description("cpu")
    start = time.perf_counter()
    rows = []
    for name in names:  # each row said as it is done: on a shared machine a long run may not reach the end
        rows.append(measure_family(SHAPES[name], tokenizer, tokens, reps, with_bf16, progress=progress))
        progress(row_line(rows[-1]))
    return {"schema": "miaohui-bench-families/1", "machine": machine,
            "load_average_1m_after": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
            "tokens": tokens, "reps": reps, "elapsed_s": time.perf_counter() - start, "families": rows}


def row_line(row: dict[str, Any]) -> str:
    """One family's result in one line (the progress of a run)."""
    decode, gb = row["decode_tok_s"]["median"], row["gb_s"]
    return (f"{row['family']}: int4 {_num(decode.get('int4'), '.1f')} tok/s ({_num(gb.get('int4'), '.1f')} GB/s), "
            f"llama.cpp {_num(decode.get(PEER_NAME), '.1f')} tok/s ({_num(gb.get(PEER_NAME), '.1f')} GB/s), "
            f"ratio {_num(row['int4_vs_peer'], '.2f')}; TTFT {_num(row['ttft_long_s']['median'].get('int4'), '.2f')} s / "
            f"{_num(row['ttft_long_s']['median'].get(PEER_NAME), '.2f')} s; runs {row['decode_tok_s']['runs']}")


def _num(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def format_families(result: dict[str, Any]) -> str:
    """The table: per family decode tok/s of both, their ratio, MB read per token and GB/s, TTFT."""
    m = result["machine"]
    lines = [f"families: {m['cpu']} ({m['cpu_capability']}), {m['torch_threads']} threads, load average "
             f"{m['load_average_1m']:.1f} -> {result['load_average_1m_after']:.1f}; "
             f"{result['tokens']} tokens, medians of {result['reps']} alternated repetitions",
             "| family | params | int4 tok/s | llama.cpp tok/s | int4 ÷ llama.cpp | MB/token int4 / llama.cpp "
             "| GB/s int4 / llama.cpp | TTFT ~500 tok int4 / llama.cpp (s) |",
             "|---|---|---|---|---|---|---|---|"]

    num = _num
    notes = []
    for row in result["families"]:
        dec, ttft, mb, gb = row["decode_tok_s"]["median"], row["ttft_long_s"]["median"], row["bytes_per_token"], \
            row["gb_s"]
        lines.append(f"| {row['family']} | {row['params'] / 1e9:.2f} B | {num(dec.get('int4'), '.1f')} | "
                     f"{num(dec.get(PEER_NAME), '.1f')} | **{num(row['int4_vs_peer'], '.2f')}** | "
                     f"{mb['int4'] / 1e6:.0f} / {mb[PEER_NAME] / 1e6:.0f} | {num(gb.get('int4'), '.1f')} / "
                     f"{num(gb.get(PEER_NAME), '.1f')} | {num(ttft.get('int4'), '.2f')} / "
                     f"{num(ttft.get(PEER_NAME), '.2f')} |")
        if row["ttft_int4_vs_bf16"] is not None:
            notes.append(f"{row['family']}: TTFT int4 ÷ bf16 {row['ttft_int4_vs_bf16']:.2f}")
        if row["peer_note"]:
            notes.append(f"{row['family']}: {row['peer_note']}")
    return "\n".join(lines + notes)
