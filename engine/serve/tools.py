"""Tools and structured replies for the chat endpoint: OpenAI's ``tools`` / ``tool_choice`` / ``response_format``
turned into a prompt, a constraint and, from the reply's text, ``tool_calls`` in OpenAI's shapes.

A call is written ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` in both modes; which one a model gets
is ``engine.tools.calls.native_tools``' decision, once per model, and the response says it (``X-Miaohui-Tools-Mode``).
*native* (a template that supports tools in this format, as Qwen2.5's does): the template gets the request's
``tools`` and describes them itself; an assistant's ``tool_calls`` stay structured (arguments as objects) and each
``tool`` result stays a ``tool`` turn, for the template to write. *prompted* (every other template, including those
with another call format: Llama 3.1's bare JSON, Mistral's ``[TOOL_CALLS]``): the tools are described in the system
prompt, and earlier turns go back through the template as text in the format above (an assistant's calls as its
reply, each ``tool`` result as a ``<tool_response>`` in a user turn), so any chat template can carry them.
``tool_choice``: ``required`` or a named function force the format with a grammar (``engine.constrain``), so the
arguments always validate against the function's parameters; ``auto`` lets the model choose, and a reply that
opens with a well-formed call becomes ``tool_calls``; ``none`` describes no tools. ``parallel_tool_calls`` false
allows one call, true up to ``MAX_PARALLEL_CALLS``.

The call format itself is ``engine.tools.calls``' (shared with the command line's tool loop). This module owns
validation (every bad tool, choice or schema is an ``ApiError(400)``), the rewriting of messages, the call
format and the response/stream shapes of calls (``CallStream``); the HTTP flow is ``engine.serve.app``'s.
"""

from __future__ import annotations

import json
import re
from typing import Any, Sequence

from engine.constrain import ConstraintError, ConstraintSpec, check_spec
from engine.serve.errors import ApiError
from engine.tools.calls import TOOL_CLOSE, TOOL_OPEN, TOOLS_MODE_HEADER, Tool, ToolPlan, loads_or, tool_response

__all__ = ["TOOL_OPEN", "TOOLS_MODE_HEADER", "CallStream", "ToolPlan", "finish_calls", "parse_tools",
           "response_constraint", "rewrite_messages"]

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # OpenAI's rule for a function name
ANY_OBJECT = {"type": "object"}


