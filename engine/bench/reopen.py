"""What reopening a long conversation costs with and without its saved KV cache (issue 29's target).

``python -m engine.bench.serve --reopen [--context-tokens 4000] [--reps 3]`` loads the model once, builds a
conversation of about ``--context-tokens`` tokens (fixed text: alternating questions and answers), answers it once
(that session's cache is what a closed conversation leaves) and saves the cache with ``engine.generate.kv_store``
(its size and the save time are reported). Then, alternating in one process, the next turn's TTFT - from the
moment the conversation is opened to its first reply token - for:

- ``full prefill``: a new session computes the whole prompt (what reopening costs without a saved cache);
- ``reopen (file)``: a new session loads the file (checksum, identity and shape checks included), restores it and
  prefills only the new turn (what the window does when a conversation is reopened after a restart);
- ``http reopen (--kv-store)``: the same through a freshly started ``engine serve`` (its worker and HTTP server;
  the model stays loaded) whose ``--kv-store`` holds the saved file, the TTFT taken by the client from the stream
  (HTTP and SSE included, so its ratio to the in-process full prefill is, if anything, pessimistic);
- ``http full prefill`` (only with ``--http-full``: one more full prefill per repetition, minutes on a busy CPU):
  the same server without the store.

Ratios are to ``full prefill``; each figure is also printed as it is taken (``BENCH_VERBOSE=1``). Greedy replies
are compared (a reused cache must not change the reply). The file was just written, so it is read from the OS page
cache; after a reboot the first read also pays the disk (``file_bytes`` over the disk's read rate). The model
fingerprint the identity needs (once per loaded model) is timed apart (``identity_s``). Owns this scenario only;
``engine.bench.serve`` dispatches to it.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from engine.bench import core
from engine.events import Finished, Message, Token
from engine.generate.context import build_prompt
from engine.generate.kv_snapshot import identity_of
from engine.generate.kv_store import KVStore
from engine.generate.session import ChatSession
from engine.inputs import SamplingConfig
from engine.remote.client import connect
from engine.remote.session import RemoteSession
from engine.remote.spec import RemoteSpec
from engine.serve.app import create_app
from engine.serve.server import BackgroundServer
from engine.serve.worker import Worker

_TOPICS = ("the KV cache", "prefill and decode", "memory bandwidth", "quantization to eight bits", "sampling with a "
           "temperature", "chat templates", "continuous batching", "speculative decoding", "rotary position "
           "embeddings", "grouped-query attention", "the tokenizer", "a context window", "the LM head")
_ANSWER = ("{topic} matters on a small machine because every token the model writes reads the weights once and the "
           "cached keys and values of every earlier position. On two cores that reading, not the arithmetic, sets "
           "the pace, so {topic} is worth understanding by what it reads and writes, how many bytes each step moves, "
           "and which of them could be kept instead of computed again. Turn {n}: the short version is that {topic} "
           "trades memory for time, and the long version is a table of sizes, rates and the ratios between them.")
KEY = "bench-reopen"


def conversation(tokenizer: Any, context_tokens: int) -> list[Message]:
    """Alternating questions and answers until the rendered prompt reaches ``context_tokens``; ends on a question."""
    messages = [Message("system", "You are Miaohui, a concise assistant running on a small laptop.")]
    n = 0
    while True:
        topic = _TOPICS[n % len(_TOPICS)]
        question = Message("user", f"Question {n + 1}: explain {topic} in a paragraph.")
        ids = build_prompt(tokenizer, [*messages, question], 1 << 30, 1).ids
        if len(ids) >= context_tokens or n > 10_000:
            return [*messages, question]
        messages += [question, Message("assistant", _ANSWER.format(topic=topic.capitalize(), n=n + 1))]
        n += 1


def _first_token(events: Any, t0: float) -> tuple[float, str]:
    """(seconds from ``t0`` to the first token, the reply's text) of a stream of engine events."""
    first = None
    last = None
    for event in events:
        if first is None and isinstance(event, Token):
            first = time.perf_counter() - t0
        last = event
    if not isinstance(last, Finished) or last.error is not None or first is None:
        raise RuntimeError(f"the reply failed: {getattr(last, 'error', last)}")
    return first, last.text


def run(loaded: Any, context_tokens: int, reps: int, new_tokens: int, progress: Callable[[str], None],
        http_full: bool = False) -> dict:
    config = SamplingConfig(temperature=0.0, repetition_penalty=1.0, max_new_tokens=new_tokens)
    turn1 = conversation(loaded.tokenizer, context_tokens)
    t = time.perf_counter()
    identity_of(loaded)  # the weights' fingerprint, once per loaded model
    identity_s = time.perf_counter() - t
    writer = ChatSession(loaded)
    progress(f"answering the {context_tokens}-token conversation once")
    _, reply = _first_token(writer.generate(turn1, config), time.perf_counter())
    turn2 = [*turn1, Message("assistant", reply), Message("user", "Summarise all of that in one sentence.")]
    prompt_tokens = len(build_prompt(loaded.tokenizer, turn2, 1 << 30, 1).ids)
    with tempfile.TemporaryDirectory(prefix="miaohui-reopen-") as folder:
        store = KVStore(Path(folder))
        snapshot = writer.snapshot()
        t = time.perf_counter()
        path = store.save(KEY, snapshot, writer.kv_identity())
        save_s = time.perf_counter() - t
        cached_tokens = len(snapshot.ids)
        del writer, snapshot

        def full() -> tuple[float, str]:
            t0 = time.perf_counter()
            return _first_token(ChatSession(loaded).generate(turn2, config), t0)

        def reopen() -> tuple[float, str]:
            t0 = time.perf_counter()
            session = ChatSession(loaded)
            session.restore(store.load(KEY, session.kv_identity()))
            return _first_token(session.generate(turn2, config), t0)

        def http(with_store: bool) -> Callable[[], tuple[float, str]]:
            def go() -> tuple[float, str]:
                worker = Worker(loaded, kv_store=KVStore(Path(folder)) if with_store else None).start()
                try:
                    with BackgroundServer(create_app(worker)) as server:
                        remote = RemoteSession(connect(RemoteSpec(server.url, model="")))
                        t0 = time.perf_counter()
                        return _first_token(remote.generate(turn2, config), t0)
                finally:
                    worker.close()  # saves what its session holds: the next repetition must not find that
                    for entry in store.entries():
                        if entry.key != KEY:
                            store.discard(entry.key)
            return go

        variants = {"full prefill": full, "reopen (file)": reopen, "http reopen (--kv-store)": http(True)}
        if http_full:
            variants["http full prefill"] = http(False)
        ttft: dict[str, list[float]] = {name: [] for name in variants}
        texts: dict[str, set[str]] = {name: set() for name in variants}
        for rep in range(reps):
            for name in core.rotated(list(variants), rep):
                progress(f"rep {rep + 1}/{reps}: {name}")
                seconds, text = variants[name]()
                ttft[name].append(seconds)
                progress(f"  {name}: TTFT {seconds:.3f} s")
                texts[name].add(text)
        file_bytes = path.stat().st_size if path is not None and path.exists() else None
    medians = {name: core.median(values) for name, values in ttft.items()}
    base = medians["full prefill"]
    return {"context_tokens": prompt_tokens, "cached_tokens": cached_tokens, "reps": reps,
            "file_bytes": file_bytes, "save_s": save_s, "identity_s": identity_s,
            "ttft_s": {"median": medians, "all": ttft},
            "ttft_ratio_to_full_prefill": {name: core.ratio(m, base) for name, m in medians.items()},
            "http_ttft_ratio": core.ratio(medians["http reopen (--kv-store)"], medians.get("http full prefill")),
            "replies_identical": len(set().union(*texts.values())) == 1}
