"""What a constrained reply must follow (``ConstraintSpec``) and its translation to an llguidance grammar.

Kinds: ``json_schema`` (a JSON Schema, as text), ``json_object`` (any JSON object), ``regex`` and ``grammar``
(Lark, GBNF or EBNF as llama.cpp writes them; llguidance converts GBNF). JSON comes out compact, with no free
whitespace: a model allowed to pad between tokens can pad forever, and compact JSON is what OpenAI's strict
mode sends too.

Why llguidance rather than xgrammar (both on PyPI, both used by the large servers), measured on this project's
2-core AMD EPYC (loaded, 2026-12-02; the bench's schema, SmolLM2's 49k-token vocabulary, one mask per token of a
30-token reply, no model): xgrammar 0.2.9 builds a mask in 0.016 ms, llguidance 1.9.1 in 0.077 ms. Both are
under 0.3% of a decode step here (~30 ms idle) and run overlapped with the forward, so the difference cannot show
in tok/s; what decides is the install: ``pip install llguidance`` adds one wheel and nothing else, while
``pip install xgrammar`` pulls triton 3.9 (a GPU compiler, hundreds of MB) and apache-tvm-ffi into a CPU
install. llguidance also reads GBNF and Lark (with inline ``%json`` schemas, which the forced tool-call format
uses) without a converter of ours. Imports nothing heavy: the server checks specs before queuing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from engine.errors import BadInputError

KINDS = ("json_schema", "json_object", "regex", "grammar")
# llguidance's JSON options: no whitespace a model could repeat without end, every key of a strict schema.
JSON_OPTIONS = {"whitespace_flexible": False, "coerce_one_of": True}
ANY_JSON_OBJECT = {"type": "object"}


class ConstraintError(BadInputError):
    """A schema, regex or grammar that cannot constrain a reply (malformed, or one llguidance refuses)."""


@dataclass(frozen=True)
class ConstraintSpec:
    """What the reply must follow: ``kind`` one of ``KINDS``, ``source`` its text (ignored for json_object)."""

    kind: str
    source: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConstraintError(f"unknown constraint kind {self.kind!r}: choose one of {', '.join(KINDS)}")

    @classmethod
    def json_schema(cls, schema: dict) -> "ConstraintSpec":
        return cls("json_schema", json.dumps(schema))


def grammar_text(spec: ConstraintSpec) -> str:
    """The llguidance grammar for ``spec`` (not yet validated: ``check_spec`` does that)."""
    from llguidance import LLMatcher, grammar_from

    try:
        if spec.kind == "json_object":
            return LLMatcher.grammar_from_json_schema(ANY_JSON_OBJECT, defaults=JSON_OPTIONS)
        if spec.kind == "json_schema":
            schema = json.loads(spec.source)
            if not isinstance(schema, dict):
                raise ConstraintError("a JSON schema must be a JSON object")
            return LLMatcher.grammar_from_json_schema(schema, defaults=JSON_OPTIONS)
        if spec.kind == "regex":
            return LLMatcher.grammar_from_regex(spec.source)
        return grammar_from("grammar", spec.source)
    except json.JSONDecodeError as exc:
        raise ConstraintError(f"the JSON schema is not valid JSON: {exc}") from None
    except ValueError as exc:
        raise ConstraintError(f"the {spec.kind.replace('_', ' ')} cannot be used: {exc}") from None


def check_spec(spec: ConstraintSpec) -> str:
    """``spec``'s grammar, validated without a tokenizer; ``ConstraintError`` (one line) when it is unusable."""
    from llguidance import LLMatcher

    grammar = grammar_text(spec)
    is_error, messages = LLMatcher.validate_grammar_with_warnings(grammar)
    if is_error:
        raise ConstraintError(f"the {spec.kind.replace('_', ' ')} cannot be used: {messages[0] if messages else '?'}")
    return grammar
