"""One chat turn, messages in, events out: the prompt (``context``; ``chat_template``, which renders in
``template_sandbox`` within ``template_budget``), the choice of each token (``sampling``), a reasoning model's thought
(``reasoning``), the conversation that ties them (``session``) and its KV cache as a file (``kv_snapshot``,
``kv_store``).

Owns no forward pass (``engine/executor/``: the runners and their steps), no model loading (``engine/models/``) and no
measuring of benchmarks (``engine/bench/``).
"""
