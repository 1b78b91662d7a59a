"""Fork a conversation at any message: the real window on the tiny model, and the worker's session hand-over."""

from __future__ import annotations

from dataclasses import replace

import pytest
from PySide6.QtCore import Qt

from app.history.store import StoreError
from engine.core.kv_persist import kv_folder
from engine.core.sessions import SessionCache
from tests.app._gui_fixtures import (REPLY_TIMEOUT_MS, greedy, make_window, send_and_wait, settings,  # noqa: F401
                                     store)

pytestmark = [pytest.mark.qt_log_ignore("propagateSizeHints"), pytest.mark.qt_log_level_fail("WARNING")]


class _Session:
    def __init__(self, ids: tuple[int, ...] = ()) -> None:
        self.ids = ids

    def cached_ids(self, use_kv_cache: bool = True) -> tuple[int, ...]:
        return self.ids if use_kv_cache else ()


def test_a_forks_first_turn_takes_over_the_origins_session_which_then_counts_as_evicted():
    cache = SessionCache()
    origin, _ = cache.take(1, lambda: _Session((5, 6, 7)))
    assert cache.cached_ids(2, 1, True) == (5, 6, 7) and cache.cached_ids(2, 1, False) == ()  # the forecast's view
    assert cache.cached_ids(2, None, True) == () and cache.kept() == [1]  # reading moves nothing
    session, evicted = cache.take(2, _Session, prefix_from=1)
    assert session is origin and not evicted and cache.kept() == [2]
    again, evicted = cache.take(1, _Session)
    assert again is not origin and evicted  # its next reply prefills again, and the panel says why
    own, _ = cache.take(2, _Session, prefix_from=1)
    assert own is origin  # a fork with a session of its own keeps it
    fresh, evicted = cache.take(3, _Session, prefix_from=99)  # the origin's session is gone (a new model)
    assert fresh not in (origin, again) and not evicted


def test_fork_from_here_opens_a_copy_whose_first_turn_reuses_the_shared_kv_cache(qtbot, make_window, settings,
                                                                              store):
    window = make_window(max_new_tokens=6)
    settings.set_chat(replace(greedy(6), system_prompt="Answer briefly.", seed=7))
    window.apply_settings()  # no conversation open yet: this starts the next one
    send_and_wait(qtbot, window, "What is the capital of France?")
    send_and_wait(qtbot, window, "Hello, how are you today?")
    cid = window.current_conversation()
    original = [(r.id, r.role, r.text, r.finish_reason) for r in store.messages(cid)]
    assert all(not w._buttons["fork"].isHidden() for w in window.chat.widgets())  # offered on every saved message

    with qtbot.waitSignal(window.forker.forked, timeout=5000) as forked:
        window.chat.widgets()[1]._buttons["fork"].click()  # the first reply
    new = forked.args[0]
    assert forked.args == [new, cid] and window.current_conversation() == new != cid
    assert window.conversations.current_id() == new
    row, source = store.get_conversation(new), store.get_conversation(cid)
    assert row.title == f"{source.title} (fork)" and row.system_prompt == "Answer briefly."
    assert row.settings == source.settings and row.settings["seed"] == 7
    assert (window.chat_settings().system_prompt, window.chat_settings().seed) == ("Answer briefly.", 7)  # in use
    assert [(m.role, m.text) for m in window.chat.messages()] == [(r[1], r[2]) for r in original[:2]]
    # Switched away from, the original's cache goes to disk once the engine is idle (app/window/kv_keeping.py).
    qtbot.waitUntil((kv_folder() / f"conversation-{cid}.kv").exists, timeout=REPLY_TIMEOUT_MS)

    # While typing, the forecast already counts the original's cache (the fork's first turn will take it over).
    starts = []
    window.bridge.generation_started.connect(starts.append)
    with qtbot.waitSignal(window.prompt_meter.forecast_shown, timeout=REPLY_TIMEOUT_MS,
                          check_params_cb=lambda f: f is not None) as shown:
        qtbot.keyClicks(window.prompt, "What is a KV cache?")
    predicted = shown.args[0].reused_tokens
    assert predicted > 0
    assert send_and_wait(qtbot, window, window.prompt.toPlainText()) == "length"
    assert starts[-1].reused_tokens == predicted and not starts[-1].kv_evicted
    assert window.last_metrics.reused_tokens == predicted > 0  # the shared prefix was not computed again
    assert [(r.role, r.text) for r in store.messages(new)][:2] == [(r[1], r[2]) for r in original[:2]]
    assert len(store.messages(new)) == 4
    assert [(r.id, r.role, r.text, r.finish_reason) for r in store.messages(cid)] == original  # unchanged

    # The original goes on correctly: its session went to the fork, but its cache was saved when the user left it,
    # so it reopens from the file (not an eviction), and it replies exactly as a conversation the worker never saw
    # would.
    window.conversations.conversation_selected.emit(cid)  # the user picks the original in the list
    assert window.current_conversation() == cid
    assert send_and_wait(qtbot, window, "And Paris?") == "length"
    assert not starts[-1].kv_evicted and 0 < starts[-1].reused_tokens < starts[-1].prompt_tokens
    qtbot.waitUntil(lambda: not window.bridge.is_busy(), timeout=5000)
    asked = window.controller.conversation_for_engine(len(window.controller.messages()) - 1)
    with qtbot.waitSignal(window.bridge.generation_finished, timeout=REPLY_TIMEOUT_MS) as fresh:
        assert window.bridge.generate(10_000, asked, window.chat_settings().sampling_config())
    assert fresh.args[0].text == store.messages(cid)[-1].text
    qtbot.waitUntil(lambda: not window.bridge.is_busy(), timeout=5000)


