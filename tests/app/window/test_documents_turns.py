"""A grounded turn in the real window on the tiny model, kept and followed up: the attached file and the reply's
sources are saved with the messages and shown again when the conversation is reopened; a Regenerate after reopening
grounds the question in the same file again; and a follow-up question is answered from the same sources, the grounded
first message staying in the conversation the engine sees, so its tokens come from the KV cache (the reply's
``reused_tokens``) instead of being computed again."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from engine.generate import session as session_module
from tests.app._gui_fixtures import REPLY_TIMEOUT_MS, make_window, send_and_wait, settings, store  # noqa: F401
from tests.app.window.test_attachments import drop_files, wait_read


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """The tiny model with 1024 positions: a grounded question and its follow-up fit without dropping a turn (the
    session-wide one has 256, which trimming would spend on the follow-up alone)."""
    from tests.helpers.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-1k"), max_position_embeddings=1024)


@pytest.fixture
def conversations(monkeypatch):
    """Every conversation the engine built a prompt from (the real build_prompt still runs)."""
    seen: list[list] = []
    real = session_module.build_prompt

    def recording(tokenizer, messages, *args, **kwargs):
        seen.append(list(messages))
        return real(tokenizer, messages, *args, **kwargs)

    monkeypatch.setattr(session_module, "build_prompt", recording)
    return seen


def test_sources_are_kept_reopened_regrounded_and_a_follow_up_reuses_the_documents_cache(
        qtbot, make_window, tmp_path, conversations):
    window = make_window(max_new_tokens=4)
    notes = tmp_path / "notes.md"
    notes.write_text("# Tea\n\nThe kettle in room 4 boils water in ninety seconds.\n", encoding="utf-8")
    drop_files(window.composer, [notes])
    wait_read(qtbot, window.composer.chips.chip(str(notes)))
    window.prompt.setPlainText("How fast does the kettle boil?")
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS):
        qtbot.mouseClick(window.send_button, Qt.MouseButton.LeftButton)
    first = window.controller.messages()[-1]
    grounded = conversations[-1][-1].content
    assert first.documents is not None and first.documents.mode == "whole" and "ninety seconds" in grounded

    # The follow-up: the first question reaches the engine grounded exactly as it was, its prefix already cached.
    with qtbot.waitSignal(window.controller.reply_finished, timeout=REPLY_TIMEOUT_MS) as finished:
        assert window.send("And in which room?")
    follow_up = conversations[-1]
    # (the tiny model's reply in between is left out when it is only blanks, as for any blank reply)
    assert [m.role for m in follow_up] in (["user", "assistant", "user"], ["user", "user"])
    assert follow_up[0].content == grounded and follow_up[-1].content == "And in which room?"
    metrics = finished.args[0].metrics
    assert metrics.reused_tokens > first.documents.source_tokens  # the document was not prefilled again
    assert metrics.prefill_tokens < metrics.reused_tokens
    assert finished.args[0].message.documents is None  # the follow-up added no sources of its own

    # Reopened from the store: the bubbles show the file and the sources again.
    cid = window.controller.conversation_id
    window.controller.open(cid)
    qtbot.waitUntil(lambda: len(window.chat.widgets()) == 4)
    user, reply = window.chat.widgets()[:2]
    assert window.controller.messages()[0].attachments == (str(notes),)
    assert user.attached is not None and user.attached.text() == "Attached: notes.md"
    assert reply.sources is not None and [b.text() for b in reply.sources.buttons] == ["[1] notes.md"]
    assert window.controller.messages()[1].documents == first.documents

    # Regenerate after reopening the one-turn fork of it: the question is grounded in the same file again.
    fork = window.store.fork_conversation(cid, window.controller.messages()[1].message_id)
    window.controller.open(fork)
    qtbot.waitUntil(lambda: len(window.chat.widgets()) == 2)
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS):
        assert window.controller.regenerate()
    assert conversations[-1][-1].content == grounded
    regenerated = window.store.messages(fork)[-1]
    assert regenerated.documents is not None and regenerated.documents.sources == first.documents.sources


def test_a_new_conversation_on_the_same_file_starts_from_its_cached_prefix_and_the_panel_says_so(qtbot, make_window,
                                                                                                  tmp_path):
    window = make_window(max_new_tokens=4)
    notes = tmp_path / "notes.md"
    notes.write_text("# Tea\n\nThe kettle in room 4 boils water in ninety seconds.\n", encoding="utf-8")
    starts = []
    window.bridge.generation_started.connect(starts.append)
    for question in ("How fast does the kettle boil?", "Which room is the kettle in?"):
        window.on_new_chat_triggered()
        drop_files(window.composer, [notes])
        wait_read(qtbot, window.composer.chips.chip(str(notes)))
        window.prompt.setPlainText(question)
        with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS):
            qtbot.mouseClick(window.send_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: not window.bridge.is_busy(), timeout=5000)  # the prefix is kept after the reply
    first, second = starts
    assert first.document_prefix_tokens == 0
    document = window.controller.messages()[1].documents
    assert second.document_prefix_tokens == second.reused_tokens > document.source_tokens
    shown = window.perf_panel.ttft_view.shown()
    assert shown["document"] == f"{second.document_prefix_tokens} of the reused tokens"
    assert shown["reused"] == f"{second.reused_tokens} tokens, free"
