"""The benchmark's report: the shape of its JSON and the readable table made from it.

Owns the names the JSON promises (``SCHEMA``, ``VARIANTS``, ``METRICS``: every metric is always present,
missing values are null; the shape is documented in docs/BENCHMARK.md and is stable), the JSON text
(``to_json``) and the table (``format_table``: one row per figure, one column per variant, ratios to the
baseline, then the derived lines; the llama.cpp column only where the peer ran, else the one line saying
why). Measures nothing and builds no figures (``engine.bench.run`` does); torch-free, so the command line
can load it without loading torch.
"""

from __future__ import annotations

import json
from typing import Any

from engine.bench import core

SCHEMA = "miaohui-bench/1"
VARIANTS = ("baseline", "engine", "fastpath")
PEER = "llama.cpp"  # the peer's column (engine.bench.peer.NAME): its figures are null where it did not run
# Metric name -> (unit, which direction is better). Every name is always present in the JSON.
METRICS = {
    "decode_tok_s": ("tok/s", "higher"),
    "ttft_short_s": ("s", "lower"),
    "ttft_long_s": ("s", "lower"),
    "decode_tok_s_long": ("tok/s", "higher"),
    "followup_ttft_reuse_s": ("s", "lower"),
    "followup_ttft_full_s": ("s", "lower"),
    "decode_tok_s_no_kv": ("tok/s", "higher"),
}


def to_json(result: dict[str, Any]) -> str:
    """The result as the JSON text ``--json`` prints."""
    return json.dumps(result, indent=1)


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        return f"{value * 1000:.0f} ms"
    return f"{value:.1f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}×"

def _file(path: str | None) -> str:
    return path.replace("\\", "/").rsplit("/", 1)[-1] if path else "-"


def _peer_line(peer: dict[str, Any], settings: dict[str, Any]) -> str:
    """What the llama.cpp column ran, or the one line that says why there is none."""
    if not peer.get("ran"):
        return str(peer.get("note") or "llama.cpp column: not run")
    diff = peer.get("first_difference_vs_baseline")
    return (f"llama.cpp {peer.get('version')}: {_file(peer.get('gguf'))}, {peer.get('threads')} threads, the "
            f"engine's prompt ids, greedy; its tokens "
            + ("equal the baseline's" if diff is None else f"part from the baseline's ({settings['precision']}) "
                                                            f"at token {diff} (4-bit weights)"))


def _precision_table(result: dict[str, Any], peer: dict[str, Any]) -> list[str]:
    """The fast path in each precision side by side (and llama.cpp on the GGUF): the seeds' lesson in one table,
    fewer bytes read per token, more tokens per second. Empty when no other precision was measured."""
    s, metrics = result["settings"], result["metrics"]
    measured = {name: p for name, p in result["precisions"].items() if "error" not in p}
    if not measured:
        return []
    main = s["precision"]
    columns: dict[str, dict[str, Any]] = {main: {
        "decode": metrics["decode_tok_s"]["median"].get("fastpath"),
        "ttft": metrics["ttft_long_s"]["median"].get("fastpath"),
        "long": metrics["decode_tok_s_long"]["median"].get("fastpath"),
        "weights": result["model"]["weights_bytes"], "agree": 1.0, "ppl": result["quality"]["perplexity"]}}
    for name, p in measured.items():
        columns[name] = {"decode": p["decode_tok_s"]["median"].get("fastpath"),
                         "ttft": p["ttft_long_s"]["median"].get("fastpath"),
                         "long": p["decode_tok_s_long"]["median"].get("fastpath"),
                         "weights": p["weights_bytes"],
                         "agree": p["top1_agreement"], "ppl": p["perplexity"]}
    if peer.get("ran"):
        columns[PEER] = {"decode": metrics["decode_tok_s"]["median"].get(PEER),
                         "ttft": metrics["ttft_long_s"]["median"].get(PEER),
                         "long": metrics["decode_tok_s_long"]["median"].get(PEER), "weights": None, "agree": None,
                         "ppl": None}
    base = columns[main]

    def times(v: float | None, of: float | None) -> str:
        r = core.ratio(v, of)
        return "-" if r is None else f"{r:.2f}×"

    rows = [("decode (tok/s)", "decode", lambda v: _fmt(v, "tok/s")),
            (f"decode ÷ {main}", "decode", lambda v: times(v, base["decode"])),
            ("TTFT, long prompt", "ttft", lambda v: _fmt(v, "s")),
            (f"TTFT ÷ {main}", "ttft", lambda v: times(v, base["ttft"])),
            ("decode after long prompt", "long", lambda v: _fmt(v, "tok/s")),
            ("weights (MB)", "weights", lambda v: f"{v / 1e6:.0f}" if v else "-"),
            (f"weights ÷ {main}", "weights", lambda v: times(v, base["weights"]) if v else "-"),
            (f"top-1 agree w/ {main}", "agree", lambda v: f"{v * 100:.1f}%" if v is not None else "-"),
            ("perplexity", "ppl", lambda v: f"{v:.3f}" if v is not None else "-")]
    header = f"{'fast path by precision':<26}" + "".join(f"{name:>11}" for name in columns)
    lines = ["", header, "-" * len(header)]
    for label, key, show in rows:
        lines.append(f"{label:<26}" + "".join(f"{show(c[key]):>11}" for c in columns.values()))
    return lines


