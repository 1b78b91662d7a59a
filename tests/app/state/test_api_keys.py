"""API keys kept between runs: a real keyring backend (``keyrings.alt``'s file keyring, in the test's folder), the
no-keyring path (keyring's own ``fail`` backend) where a key is stored only when asked, in the settings file, and
the dialog that asks."""

from __future__ import annotations

from pathlib import Path

import keyring
import pytest
from keyring.backends import null

from app.state.api_keys import SERVICE, ApiKeys, KeyringInfo, system_keyring
from app.widgets.remote_dialog import RemoteDialog
from tests.app._gui_fixtures import settings  # noqa: F401 (fixture)
from tests.helpers.keyrings import file_keyring as make_file_keyring
from tests.helpers.keyrings import no_keyring  # noqa: F401 (fixture)

URL = "http://gpu-box:8000/v1"
KEY = "sk-keyring-test-7319"


@pytest.fixture
def file_keyring(tmp_path, no_keyring):
    """keyrings.alt's plaintext file keyring, its file in this test's folder, as the keyring package's choice."""
    return make_file_keyring(tmp_path)


def settings_text(settings) -> str:
    settings._q.sync()
    return Path(settings._q.fileName()).read_text(encoding="utf-8") if Path(settings._q.fileName()).exists() else ""


def test_a_keyring_keeps_the_key_and_the_settings_file_never_does(file_keyring, settings):
    assert system_keyring() is file_keyring
    keys = ApiKeys(settings)
    assert keys.info() == KeyringInfo(file_keyring.name, False)  # priority 0.5: keyring does not recommend files
    assert keys.load(URL) is None
    assert keys.store(URL, KEY, in_settings=True) is None
    assert file_keyring.get_password(SERVICE, URL) == KEY
    assert f"[{SERVICE}]" in Path(file_keyring.file_path).read_text()  # the keyring's own file (base64 inside)
    assert KEY not in settings_text(settings) and settings.remembered_api_key(URL) is None
    assert ApiKeys(settings).load(URL) == KEY  # the next run finds it
    keys.forget(URL)
    assert file_keyring.get_password(SERVICE, URL) is None and ApiKeys(settings).load(URL) is None
    keys.forget(URL)  # forgetting what is not there is fine


def test_storing_in_the_keyring_removes_a_plain_copy_left_in_the_settings(file_keyring, settings):
    settings.set_remembered_api_key(URL, "sk-old-plain")
    ApiKeys(settings).store(URL, KEY)
    assert "sk-old-plain" not in settings_text(settings) and ApiKeys(settings).load(URL) == KEY


def test_without_a_keyring_a_key_is_kept_only_when_asked_in_the_settings_file(no_keyring, settings):
    assert system_keyring() is None
    keys = ApiKeys(settings)
    assert keys.info() == KeyringInfo(None, False)
    assert keys.store(URL, KEY) is None  # not asked: kept nowhere
    assert keys.load(URL) is None and KEY not in settings_text(settings)
    keys.store(URL, KEY, in_settings=True)
    assert KEY in settings_text(settings) and ApiKeys(settings).load(URL) == KEY
    keys.forget(URL)
    assert KEY not in settings_text(settings) and keys.load(URL) is None


def test_the_null_keyring_and_an_unreadable_value_count_as_none(settings):
    before = keyring.get_keyring()
    keyring.set_keyring(null.Keyring())
    try:
        assert system_keyring() is None
    finally:
        keyring.set_keyring(before)
    settings._q.setValue("remote/api_keys", "{not json")
    assert settings.remembered_api_key(URL) is None
    settings._q.setValue("remote/api_keys", '["a list"]')
    assert settings.remembered_api_key(URL) is None


def test_without_a_keyring_the_dialog_warns_and_leaves_remember_unticked(qtbot):
    dialog = RemoteDialog(URL, "", None, keyring=KeyringInfo(None, False))
    qtbot.addWidget(dialog)
    dialog.show()
    assert "stored unencrypted in the settings file" in dialog.remember_box.text()
    assert not dialog.remember_key() and dialog.key_warning.isVisible()
    assert "plain text" in dialog.key_warning.text()
    assert dialog.key_edit.echoMode() == dialog.key_edit.EchoMode.Password


def test_with_a_recommended_keyring_the_dialog_remembers_by_default_and_names_it(qtbot):
    dialog = RemoteDialog(URL, "", KEY, keyring=KeyringInfo("macOS Keyring", True), remembered=True)
    qtbot.addWidget(dialog)
    dialog.show()
    assert dialog.remember_key() and "macOS Keyring" in dialog.remember_box.text()
    assert not dialog.key_warning.isVisible() and dialog.key_edit.text() == KEY
    dialog.remember_box.setChecked(False)
    assert not dialog.remember_key()


def test_a_keyring_keyring_does_not_recommend_is_named_with_a_warning(qtbot, file_keyring, settings):
    dialog = RemoteDialog(URL, "", None, keyring=ApiKeys(settings).info())
    qtbot.addWidget(dialog)
    dialog.show()
    assert not dialog.remember_key() and file_keyring.name in dialog.remember_box.text()
    assert dialog.key_warning.isVisible() and "not a recommended keyring" in dialog.key_warning.text()
