"""The tokenizer view on the real bridge and tiny model: typed text is cut into tokens on the worker thread."""

from __future__ import annotations

import pytest

from app.runtime.bridge import Bridge
from app.widgets.tokenizer_view import TokenizerView
from tests.app._gui_fixtures import loaded_bridge  # noqa: F401 (fixture)

pytestmark = pytest.mark.qt_log_ignore("propagateSizeHints")

TASK_TIMEOUT_MS = 30_000


def test_typed_text_is_shown_as_tokens(qtbot, loaded_bridge, tiny_model_dir):
    from transformers import AutoTokenizer

    view = TokenizerView(loaded_bridge)
    qtbot.addWidget(view)
    with qtbot.waitSignal(view.view_shown, timeout=TASK_TIMEOUT_MS) as blocker:
        view.set_text("Hello 鲸")  # debounced: tokenised after the pause
    shown = blocker.args[0]
    expected = AutoTokenizer.from_pretrained(str(tiny_model_dir))("Hello 鲸", add_special_tokens=False).input_ids
    assert [p.token_id for p in shown.pieces] == expected
    assert view.table.rowCount() == len(expected)
    assert [int(view.table.item(r, 1).text()) for r in range(len(expected))] == expected
    assert view.table.item(len(expected) - 1, 4).text() == "3/3"  # the last byte of the split character
    assert view.counts_label.text().startswith(f"{len(expected)} tokens · 7 characters")
    assert "1 characters split" in view.counts_label.text()
    assert "鲸(1/3)" in view.chips.toPlainText()


def test_template_toggle_shows_special_tokens(qtbot, loaded_bridge):
    view = TokenizerView(loaded_bridge)
    qtbot.addWidget(view)
    view.input.setPlainText("Hi")
    with qtbot.waitSignal(view.view_shown, timeout=TASK_TIMEOUT_MS) as blocker:
        view.template_box.setChecked(True)
    assert blocker.args[0].with_template
    parts = [view.table.item(r, 4).text() for r in range(view.table.rowCount())]
    assert parts.count("special") == 3
    assert "<|im_start|>" in view.chips.toPlainText()


def test_only_the_latest_request_is_shown(qtbot, loaded_bridge):
    view = TokenizerView(loaded_bridge)
    qtbot.addWidget(view)
    view.input.setPlainText("first")
    first = view.tokenize()
    view.input.setPlainText("second text")
    with qtbot.waitSignal(view.view_shown, timeout=TASK_TIMEOUT_MS) as blocker:
        second = view.tokenize()
    assert second > first and blocker.args[0].text == "second text"


def test_without_a_model_it_says_so(qtbot, home):
    bridge = Bridge()
    try:
        view = TokenizerView(bridge)
        qtbot.addWidget(view)
        view.input.setPlainText("hello")
        assert view.tokenize() == 0
        assert view.status_label.text() == "Load a model to tokenize."
    finally:
        assert bridge.shutdown(5000) is True
