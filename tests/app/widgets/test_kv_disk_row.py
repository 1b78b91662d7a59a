"""Settings' saved-KV-caches row: the folder's size as files make it, and Clear deleting them."""

from __future__ import annotations

from app.runtime.kv_persist import kv_folder
from app.widgets.kv_disk_row import KVDiskRow
from app.widgets.settings_dialog import SettingsDialog
from tests.app._gui_fixtures import settings  # noqa: F401 (fixtures)


def test_the_row_shows_the_folders_size_and_clear_empties_it(qtbot, home):
    folder = kv_folder()
    folder.mkdir()
    (folder / "conversation-1.kv").write_bytes(b"x" * 3 * 1024 * 1024)
    (folder / "notes.txt").write_text("not a cache: neither counted nor deleted")
    row = KVDiskRow(budget_bytes=1 << 30)
    qtbot.addWidget(row)
    assert row.usage.text() == "3.0 MiB on disk (at most 1.0 GiB)" and row.clear_button.isEnabled()
    with qtbot.waitSignal(row.cleared) as blocker:
        row.clear_button.click()
    assert blocker.args == [3 * 1024 * 1024]
    assert not (folder / "conversation-1.kv").exists() and (folder / "notes.txt").exists()
    assert row.usage.text().startswith("0 B on disk") and not row.clear_button.isEnabled()


def test_settings_show_the_row(qtbot, home, settings):
    dialog = SettingsDialog(settings)
    qtbot.addWidget(dialog)
    assert isinstance(dialog.saved_kv, KVDiskRow) and not dialog.saved_kv.clear_button.isEnabled()
