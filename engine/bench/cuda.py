"""The one short GPU benchmark: ``python -m engine.bench.cuda [--out FILE]`` on a CUDA machine.

Owns the batch-1 decode comparison on a GPU with a Llama of about 1.2 B parameters built from a config
with random weights (decode speed does not depend on weight values, and nothing has to be downloaded):
transformers ``generate()`` with its default cache (the baseline), the fast path eager, and the fast path
with a static cache captured as a CUDA graph (``torch.compile(mode="reduce-overhead")``), alternated,
medians and ratios, plus the GPU's memory bandwidth measured in the same run and the bandwidth each
variant achieves (MBU). bitsandbytes int8/nf4 are measured through ``generate()`` when bitsandbytes is
installed. Prints one JSON object (also written to ``--out``). Needs only torch and transformers (no Qt,
no data dir); ``--tiny --device cpu`` runs the same code in seconds on any machine, as a smoke test.

Owns the GPU bench's model, variants and JSON; the warm-up, the alternation of the variants, the medians
and the per-token clock are ``engine.bench.core``'s, the bandwidth ``engine.bench.membw``'s. The CUDA-only
parts (the CUDA-graph variant, ``torch.cuda`` calls) run only when the device is a CUDA one.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from typing import Any, Callable

import torch
from transformers import AutoModelForCausalLM, BitsAndBytesConfig, LlamaConfig, LlamaForCausalLM

from engine.bench import core
from engine.bench.membw import measure_bandwidth
from engine.executor.fastpath import FastRunner
from engine.executor.llama_fused import unsupported_reason
from engine.executor.runner import sync

# A Llama-3.2-1B-shaped decoder: 16 layers, d=2048, GQA 32/8, MLP 8192, vocab 128256 (1.24 B params).
GPU_CONFIG = dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                  num_key_value_heads=8, head_dim=64, vocab_size=128256, max_position_embeddings=4096,
                  tie_word_embeddings=True, rms_norm_eps=1e-5)
TINY_CONFIG = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=16, vocab_size=512, max_position_embeddings=256,
                   tie_word_embeddings=True, rms_norm_eps=1e-5)


def build_model(config_kwargs: dict[str, Any], dtype: torch.dtype, device: str) -> Any:
    torch.manual_seed(0)
    config = LlamaConfig(**config_kwargs)
    with torch.device(device):
        model = LlamaForCausalLM(config).to(dtype).eval()
    return model


def time_generate(model: Any, prompt: torch.Tensor, tokens: int,
                  device: torch.device) -> tuple[float | None, list[int]]:
    """Decode tok/s of ``generate()``: times of each new token through a streamer."""
    clock = core.TokenClock(lambda: sync(device))
    with torch.inference_mode():
        model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=tokens,
                       min_new_tokens=tokens, do_sample=False, streamer=clock, pad_token_id=0)
    return clock.decode_tok_s, clock.ids


def time_runner(make: Callable[[], Any], prompt: torch.Tensor, tokens: int,
                device: torch.device) -> tuple[float, list[int], Any]:
    """Decode tok/s of a FastRunner: greedy on device, one host read per token (the id is needed anyway)."""
    runner = make()
    logits = [out for _, out in runner.prefill(prompt[0].tolist())][-1]
    ids = [int(logits.argmax())]
    sync(device)
    t0 = time.perf_counter()
    for _ in range(tokens - 1):
        logits = runner.decode(ids[-1])
        ids.append(int(logits.argmax()))
    sync(device)
    return (tokens - 1) / (time.perf_counter() - t0), ids, runner


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true", help="a tiny model (smoke test of this script)")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--prompt", type=int, default=64, help="prompt tokens")
    parser.add_argument("--no-bnb", action="store_true", help="skip bitsandbytes int8/nf4")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    args = parser.parse_args(argv)

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA GPU here (use --tiny --device cpu for a smoke run)", file=sys.stderr)
        return 2
    cuda = device.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    config = TINY_CONFIG if args.tiny else GPU_CONFIG
    t_start = time.perf_counter()
    bandwidth = measure_bandwidth(device, None if not args.tiny else 64 * 1024 * 1024)
    model = build_model(config, dtype, str(device))
    params = sum(p.numel() for p in model.parameters())
    weight_bytes = sum(p.nbytes for p in model.parameters())  # tied head: embedding counted once, read once
    prompt = torch.randint(0, config["vocab_size"], (1, args.prompt), generator=torch.Generator().manual_seed(1))
    prompt = prompt.to(device)
    capacity = args.prompt + args.tokens + 8  # the static cache spans exactly what the run needs

    variants: dict[str, Callable[[], tuple[float | None, list[int]]]] = {
        "baseline": lambda: time_generate(model, prompt, args.tokens, device),
        "fastpath": lambda: time_runner(lambda: FastRunner(model, max_positions=capacity), prompt, args.tokens,
                                        device)[:2],
    }
    compile_s: float | None = None
    if cuda:
        graph_runner = FastRunner(model, static=True, compile=True, max_positions=capacity)

        def graphs() -> tuple[float, list[int]]:
            graph_runner.reset()
            rate, ids, _ = time_runner(lambda: graph_runner, prompt, args.tokens, device)
            return rate, ids

        t0 = time.perf_counter()
        graphs()  # compile + capture, excluded from the timings
        graphs()  # CUDA-graph trees record on the first replays
        compile_s = time.perf_counter() - t0
        variants["fastpath_cudagraph"] = graphs

    def decode(variant: Callable[[], tuple[float | None, list[int]]]) -> dict[str, Any]:
        rate, ids = variant()
        return {"decode_tok_s": rate, "_ids": ids}

    measured = core.measure(variants, [("decode", decode)], args.reps)
    decode_tok_s = core.summarise(measured.runs, {"decode_tok_s": ("tok/s", "higher")})["decode_tok_s"]
    medians = decode_tok_s["median"]
    outputs = {name: runs["_ids"][0] for name, runs in measured.runs.items() if runs.get("_ids")}
    result: dict[str, Any] = {
        "schema": "miaohui-bench-cuda/1",
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "torch": torch.__version__,
        "model": {"params": params, "weights_bytes": weight_bytes, "dtype": str(dtype), "config": config,
                  "fastpath_reason": unsupported_reason(model)},
        "settings": {"tokens": args.tokens, "reps": args.reps, "prompt_tokens": args.prompt},
        "memory_bandwidth": {"read_bytes_s": bandwidth.read_bytes_s, "copy_bytes_s": bandwidth.copy_bytes_s},
        "compile_s": compile_s,
        "warmup_s": measured.warmup_s,
        "decode_tok_s": {"median": medians, "runs": decode_tok_s["runs"], "ratio": decode_tok_s["ratio"]},
        # Weights are read once per token; the KV cache read (≤ 200 positions here) is under 1% of that.
        "mbu": {k: weight_bytes * v / bandwidth.read_bytes_s for k, v in medians.items()},
        "greedy_equal_to_baseline": {k: outputs[k] == outputs["baseline"] for k in outputs if k != "baseline"},
    }
    del variants
    if cuda:
        del graph_runner
    if not args.no_bnb:
        result["bitsandbytes"] = _bnb(model, prompt, args, device)
    result["elapsed_s"] = time.perf_counter() - t_start
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            handle.write(text)
    return 0


def _bnb(model: Any, prompt: torch.Tensor, args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """int8 / nf4 decode through generate(): the random model saved once, reloaded quantized."""
    try:
        # Lazy: optional, and its import costs seconds that the bench pays only when it measures these rows.
        import bitsandbytes  # noqa: F401
    except ImportError as exc:
        return {"skipped": f"bitsandbytes not installed: {exc}"}
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        for name, qconfig in (("int8", BitsAndBytesConfig(load_in_8bit=True)),
                              ("nf4", BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                         bnb_4bit_compute_dtype=torch.bfloat16))):
            try:
                quant = AutoModelForCausalLM.from_pretrained(folder, quantization_config=qconfig,
                                                             device_map={"": str(device)}).eval()
                time_generate(quant, prompt, 8, device)  # warm-up
                rates = [time_generate(quant, prompt, args.tokens, device)[0] for _ in range(args.reps)]
                out[name] = {"decode_tok_s": core.median(rates), "runs": rates,
                             "weights_bytes": quant.get_memory_footprint()}
                del quant
            except Exception as exc:  # noqa: BLE001  (one precision failing must not lose the others)
                out[name] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return out


if __name__ == "__main__":
    sys.exit(main())
