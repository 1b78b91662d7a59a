"""The tool-call format every model is prompted with, and reading calls back from a reply: ``Tool``, ``ToolPlan``.

A call is written ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (the Hermes/Qwen convention many
small instruct models have seen), the tools are described in the system prompt (``ToolPlan.system_text``), a
result comes back inside ``<tool_response>`` tags. ``ToolPlan.constraint()`` is the grammar that forces calls
(``required`` / one named function): each call's arguments then follow that function's parameter schema.
The server (``engine.serve.tools``) and the command line's tool loop (``engine.tools.loop``) share this.

Two modes, decided once per tokenizer by ``native_tools``: a chat template that supports tools in this same format
(Qwen2.5's, Hermes') is *native*: it gets ``tools=`` (its own description of them replaces ``system_text``), the
assistant's calls structured and results as ``tool`` turns; any other template is *prompted* (the text above,
through the template as ordinary turns). The probe renders one call and one result through the template, in the
bounded sandbox (``engine.generate.chat_template``), and asks: are the tools described, is the call written as
``<tool_call>`` JSON, is the result carried inside ``<tool_response>``? Templates with another call format
(Llama 3.1's bare JSON, Mistral's ``[TOOL_CALLS]``) fail it and stay prompted: the grammar forcing and the parsing
here know only this format.
"""

from __future__ import annotations

import json
import re
import uuid
import weakref
from dataclasses import dataclass
from typing import Any

from engine.constrain import ConstraintSpec
from engine.errors import CancelledError, TemplateError
from engine.generate.chat_template import render_text

TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"
MAX_PARALLEL_CALLS = 8  # a forced reply may hold this many calls: bounded, so a model cannot call without end
TOOLS_MODE_HEADER = "X-Miaohui-Tools-Mode"
_CALL = re.compile(re.escape(TOOL_OPEN) + r"\s*(.*?)\s*" + re.escape(TOOL_CLOSE), re.DOTALL)
_COMPACT = {"whitespace_flexible": False}


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class ToolPlan:
    """The request's tools and how they may be called."""

    tools: tuple[Tool, ...]
    choice: str  # auto | required | forced (one named function)
    forced: str | None = None  # the named function of tool_choice
    parallel: bool = True
    native: bool = False  # the template describes the tools and writes the turns (``native_tools``)

    @property
    def headers(self) -> dict[str, str]:
        return {TOOLS_MODE_HEADER: "native" if self.native else "prompted"}

    def template_tools(self) -> tuple[dict[str, Any], ...]:
        """The tools as a template's ``tools`` takes them (OpenAI's shape)."""
        return tuple({"type": "function", "function": {"name": t.name, "description": t.description,
                                                       "parameters": t.parameters}} for t in self.tools)

    def constraint(self) -> ConstraintSpec | None:
        """The grammar that forces calls (required / named), or None for ``auto``."""
        if self.choice == "auto":
            return None
        tools = [t for t in self.tools if self.forced in (None, t.name)]
        variants = [{"type": "object", "properties": {"name": {"const": t.name}, "arguments": strict(t.parameters)},
                     "required": ["name", "arguments"], "additionalProperties": False} for t in tools]
        schema = {"anyOf": variants, "x-guidance": _COMPACT}
        more = f' ("\\n" call){{0,{MAX_PARALLEL_CALLS - 1}}}' if self.parallel else ""
        lark = f'start: call{more}\ncall: "{TOOL_OPEN}" %json {json.dumps(schema)} "{TOOL_CLOSE}"\n'
        return ConstraintSpec("grammar", lark)

    def system_text(self) -> str:
        described = "\n".join(json.dumps(t, ensure_ascii=False) for t in self.template_tools())
        return ("# Tools\n\nYou can call functions to help answer. They are described in JSON here:\n<tools>\n"
                f"{described}\n</tools>\n\nTo call one, reply with nothing but a JSON object holding the function's "
                f"name and arguments, inside {TOOL_OPEN}{TOOL_CLOSE} tags, one per call:\n"
                f'{TOOL_OPEN}{{"name": "<function name>", "arguments": {{<arguments>}}}}{TOOL_CLOSE}\n'
                "A function's result comes back to you inside <tool_response></tool_response> tags.")

    def parse(self, text: str) -> list[dict[str, Any]] | None:
        """The ``tool_calls`` the reply ``text`` makes, or None when it is not (only) well-formed calls."""
        body = text.strip()
        if not body.startswith(TOOL_OPEN):
            return None
        end = body.rfind(TOOL_CLOSE)
        tail = body[end + len(TOOL_CLOSE):].strip() if end >= 0 else ""
        if end >= 0 and (tail.startswith(TOOL_OPEN) or TOOL_OPEN.startswith(tail)):
            body = body[: end + len(TOOL_CLOSE)]  # a reply cut at its budget inside a further call: keep the whole ones
        found = _CALL.findall(body)
        if not found or _CALL.sub("", body).strip():
            return None
        names = {t.name for t in self.tools}
        calls = []
        for raw in found[: MAX_PARALLEL_CALLS if self.parallel else 1]:
            try:
                call = json.loads(raw)
            except json.JSONDecodeError:
                return None
            if not isinstance(call, dict) or call.get("name") not in names:
                return None
            arguments = call.get("arguments", {})
            if isinstance(arguments, str):  # some models write the arguments as a JSON string, as the API sends them
                arguments = loads_or(arguments, arguments)
            function = {"name": call["name"], "arguments": json.dumps(arguments, ensure_ascii=False)}
            if any(made["function"] == function for made in calls):
                continue  # a small model forced to call may repeat the same call until its budget: once is enough
            calls.append({"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": function})
        return calls


