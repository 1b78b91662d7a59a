"""Constrained decoding on the tiny random-weight model: whatever its weights prefer, the reply follows the schema,
the regex or the grammar, and ends (its end token) only where that is complete."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from engine.constrain import ConstraintError, ConstraintSpec, check_spec
from engine.constrain.matcher import TokenConstraint
from engine.events import Finished, Message, Token
from engine.generate.session import ChatSession
from engine.inputs import LoadSpec, SamplingConfig
from engine.models.loader import load_model

SCHEMAS = [
    {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 12}}, "required": ["answer"],
     "additionalProperties": False},
    {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 999},
                                      "ok": {"type": "boolean"}}, "required": ["n", "ok"], "additionalProperties": False},
    {"type": "object", "properties": {"colour": {"enum": ["red", "green", "blue"]},
                                      "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}},
     "required": ["colour", "tags"], "additionalProperties": False},
    {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 9}, "minItems": 1, "maxItems": 4},
]


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu"))


def _reply(tiny, spec: ConstraintSpec, config: SamplingConfig, text: str = "Say something") -> tuple[Finished, TokenConstraint]:
    constraint = TokenConstraint(spec, tiny.tokenizer, tiny.eos_token_ids)
    events = list(ChatSession(tiny).generate([Message("user", text)], config, constraint=constraint))
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.error is None, finished
    assert constraint.stats.steps == sum(isinstance(e, Token) for e in events)
    return finished, constraint


@pytest.mark.parametrize("schema", SCHEMAS, ids=["string", "integer-bool", "enum-array", "array"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sampled_replies_parse_and_validate(tiny, schema, seed):
    config = SamplingConfig(temperature=1.0, top_p=1.0, top_k=0, repetition_penalty=1.0, max_new_tokens=200,
                            seed=seed)
    finished, _ = _reply(tiny, ConstraintSpec.json_schema(schema), config, f"prompt {seed}")
    assert finished.reason == "eos"  # the end token came, and only once the JSON was whole
    jsonschema.validate(json.loads(finished.text), schema)


def test_greedy_with_repetition_penalty_still_validates(tiny):
    schema = SCHEMAS[1]
    finished, constraint = _reply(tiny, ConstraintSpec.json_schema(schema),
                                  SamplingConfig(temperature=0, repetition_penalty=1.3, max_new_tokens=200))
    jsonschema.validate(json.loads(finished.text), schema)
    assert constraint.finished


def test_regex_reply_matches_whole(tiny):
    finished, _ = _reply(tiny, ConstraintSpec("regex", r"(yes|no), [0-9]{3}"),
                         SamplingConfig(temperature=1.0, top_k=0, top_p=1.0, seed=3, max_new_tokens=50))
    assert re.fullmatch(r"(yes|no), [0-9]{3}", finished.text)


def test_gbnf_grammar_reply_follows_it(tiny):
    grammar = 'root ::= "(" item ("," item)* ")"\nitem ::= [a-c] | "x"'
    finished, _ = _reply(tiny, ConstraintSpec("grammar", grammar),
                         SamplingConfig(temperature=1.0, top_k=0, top_p=1.0, seed=4, max_new_tokens=100))
    assert re.fullmatch(r"\(([a-c]|x)(,([a-c]|x))*\)", finished.text)


def test_json_object_is_any_json_object(tiny):
    # A random model in free JSON may nest without end; the budget is what bounds it, so only check the start
    # when it was cut, the whole object when it ended.
    finished, _ = _reply(tiny, ConstraintSpec("json_object"),
                         SamplingConfig(temperature=0, repetition_penalty=1.0, max_new_tokens=120))
    assert finished.text.startswith("{")
    if finished.reason == "eos":
        assert isinstance(json.loads(finished.text), dict)


@pytest.mark.parametrize("spec", [ConstraintSpec("json_schema", "{not json"), ConstraintSpec("json_schema", "[1]"),
                                  ConstraintSpec.json_schema({"type": "nonsense"}), ConstraintSpec("regex", "(["),
                                  ConstraintSpec("grammar", "root ::= ( ")],
                         ids=["not-json", "not-object", "bad-type", "bad-regex", "bad-grammar"])
def test_unusable_specs_are_one_line_errors(spec):
    with pytest.raises(ConstraintError) as caught:
        check_spec(spec)
    assert str(caught.value) and "\n" not in str(caught.value)


INFINITE = {
    "self": {"$ref": "#"},
    "mutual-defs": {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
    "required-self": {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]},
    "mutual-objects": {"$defs": {"a": {"type": "object", "properties": {"b": {"$ref": "#/$defs/b"}}, "required": ["b"]},
                                 "b": {"type": "object", "properties": {"a": {"$ref": "#/$defs/a"}}, "required": ["a"]}},
                       "$ref": "#/$defs/a"},
    "non-empty-array-of-self": {"type": "array", "items": {"$ref": "#"}, "minItems": 1},
    "allof-self": {"allOf": [{"type": "object"}, {"$ref": "#"}]},
}


@pytest.mark.parametrize("schema", list(INFINITE.values()), ids=list(INFINITE))
def test_a_schema_whose_only_instances_are_infinite_is_refused(schema):
    with pytest.raises(ConstraintError, match="no finite") as caught:
        check_spec(ConstraintSpec.json_schema(schema))
    assert "\n" not in str(caught.value)


TREE = {"type": "object", "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#"}}},
        "required": ["v", "kids"]}


def test_a_recursive_schema_with_a_way_out_is_followed(tiny):
    """Recursion llguidance handles, with finite instances (an empty ``kids``): served, and the reply validates."""
    check_spec(ConstraintSpec.json_schema(TREE))
    check_spec(ConstraintSpec.json_schema({"anyOf": [{"type": "null"}, {"type": "array", "items": {"$ref": "#"}}]}))
    finished, _ = _reply(tiny, ConstraintSpec.json_schema(TREE),
                         SamplingConfig(temperature=0, repetition_penalty=1.0, max_new_tokens=200))
    if finished.reason == "eos":
        jsonschema.validate(json.loads(finished.text), TREE)
    else:
        assert finished.text.startswith('{"')


def test_unknown_kind_is_refused():
    with pytest.raises(ConstraintError, match="unknown constraint kind"):
        ConstraintSpec("xml")
