"""The fast model's one home (issue 42): everything that runs a loaded decoder's forward passes.

- ``runners`` (the ``Runner`` protocol and ``make_runner``, the one place a runner is chosen), ``runner``
  (transformers' forward over a ``DynamicCache``, any model), ``recompute`` (the KV cache off);
- ``fastpath`` (``FastRunner``), on ``llama_fused`` (the fused weights and the layer maths) for the ``families``
  it qualifies (``refusal``: why not, without torch), with ``rope_tables``;
- its steps: the eager one (``fastpath``), the static one (``static_step``, what CUDA graphs capture), the batched one
  (``batched``, over ``row_products``), the native int8/int4 one (``native_step``, the C++ in engine/quant/) and the
  speculative ``verify`` (k tokens, bit for bit what k decodes give);
- KV storage: ``kv_cache`` (the buffers), ``kv_blocks`` (shared prefix blocks), ``kv_rows`` (rows out and back in).

Owns no turn (``engine/generate/``: prompt, sampling, the session), no drafting policy (``engine/speculate/``), no
loading (``engine/models/``) and no scheduling (``engine/serve/``, ``engine/core/``). Importing this package imports
no torch; its modules do.
"""
