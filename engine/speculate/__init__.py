"""Speculative decoding (投机解码): a cheap drafter proposes several next tokens, the model checks them all in one
forward pass, and every token it agrees with costs no forward of its own.

- ``engine.speculate.drafters``: the ``Drafter`` interface and its three drafters (prompt lookup, a smaller draft
  model with the same tokenizer, the loaded model's own int4 copy) and ``build_drafter``, which makes the one a
  ``SpeculationConfig`` names.
- ``engine.speculate.accept``: how drafted tokens are accepted or rejected against the model's distribution
  (greedy: equal to its argmax; sampled: the speculative sampling rule, so the distribution is unchanged), with the
  sampling settings applied to model and drafter alike.
- ``engine.speculate.length``: the adaptive draft length (most expected tokens per second from the measured draft
  and verify times and the acceptance; prompt lookup's runs double while they keep matching) and the decision to
  draft at all: only where that beats a plain step, timed on the runner actually decoding (``CostBook``).
- ``engine.speculate.loop``: ``Speculator``, one decoding step of draft, verify, roll back; the off-switch and the
  counts the metrics report.
- ``engine.executor.verify``: the fast runner's check of drafted tokens, bit for bit what one-token decodes
  give (one native call where the int8/int4 step is native).

``engine.generate.session.ChatSession`` drives it when given a ``SpeculationConfig`` (``engine.inputs``).
"""
