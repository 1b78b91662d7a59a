"""``app.window.context_meter.ContextMeter`` in the real window on the tiny model: a conversation opened after its
reply (its last message the assistant's) is measured as the context holds it, the chat template's own token count
with no generation prompt after the reply, not left to the reply's stored figures (the engine refused a prompt that
ends with a reply, and the bar said nothing of it)."""

from __future__ import annotations

import pytest

from tests.app._gui_fixtures import REPLY_TIMEOUT_MS, make_window, settings, store  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.qt_log_ignore("propagateSizeHints"), pytest.mark.qt_log_level_fail("WARNING")]


def test_a_conversation_that_ends_with_a_reply_is_measured_as_the_template_holds_it(qtbot, make_window, store,
                                                                                     tiny_model_dir):
    from transformers import AutoTokenizer

    cid = store.create_conversation("Held")
    store.add_message(cid, "user", "What is the capital of France?")
    store.add_message(cid, "assistant", "Paris, on the Seine, since the Middle Ages.")
    window = make_window(max_new_tokens=4)
    system = window.controller.chat_settings().system_prompt
    conversation = ([{"role": "system", "content": system}] if system.strip() else []) + [
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "Paris, on the Seine, since the Middle Ages."}]
    own = AutoTokenizer.from_pretrained(tiny_model_dir).apply_chat_template(
        conversation, add_generation_prompt=False, tokenize=True, return_dict=False)
    bar = window.perf_panel._context_bar
    assert window.controller.open(cid)
    qtbot.waitUntil(lambda: bar.text().startswith(f"{len(own)} / "), timeout=REPLY_TIMEOUT_MS)
    assert bar.value() == len(own)
