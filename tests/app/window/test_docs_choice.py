"""Per conversation, in the real window on the tiny model: the composer's 📚 button picks the collections a
conversation answers from and its documents mode; the choice is saved with the conversation (through a reopen of the
history file), shown again when the conversation is opened, and reaches the engine: the question the model receives
holds the collection's passage (the real ``build_prompt``, recorded)."""

from __future__ import annotations

from app.history.conversation_docs import DocsChoice, load_choice
from app.history.store import HistoryStore
from app.runtime.worker import GenerateJob
from app.window.docs_forecast import DocsRequest
from engine import paths
from engine.docs.index import index_paths
from engine.docs.store import DocumentStore
from tests.app._gui_fixtures import make_window, send_and_wait, settings, store  # noqa: F401 (fixtures)
from tests.helpers.prompts import prompts  # noqa: F401 (fixture)


def _collection(tmp_path, name: str, text: str) -> None:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "facts.md").write_text(text, encoding="utf-8")
    with DocumentStore(paths.documents_path()) as documents:
        index_paths(documents, name, [folder])


def test_the_picked_collections_ground_the_question_and_stay_with_the_conversation(
        qtbot, make_window, tmp_path, prompts, monkeypatch):
    _collection(tmp_path, "notes", "# Tea\n\nThe kettle in room 4 boils water in ninety seconds.\n")
    _collection(tmp_path, "other", "# Lamps\n\nThe lamp in the hall is blue.\n")
    window = make_window(max_new_tokens=4)
    button = window.collections.button
    assert button.text() == "Collections" and sorted(button.collection_actions) == ["notes", "other"]
    # an icon drawn from assets/collections.svg, not an emoji a system without an emoji font shows as a box
    assert not button.icon().pixmap(16, 16).isNull() and "\U0001F4DA" not in button.text()
    jobs: list[GenerateJob] = []
    submit = window.bridge._submit
    monkeypatch.setattr(window.bridge, "_submit", lambda job: (jobs.append(job), submit(job))[1])

    button.collection_actions["notes"].trigger()  # a chat not saved yet: kept until its first message saves it
    button.mode_actions["retrieve"].trigger()
    assert button.text() == "notes"
    # the composer's forecast of both documents choices counts what the conversation picked
    assert window.prompt_meter.documents() == DocsRequest((), ("notes",), "retrieve")
    assert send_and_wait(qtbot, window, "How fast does the kettle boil?") in ("eos", "length")
    cid = window.current_conversation()
    assert cid is not None
    job = next(j for j in jobs if isinstance(j, GenerateJob))
    assert (job.collections, job.docs_mode) == (("notes",), "retrieve")
    sent = prompts[-1]
    assert "Answer only from the numbered sources below." in sent and "ninety seconds" in sent
    assert "lamp" not in sent  # the collection not picked is not searched
    reply = window.chat.widgets()[-1]
    assert reply.sources is not None and [b.text() for b in reply.sources.buttons] == ["[1] facts.md"]

    window.on_new_chat_triggered()  # another conversation starts with nothing picked
    assert button.text() == "Collections" and window.collections.keeper.choice() == DocsChoice()
    button.collection_actions["other"].trigger()
    other = window.current_conversation()
    window.open_conversation(cid)
    window.conversations.select(cid)
    assert button.text() == "notes" and button.mode_actions["retrieve"].isChecked()
    assert button.collection_actions["notes"].isChecked() and not button.collection_actions["other"].isChecked()
    with HistoryStore(window.store.path) as reopened:  # through a second connection to the file, as after a restart
        assert load_choice(reopened, cid) == DocsChoice(("notes",), "retrieve")
        assert load_choice(reopened, other) == DocsChoice(("other",), "auto")


def test_a_removed_collection_leaves_the_choice_and_the_menu(qtbot, make_window, tmp_path):
    _collection(tmp_path, "notes", "Water the ficus on Fridays.")
    window = make_window(loaded=False)
    button = window.collections.button
    button.collection_actions["notes"].trigger()
    assert window.bridge.docs_choice(0) == (("notes",), "auto")
    ui = window.collections
    [action] = [a for a in window.menuBar().actions()[0].menu().actions() if a.text() == "Collections…"]
    assert action.shortcut().toString() == "Ctrl+Shift+D"
    action.trigger()  # Chat → Collections…
    assert ui.window.isVisible() and [ui.window.table.item(0, 0).text()] == ["notes"]
    ui.window.close()
    [manage] = [a for a in button.menu_.actions() if a.text() == "Manage collections…"]
    manage.trigger()  # the composer's way in
    assert ui.window.isVisible()
    with qtbot.waitSignal(ui.indexer.removed, timeout=60_000):
        assert ui.indexer.remove("notes")
    assert button.collection_actions == {} and button.text() == "Collections"
    assert window.bridge.docs_choice(0) is None  # nothing left to search: the reply is not grounded
    assert ui.window.table.rowCount() == 0
