"""Each conversation's model: recorded with it in the real SQLite history, restored by the real window on the tiny
models (two folders of their own) when the conversation is opened again, a missing one said in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.history.store import MODEL_KEY
from app.window.conversation_model import ModelRecord
from tests.app._gui_fixtures import LOAD_TIMEOUT_MS, REPLY_TIMEOUT_MS, make_window, send_and_wait, settings, store  # noqa: F401
from tests.helpers.keyrings import no_keyring  # noqa: F401 (fixture)

pytestmark = [pytest.mark.qt_log_ignore("propagateSizeHints"), pytest.mark.qt_log_level_fail("WARNING")]


@pytest.fixture(scope="module")
def second_model_dir(tmp_path_factory) -> Path:
    """Another tiny model in a folder of its own (other weights, so another model to the app)."""
    from tests.helpers.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("second-tiny"), seed=1)


def _record(window, cid: int) -> ModelRecord | None:
    return ModelRecord.from_stored(window.store.get_conversation(cid).settings.get(MODEL_KEY))


def _load(qtbot, window, folder: Path) -> None:
    with qtbot.waitSignal(window.model_ready, timeout=LOAD_TIMEOUT_MS):
        window.load_model(str(folder), "fp32", "cpu")


def _open(qtbot, window, cid: int, reloads: bool) -> None:
    """Open conversation ``cid`` as a click in the list does; wait for the model it restores, if it reloads."""
    if reloads:
        with qtbot.waitSignal(window.model_ready, timeout=LOAD_TIMEOUT_MS):
            window.controller.select(cid)  # what the list's conversation_selected is wired to
    else:
        window.controller.select(cid)
        assert not window.controller.is_loading()  # a restore asks for its load at once: none was asked
    assert window.current_conversation() == cid


def _chat_with(qtbot, window, text: str) -> int:
    window.on_new_chat_triggered()
    assert send_and_wait(qtbot, window, text) == "length"
    return window.current_conversation()


def test_opening_a_conversation_loads_the_model_it_was_held_with(qtbot, make_window, tiny_model_dir, second_model_dir):
    window = make_window(max_new_tokens=3)
    first = _chat_with(qtbot, window, "hello")
    assert _record(window, first) == ModelRecord(str(tiny_model_dir), window.controller.facts.name, "fp32", "cpu")
    window.on_new_chat_triggered()
    second = window.current_conversation()
    _load(qtbot, window, second_model_dir)
    assert _record(window, second) is None  # recorded with its first message, not before
    assert send_and_wait(qtbot, window, "你好") == "length"
    assert _record(window, second).model == str(second_model_dir)
    assert _record(window, first).model == str(tiny_model_dir)  # loading for the new chat left the first one's alone

    _open(qtbot, window, first, reloads=True)
    assert window.controller.facts.source == str(tiny_model_dir)
    assert window.model_bar.choice() == (str(tiny_model_dir), "fp32", "cpu")  # the bar shows what was restored
    assert [m.text for m in window.controller.messages()][0] == "hello"
    _open(qtbot, window, second, reloads=True)
    assert window.controller.facts.source == str(second_model_dir)

    # Another model loaded mid-conversation is the one it goes on with: the latest choice is recorded.
    _load(qtbot, window, tiny_model_dir)
    assert _record(window, second).model == str(tiny_model_dir)
    _open(qtbot, window, first, reloads=False)


def test_a_conversation_on_the_loaded_model_opens_without_reloading(qtbot, make_window):
    window = make_window(max_new_tokens=3)
    first = _chat_with(qtbot, window, "one")
    second = _chat_with(qtbot, window, "two")
    assert _record(window, first) == _record(window, second)
    _open(qtbot, window, first, reloads=False)
    _open(qtbot, window, second, reloads=False)
    assert "not on this machine" not in window.messages.text()


def test_a_model_that_is_gone_keeps_the_loaded_one_and_says_so(qtbot, make_window, tmp_path):
    window = make_window(max_new_tokens=3)
    loaded_name = window.controller.facts.name
    gone = _chat_with(qtbot, window, "keep me")
    lost = ModelRecord(str(tmp_path / "deleted-model"), "deleted-model", "int8", "cpu")
    window.store.set_conversation_model(gone, lost.stored())
    window.on_new_chat_triggered()

    _open(qtbot, window, gone, reloads=False)
    assert window.messages.text() == (f"This conversation used deleted-model, which is not on this machine; "
                                      f"continuing with {loaded_name}.")
    assert window.messages.level == "warning"
    assert [m.text for m in window.controller.messages()][0] == "keep me"  # nothing lost
    assert _record(window, gone) == lost  # opening it changed nothing
    assert send_and_wait(qtbot, window, "and go on") == "length"
    assert _record(window, gone).model != lost.model  # going on with the loaded model records it


def test_a_restore_waits_for_the_streaming_reply_to_end(qtbot, make_window, tiny_model_dir, second_model_dir):
    window = make_window(max_new_tokens=200)
    first = _chat_with(qtbot, window, "first")  # 200 tokens: long enough to still stream when the user switches
    window.on_new_chat_triggered()
    _load(qtbot, window, second_model_dir)
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS), \
            qtbot.waitSignal(window.model_ready, timeout=LOAD_TIMEOUT_MS):
        assert window.send("a long answer please")
        window.controller.select(first)  # the reply elsewhere is stopped; the restore waits for its end
        assert window.controller.is_generating() and not window.controller.is_loading()
    assert window.controller.facts.source == str(tiny_model_dir)
    assert window.current_conversation() == first


@pytest.mark.parametrize("stored", [None, "x", {"model": 3}, {"model": "", "name": "a"},
                                    {"model": "m", "name": "m", "precision": "int3"},
                                    {"model": "m\0", "name": "m"}])
def test_an_unusable_stored_record_is_no_record(stored):
    assert ModelRecord.from_stored(stored) is None


def test_a_record_round_trips_and_compares_by_how_the_model_was_asked_for():
    record = ModelRecord("/models/a", "a", "int4", "cpu")
    assert ModelRecord.from_stored(record.stored()) == record
    assert record.same_model(ModelRecord("/models/a", "renamed", "int4", "cpu"))
    assert not record.same_model(ModelRecord("/models/a", "a", "int8", "cpu")) and not record.same_model(None)


def test_a_conversation_held_with_a_servers_model_connects_to_it_again(qtbot, make_window, tiny_model_dir, no_keyring):
    from engine.inputs import LoadSpec
    from engine.models.loader import load_model
    from engine.remote import RemoteSpec
    from tests.engine.serve.conftest import start_server

    served, stop = start_server(load_model(LoadSpec(str(tiny_model_dir), "fp32", "cpu")), key=None)
    try:
        window = make_window(max_new_tokens=3)
        window.on_new_chat_triggered()
        remote = window.current_conversation()
        with qtbot.waitSignal(window.model_ready, timeout=LOAD_TIMEOUT_MS):
            window.remote_source.connect_to(RemoteSpec(served.url + "/v1"))
        assert send_and_wait(qtbot, window, "hello server") == "length"
        assert _record(window, remote).base_url == served.url + "/v1"
        local = _chat_with(qtbot, window, "local")  # a new chat; then the local model again, recorded with it
        _load(qtbot, window, tiny_model_dir)
        assert send_and_wait(qtbot, window, "again") == "length" and _record(window, local).base_url == ""

        _open(qtbot, window, remote, reloads=True)
        assert getattr(window.controller.facts, "remote", False)
        _open(qtbot, window, local, reloads=True)
        assert window.controller.facts.source == str(tiny_model_dir)
    finally:
        stop()


