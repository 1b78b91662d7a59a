"""``python -m engine bench --contexts 512,4096,16384``: the decode roofline at each context length (issue 45).

A decode step reads every weight once and the whole KV cache once, so as the context grows the cache's share of the
bytes read per token grows with it: at a few hundred positions a step is the weights; at 16k positions of a
Llama-3.2-1B-shaped model the 16-bit cache (16 layers × 2 × 8 heads × 64 × 2 bytes × 16k = 512 MiB) outweighs its
int4 weights. This bench says, per context length, what a step reads and how fast it goes, so the roofline's verdict
("bandwidth-bound" near the measured memory bandwidth, "overhead-bound" far below it, "machine busy") is checked where
the KV cache dominates, not only on a short prompt.

``--model`` may also name one of ``engine.bench.families``' shapes (``llama-3.2-1b``, ...): its random-weight Q4_0
GGUF, so llama.cpp runs beside the engine on the same file. Per length ``n``, on one fast runner of ``--model`` at
``--precision`` (and ``--precisions``): the engine's fixed prose (``engine.quant.quality.quality_ids``) prefilled to
``n`` positions on a fresh runner per repetition (the median is the TTFT of an ``n``-token prompt); where ``--model``
is a GGUF and llama-cpp-python is installed (``engine.bench.peer``), llama.cpp's TTFT on the same file and ids, a whole
prefill per repetition; then
``reps`` greedy decodes of ``tokens`` steps from those ``n`` positions, each engine's cropped back to ``n`` and
llama.cpp's keeping the prompt's cache (prefix reuse), taken in turn within each repetition and in reverse order every
other one, so every column sees the same machine. Reported per row: decode tok/s (median), weight and KV bytes read
per step (the KV cache's bytes at ``n`` + ``tokens``/2, its mean length during the run), achieved GB/s, its share of
the measured read bandwidth (``engine.bench.roofline``'s stored figure, other processes' CPU share taken over the
engine's own decode runs) and the verdict, and llama.cpp's decode and TTFT. A length past the model's context window
is left out with a note, never run past it.

Never asserts a speed. Owns this sweep and its table; the roofline arithmetic is ``engine.bench.roofline``'s.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from engine.bench.core import decode_rate
from engine.bench.kv_cache import decode_rate_at
from engine.bench.peer import NAME
from engine.bench.roofline import CpuWatch, Roofline, measure_and_store, weights_read_per_token

CONTEXTS = (512, 4096, 16384)
TOKENS = 32
REPS = 3


def parse_contexts(text: str) -> list[int]:
    """``"512,4k,16384"`` → ``[512, 4096, 16384]``; a bad entry raises ``ValueError`` with one line."""
    out: list[int] = []
    for part in (p.strip().lower() for p in text.split(",") if p.strip()):
        scale = 1024 if part.endswith("k") else 1
        try:
            value = int(part.removesuffix("k")) * scale
        except ValueError:
            raise ValueError(f"--contexts: {part!r} is not a number of positions (e.g. 512,4k,16k)") from None
        if value < 1:
            raise ValueError(f"--contexts: {part!r} must be at least 1 position")
        out.append(value)
    if not out:
        raise ValueError("--contexts: give at least one length, e.g. 512,4096,16384")
    return sorted(set(out))


def _kv_bytes_at(runner: Any, context: int, tokens: int) -> int:
    """The KV bytes a step reads at the run's mean length (``context`` + tokens/2): the bytes the cache holds now,
    per position it holds, times that length."""
    held, positions = runner.kv_bytes()[0], len(runner.cached_ids)
    return int(held / max(1, positions) * (context + tokens / 2))


def sweep(loaded: dict[str, Any], contexts: Sequence[int], tokens: int, reps: int, peer: Any = None,
          progress: Callable[[str], None] = lambda _m: None,
          bandwidth: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One row per (context, precision) for the loaded models (name → ``LoadedModel`` on the fast path), and one
    per context for ``peer`` (an ``engine.bench.peer.PeerProcess``) when given. ``bandwidth``: the read bandwidth
    entry to compare with (default: the stored one, measured again when stale)."""
    from engine.executor.runners import make_runner
    from engine.quant.quality import quality_ids

    first = next(iter(loaded.values()))
    limit = first.facts.context_length or max(contexts) + tokens + 2
    bandwidth = bandwidth if bandwidth is not None else measure_and_store(first.facts.device)
    rows: list[dict[str, Any]] = []
    for context in contexts:
        if context + tokens + 2 > limit:
            rows.append({"context": context, "skipped": f"past the model's context window ({limit} positions)"})
            progress(f"{context} positions: past the model's {limit}-position window, left out")
            continue
        prompt = quality_ids(first.tokenizer, context)
        runners: dict[str, Any] = {}
        ttfts: dict[str, list[float]] = {}
        for name, one in loaded.items():
            # ``reps`` whole prefills, each on a fresh runner, as llama.cpp's TTFT is taken (``_peer_ttfts``): one
            # sample moved 29-43 s at 3,264 tokens on an AVX2 VM from one minute to the next, past the target's margin.
            ttfts[name] = []
            for rep in range(max(1, reps)):
                progress(f"{context} positions: prefilling at {name}, repetition {rep + 1}/{max(1, reps)}")
                runners.pop(name, None)  # the last one's cache freed before the next is allocated
                runner = make_runner(one, True, max_positions=context + tokens + 2)
                start = time.perf_counter()
                list(runner.prefill(prompt))
                runner.sync()
                ttfts[name].append(time.perf_counter() - start)
                runners[name] = runner
        peer_ttfts = _peer_ttfts(peer, prompt, context, tokens, reps, progress) if peer is not None else []
        # Decode: each repetition times every runner and then the peer (the prompt's cache kept, so a repetition
        # costs only its tokens), the order reversed every other one, so all see the same machine within seconds:
        # a shared VM's speed drifts by a quarter over a minute, more than the differences measured here.
        names = [*runners, *([NAME] if peer is not None else [])]
        rates: dict[str, list[float]] = {name: [] for name in names}
        others_s = engine_s = 0.0  # other processes' CPU share, over the engine's own decode runs only
        watch = CpuWatch()
        for rep in range(reps):
            progress(f"{context} positions: decode, repetition {rep + 1}/{reps}")
            for name in names if rep % 2 == 0 else list(reversed(names)):
                if name == NAME:
                    rate = decode_rate(peer.generate(prompt, tokens + 1, reuse=True).times)
                    rates[name] += [rate] if rate is not None else []
                    continue
                watch.start()
                start = time.monotonic()
                rates[name].append(decode_rate_at(runners[name], context, tokens))
                wall = time.monotonic() - start
                others_s += (watch.others_share() or 0.0) * wall
                engine_s += wall
        others = others_s / engine_s if engine_s > 0 else None
        for name, runner in runners.items():
            line = Roofline(weights_bytes=weights_read_per_token(loaded[name]),
                            kv_bytes=_kv_bytes_at(runner, context, tokens), tok_s=statistics.median(rates[name]),
                            bandwidth_bytes_s=bandwidth.get("read_bytes_s"), others_cpu_share=others)
            rows.append({"context": context, "engine": name, "ttft_s": statistics.median(ttfts[name]),
                         "ttft_runs": ttfts[name], "runs": rates[name],
                         **{k: v for k, v in line.to_dict().items() if not k.startswith("bandwidth_measured")}})
        if peer is not None:
            rows.append({"context": context, "engine": NAME, "ttft_s": statistics.median(peer_ttfts),
                         "ttft_runs": peer_ttfts, "tok_s": statistics.median(rates[NAME]) if rates[NAME] else None,
                         "runs": rates[NAME]})
        del runners
    return rows


