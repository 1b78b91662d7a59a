"""One chat turn, messages in, events out: the prompt (``context``, ``chat_template``), the choice of each token
(``sampling``), the forward passes (``runner``, ``fastpath``) and the conversation that ties them (``session``).

Owns no model loading (``engine/models/``) and no measuring of benchmarks (``engine/bench/``).
"""
