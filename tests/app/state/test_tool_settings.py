"""The MCP servers the user added (settings, for every conversation) and a conversation's own tools, tool choice
and JSON schema (saved with it, never a default for new ones, kept through the settings dialog)."""

from __future__ import annotations

import json
from dataclasses import replace

from PySide6.QtCore import QSettings

from app.state.settings import ChatSettings, Settings, chat_from_stored, with_conversation_fields

SERVER = "stdio:python server.py --flag"


def test_servers_round_trip_once_each_and_a_damaged_value_reads_as_none(tmp_path):
    settings = Settings.in_file(tmp_path / "s.ini")
    assert settings.mcp_servers() == []  # nothing configured: nothing will be started
    settings.set_mcp_servers([SERVER, "http://127.0.0.1:9000/mcp", SERVER])
    assert Settings.in_file(tmp_path / "s.ini").mcp_servers() == [SERVER, "http://127.0.0.1:9000/mcp"]
    QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat).setValue("tools/mcp_servers", "{not json")
    assert Settings.in_file(tmp_path / "s.ini").mcp_servers() == []


def test_a_conversations_tools_are_its_own(tmp_path):
    settings = Settings.in_file(tmp_path / "s.ini")
    chat = replace(ChatSettings(), tools=("add",), tool_choice="required", json_schema='{"type": "object"}')
    settings.set_chat(chat)  # the defaults new conversations start from never carry tools
    assert (settings.chat().tools, settings.chat().tool_choice, settings.chat().json_schema) == ((), "auto", "")
    stored = chat.stored()
    assert stored["tools"] == ["add"]  # JSON's shape: the history row reads back what it wrote
    back = chat_from_stored(chat.system_prompt, json.loads(json.dumps(stored)), ChatSettings())
    assert (back.tools, back.tool_choice, back.json_schema) == (("add",), "required", '{"type": "object"}')
    damaged = chat_from_stored("", {"tools": "add", "tool_choice": "always", "json_schema": 3}, ChatSettings())
    assert (damaged.tools, damaged.tool_choice, damaged.json_schema) == ((), "auto", "")
    dialog_values = replace(ChatSettings(), temperature=0.2)  # the settings dialog knows nothing of tools
    kept = with_conversation_fields(dialog_values, chat)
    assert (kept.temperature, kept.tools, kept.tool_choice) == (0.2, ("add",), "required")
