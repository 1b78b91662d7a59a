"""The engine core (issue 42): what the window and the server share beside a loaded model.

Owns the chat sessions routed by conversation id (the window) or by prompt prefix (the server)
(``engine.core.sessions``), conversations' KV caches kept on disk (``engine.core.kv_persist``) and the speculation
drafter kept between replies (``engine.core.drafters``). Qt-free: the window's thread adapter
(``app.runtime.worker``) and the server's queue (``engine.serve.worker``) use these parts; not yet one thread and
one job queue behind both (issue 42's next steps, docs/DESIGN.md).
"""