def format_table(result: dict[str, Any]) -> str:
    """The readable report: one row per figure, one column per variant, ratios to the baseline."""
    m = result["machine"]
    s = result["settings"]
    lines = [f"Miaohui bench: {result['model']['name']} {s['precision']} on {s['device']} "
             f"({m['cpu']}, {m['cpu_capability']}, {m['cores_logical']} cores, {m['torch_threads']} torch threads, "
             f"torch {m['torch']} / transformers {m['transformers']}"
             f"{', ' + m['gpu'] if m['gpu'] else ''})",
             f"{s['tokens']} new tokens, greedy, {s['reps']} reps, medians; ratio = variant ÷ baseline; "
             f"load average {m['load_average_1m']}", ""]
    peer = result.get("peer") or {}
    columns = VARIANTS + ((PEER,) if peer.get("ran") else ())
    header = (f"{'figure':<26}" + "".join(f"{name:>11}" for name in columns) + f"{'engine÷b':>10}{'fast÷b':>9}")
    lines += [header, "-" * len(header)]
    for name, metric in result["metrics"].items():
        med, ratio, unit = metric["median"], metric["ratio"], metric["unit"]
        label = f"{name} ({unit})"
        ratios = "".join(f"{('%.2f×' % ratio[k]) if ratio.get(k) else '-':>{w}}" for k, w in (("engine", 10),
                                                                                              ("fastpath", 9)))
        lines.append(f"{label:<26}" + "".join(f"{_fmt(med.get(v), unit):>11}" for v in columns) + ratios)
    lines += _precision_table(result, peer)
    d = result["derived"]
    bw = result["memory_bandwidth"]
    lines += ["", f"follow-up TTFT, reuse ÷ full re-prefill: engine {_pct(d['followup_reuse_share']['engine'])}, "
                  f"fastpath {_pct(d['followup_reuse_share']['fastpath'])} "
                  f"(reused {d['followup_reused_tokens']['engine']} of {s['prompt_tokens']['followup']} tokens)",
              f"KV cache on ÷ off (decode tok/s): baseline {_x(d['kv_cache_speedup']['baseline'])}, "
              f"engine {_x(d['kv_cache_speedup']['engine'])}",
              f"memory bandwidth (measured now): read {bw['read_bytes_s'] / 1e9:.1f} GB/s, copy "
              f"{bw['copy_bytes_s'] / 1e9:.1f} GB/s; weights read per token "
              f"{result['model']['bytes_read_per_token'] / 1e6:.0f} MB -> roofline {bw['roofline_tok_s']:.0f} tok/s",
              "roofline share (achieved ÷ measured read bandwidth): " + ", ".join(
                  f"{k} {_pct(v['share'])}" for k, v in result["roofline"].items() if k in columns)]
    fp = result["fastpath"]
    lines.append(f"fast path: {'active' if fp['active'] else 'not used (' + str(fp['reason']) + ')'}"
                 + (f", compiled in {fp['compile_s']:.1f} s" if fp.get("compile_s") else "")
                 + (f"; its matrix products alone take {fp['matmul_s_per_token'] * 1000:.1f} ms per token "
                    f"(ceiling {fp['matmul_ceiling_tok_s']:.0f} tok/s)" if fp.get("matmul_s_per_token") else ""))
    lines.append("greedy tokens equal to baseline: " + ", ".join(
        f"{k} {'yes' if c['equal'] else 'no, first difference at token ' + str(c['first_difference'])}"
        for k, c in result["correctness"].items()))
    lines.append(_peer_line(peer, s))
    lines.append("warm-up (excluded): " + ", ".join(f"{k} {v:.1f} s" for k, v in result["warmup_s"].items()))
    for name, p in result["precisions"].items():
        if "error" in p:
            lines.append(f"{name}: {p['error']}")
            continue
        med, ratio = p["decode_tok_s"]["median"], p["decode_tok_s"]["ratio"]
        lines.append(f"{name}: weights {p['weights_bytes'] / 1e6:.0f} MB, decode tok/s " + ", ".join(
            f"{k} {_fmt(v, 'tok/s')}" + (f" ({ratio[k]:.2f}×)" if ratio.get(k) else "") for k, v in med.items()))
        main_decode = result["metrics"]["decode_tok_s"]["median"]
        fast = med.get("fastpath")
        ttft = p["ttft_long_s"]["median"].get("fastpath")
        main_ttft = result["metrics"]["ttft_long_s"]["median"].get("fastpath")
        short = core.ratio(p["ttft_short_s"]["median"].get("fastpath"),
                           result["metrics"]["ttft_short_s"]["median"].get("fastpath"))
        vs_generate = core.ratio(fast, main_decode.get("baseline"))
        lines.append(f"  fastpath {name} ÷ generate() {s['precision']}: {_x(vs_generate)}, "
                     f"÷ fastpath {s['precision']}: {_x(core.ratio(fast, main_decode.get('fastpath')))}; "
                     f"TTFT ÷ fastpath {s['precision']}: short prompt {_x(short)}, long prompt "
                     f"{_x(core.ratio(ttft, main_ttft))}; weights ÷ "
                     f"{s['precision']}: {core.ratio(p['weights_bytes'], result['model']['weights_bytes']):.2f}; "
                     f"top-1 agreement {_pct(p['top1_agreement'])}, perplexity {p['perplexity']:.2f} "
                     f"({s['precision']}: {result['quality']['perplexity']:.2f})")
        peer_decode = result["metrics"]["decode_tok_s"]["median"].get(PEER)
        if peer.get("ran") and peer_decode:
            lines.append(f"  fastpath {name} ÷ llama.cpp on {_file(peer['gguf'])} (decode): "
                         f"{_x(core.ratio(fast, peer_decode))}")
    lines.append(f"total {result['elapsed_s']:.0f} s")
    return "\n".join(lines)