def _peer_ttfts(peer: Any, prompt: Sequence[int], context: int, tokens: int, reps: int,
                progress: Callable[[str], None]) -> list[float]:
    """llama.cpp's TTFT on the same file and ids, a whole prefill per repetition (its cache reset first)."""
    out = []
    for rep in range(reps):
        progress(f"{context} positions: {NAME} prefill, repetition {rep + 1}/{reps}")
        out.append(peer.generate(prompt, tokens + 1).first_s)
    return out


def run(model: str, precisions: Sequence[str], contexts: Sequence[int], tokens: int = TOKENS, reps: int = REPS,
        with_peer: bool = True, progress: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """Load ``model`` at each precision (CPU), sweep, and add llama.cpp's rows where it can run the same file."""
    from engine.bench.peer import INSTALL_HINT, PeerError, PeerProcess, installed
    from engine.bench.run import machine_description
    from engine.inputs import LoadSpec
    from engine.models.loader import load_model

    import torch

    from engine.bench import families

    if model in families.SHAPES:  # a family's random-weight Q4_0 file (``--families``'), written once
        model = str(families.family_gguf(families.SHAPES[model], families.default_tokenizer(), progress=progress))
    loaded = {}
    for precision in precisions:
        progress(f"loading {model} at {precision}")
        one = load_model(LoadSpec(model=model, precision=precision, device="cpu"))
        if one.facts.runner != "fast":
            raise ValueError(f"the context sweep needs the fast runner: {one.facts.runner_reason}")
        loaded[precision] = one
    peer, peer_note = None, None
    path = Path(model)
    if not with_peer:
        peer_note = "left out (--no-peer)"
    elif path.suffix != ".gguf":
        peer_note = "llama.cpp runs only a .gguf --model"
    elif not installed():
        peer_note = INSTALL_HINT
    else:
        try:
            peer = PeerProcess(path, torch.get_num_threads(), max(contexts) + tokens + 8)
        except PeerError as exc:
            peer_note = str(exc)
    try:
        rows = sweep(loaded, contexts, tokens, reps, peer, progress)
    finally:
        if peer is not None:
            peer.close()
    first = next(iter(loaded.values()))
    return {"schema": "miaohui-bench-contexts/1", "machine": machine_description("cpu"),
            "model": first.facts.name, "tokens": tokens, "reps": reps, "peer_note": peer_note, "rows": rows}


def format_sweep(result: dict[str, Any]) -> str:
    """The table: one line per context and engine."""
    machine = result["machine"]
    lines = [f"{result['model']} on {machine.get('cpu')} ({machine.get('torch_threads')} threads); "
             f"{result['tokens']} greedy steps per run, median of {result['reps']}",
             f"{'context':>8} {'engine':>10} {'TTFT s':>8} {'tok/s':>8} {'weights MB':>10} {'KV MB':>8} "
             f"{'GB/s':>6} {'of peak':>7}  verdict"]
    for row in result["rows"]:
        if "skipped" in row:
            lines.append(f"{row['context']:>8} {'':>10} {row['skipped']}")
            continue
        share = row.get("share")
        lines.append(
            f"{row['context']:>8} {row['engine']:>10} {_num(row.get('ttft_s'), '.2f'):>8} {_num(row.get('tok_s'), '.1f'):>8} "
            f"{_num(_mb(row.get('weights_bytes')), '.0f'):>10} {_num(_mb(row.get('kv_bytes')), '.0f'):>8} "
            f"{_num((row.get('achieved_bytes_s') or 0) / 1e9 or None, '.1f'):>6} "
            f"{(f'{share:.0%}' if share else '-'):>7}  {row.get('verdict') or '-'}")
    if result.get("peer_note"):
        lines.append(f"llama.cpp: {result['peer_note']}")
    return "\n".join(lines)


def _mb(value: int | None) -> float | None:
    return value / 1e6 if value else None


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)