def strict(schema: Any) -> Any:
    """``schema`` with ``additionalProperties: false`` wherever an object lists its properties and says nothing of
    others, as OpenAI's strict mode reads a schema: otherwise a forced call may add keys without end."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: (strict(value) if key in ("properties", "items", "anyOf", "oneOf", "allOf", "$defs", "definitions",
                                          "prefixItems") else value) for key, value in schema.items()}
    if isinstance(out.get("properties"), dict):
        out["properties"] = {name: strict(value) for name, value in schema["properties"].items()}
        out.setdefault("additionalProperties", False)
    if isinstance(schema.get("$defs"), dict):
        out["$defs"] = {name: strict(value) for name, value in schema["$defs"].items()}
    return out


def loads_or(text: str, default: Any) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return default


def tool_response(name: str, text: str) -> str:
    """A tool's result as the model reads it back (in a user turn)."""
    return f"<tool_response>\n{json.dumps({'name': name}, ensure_ascii=False)}\n{text}\n</tool_response>"


_PROBE_NAME, _PROBE_DESCRIPTION, _PROBE_RESULT = "miaohui_probe", "miaohui probe description", "miaohui-probe-result"
_PROBE_ARGUMENTS = {"probe": "miaohui-probe-argument"}
_PROBE_TOOLS = [{"type": "function", "function": {"name": _PROBE_NAME, "description": _PROBE_DESCRIPTION,
                                                  "parameters": {"type": "object", "properties": {
                                                      "probe": {"type": "string"}}}}}]
_PROBE = [{"role": "user", "content": "probe"},
          {"role": "assistant", "content": "", "tool_calls": [{"id": "call_probe", "type": "function", "function": {
              "name": _PROBE_NAME, "arguments": _PROBE_ARGUMENTS}}]},
          {"role": "tool", "tool_call_id": "call_probe", "name": _PROBE_NAME, "content": _PROBE_RESULT}]
_RESPONSE = re.compile(r"<tool_response>\s*(?:.*?)" + re.escape(_PROBE_RESULT) + r"\s*</tool_response>", re.DOTALL)
_NATIVE: "weakref.WeakKeyDictionary[Any, bool]" = weakref.WeakKeyDictionary()


def native_tools(tokenizer: Any) -> bool:
    """Whether ``tokenizer``'s chat template supports tools in the ``<tool_call>`` format (remembered per tokenizer).

    A template that fails, or is cut off by its bounds, on the probe is prompted: the probe is not the user's."""
    try:
        return _NATIVE[tokenizer]
    except (KeyError, TypeError):
        pass
    try:
        text = render_text(tokenizer, _PROBE, add_generation_prompt=True, tools=_PROBE_TOOLS)
    except (TemplateError, CancelledError):
        text = ""
    calls = [loads_or(body, None) for body in _CALL.findall(text)]
    native = (_PROBE_DESCRIPTION in text and {"name": _PROBE_NAME, "arguments": _PROBE_ARGUMENTS} in calls
              and bool(_RESPONSE.search(text)))
    try:
        _NATIVE[tokenizer] = native
    except TypeError:  # not weakly referable: decided again next time
        pass
    return native
