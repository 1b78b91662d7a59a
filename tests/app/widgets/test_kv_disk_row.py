"""Settings' saved-KV-caches row: the folder's size as files make it, and Clear deleting them."""

from __future__ import annotations

from engine.core.kv_persist import kv_folder
from app.widgets.kv_disk_row import KVDiskRow
from app.widgets.settings_dialog import SettingsDialog
from engine.fmt import format_bytes
from tests.app._gui_fixtures import settings  # noqa: F401 (fixtures)


def test_the_row_shows_the_folders_size_and_clear_empties_it(qtbot, home, tiny_model_dir):
    """Only the store's own snapshots (sealed with its key, engine/generate/kv_store.py) count and are cleared: a
    foreign `.kv` and any other file stay, as issue 40 asks of a store that deletes only what it wrote."""
    from engine.events import Message
    from engine.generate.kv_snapshot import identity_of
    from engine.generate.kv_store import KVStore
    from engine.generate.session import ChatSession
    from engine.inputs import LoadSpec, SamplingConfig
    from engine.models.loader import load_model

    loaded = load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu"))
    session = ChatSession(loaded)
    list(session.generate([Message("user", "Keep this conversation on disk.")],
                          SamplingConfig(temperature=0.0, max_new_tokens=4)))
    folder = kv_folder()
    saved = KVStore(folder).save("conversation-1", session.snapshot(), identity_of(loaded))
    assert saved is not None
    size = saved.stat().st_size
    (folder / "foreign.kv").write_bytes(b"x" * 3 * 1024 * 1024)  # not the store's: neither counted nor deleted
    (folder / "notes.txt").write_text("not a cache: neither counted nor deleted")
    row = KVDiskRow(budget_bytes=1 << 30)
    qtbot.addWidget(row)
    assert row.usage.text() == f"{format_bytes(size)} on disk (at most 1.0 GiB)" and row.clear_button.isEnabled()
    with qtbot.waitSignal(row.cleared) as blocker:
        row.clear_button.click()
    assert blocker.args == [size]
    assert not saved.exists() and (folder / "foreign.kv").exists() and (folder / "notes.txt").exists()
    assert row.usage.text().startswith("0 B on disk") and not row.clear_button.isEnabled()


def test_settings_show_the_row(qtbot, home, settings):
    dialog = SettingsDialog(settings)
    qtbot.addWidget(dialog)
    assert isinstance(dialog.saved_kv, KVDiskRow) and not dialog.saved_kv.clear_button.isEnabled()
