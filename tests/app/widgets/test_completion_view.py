"""Complete text in the real window: a base model (no chat template) is told apart once it loads, chat is said to
be off for it and the Complete text window opens; the document is continued (streamed onto its end, the panel's
figures, Stop, Continue again) and each run is kept in the history. Real window, bridge, engine and SQLite."""

from __future__ import annotations

from PySide6.QtCore import Qt

from tests.app._gui_fixtures import LOAD_TIMEOUT_MS, REPLY_TIMEOUT_MS, make_window, settings, store  # noqa: F401
from tests.helpers.base_model import without_chat_template

PROMPT = "The capital of France is"


def test_a_base_model_continues_a_document_in_the_window(qtbot, make_window, store, tiny_model_dir, tmp_path):
    base = without_chat_template(tiny_model_dir, tmp_path / "tiny-base")
    window = make_window(max_new_tokens=6, loaded=False)
    view = window.completion
    with qtbot.waitSignal(window.model_ready, timeout=LOAD_TIMEOUT_MS):
        window.load_model(str(base), "fp32", "cpu")
    qtbot.waitUntil(view.isVisible, timeout=LOAD_TIMEOUT_MS)  # offered at once: this model cannot chat
    assert "no chat template" in window.messages.text()

    view.editor.setPlainText(PROMPT)
    with qtbot.waitSignal(window.bridge.generation_finished, timeout=REPLY_TIMEOUT_MS) as done:
        qtbot.mouseClick(view.continue_button, Qt.MouseButton.LeftButton)
    finished = done.args[0]
    assert finished.reason == "length" and finished.text
    assert view.editor.toPlainText() == PROMPT + finished.text  # streamed onto the document's end
    assert "Continue" in view.status.text() and view.continue_button.isEnabled()
    assert window.perf_panel._values["tokens"].text() == "6"  # the window's panel, as for a chat reply

    first = view.editor.toPlainText()
    with qtbot.waitSignal(window.bridge.generation_finished, timeout=REPLY_TIMEOUT_MS) as again:
        assert view.continue_text()
    assert view.editor.toPlainText() == first + again.args[0].text  # Continue continues the document as it is
    assert again.args[0].metrics.reused_tokens > 0  # its unchanged beginning came from the KV cache

    (conversation,) = [c for c in store.list_conversations() if c.settings.get("mode") == "complete"]
    rows = store.messages(conversation.id)
    assert [(r.role, r.text) for r in rows] == [("user", PROMPT), ("assistant", finished.text),
                                                ("user", first), ("assistant", again.args[0].text)]
    assert rows[1].finish_reason == "length" and rows[1].perf.generated_tokens == 6


def test_an_empty_document_or_no_model_is_one_line(qtbot, make_window):
    window = make_window(loaded=False)
    view = window.completion
    view.open_view()
    assert not view.continue_text() and "No model loaded" in view.status.text()


def test_a_chat_model_does_not_open_it(qtbot, make_window):
    window = make_window()
    qtbot.wait(300)
    assert not window.completion.isVisible()
    window.completion.open_view()
    assert not window.completion.continue_text() and "Write something" in window.completion.status.text()


def test_the_model_bar_offers_it_from_the_files_before_the_weights_load(qtbot, make_window, tiny_model_dir,
                                                                        tmp_path):
    base = without_chat_template(tiny_model_dir, tmp_path / "tiny-base")
    window = make_window(loaded=False)
    window.model_bar.load_requested.emit(str(base), "fp32", "cpu")  # what the model bar's Load button sends
    # Said when the load is asked for, from the files: not after the weights are in memory.
    assert window.completion.isVisible() and "no chat template" in window.messages.text()
    assert window.controller.facts is None
    with qtbot.waitSignal(window.model_ready, timeout=LOAD_TIMEOUT_MS):
        pass
