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

Recursion: llguidance follows ``$ref`` cycles, and a recursive schema with a way out (an optional property, an array
that may be empty, a branch of an ``anyOf``) is served as it is. It does not check that a way out exists: for
``{"$ref": "#"}``, two ``$defs`` that refer to each other, or an object that requires itself, it builds a grammar
whose every instance is infinite, and a reply then ends at once (``''``) or half-made (``'{"a":'``). So a JSON
schema is refused (``ConstraintError``, a 400) unless it has a finite instance (``_finite``: the least fixed point
of "this subschema has a finite instance", as a grammar's productive symbols are found).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from engine.errors import BadInputError

KINDS = ("json_schema", "json_object", "regex", "grammar")
# llguidance's JSON options: no whitespace a model could repeat without end, every key of a strict schema.
JSON_OPTIONS = {"whitespace_flexible": False, "coerce_one_of": True}
ANY_JSON_OBJECT = {"type": "object"}
# Subschemas the finiteness check looks at; a larger schema is left to llguidance (the check is quadratic at worst,
# and a schema this large is not a typo: it only ever costs its own request an empty reply).
_MAX_SUBSCHEMAS = 5000


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
            if not _finite(schema):
                raise ConstraintError("the JSON schema has no finite instance: its $ref cycle never ends (give each "
                                      "recursive reference a way out: an optional property, an array that may be "
                                      "empty, or an anyOf branch without it)")
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


# -- finiteness of a JSON schema ----------------------------------------------------------------------------------
def _subschemas(root: dict) -> list[dict] | None:
    """Every dict inside ``root`` (any of them may be a ``$ref`` target), iteratively: a deep schema cannot overflow
    the stack here. None past ``_MAX_SUBSCHEMAS``."""
    found: list[dict] = []
    stack: list[Any] = [root]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, dict):
            found.append(node)
            if len(found) > _MAX_SUBSCHEMAS:
                return None
            stack.extend(v for v in node.values() if isinstance(v, (dict, list)))
        elif isinstance(node, list):
            stack.extend(v for v in node if isinstance(v, (dict, list)))
    return found


def _resolve(root: dict, ref: Any) -> Any:
    """The subschema a local ``$ref`` (``#`` or a JSON pointer ``#/a/b``) names; ``True`` (unknown: left to
    llguidance) for any other reference."""
    if not isinstance(ref, str) or not ref.startswith("#") or (len(ref) > 1 and not ref.startswith("#/")):
        return True
    node: Any = root
    for part in ref[2:].split("/") if len(ref) > 1 else ():
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return True
    return node


def _finite(root: dict) -> bool:
    """Whether ``root`` has an instance of finite size, as far as ``$ref``, ``allOf``/``anyOf``/``oneOf``, required
    properties and ``minItems`` decide (anything else - types, formats, bounds - is llguidance's to judge)."""
    nodes = _subschemas(root)
    if nodes is None:
        return True
    finite: set[int] = set()

    def ok(sub: Any) -> bool:
        if isinstance(sub, dict):
            return id(sub) in finite
        return sub is not False  # True, or not a schema at all (llguidance refuses that itself)

    def holds(node: dict) -> bool:
        if "$ref" in node and not ok(_resolve(root, node["$ref"])):
            return False
        if isinstance(node.get("allOf"), list) and not all(ok(s) for s in node["allOf"]):
            return False
        for key in ("anyOf", "oneOf"):
            if isinstance(node.get(key), list) and not any(ok(s) for s in node[key]):
                return False
        types = node.get("type")
        if isinstance(types, str):
            types = [types]
        elif not isinstance(types, list):  # untyped: judged as the keywords it has (a schema generator's intent)
            types = (["object"] if "required" in node else []) + (["array"] if "minItems" in node else [])
            if not types:
                return True
        return any(_type_finite(node, t, ok) for t in types)

    changed = True
    while changed:  # least fixed point: at most one pass per subschema
        changed = False
        for node in nodes:
            if id(node) not in finite and holds(node):
                finite.add(id(node))
                changed = True
    return id(root) in finite


def _type_finite(node: dict, kind: Any, ok: Any) -> bool:
    if kind == "object":
        properties = node.get("properties") if isinstance(node.get("properties"), dict) else {}
        extra = node.get("additionalProperties", True)
        required = node.get("required") if isinstance(node.get("required"), list) else []
        return all(ok(properties[name] if name in properties else extra) for name in required if isinstance(name, str))
    if kind == "array":
        least = node.get("minItems", 0)
        least = least if isinstance(least, int) and not isinstance(least, bool) else 0
        prefix = node.get("prefixItems", node.get("items") if isinstance(node.get("items"), list) else [])
        prefix = prefix if isinstance(prefix, list) else []
        rest = node.get("items", True) if not isinstance(node.get("items"), list) else node.get("additionalItems", True)
        return all(ok(prefix[i]) if i < len(prefix) else ok(rest) for i in range(min(least, len(prefix) + 1)))
    return True
