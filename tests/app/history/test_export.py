"""Exports read back: Markdown text, JSON parsed with its perf records, CSV through the csv module."""

from __future__ import annotations

import csv
import io
import json

import pytest

from app.history.export import (MAX_FILE_NAME_BYTES, PERF_CSV_COLUMNS, export_file_name, iso, perf_to_csv, to_json,
                        to_markdown)
from app.history.perf import PerfRecord
from app.history.store import HistoryStore

PERF = PerfRecord(model="SmolLM2-135M-Instruct", ttft_s=0.086, prefill_tok_s=1500.0, decode_tok_s=41.8,
                  prompt_tokens=30, generated_tokens=128, kv_cache_bytes=3_040_000, weights_bytes=269_000_000,
                  peak_memory_bytes=None, device="cpu", precision="bf16")


@pytest.fixture
def store(tmp_path):
    with HistoryStore(tmp_path / "history.sqlite3", clock=lambda: 1_796_000_000.0) as s:
        cid = s.create_conversation(system_prompt="Answer in one line.\nBe kind.", settings={"temperature": 0.2})
        s.add_message(cid, "user", "什么是 KV cache?")
        s.add_message(cid, "assistant", "It stores keys and values.\n\n```python\nx = 1\n```", "eos", PERF)
        s.add_message(cid, "user", "More?")
        s.add_message(cid, "assistant", "Partial", "cancelled",
                      PerfRecord(model="SmolLM2-135M-Instruct", decode_tok_s=40.0, generated_tokens=3))
        other = s.create_conversation("no perf here")
        s.add_message(other, "user", "hi")
        yield s


def test_markdown_has_title_turns_verbatim_and_footers(store):
    cid = store.list_conversations()[-1].id
    md = to_markdown(store, cid)
    assert md.startswith("# 什么是 KV cache?\n")
    assert "> **System prompt:** Answer in one line.\n> Be kind." in md
    assert "## User\n\n什么是 KV cache?\n" in md
    assert "## Assistant\n\nIt stores keys and values.\n\n```python\nx = 1\n```\n" in md
    assert "*41.8 tok/s · TTFT 86 ms · 128 tokens · KV 2.9 MiB*" in md
    assert "*stopped · 40.0 tok/s · 3 tokens*" in md
    assert md.index("## User") < md.index("## Assistant") < md.index("More?")


def test_json_parses_back_with_perf_records(store):
    cid = store.list_conversations()[-1].id
    doc = json.loads(to_json(store, cid))
    assert doc["format"] == "miaohui-conversation" and doc["version"] == 1
    assert doc["conversation"]["settings"] == {"temperature": 0.2}
    assert doc["conversation"]["created"] == iso(1_796_000_000.0) == "2026-11-30T00:53:20Z"
    roles = [m["role"] for m in doc["messages"]]
    assert roles == ["user", "assistant", "user", "assistant"]
    first_reply = doc["messages"][1]
    assert first_reply["finish_reason"] == "eos"
    assert PerfRecord.from_dict(first_reply["perf"]) == PERF
    assert doc["messages"][0]["perf"] is None and doc["messages"][0]["text"] == "什么是 KV cache?"


def test_perf_csv_has_header_and_one_row_per_reply(store):
    rows = list(csv.reader(io.StringIO(perf_to_csv(store))))
    assert rows[0] == PERF_CSV_COLUMNS
    assert len(rows) == 3
    record = dict(zip(rows[0], rows[1]))
    assert record["conversation_title"] == "什么是 KV cache?" and record["finish_reason"] == "eos"
    assert float(record["decode_tok_s"]) == 41.8 and int(record["kv_cache_bytes"]) == 3_040_000
    assert record["peak_memory_bytes"] == "" and record["device"] == "cpu"
    assert record["image_tokens"] == "" and record["vision_encoder_s"] == ""  # a text reply: no pictures
    assert dict(zip(rows[0], rows[2]))["finish_reason"] == "cancelled"


def test_perf_csv_of_an_empty_history_is_just_the_header(tmp_path):
    with HistoryStore(tmp_path / "empty.sqlite3") as s:
        assert list(csv.reader(io.StringIO(perf_to_csv(s)))) == [PERF_CSV_COLUMNS]


FORMULAS = ["=HYPERLINK(\"http://evil.example\",\"click\")", "+cmd|' /C calc'!A0", "-2+3", "@SUM(A1:A9)",
            "\tTAB", "\rCR"]


