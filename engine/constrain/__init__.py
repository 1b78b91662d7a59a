"""Constrained decoding: a logits mask per step so a reply follows a JSON schema, any JSON, a regex or a grammar.

``ConstraintSpec`` (``engine.constrain.spec``) says what the reply must follow and is checked without a model
(``check_spec``: a bad schema or grammar is one ``ConstraintError`` line, the server's 400). ``TokenConstraint``
(``engine.constrain.matcher``) is one request's state over one tokenizer: the sampler asks it to mask the logits
of each step and tells it the token chosen. This package owns grammars and masks; choosing a token is
``engine.generate.sampling``'s, what the API asks for is ``engine.serve``'s.
"""

from engine.constrain.spec import KINDS, ConstraintError, ConstraintSpec, check_spec

__all__ = ["KINDS", "ConstraintError", "ConstraintSpec", "check_spec"]
