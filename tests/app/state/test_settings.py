"""app.state.settings: every value read back is valid whatever the settings file holds (issue 18, defect 6).

Real INI files written as text, the way a hand edit, an older build or a crash mid-write leaves them:
``@Invalid()``, lists where a string belongs, NaN and infinities, numbers past what a spin box or the
engine accepts, unknown names. The getters return defaults (one warning per key), the settings dialog
opens showing valid values, and the main window builds.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pytest

from PySide6.QtCore import QSettings

from app.state.settings import MAX_RECENT_MODELS, ChatSettings, Settings
from engine.errors import BadInputError
from engine.inputs import SamplingConfig

HOSTILE_INI = r"""
[chat]
system_prompt=one, two, three
temperature=nan
top_p=inf
top_k=@Invalid()
repetition_penalty=-1e400
max_new_tokens=-5
seed=99999999999999999999
use_kv_cache=perhaps

[model]
model=@ByteArray(abc)
precision=int3
device=tpu
recent=@Invalid()

[history]
last_conversation=1, 2

[window]
geometry=not bytes
state=@Invalid()
"""

# One bad value at a time, each of a different kind, for the keys the dialog shows.
ONE_BAD_VALUE = {
    "temperature": ["nan", "-inf", "1e309", "-0.5", "10.01", "warm", "@Invalid()", "0.2, 0.3"],
    "top_p": ["0", "1.5", "nan", "@ByteArray(0.9)"],
    "top_k": ["-1", "100001", "1.5", "9" * 5000, "@Invalid()", "true"],
    "repetition_penalty": ["0", "inf", "nan"],
    "max_new_tokens": ["0", "-5", "32769", "2147483648", "many"],
    "seed": ["-2", "2147483648", "99999999999999999999", "nan", "1e3"],
    "use_kv_cache": ["perhaps", "2", "@Invalid()", "true, false"],
    "system_prompt": ["one, two", "@ByteArray(hi)", "@Variant(\\0\\0\\0\\x2\\0\\0\\0\\x5)"],
}


def _settings(tmp_path: Path, text: str) -> Settings:
    path = tmp_path / "miaohui.ini"
    path.write_text(text, encoding="utf-8")
    return Settings(QSettings(str(path), QSettings.Format.IniFormat))


def test_hostile_settings_file_reads_as_defaults(tmp_path):
    settings = _settings(tmp_path, HOSTILE_INI)
    assert settings.chat() == ChatSettings()
    assert settings.model_choice() == ("default", "auto", "auto")
    assert settings.recent_models() == []
    assert settings.last_conversation() is None
    assert settings.window_state() == (None, None)
    assert isinstance(settings.chat().sampling_config(), SamplingConfig)  # the engine accepts what it is given


@pytest.mark.parametrize("key,value", [(k, v) for k, values in ONE_BAD_VALUE.items() for v in values])
def test_each_unusable_chat_value_falls_back_to_its_default_and_the_rest_is_kept(tmp_path, key, value):
    settings = _settings(tmp_path, f"[chat]\n{key}={value}\nsystem_prompt=kept\n" if key != "system_prompt"
                         else f"[chat]\n{key}={value}\ntemperature=0.7\n")
    from app.state.settings import RANGES

    chat = settings.chat()
    assert getattr(chat, key) == getattr(ChatSettings(), key)
    assert (chat.system_prompt == "kept") if key != "system_prompt" else (chat.temperature == 0.7)
    for name, (low, high) in RANGES.items():
        number = getattr(chat, name)
        assert math.isfinite(number) and low <= number <= high


def test_good_values_are_read_back_with_their_types(tmp_path):
    settings = _settings(tmp_path, "[chat]\ntemperature=0.55\ntop_k=0\nseed=2147483647\nuse_kv_cache=false\n"
                                   "max_new_tokens=32768\n[model]\nmodel=/m/x\nprecision=nf4\ndevice=cpu\n"
                                   "[history]\nlast_conversation=12\n")
    chat = settings.chat()
    assert (chat.temperature, chat.top_k, chat.seed, chat.use_kv_cache, chat.max_new_tokens) == (
        0.55, 0, 2**31 - 1, False, 32768)
    assert settings.model_choice() == ("/m/x", "nf4", "cpu")
    assert settings.last_conversation() == 12


def test_recent_models_keep_only_distinct_strings(tmp_path):
    paths = ", ".join(f"/models/m{i}" for i in range(12))
    settings = _settings(tmp_path, "[model]\nrecent=@ByteArray(x), /real/model, @Invalid(), "
                                   "@Variant(\\0\\0\\0\\x2\\0\\0\\0\\x5), /real/model, , " + paths + "\n")
    assert settings.recent_models() == ["/real/model"] + [f"/models/m{i}" for i in range(MAX_RECENT_MODELS - 1)]
    assert _settings(tmp_path, "[model]\nrecent=/only/one\n").recent_models() == ["/only/one"]
    assert _settings(tmp_path, "[model]\nrecent=@Variant(\\0\\0\\0\\x2\\0\\0\\0\\x5)\n").recent_models() == []
    settings = _settings(tmp_path, "[model]\nrecent=@Invalid()\n")
    settings.add_recent_model("/new/model")  # a corrupt list is replaced, not a crash
    assert settings.recent_models() == ["/new/model"]


def test_each_unusable_key_is_warned_about_once(tmp_path, caplog):
    settings = _settings(tmp_path, HOSTILE_INI)
    with caplog.at_level(logging.WARNING, logger="app.state.settings"):
        for _ in range(3):
            settings.chat()
            settings.model_choice()
    keys = [record.getMessage().split()[1] for record in caplog.records]
    assert sorted(keys) == sorted(["chat/system_prompt", "chat/temperature", "chat/top_p", "chat/repetition_penalty",
                                   "chat/max_new_tokens", "chat/seed", "chat/use_kv_cache", "model/model",
                                   "model/precision", "model/device"])
    assert all("\n" not in record.getMessage() for record in caplog.records)


def test_settings_dialog_opens_on_a_hostile_file_and_shows_valid_values(qtbot, tmp_path):
    from app.widgets.settings_dialog import SettingsDialog

    settings = _settings(tmp_path, HOSTILE_INI.replace("seed=99999999999999999999", "seed=2147483648"))
    dialog = SettingsDialog(settings)
    qtbot.addWidget(dialog)
    dialog.show()
    assert dialog.values() == ChatSettings()
    assert dialog.seed.value() == -1 and dialog.temperature.value() == pytest.approx(0.2)


def test_main_window_builds_on_a_hostile_settings_file(qtbot, tmp_path):
    from app.history.store import HistoryStore
    from app.window.mainwindow import MainWindow

    settings = _settings(tmp_path, HOSTILE_INI.replace("last_conversation=1, 2", "last_conversation=" + "9" * 30))
    with HistoryStore(tmp_path / "history.sqlite3") as store:
        window = MainWindow(settings, store)
        qtbot.addWidget(window)
        window.show()
        assert window.isVisible()
        assert window.shutdown() is True


def test_speculation_choice_and_tint_are_remembered_and_checked(tmp_path):
    settings = _settings(tmp_path, "")
    assert settings.speculation() == "off" and settings.tint_drafts() is True  # defaults
    for value in ("prompt-lookup", "self", "draft:/models/small", "off"):
        settings.set_speculation(value)
        assert Settings(QSettings(str(tmp_path / "miaohui.ini"), QSettings.Format.IniFormat)).speculation() == value
    settings.set_tint_drafts(False)
    assert settings.tint_drafts() is False
    with pytest.raises(BadInputError):
        settings.set_speculation("guess")
    hostile = _settings(tmp_path, "[speculation]\nmethod=guess\ntint=maybe\n")
    assert hostile.speculation() == "off" and hostile.tint_drafts() is True
