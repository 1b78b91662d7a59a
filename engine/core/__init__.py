"""The engine core (issue 42): one owner of the loaded models behind every client.

``EngineCore`` (``engine.core.core``) holds the loaded models (``engine.core.models``: a chat model and what lives
beside it, under a budget, reported as ``ModelRecord``s) and runs the typed jobs (``engine.core.jobs``) one at a time
on the one engine thread; beside the model it keeps the chat sessions routed by conversation id (the window) or by
prompt prefix (the server) (``engine.core.sessions``), conversations' KV caches on disk (``engine.core.kv_persist``),
the speculation drafter (``engine.core.drafters``) and whole documents' KV prefixes (``engine.docs.kv_prefix``). An
API server's model work reaches that thread through ``engine.core.handoff``. Qt-free: the window's Qt adapter is
``app.runtime.worker``; the thread is the window's engine QThread there, and the core's own
(``engine.core.engine_thread``) for ``engine serve`` (``engine.serve.hosting``) (docs/DESIGN.md, "From a key press to a
kernel").
"""
