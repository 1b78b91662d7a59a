"""Speculative decoding in the real window (app/window/speculation.py): the model bar's choice, the tint of accepted
drafts in the streaming reply and its switch, the panel's rows, the same greedy reply with and without speculation
(real default model); a draft model with another vocabulary refused in one line (tiny model)."""

from __future__ import annotations

import pytest

from tests.app._gui_fixtures import LOAD_TIMEOUT_MS, make_window, settings, store  # noqa: F401 (fixtures)

SLOW_REPLY_MS = 900_000  # the default model on a shared 2-core machine: minutes, not seconds, when others run

REPEAT = ("Repeat this list exactly as it is, nothing else: apple, banana, cherry, date, elderberry, fig, grape, "
          "apple, banana, cherry, date, elderberry, fig, grape.")


def choose(qtbot, window, value: str) -> None:
    """Pick ``value`` in the model bar's drop-down as a user does, and wait for the worker to prepare it."""
    combo = window.speculation.choice.combo
    index = combo.findData(value)
    assert index >= 0, value
    combo.setCurrentIndex(index)
    if window.bridge.facts is not None and value != "off":
        with qtbot.waitSignals([window.bridge.task_finished], timeout=LOAD_TIMEOUT_MS, raising=False):
            combo.activated.emit(index)
        qtbot.waitUntil(lambda: not window.speculation._pending, timeout=LOAD_TIMEOUT_MS)
    else:
        combo.activated.emit(index)


def send_and_wait(qtbot, window, text: str) -> str:
    with qtbot.waitSignal(window.reply_finished, timeout=SLOW_REPLY_MS) as blocker:
        assert window.send(text)
    return blocker.args[0]


def reply_text(window) -> str:
    return window.chat.widgets()[-1].browser.document().toPlainText()


@pytest.mark.default_model
def test_prompt_lookup_tints_drafts_shows_its_rows_and_replies_as_plain(qtbot, make_window, default_model_dir):
    window = make_window(max_new_tokens=24, loaded=False)
    with qtbot.waitSignal(window.model_ready, timeout=LOAD_TIMEOUT_MS):
        window.load_model(str(default_model_dir), "bf16", "cpu")
    view, tint = window.speculation.view, window.speculation.tint
    assert send_and_wait(qtbot, window, REPEAT) in ("length", "eos")  # plain: the reference text and rate
    plain = reply_text(window)
    assert view.baseline(window.bridge.facts) is not None and not view.isVisible()
    assert not window.chat.widgets()[-1].browser.extraSelections()

    window.on_new_chat_triggered()
    choose(qtbot, window, "prompt-lookup")
    assert window.settings.speculation() == "prompt-lookup" and window.speculation.choice.tint.isChecked()
    tinted_while_streaming = []
    window.bridge.tokens_received.connect(lambda _t, _tokens: tinted_while_streaming.append(bool(tint.spans())))
    assert send_and_wait(qtbot, window, REPEAT) in ("length", "eos")
    assert reply_text(window) == plain  # greedy: speculation changes the speed, never the text
    assert any(tinted_while_streaming)
    browser = window.chat.widgets()[-1].browser
    qtbot.waitUntil(lambda: bool(browser.extraSelections()), timeout=5000)
    tinted = " ".join(browser.document().toPlainText()[a:b] for a, b in tint.spans())
    assert tinted and all(part in plain for part in tinted.split())  # drafts are the reply's own words
    shown = view.shown()
    assert view.isVisible() and shown["drafter"] == "prompt lookup"
    assert "%" in shown["acceptance"] and float(shown["per_step"]) > 1.0
    assert "×" in shown["speedup"]  # against the plain reply measured above on this model

    window.speculation.choice.tint.setChecked(False)  # the switch: the tint goes, the setting is kept
    assert browser.extraSelections() == [] and window.settings.tint_drafts() is False
    window.speculation.choice.tint.setChecked(True)
    assert browser.extraSelections()


def test_a_draft_model_with_another_vocabulary_is_refused_in_one_line(qtbot, make_window, tmp_path):
    from transformers import AutoTokenizer

    from tests.helpers.tiny_model import build_tiny_model

    foreign = build_tiny_model(tmp_path / "foreign", seed=2)
    tokenizer = AutoTokenizer.from_pretrained(str(foreign))
    tokenizer.add_tokens(["<only-here>"])
    tokenizer.save_pretrained(str(foreign))
    window = make_window()
    choose(qtbot, window, "prompt-lookup")
    window.speculation.choice.set_choice(f"draft:{foreign}")  # as if listed: the worker's check decides
    index = window.speculation.choice.combo.currentIndex()
    with qtbot.waitSignal(window.bridge.task_failed, timeout=LOAD_TIMEOUT_MS):
        window.speculation.choice.combo.activated.emit(index)
    qtbot.waitUntil(lambda: not window.speculation._pending, timeout=5000)
    message = window.messages.text()
    assert window.settings.speculation() == "prompt-lookup"  # the choice went back to what it was
    assert window.speculation.choice.choice() == "prompt-lookup"
    assert "vocabularies differ" in message and "\n" not in message and "Traceback" not in message
