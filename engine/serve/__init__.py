"""``python -m engine serve``: the loaded model behind an OpenAI-compatible HTTP API.

Why FastAPI on uvicorn: both are well kept and widely deployed (vLLM's own OpenAI server is built on
them); the ASGI model streams server-sent events from an async generator without a thread per client;
and the OpenAI request shapes (messages, stop as a string or a list, stream options) are a few
pydantic classes, validated with one-line errors the server turns into OpenAI-shaped JSON.

One model, up to ``--parallel`` requests at once: requests wait in one first-in first-out queue
(``worker.Worker``); their forward passes run on one thread, decodes batched (``batching``). The asyncio side parses, queues and writes; it never
touches torch, the tokenizer or a KV cache. Modules:

- ``schemas``: request bodies (pydantic) and their translation into engine inputs;
- ``errors``: ``ApiError`` and the OpenAI error body;
- ``stops``: stop strings over a stream of text deltas;
- ``sessions``: the small LRU of ``ChatSession`` objects, so a conversation's next turn reuses its KV cache;
- ``worker``: the queue, the budget rule and what it emits per request (``jobs``: the job and event types);
- ``batching``: continuous batching, the one thread running every forward;
- ``prefix``: prefixes shared between conversations (the block pool, ``engine.executor.kv_blocks``) and kept
  across restarts (``--kv-store``);
- ``metrics``: Prometheus metrics under vLLM's names with a ``miaohui:`` prefix;
- ``responses``: OpenAI response and chunk bodies;
- ``app``: the ASGI application factory ``create_app(worker, ...)``;
- ``guard``: the ASGI app in front of every route: no other site's ``Host`` (DNS rebinding), JSON bodies only;
- ``connections``: uvicorn's h11 protocol with a header deadline and a cap on open connections;
- ``server``: binding a socket and running uvicorn (in the foreground, or on a thread for tests).

The command line itself is ``engine/cli/serve.py``; docs/SERVE.md is the user's guide.
"""