def test_a_fork_the_history_refuses_says_why_and_changes_nothing(qtbot, make_window, store, monkeypatch):
    window = make_window(max_new_tokens=4)
    send_and_wait(qtbot, window, "Hello")
    cid = window.current_conversation()

    def refuse(*_args, **_kwargs):
        raise StoreError("history cannot be written (read-only file)")

    monkeypatch.setattr(store, "fork_conversation", refuse)
    assert window.forker.fork(0) is None
    assert "Could not fork this chat: history cannot be written" in window.messages.text()
    assert window.current_conversation() == cid and [c.id for c in store.list_conversations()] == [cid]


def test_a_fork_is_marked_in_the_list_and_its_context_bar_counts_its_own_tokens(qtbot, make_window, store):
    # Issue 41 point 7: the "(fork)" suffix was elided away in the list (two identical rows), and the fork's context
    # bar went on showing its source's token count.
    window = make_window(max_new_tokens=12)
    send_and_wait(qtbot, window, "What is the capital of France?")
    send_and_wait(qtbot, window, "And what is the capital of Italy, and why is it there?")
    cid = window.current_conversation()
    long_title = "A conversation whose title is far too long for the list to show whole " * 2
    store.rename_conversation(cid, long_title.strip())
    window.conversations.refresh()
    bar = window.perf_panel._context_bar
    source_tokens = bar.value()
    assert source_tokens > 0 and "tokens" in bar.text()

    with qtbot.waitSignal(window.forker.forked, timeout=5000) as forked:
        qtbot.mouseClick(window.chat.widgets()[1]._buttons["fork"], Qt.MouseButton.LeftButton)  # the first reply
    new = forked.args[0]
    items = {window.conversations.list.item(i).data(Qt.ItemDataRole.UserRole): window.conversations.list.item(i)
             for i in range(window.conversations.list.count())}
    fork_item, source_item = items[new], items[cid]
    assert not fork_item.icon().isNull() and source_item.icon().isNull()  # the mark survives eliding the title
    assert fork_item.toolTip().startswith(f"Fork of “{long_title.strip()}”")
    # The fork's own conversation (one question, one reply) is measured: fewer tokens than its source's two turns.
    qtbot.waitUntil(lambda: 0 < bar.value() < source_tokens, timeout=REPLY_TIMEOUT_MS)
    fork_tokens = bar.value()
    assert bar.text().startswith(f"{fork_tokens} / ")

    window.conversations.conversation_selected.emit(cid)  # back to the source: its own count again
    qtbot.waitUntil(lambda: bar.value() > fork_tokens, timeout=REPLY_TIMEOUT_MS)
    window.conversations.conversation_selected.emit(new)
    store.delete_conversation(cid)  # the source goes: the fork stays marked, and says so
    window.conversations.refresh()
    fork_item = next(window.conversations.list.item(i) for i in range(window.conversations.list.count())
                     if window.conversations.list.item(i).data(Qt.ItemDataRole.UserRole) == new)
    assert not fork_item.icon().isNull() and fork_item.toolTip().startswith("Fork of a deleted chat")
