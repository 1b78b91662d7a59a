"""One chat turn, messages in, events out: the prompt (``context``; ``chat_template``, which renders in
``template_sandbox`` within ``template_budget``), the choice of each token (``sampling``), the forward passes
(``runners`` picks ``runner`` or ``fastpath``, which runs on ``llama_fused``) and the conversation that ties
them (``session``).

Owns no model loading (``engine/models/``) and no measuring of benchmarks (``engine/bench/``).
"""