@pytest.mark.parametrize("title", FORMULAS)
def test_perf_csv_escapes_formula_text_but_keeps_numbers_numeric(tmp_path, title):
    with HistoryStore(tmp_path / "h.sqlite3") as s:
        cid = s.create_conversation(title)
        s.add_message(cid, "user", "hi")
        s.add_message(cid, "assistant", "x", "eos", PerfRecord(model="=1+1", decode_tok_s=-1.5, generated_tokens=3))
        rows = list(csv.reader(io.StringIO(perf_to_csv(s), newline="")))
    record = dict(zip(rows[0], rows[1]))
    assert record["conversation_title"] == "'" + title  # OWASP: a leading quote makes it text
    assert record["model"] == "'=1+1"
    assert record["decode_tok_s"] == "-1.5" and record["generated_tokens"] == "3"  # numbers stay numbers


@pytest.mark.parametrize("title,name", [
    ("Hello: what/why?", "Hello_ what_why_.md"),
    ("CON", "_CON.md"), ("con.tar", "_con.tar.md"), ("NUL.", "_NUL.md"), ("com1", "_com1.md"),
    ("LPT9 .x", "_LPT9 .x.md"), ("AUX", "_AUX.md"), ("PRN", "_PRN.md"),
    ("CONSOLE", "CONSOLE.md"),  # only the exact device names are reserved
    ('a<b>c:d"e/f\\g|h?i*j', "a_b_c_d_e_f_g_h_i_j.md"),
    ("line\nbreak\ttab\x00nul\x7f", "line_break_tab_nul_.md"),
    ("  ...hidden and trailing. . ", "hidden and trailing.md"),
    ("..", "conversation.md"), ("", "conversation.md"),
])
def test_export_file_name_is_safe_on_every_platform(title, name):
    assert export_file_name(title, ".md") == name


def test_export_file_name_is_capped_without_splitting_a_character():
    for title in ("我" * 200, "x" * 300, "😀" * 100, "a" + "é" * 150):
        name = export_file_name(title, ".json")
        raw = name.encode("utf-8")
        assert len(raw) <= MAX_FILE_NAME_BYTES and name.endswith(".json") and raw.decode("utf-8") == name
        assert title.startswith(name[: -len(".json")])
        assert len(raw) > MAX_FILE_NAME_BYTES - 4  # cut at the limit, not far below it


def test_a_reasoning_models_thought_is_exported_beside_its_answer(tmp_path):
    with HistoryStore(tmp_path / "h.sqlite3") as s:
        cid = s.create_conversation()
        s.add_message(cid, "user", "Capital of France?")
        mid = s.add_message(cid, "assistant", "", None)
        s.update_message(mid, "Paris.", "eos", reasoning="先想一想：France…")
        md = to_markdown(s, cid)
        assert "## Assistant\n\n<details><summary>Thinking</summary>\n\n先想一想：France…\n\n</details>\n\nParis.\n" in md
        messages = json.loads(to_json(s, cid))["messages"]
        assert messages[1]["reasoning"] == "先想一想：France…" and messages[1]["text"] == "Paris."
        assert "reasoning" not in messages[0]  # only a reply that thought carries the key


def test_a_message_s_pictures_export_as_markdown_links_to_copies_and_json_addresses(store, tmp_path, home):
    from app.history.export import copy_images
    from app.history.images import save_images
    from engine.vision import image_store

    data = b"\x89PNG\r\n\x1a\n-the-bytes-as-attached"
    kept = image_store.put(data, "png")
    cid = store.create_conversation()
    mid = store.add_message(cid, "user", "What is this?")
    save_images(store, mid, [str(kept)])
    markdown = to_markdown(store, cid, "chat-images")
    assert f"![picture 1](<chat-images/{kept.name}>)\n\nWhat is this?" in markdown
    assert json.loads(to_json(store, cid))["messages"][0]["images"] == [{"sha256": image_store.address(data),
                                                                         "format": "png"}]
    folder = tmp_path / "export" / "chat-images"
    assert copy_images(store, cid, folder) == 1
    assert (folder / kept.name).read_bytes() == data
    kept.unlink()  # gone from the images folder: left out, nothing raised
    assert copy_images(store, cid, tmp_path / "again") == 0
