"""The chat controller without a window: the real bridge on the tiny model, a real SQLite history in tmp_path.

Each test drives ``ChatController`` through its methods and reads what it reports (its signals) and what it
wrote (the store): the conversation a reply answers comes from the store, never from a widget.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from app.history.store import HistoryStore
from app.state.settings import chat_from_stored
from app.window.controller import ChatController, FinishedReply
from engine.errors import ErrorKind
from engine.events import Message
from engine.inputs import LoadSpec
from tests.app._gui_fixtures import (LOAD_TIMEOUT_MS, REPLY_TIMEOUT_MS, greedy, loaded_bridge, plan,  # noqa: F401
                                     settings, store)
from tests.helpers.faults import make_damaged

pytestmark = [pytest.mark.qt_log_ignore("propagateSizeHints"), pytest.mark.qt_log_level_fail("WARNING")]

SIGNALS = ("conversation_shown", "message_added", "messages_removed", "reply_started", "reply_grew", "reply_finished",
           "editing_changed", "conversation_listed", "state_changed", "notice", "status_note", "model_ready",
           "remote_code_offered")


class Recorder:
    """Every controller signal, in arrival order."""

    def __init__(self, controller: ChatController) -> None:
        self.log: list[tuple[str, tuple]] = []
        for name in SIGNALS:
            getattr(controller, name).connect(lambda *args, _n=name: self.log.append((_n, args)))

    def names(self) -> list[str]:
        return [name for name, _ in self.log]

    def of(self, name: str) -> list[tuple]:
        return [args for n, args in self.log if n == name]

    def clear(self) -> None:
        self.log.clear()


@pytest.fixture
def controller(qtbot, settings, store, loaded_bridge):
    settings.set_chat(greedy(6))
    chat = ChatController(settings, store, loaded_bridge)
    yield chat
    assert chat.shutdown(5000) is True


def _wait_reply(qtbot, controller: ChatController, start) -> FinishedReply:
    """Run ``start()`` (which must start a reply) and return the reply once it ended and was saved."""
    with qtbot.waitSignal(controller.reply_finished, timeout=REPLY_TIMEOUT_MS) as done:
        assert start()
    qtbot.waitUntil(lambda: not controller.bridge.is_busy(), timeout=5000)  # the job ends just after its Finished
    return done.args[0]


def _as_stored(store: HistoryStore, cid: int) -> list[tuple]:
    return [(r.role, r.text, r.id, r.finish_reason) for r in store.messages(cid)]


def _as_held(controller: ChatController) -> list[tuple]:
    return [(m.role, m.text, m.message_id, m.finish_reason) for m in controller.messages()]


def test_a_reply_answers_the_conversation_of_record_and_is_saved(qtbot, controller, store, settings):
    cid = store.create_conversation(system_prompt="Answer briefly.", settings={**greedy(5).stored(), "seed": 3})
    store.add_message(cid, "user", "What is a KV cache?")
    store.add_message(cid, "assistant", "A cache of keys and values.", finish_reason="eos")
    store.add_message(cid, "user", "And prefill?")
    store.add_message(cid, "assistant", "", finish_reason="error")  # a failed reply: not something the model said
    rec = Recorder(controller)
    assert controller.open(cid)
    (shown,), = rec.of("conversation_shown")
    assert [(m.role, m.text, m.message_id, m.finish_reason) for m in shown] == _as_stored(store, cid)
    assert controller.chat_settings() == chat_from_stored("Answer briefly.", store.get_conversation(cid).settings,
                                                          settings.chat())
    assert controller.chat_settings().seed == 3 and controller.chat_settings().max_new_tokens == 5
    assert controller.conversation_for_engine() == [
        Message("system", "Answer briefly."), Message("user", "What is a KV cache?"),
        Message("assistant", "A cache of keys and values."), Message("user", "And prefill?")]
    assert settings.last_conversation() == cid

    rec.clear()
    finished = _wait_reply(qtbot, controller, lambda: controller.send("Thanks. One more?"))
    names = rec.names()
    assert names.index("message_added") < names.index("reply_started") < names.index("reply_grew")
    assert names[-2:] == ["state_changed", "reply_finished"]  # no text after the end
    streamed = "".join(args[0] for args in rec.of("reply_grew"))
    assert finished.shown and finished.kept and finished.message.finish_reason == "length"
    assert finished.message.text == streamed and finished.metrics.generated_tokens == 5
    rows = store.messages(cid)
    assert [r.text for r in rows[-2:]] == ["Thanks. One more?", streamed]
    assert rows[-1].finish_reason == "length" and rows[-1].perf == finished.message.perf
    assert rows[-1].perf.generated_tokens == 5 and finished.message.footer == rows[-1].perf.footer()
    assert _as_held(controller) == _as_stored(store, cid)  # what it holds is what the store holds
    assert controller.last_metrics is finished.metrics and not controller.is_generating()


def test_a_first_message_creates_the_conversation_with_its_settings_and_titles_it(qtbot, controller, store, settings):
    rec = Recorder(controller)
    _wait_reply(qtbot, controller, lambda: controller.send("Hello there"))
    cid = controller.conversation_id
    row = store.get_conversation(cid)
    assert row.title == "Hello there" and row.settings == settings.chat().stored()
    assert rec.of("conversation_listed") == [(cid,), (None,)]  # listed and selected, then its new title
    assert [r.role for r in store.messages(cid)] == ["user", "assistant"]


def test_edit_and_regenerate_cut_the_store_and_the_conversation(qtbot, controller, store):
    _wait_reply(qtbot, controller, lambda: controller.send("first question"))
    _wait_reply(qtbot, controller, lambda: controller.send("second question"))
    cid = controller.conversation_id
    old_reply = store.messages(cid)[-1].id
    rec = Recorder(controller)
    _wait_reply(qtbot, controller, controller.regenerate)
    assert rec.of("messages_removed") == [(3,)]
    rows = store.messages(cid)
    assert len(rows) == 4 and rows[-1].role == "assistant" and rows[-1].id != old_reply

    rec.clear()
    assert controller.edit(2) and rec.of("editing_changed") == [(2,)]
    _wait_reply(qtbot, controller, lambda: controller.send("second question, edited"))
    assert rec.of("messages_removed") == [(2,)] and rec.of("editing_changed")[-1] == (None,)
    assert [r.text for r in store.messages(cid) if r.role == "user"] == ["first question", "second question, edited"]
    assert _as_held(controller) == _as_stored(store, cid)

    # Continue resumes the last reply itself (issue 26: no new user turn); Stop while editing only stops editing.
    before = store.messages(cid)
    assert before[-1].finish_reason == "length"
    _wait_reply(qtbot, controller, controller.continue_reply)
    after = store.messages(cid)
    assert [r.id for r in after] == [r.id for r in before] and after[-1].text.startswith(before[-1].text)
    assert len(after[-1].text) > len(before[-1].text)
    assert controller.edit(0) and controller.stop() is False and rec.of("editing_changed")[-2:] == [(0,), (None,)]


def test_the_settings_the_window_passes_are_the_ones_replies_use(qtbot, controller, store, settings):
    """Issue 26: the window hands the dialog's settings object to the controller; it is not read back from
    QSettings (which here still hold other values)."""
    _wait_reply(qtbot, controller, lambda: controller.send("Hello"))
    chosen = replace(greedy(2), system_prompt="Chosen in the dialog.", top_k=7)
    assert settings.chat() != chosen
    controller.apply_settings(chosen)
    assert controller.chat_settings() == chosen
    row = store.get_conversation(controller.conversation_id)
    assert row.system_prompt == "Chosen in the dialog." and row.settings == chosen.stored()
    finished = _wait_reply(qtbot, controller, lambda: controller.send("Again"))
    assert finished.metrics.generated_tokens == 2  # the chosen max_new_tokens, not the stored 6


def test_a_conversation_changed_in_another_window_is_reloaded_never_cut(qtbot, controller, store):
    _wait_reply(qtbot, controller, lambda: controller.send("first question"))
    cid = controller.conversation_id
    with HistoryStore(store.path) as other:
        other.add_message(cid, "user", "asked in the other window")
        other.add_message(cid, "assistant", "answered in the other window")
    before = _as_stored(store, cid)
    rec = Recorder(controller)
    assert controller.regenerate() is False and not controller.is_generating()
    assert _as_stored(store, cid) == before  # nothing deleted, nothing added
    (notice, level), = rec.of("notice")
    assert level == "warning" and "another window" in notice
    (shown,), = rec.of("conversation_shown")
    assert [m.text for m in shown][2:] == ["asked in the other window", "answered in the other window"]
    assert _as_held(controller) == before
    assert _wait_reply(qtbot, controller, lambda: controller.send("and now?")).message.finish_reason == "length"


def test_each_conversation_replies_with_its_own_saved_settings(qtbot, controller, store, settings):
    terse = replace(greedy(3), system_prompt="Be terse.")
    settings.set_chat(terse)
    controller.new_conversation()
    first = controller.conversation_id
    assert controller.chat_settings() == terse and store.get_conversation(first).system_prompt == "Be terse."
    _wait_reply(qtbot, controller, lambda: controller.send("Hello"))

    settings.set_chat(replace(greedy(4), system_prompt="Explain at length."))
    controller.new_conversation()
    second = controller.conversation_id
    assert controller.messages() == [] and controller.conversation_for_engine() == [
        Message("system", "Explain at length.")]
    controller.apply_settings()  # the dialog saved new defaults: the open conversation takes them too
    assert store.get_conversation(second).system_prompt == "Explain at length."

    assert controller.open(first)
    assert controller.chat_settings() == terse
    assert controller.conversation_for_engine()[0] == Message("system", "Be terse.")
    finished = _wait_reply(qtbot, controller, lambda: controller.send("Again"))
    assert finished.metrics.generated_tokens == 3  # its own max_new_tokens, not the new defaults'


def test_opening_another_conversation_mid_reply_saves_the_reply_where_it_belongs(qtbot, controller, store, plan):
    other = store.create_conversation()
    store.add_message(other, "user", "an older chat")
    plan.hold_decode_after = 4  # the reply stalls after a few tokens until it is stopped
    settings_chat = replace(controller.chat_settings(), max_new_tokens=100)
    controller.settings.set_chat(settings_chat)
    with qtbot.waitSignal(controller.reply_grew, timeout=REPLY_TIMEOUT_MS):
        assert controller.send("Hello")
    plan.hold_decode_after = 0
    first = controller.conversation_id
    with qtbot.waitSignal(controller.reply_finished, timeout=REPLY_TIMEOUT_MS) as done:
        controller.select(other)  # stops the reply; it is saved in its own conversation
    finished = done.args[0]
    assert not finished.shown and finished.message.finish_reason == "cancelled" and finished.message.text
    assert controller.conversation_id == other and _as_held(controller) == _as_stored(store, other)
    rows = store.messages(first)
    assert [(r.role, r.finish_reason) for r in rows] == [("user", None), ("assistant", "cancelled")]
    assert rows[-1].text == finished.message.text


def test_deleting_the_open_conversation_closes_it(qtbot, controller, store, settings):
    _wait_reply(qtbot, controller, lambda: controller.send("Hello"))
    cid = controller.conversation_id
    rec = Recorder(controller)
    store.delete_conversation(cid)
    controller.conversation_deleted(cid)
    assert controller.conversation_id is None and controller.messages() == []
    assert rec.of("conversation_shown") == [([],)]
    assert settings.last_conversation() is None
    assert controller.chat_settings() == settings.chat()


def test_shutdown_mid_reply_keeps_the_partial_reply_and_is_truthful_when_called_again(qtbot, controller, store, plan):
    plan.hold_decode_after = 4
    controller.settings.set_chat(replace(controller.chat_settings(), max_new_tokens=100))
    with qtbot.waitSignal(controller.reply_grew, timeout=REPLY_TIMEOUT_MS):
        assert controller.send("Hello")
    cid = controller.conversation_id
    with qtbot.waitSignal(controller.reply_finished, timeout=REPLY_TIMEOUT_MS) as done:
        assert controller.shutdown(5000) is True
    assert done.args[0].message.finish_reason == "cancelled"
    assert controller.shutdown(5000) is True  # again: waits no more, still the truth
    rows = store.messages(cid)
    assert rows[-1].finish_reason == "cancelled" and rows[-1].text == done.args[0].message.text


def test_a_refused_send_says_why_and_writes_nothing(qtbot, controller, store):
    rec = Recorder(controller)
    assert controller.send("   \n") is False
    assert rec.of("notice") == [("Your message is empty.", "info")]
    assert controller.conversation_id is None and store.list_conversations() == []
    assert controller.regenerate() is False  # nothing to regenerate
    assert controller.messages() == [] and not controller.is_generating()


def test_load_failures_are_typed_and_a_remote_code_refusal_is_offered_once_per_spec(qtbot, controller, tiny_model_dir,
                                                                                   tmp_path: Path):
    rec = Recorder(controller)
    damaged = make_damaged("auto-map", tiny_model_dir, tmp_path / "auto-map")
    spec = LoadSpec(str(damaged.path), "fp32", "cpu")
    with qtbot.waitSignal(controller.bridge.load_failed, timeout=LOAD_TIMEOUT_MS) as failed:
        controller.load(spec)
        assert controller.is_loading() and rec.of("state_changed")
    assert failed.args[0].kind is ErrorKind.REMOTE_CODE_REFUSED
    assert not controller.is_loading() and controller.facts is not None  # the tiny model is still loaded
    assert rec.of("remote_code_offered") == [(spec,)]
    notice, level = rec.of("notice")[-1]
    assert level == "error" and notice.startswith("Could not load the model:") and "\n" not in notice
    assert notice.endswith(f"(still using {tiny_model_dir.name})")
    assert controller.settings.model_choice() == (str(damaged.path), "fp32", "cpu")

    rec.clear()  # a refusal of a load that had opted in is not offered again, nor any other failure
    for again in (replace(spec, allow_remote_code=True), LoadSpec(str(tmp_path / "missing"))):
        with qtbot.waitSignal(controller.bridge.load_failed, timeout=LOAD_TIMEOUT_MS):
            controller.load(again)
    assert rec.of("remote_code_offered") == []
    qtbot.waitUntil(lambda: not controller.bridge.is_busy(), timeout=5000)
    assert _wait_reply(qtbot, controller, lambda: controller.send("still there?")).kept


def test_the_controller_knows_what_the_loaded_model_was_asked_as(qtbot, controller, tiny_model_dir, tmp_path: Path):
    assert controller.loaded_spec is None  # the bridge had loaded it before the controller existed
    wanted, missing = LoadSpec(str(tiny_model_dir), "fp32", "cpu"), LoadSpec(str(tmp_path / "missing"))
    with qtbot.waitSignal(controller.bridge.load_failed, timeout=LOAD_TIMEOUT_MS):
        controller.load(wanted)  # both queued: each outcome is matched with its own request, in order
        controller.load(missing)
    assert controller.loaded_spec == wanted  # the failed load left it as it was


def test_a_new_model_is_reported_ready(qtbot, controller, tiny_model_dir):
    rec = Recorder(controller)
    with qtbot.waitSignal(controller.model_ready, timeout=LOAD_TIMEOUT_MS) as ready:
        controller.load(LoadSpec(str(tiny_model_dir), "fp32", "cpu"))
    assert controller.facts is ready.args[0] and not controller.is_loading()
    notice, level = rec.of("notice")[-1]
    assert level == "info" and notice.startswith(f"Loaded {tiny_model_dir.name}")


def test_the_default_demo_model_points_to_real_chat_models_when_it_loads(qtbot, controller, tiny_model_dir, tmp_path):
    import shutil

    from engine.paths import DEFAULT_MODEL_NAME

    rec = Recorder(controller)
    with qtbot.waitSignal(controller.model_ready, timeout=LOAD_TIMEOUT_MS):
        controller.load(LoadSpec(str(tiny_model_dir), "fp32", "cpu"))
    assert "Recommended" not in rec.of("notice")[-1][0]  # any other model: just what loaded
    demo = shutil.copytree(tiny_model_dir, tmp_path / DEFAULT_MODEL_NAME)  # the default model's name
    with qtbot.waitSignal(controller.model_ready, timeout=LOAD_TIMEOUT_MS):
        controller.load(LoadSpec(str(demo), "fp32", "cpu"))
    notice, level = rec.of("notice")[-1]
    assert level == "info" and notice.startswith(f"Loaded {DEFAULT_MODEL_NAME}")
    assert "not for answers" in notice and "Models… → Recommended" in notice
