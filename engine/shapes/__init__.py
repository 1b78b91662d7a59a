"""The ground floor for model shapes and file formats: what a model's numbers are, before anything is loaded.

- ``shape``: ``Shape``, the one record of a decoder's dimensions, and the arithmetic on it: parameter count (the
  seeds' estimate and the exact Llama-layout count), KV-cache bytes per token, weights bytes per precision.
- ``gguf_header``: the one GGUF header reader (metadata and tensor table, from a file's first bytes).
- ``config_check``: a ``config.json``'s numbers within sane bounds, and agreeing with the weights' shapes.

Plain Python (no torch, no Qt), importing nothing of the engine but ``engine.errors`` and ``engine.inputs``: the
library (``engine/library/``), the loader (``engine/models/``) and the quantizers (``engine/quant/``) stand on it,
never the other way round (``tests/test_boundaries.py`` holds that).
"""
