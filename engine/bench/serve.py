"""What serving costs: the same model in process and through ``engine serve``'s HTTP API, side by side.

``python -m engine.bench.serve [--precision P] [--tokens N] [--reps R] [--clients 8]`` loads the default model
once and measures, alternating:

- ``in-process``: ``ChatSession.generate`` on this thread (what the window's worker does);
- ``http``: the same conversation sent to a real ``engine serve`` (a child process: FastAPI + uvicorn on 127.0.0.1,
  an ephemeral port, one request at a time) and streamed back by ``engine.remote`` — the client the window uses for
  a server — so TTFT and decode tok/s are measured on the client from the stream, HTTP and SSE framing included;

then ``--clients`` clients send one request each (a ~100-token prompt) at the same moment, to a fresh ``engine serve``
process per ``--parallel`` value (default ``1,4,8``; ``served_process`` says why a process), after one request of its
own has warmed it: with 1 it serves them in arrival order, so their total throughput stays near
one client's and the last one's TTFT grows with the queue; with N > 1 up to N decode together in one forward per
step (continuous batching, ``engine.serve.batching``). Reported per value: total tok/s, TTFT best/median/worst,
the total's ratio to parallel 1's and to one client's decode rate, whether every greedy reply equals parallel
1's (the same prompts go to every server), and the form the server's prompt products took (``prefill_form``: each
process chooses its own by timing, and the forms round differently).

``--reopen`` measures something else instead: reopening a ~``--context-tokens`` conversation with and without its
saved KV cache, in process and through a restarted server (``engine.bench.reopen``).

Every prompt carries a nonce first (in a system turn of its own, before anything two prompts could share: the
template's default system prompt would otherwise be a shared 16-token block), so no request reuses another's KV
cache, copied or from the block pool (both sides prefill the whole prompt). Prints one JSON object; docs/SERVE.md ("Measured") reads it. Owns these scenarios only: the measuring
rules are engine/bench/core.py's, the server engine/serve/'s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from typing import Any, Iterator

import torch

from engine.bench import core
from engine.bench.run import machine_description
from engine.events import Finished, Message
from engine.fmt import one_line
from engine.generate.session import ChatSession
from engine.inputs import LoadSpec, SamplingConfig
from engine.models.loader import load_model
from engine.remote.client import connect
from engine.remote.session import RemoteSession
from engine.remote.spec import RemoteSpec

_CROWD_QUESTION = ("A user writes: my laptop has two cores and sixteen gigabytes of memory, and I want several people "
                   "in my team to ask a small local language model questions at the same time through one server. "
                   "Explain in a few sentences what limits how fast it can answer them all, why serving requests "
                   "one after another makes the last person wait so long, and how batching their decode steps "
                   "together in one forward pass changes both the total speed and the waiting time.")
_QUESTION = ("Explain in a few sentences why decoding one token on a small machine is limited by memory "
             "bandwidth rather than arithmetic, and what a KV cache saves.")


_SYSTEM = "You are a helpful assistant."
STARTED_S = 180.0  # how long a served process may take to load its model and say where it listens


def _messages() -> list[Message]:
    # the nonce opens the prompt (a system turn of its own: the template's default one would be shared by all)
    return [Message("system", f"[{uuid.uuid4().hex[:8]}] {_SYSTEM}"), Message("user", _QUESTION)]


def _figures(events: Any) -> dict[str, Any]:
    last = None
    for event in events:
        last = event
    if not isinstance(last, Finished) or last.error is not None:
        raise RuntimeError(f"the reply failed: {getattr(last, 'error', last)}")
    m = last.metrics
    return {"ttft_s": m.ttft_s, "decode_tok_s": m.decode_tok_s, "generated_tokens": m.generated_tokens,
            "prompt_tokens": m.prompt_tokens, "text": last.text}


def side_by_side(loaded: Any, remote: RemoteSession, config: SamplingConfig, reps: int,
                 progress: Any) -> dict[str, Any]:
    variants = {"in-process": lambda: ChatSession(loaded).generate(_messages(), config),
                "http": lambda: remote.generate(_messages(), config)}
    scenarios = [("reply", lambda make: _figures(make()))]
    measured = core.measure(variants, scenarios, reps, progress)
    return core.summarise(measured.runs, {"ttft_s": ("s", "lower"), "decode_tok_s": ("tok/s", "higher")},
                          baseline="in-process")


def concurrent(remote: RemoteSession, config: SamplingConfig, clients: int,
               prompts: list[list[Message]] | None = None) -> dict[str, Any]:
    """``clients`` requests released together (``prompts[i]``, or a fresh nonce each); each one's TTFT, and the
    total tokens over the wall time."""
    barrier = threading.Barrier(clients + 1)
    results: list[dict[str, Any] | BaseException] = [RuntimeError("not run")] * clients

    def client(i: int) -> None:
        barrier.wait()
        try:
            results[i] = _figures(remote.generate(prompts[i] if prompts else _messages(), config))
        except BaseException as exc:  # noqa: BLE001 (reported in the JSON: a failed client is a finding)
            results[i] = exc

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    good = [r for r in results if isinstance(r, dict)]
    tokens = sum(r["generated_tokens"] for r in good)
    ttfts = sorted(r["ttft_s"] for r in good if r["ttft_s"] is not None)
    return {"clients": clients, "completed": len(good), "failed": [str(r) for r in results if not isinstance(r, dict)],
            "wall_s": wall, "total_tok_s": tokens / wall if wall else None,
            "ttft_s": {"best": ttfts[0] if ttfts else None, "median": core.median(ttfts),
                       "worst": ttfts[-1] if ttfts else None},
            "prompt_tokens": core.median([r["prompt_tokens"] for r in good]),
            "texts": [r["text"] if isinstance(r, dict) else None for r in results]}


@contextlib.contextmanager
def served_process(model: str, precision: str, parallel: int, sessions: int | None, max_queue: int,
                   started_s: float = STARTED_S) -> Iterator[tuple[str, int]]:
    """A real ``python -m engine serve`` of ``model`` in a child process on a free port of 127.0.0.1: its URL and the
    parallel slots it granted (``/metrics``' ``miaohui:parallel_slots``); ended (Ctrl-C, then killed) afterwards.
    ``sessions`` None: the server's default.

    Why a process and not a ``Worker`` here: a server's forwards on a thread of this process, beside this bench's
    load and in-process runs on the main thread, make GNU OpenMP manage more threads than there are cores, and it
    then stops spinning between parallel regions for every thread (engine/executor/omp_team.py): the same batch of 8
    took 22-25 ms on a server thread here against 15-18 ms on the main thread alone, and everything on the main
    thread slowed too. A fresh process hosts the model on one thread, as a user's ``engine serve`` does."""
    command = [sys.executable, "-m", "engine", "serve", "--model", model, "--precision", precision,
               "--device", "cpu", "--host", "127.0.0.1", "--port", "0", "--parallel", str(parallel),
               "--max-queue", str(max_queue), *(["--sessions", str(sessions)] if sessions is not None else [])]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    try:
        url, said = None, []
        deadline = time.monotonic() + started_s
        while url is None:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            if line is None:
                raise RuntimeError(f"engine serve ended before serving: {one_line(' '.join(said[-3:]))}")
            said.append(line)
            found = re.search(r"serving .* at (http://127\.0\.0\.1:\d+/v1)", line)
            url = found.group(1) if found else None
        metrics = _metrics(url, started_s)
        slots = re.search(r"^miaohui:parallel_slots\{[^}]*\} ([0-9.]+)$", metrics, re.MULTILINE)
        yield url, int(float(slots.group(1))) if slots else parallel
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _metrics(url: str, timeout_s: float) -> str:
    """The text of the ``/metrics`` of the server whose API is at ``url`` (``…/v1``)."""
    return urllib.request.urlopen(url.removesuffix("/v1") + "/metrics", timeout=timeout_s).read().decode()


def prefill_form(url: str) -> str | None:
    """The form the server's prompt products took (``miaohui:prefill_form_info`` on its ``/metrics``), or None: the
    two forms round differently, so servers that chose differently may give different greedy replies."""
    metrics = _metrics(url, STARTED_S)
    found = re.search(r'^miaohui:prefill_form_info\{[^}]*form="(\w+)"[^}]*\} 1\.0$', metrics, re.MULTILINE)
    return found.group(1) if found else None


def by_parallel(model: str, precision: str, config: SamplingConfig, clients: int,
                values: list[int]) -> dict[str, Any]:
    """The same ``clients`` prompts (~100 tokens each) to a fresh ``engine serve`` process per ``--parallel``
    value (``served_process``)."""
    nonce = uuid.uuid4().hex[:8]  # one per run: every server gets the same prompts, none of them cached before
    prompts = [[Message("system", f"[{i}-{nonce}] {_SYSTEM}"), Message("user", _CROWD_QUESTION)]
               for i in range(clients)]  # each differs from its first tokens on: no 16-token block in common
    runs: dict[str, Any] = {}
    for parallel in values:
        # A session per client: each request prefills its whole prompt in a fresh cache on every server, so the
        # replies compare batching alone (a reused prefix would change where prefill chunks start).
        with served_process(model, precision, parallel, clients, max(32, clients)) as (url, granted):
            remote = RemoteSession(connect(RemoteSpec(url, model="")))
            concurrent(remote, config, 1)  # a first request (its own nonce) warms the fresh process; not counted
            runs[str(parallel)] = dict(concurrent(remote, config, clients, prompts), parallel_granted=granted,
                                       prefill_form=prefill_form(url))
    base = runs.get("1")
    for run in runs.values():
        run["total_tok_s_per_parallel_1"] = core.ratio(run["total_tok_s"], base["total_tok_s"]) if base else None
        run["replies_equal_parallel_1"] = run["texts"] == base["texts"] if base else None
        run["replies_equal_count"] = sum(a == b for a, b in zip(run["texts"], base["texts"])) if base else None
    for run in runs.values():
        del run["texts"]
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.bench.serve", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per reply")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--parallel", default="1,4,8", help="comma-separated --parallel values for the crowd run")
    parser.add_argument("--reopen", action="store_true",
                        help="instead: TTFT of reopening a long conversation, full prefill vs its saved KV cache")
    parser.add_argument("--context-tokens", type=int, default=4000, help="--reopen: the conversation's length")
    parser.add_argument("--http-full", action="store_true", help="--reopen: also a full prefill through HTTP")
    args = parser.parse_args(argv)
    try:
        parallels = [int(v) for v in args.parallel.split(",") if v.strip()]
    except ValueError:
        parser.error(f"--parallel takes whole numbers separated by commas (got {args.parallel!r})")
    if any(not 1 <= p <= 64 for p in parallels):
        parser.error("--parallel values must be between 1 and 64")
    torch.manual_seed(0)
    progress = (lambda m: print(m, file=sys.stderr, flush=True)) if os.environ.get("BENCH_VERBOSE") \
        else (lambda _m: None)
    loaded = load_model(LoadSpec(model=args.model, precision=args.precision, device="cpu"))
    if args.reopen:
        from engine.bench import reopen

        figures = reopen.run(loaded, args.context_tokens, args.reps, args.tokens, progress, args.http_full)
        print(json.dumps({"machine": machine_description("cpu"), "model": loaded.facts.name,
                          "precision": loaded.facts.precision, **figures}, indent=2, default=str))
        return 0
    # ignore_eos-like budget: greedy, and long enough an answer that every reply reaches the token budget.
    config = SamplingConfig(temperature=0.0, repetition_penalty=1.0, max_new_tokens=args.tokens)
    # The HTTP side is a real engine serve too (one request at a time, as the window's worker): a server thread in
    # this process would slow this thread's in-process runs as well (served_process says why).
    with served_process(args.model, loaded.facts.precision, 1, None, max(32, args.clients)) as (url, _):
        remote = RemoteSession(connect(RemoteSpec(url, model="")))
        pair = side_by_side(loaded, remote, config, args.reps, progress)
        crowd = concurrent(remote, config, args.clients)
    crowd.pop("texts", None)
    crowds = by_parallel(args.model, loaded.facts.precision, config, args.clients, parallels)
    for run in crowds.values():
        run["total_tok_s_per_single_client_decode"] = core.ratio(run["total_tok_s"], pair["decode_tok_s"]["median"]["http"])
    single = pair["decode_tok_s"]["median"]["http"]
    result = {"machine": machine_description("cpu"), "model": loaded.facts.name, "precision": loaded.facts.precision,
              "tokens": args.tokens, "reps": args.reps, "side_by_side": pair, "concurrent": crowd,
              "concurrent_by_parallel": crowds,
              "http_ttft_overhead_s": (pair["ttft_s"]["median"]["http"] - pair["ttft_s"]["median"]["in-process"])
              if None not in (pair["ttft_s"]["median"]["http"], pair["ttft_s"]["median"]["in-process"]) else None,
              "concurrent_total_tok_s_per_single_client_decode": core.ratio(crowd["total_tok_s"], single)}
    print(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