def _schema(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ApiError(400, f"{where} must be a JSON Schema object", param=where.split(".")[0])
    try:
        check_spec(ConstraintSpec.json_schema(value))
    except ConstraintError as exc:
        raise ApiError(400, f"{where}: {exc}", param=where.split(".")[0]) from None
    return value


def parse_tools(tools: list[Any] | None, tool_choice: Any, parallel: bool | None) -> ToolPlan | None:
    """The request's tools, validated; None when none may be called (no tools, or ``tool_choice: none``)."""
    if tool_choice is not None and not isinstance(tool_choice, (str, dict)):
        raise ApiError(400, "tool_choice must be auto, none, required or {\"type\": \"function\", ...}",
                       param="tool_choice")
    if isinstance(tool_choice, str) and tool_choice not in ("auto", "none", "required"):
        raise ApiError(400, f"tool_choice must be auto, none or required (got {tool_choice!r})", param="tool_choice")
    parsed: list[Tool] = []
    for i, entry in enumerate(tools or []):
        function = entry.get("function") if isinstance(entry, dict) else None
        if not isinstance(entry, dict) or entry.get("type") != "function" or not isinstance(function, dict):
            raise ApiError(400, f"tools.{i}: a tool must be {{\"type\": \"function\", \"function\": {{...}}}}",
                           param="tools")
        name = function.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise ApiError(400, f"tools.{i}.function.name must be 1 to 64 letters, digits, _ or -", param="tools")
        if any(t.name == name for t in parsed):
            raise ApiError(400, f"tools.{i}: the function name {name!r} is used twice", param="tools")
        description = function.get("description") or ""
        if not isinstance(description, str):
            raise ApiError(400, f"tools.{i}.function.description must be text", param="tools")
        parameters = _schema(function.get("parameters", ANY_OBJECT), f"tools.{i}.function.parameters")
        parsed.append(Tool(name, description, parameters))
    if tool_choice is None:  # OpenAI's default: auto when there are tools
        tool_choice = "auto"
    if tool_choice == "none" or (tool_choice == "auto" and not parsed):
        return None
    if not parsed:
        raise ApiError(400, "tool_choice needs tools to choose from", param="tool_choice")
    forced = None
    if isinstance(tool_choice, dict):
        function = tool_choice.get("function")
        forced = function.get("name") if isinstance(function, dict) else None
        if tool_choice.get("type") != "function" or not isinstance(forced, str):
            raise ApiError(400, 'tool_choice must name a function: {"type": "function", "function": {"name": ...}}',
                           param="tool_choice")
        if all(t.name != forced for t in parsed):
            raise ApiError(400, f"tool_choice names {forced!r}, which is not one of the tools", param="tool_choice")
    choice = "forced" if forced else tool_choice
    return ToolPlan(tuple(parsed), choice, forced, parallel is not False)


def response_constraint(response_format: dict[str, Any] | None) -> ConstraintSpec | None:
    """``response_format``'s constraint: None for text, any JSON object, or a JSON schema (always strict)."""
    kind = (response_format or {}).get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        return ConstraintSpec("json_object")
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            raise ApiError(400, "response_format.json_schema must be an object with a name and a schema",
                           param="response_format")
        return ConstraintSpec.json_schema(_schema(spec.get("schema", ANY_OBJECT), "response_format.json_schema.schema"))
    raise ApiError(400, f"response_format.type must be text, json_object or json_schema (got {kind!r})",
                   param="response_format")


def _text(content: Any) -> str:
    if isinstance(content, list):  # text parts, as schemas' _messages accepts them
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def rewrite_messages(messages: Sequence[Any], plan: ToolPlan | None, native: bool = False) -> list[Any]:
    """The conversation with tool turns written as text (``ChatMessage`` objects in, the same kind out); ``native``:
    as they are, for the template (calls checked, ``engine.serve.schemas`` keeps them structured)."""
    if not messages:
        return []
    if native:
        for i, message in enumerate(messages):
            for call in (message.tool_calls or []) if message.role == "assistant" else []:
                function = call.get("function") if isinstance(call, dict) else None
                if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                    raise ApiError(400, f"messages.{i}.tool_calls: each call needs a function name", param="messages")
        return list(messages)
    out: list[Any] = []
    names: dict[str, str] = {}
    for i, message in enumerate(messages):
        role, calls = message.role, message.tool_calls
        if role == "assistant" and calls:
            parts = [_text(message.content)] if _text(message.content) else []
            for call in calls:
                function = call.get("function") if isinstance(call, dict) else None
                if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                    raise ApiError(400, f"messages.{i}.tool_calls: each call needs a function name", param="messages")
                names[str(call.get("id"))] = function["name"]
                arguments = function.get("arguments", "{}")
                arguments = loads_or(arguments, arguments) if isinstance(arguments, str) else arguments
                parts.append(TOOL_OPEN + json.dumps({"name": function["name"], "arguments": arguments},
                                                    ensure_ascii=False) + TOOL_CLOSE)
            out.append(message.model_copy(update={"content": "\n".join(parts), "tool_calls": None}))
        elif role == "tool":
            name = names.get(str(message.tool_call_id), message.name or "")
            response = tool_response(name, _text(message.content))
            if out and out[-1].role == "user" and getattr(out[-1], "tool_call_id", None) == "<results>":
                out[-1] = out[-1].model_copy(update={"content": out[-1].content + "\n" + response})
            else:
                out.append(message.model_copy(update={"role": "user", "content": response, "tool_call_id": "<results>"}))
        else:
            out.append(message)
    if plan is not None:
        prompt = plan.system_text()
        if out and out[0].role in ("system", "developer"):
            out[0] = out[0].model_copy(update={"content": _text(out[0].content) + "\n\n" + prompt})
        else:
            out.insert(0, type(messages[0])(role="system", content=prompt))
    return out


def finish_calls(body: dict[str, Any], plan: ToolPlan, text: str) -> None:
    """Turn a whole chat completion ``body`` whose reply is tool calls into OpenAI's tool-call message, in place."""
    calls = plan.parse(text)
    if calls:
        choice = body["choices"][0]
        choice["message"] = {"role": "assistant", "content": None, "tool_calls": calls, "refusal": None}
        choice["finish_reason"] = "tool_calls"


class CallStream:
    """A streamed reply that may be tool calls: text goes out as it comes unless it opens a call (``auto``; a
    forced reply always is one), which is held back and sent as ``tool_calls`` deltas once the reply is whole."""

    def __init__(self, plan: ToolPlan) -> None:
        self.plan = plan
        self._state = "calls" if plan.choice != "auto" else "undecided"  # -> "content" | "calls"
        self._held = ""

    def push(self, text: str) -> str:
        """The part of ``text`` the client may be sent now as content."""
        if self._state == "content":
            return text
        self._held += text
        if self._state == "undecided":
            start = self._held.lstrip()
            if start.startswith(TOOL_OPEN):
                self._state = "calls"
            elif not TOOL_OPEN.startswith(start):
                self._state, held, self._held = "content", self._held, ""
                return held
        return ""

    def finish(self, shaper: Any, text: str, reason: str, with_usage: bool) -> tuple[list[dict[str, Any]], str]:
        """The chunks still to send before the finishing one (calls, or held text), and the finish reason."""
        if self._state == "content":
            return [], reason
        calls = self.plan.parse(text)
        if not calls:  # not calls after all (cut off, or malformed): the held text is content
            return ([shaper.chunk(self._held, with_usage=with_usage)] if self._held else []), reason
        chunks = []
        for index, call in enumerate(calls):
            head = {"index": index, "id": call["id"], "type": "function",
                    "function": {"name": call["function"]["name"], "arguments": ""}}
            tail = {"index": index, "function": {"arguments": call["function"]["arguments"]}}
            for delta in (head, tail):
                chunk = shaper.chunk(None, with_usage=with_usage)
                chunk["choices"][0]["delta"] = {"tool_calls": [delta]}
                chunks.append(chunk)
        return chunks, "tool_calls"
