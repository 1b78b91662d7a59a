"""The Chinese interface: the real window in 简体中文 shows no English (model names, units and numbers aside), the
English one stays English, the .ts source is complete and matches the code, and the language setting.

The window tests install the translators the way ``app.main`` does (``app.ui.i18n.install``), from a .qm compiled
here from the repository's .ts by ``pyside6-lrelease``: they test the translation as it is now, built or not.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import PySide6
from PySide6.QtCore import QCoreApplication, QSettings
from PySide6.QtWidgets import (QAbstractButton, QComboBox, QDockWidget, QLabel, QLineEdit, QPlainTextEdit,
                               QProgressBar, QTableWidget, QTabWidget, QWidget)

from app.ui import i18n
from app.ui.engine_texts import (EXPERIMENT_TEXTS, HISTORY_TEXTS, LOAD_FAILURES, LOAD_STAGES, REMOTE_FAILURES,
                                 WORKER_TEXTS, history_text, load_failure_text)
from app.history.notices import HistoryNotice, NoticeKind
from app.state.settings import Settings
from engine.errors import ErrorKind
from tests.app._gui_fixtures import (LOAD_TIMEOUT_MS, make_window, send_and_wait, settings,  # noqa: F401 (fixtures)
                                     store)

ROOT = Path(__file__).resolve().parents[3]
TS = ROOT / "assets" / "i18n" / "miaohui_zh_CN.ts"
pytestmark = [pytest.mark.qt_log_ignore("propagateSizeHints"), pytest.mark.qt_log_level_fail("WARNING")]

# What may stay in Latin letters in the Chinese interface: terms of the trade, units, formats, keys, names.
ALLOWED = re.compile(
    r"TTFT|tok/s|\btok\b|[Tt]okens?|\bid\b|KV|K/V|GQA|MQA|MHA|\d(?:·[\w²]+)+|Top-[pk]|top-p|distinct-1/2|A/B|"
    r"UTF-8|CSV|PNG|JSON|Markdown|GGUF|safetensors|Hugging ?Face|OpenAI|ChatGPT|\bAPI\b|Miaohui|Enter|Shift|Esc|Ctrl|"
    r"\(&[A-Z]\)|sink|"
    r"\b(?:fp32|fp16|bf16|int8|int4|nf4|fp4|bnb-int8|auto|cpu|cuda(?::\d+)?|mps)\b|"
    r"\b(?:ms|s|min|h|B|KiB|MiB|GiB|KB|MB|GB)\b")
CJK = re.compile(r"[\u3400-\u9fff\u3000-\u303f\uff00-\uffef]")


def _tool(name: str) -> str:
    """Qt's ``lupdate`` / ``lrelease`` as the PySide6 wheel ships them (what ``pyside6-<name>`` runs)."""
    return str(Path(PySide6.__file__).resolve().parent / (f"{name}.exe" if sys.platform == "win32" else name))


@pytest.fixture(scope="module")
def zh_translations(tmp_path_factory) -> Path:
    """A folder holding miaohui_zh_CN.qm compiled now from the repository's .ts."""
    folder = tmp_path_factory.mktemp("i18n")
    subprocess.run([_tool("lrelease"), "-silent", str(TS), "-qm", str(folder / "miaohui_zh_CN.qm")], check=True,
                   timeout=60)
    return folder


@pytest.fixture
def chinese(qapp, zh_translations, monkeypatch):
    monkeypatch.setattr(i18n, "TRANSLATIONS", zh_translations)
    assert i18n.install(qapp, "zh_CN") == "zh_CN"
    yield
    i18n.uninstall(qapp)


def _shown(widget: QWidget, root: QWidget) -> bool:
    return widget.isVisibleTo(root) and widget.window() is root


def visible_texts(window) -> list[str]:
    """Every text the window shows: labels, buttons, combo boxes, placeholders, progress bars, table headers,
    menus and their actions, dock and tab titles, the status bar, the chart's axis captions and the model card;
    each side tab is brought forward in turn so its contents count as shown."""
    texts = [window.windowTitle()]
    for menu_action in window.menuBar().actions():
        texts.append(menu_action.text())
        texts += [a.text() for a in menu_action.menu().actions() if not a.isSeparator()]
    texts += [dock.windowTitle() for dock in window.findChildren(QDockWidget)]
    texts += [text for row in window.model_card.rows for text in row]  # a table's cells: its captions and figures
    axis = window.perf_panel._plot.getPlotItem()
    texts += [axis.getAxis(side).labelText for side in ("bottom", "left")]
    tabs = window.side_tabs
    for index in range(tabs.count()):
        tabs.setCurrentIndex(index)
        QCoreApplication.processEvents()
        for widget in window.findChildren(QWidget):
            if not _shown(widget, window):
                continue
            if isinstance(widget, QLabel):
                texts.append(widget.text())
            elif isinstance(widget, QAbstractButton):
                texts.append(widget.text())
            elif isinstance(widget, QComboBox):
                texts.append(widget.currentText())
            elif isinstance(widget, QPlainTextEdit):
                texts.append("" if widget.toPlainText() else widget.placeholderText())
            elif isinstance(widget, QLineEdit):
                texts.append("" if widget.text() else widget.placeholderText())
            elif isinstance(widget, QProgressBar) and widget.isTextVisible():
                texts.append(widget.text())
            elif isinstance(widget, QTableWidget):
                texts += [widget.horizontalHeaderItem(c).text() for c in range(widget.columnCount())
                          if widget.horizontalHeaderItem(c) is not None and not widget.horizontalHeader().isHidden()]
            elif isinstance(widget, QTabWidget):
                texts += [widget.tabText(i) for i in range(widget.count())]
    tabs.setCurrentIndex(0)
    return [t for t in texts if t and t.strip()]


def _english_left(text: str, names: list[str]) -> list[str]:
    for name in names:
        text = text.replace(name, " ")
    return re.findall(r"[A-Za-z]{2,}", ALLOWED.sub(" ", text))


def test_chinese_window_shows_no_english(qtbot, chinese, make_window, tiny_model_dir):
    window = make_window(max_new_tokens=6)
    assert send_and_wait(qtbot, window, "你好，请介绍一下你自己") == "length"
    facts = window.controller.facts
    names = [facts.name, facts.architecture, tiny_model_dir.name, str(tiny_model_dir)]
    texts = visible_texts(window)
    assert window.send_button.text() == "发送" and window.side_tabs.tabText(0) == "性能"
    assert any("首 token 延迟" in t for t in texts) and any("预填充" == t for t in texts)
    english = {text: left for text in texts if (left := _english_left(text, names))}
    assert english == {}


def test_english_window_stays_english(qtbot, make_window):
    window = make_window(max_new_tokens=4)
    assert send_and_wait(qtbot, window, "Hello") == "length"
    texts = visible_texts(window)
    assert window.send_button.text() == "Send" and window.side_tabs.tabText(0) == "Performance"
    assert "Time to first token" in texts and "&Chat" in texts
    brand = ("秒回", "我昨天认识的那个人")  # the product's name, and the tokenizer's Chinese example
    chinese = [t for t in texts if CJK.search(re.sub("|".join(brand), "", t))]
    assert chinese == []


def test_qt_standard_dialog_buttons_are_translated_too(chinese):
    assert QCoreApplication.translate("QPlatformTheme", "Cancel") == "取消"


# ---------------------------------------------------------------- the .ts source


def _messages(path: Path):
    for context in ET.parse(path).getroot().iter("context"):
        for message in context.iter("message"):
            yield context.findtext("name"), message


PLACEHOLDERS = re.compile(r"\{[^{}]*\}|%\d")


def test_ts_has_every_message_translated_with_its_placeholders():
    checked = 0
    for context, message in _messages(TS):
        translation = message.find("translation")
        kind = translation.get("type")
        if kind in ("vanished", "obsolete"):
            continue
        source = message.findtext("source")
        assert kind != "unfinished" and (translation.text or "").strip(), (context, source)
        forms = [f.text or "" for f in translation.iter("numerusform")] or [translation.text]
        for form in forms:
            assert sorted(PLACEHOLDERS.findall(form)) == sorted(PLACEHOLDERS.findall(source)), (context, source, form)
        checked += 1
    assert checked > 300


def test_lupdate_finds_no_text_of_the_code_left_untranslated(tmp_path):
    """`pyside6-lupdate` over app/ (as `make i18n` runs it) adds nothing unfinished: every tr() text is translated."""
    copy = tmp_path / TS.name
    shutil.copy(TS, copy)
    sources = sorted(str(p) for p in (ROOT / "app").rglob("*.py") if "__pycache__" not in p.parts)
    subprocess.run([_tool("lupdate"), "-silent", "-locations", "none", *sources, "-ts", str(copy)], check=True,
                   timeout=120)
    unfinished = [(context, m.findtext("source")) for context, m in _messages(copy)
                  if m.find("translation").get("type") == "unfinished"]
    assert unfinished == [], "run `make i18n` and translate these in assets/i18n/miaohui_zh_CN.ts"


def test_the_engine_texts_the_window_shows_are_all_marked():
    from engine.lab import EXPERIMENTS

    for item in EXPERIMENTS:
        assert item.title in EXPERIMENT_TEXTS and item.description in EXPERIMENT_TEXTS, item.key
    loader = (ROOT / "engine" / "models" / "loader.py").read_text(encoding="utf-8")
    assert set(re.findall(r'LoadProgress\("([^"]+)"', loader)) <= set(LOAD_STAGES)
    worker = (ROOT / "engine" / "core" / "core.py").read_text(encoding="utf-8")  # the core runs the jobs now
    assert all(text in worker for text in WORKER_TEXTS)
    assert {kind.value for kind in NoticeKind} == set(HISTORY_TEXTS)  # every history notice, by its kind
    assert set(LOAD_FAILURES) == set(ErrorKind) and ErrorKind.OTHER in REMOTE_FAILURES


# ---------------------------------------------------------------- what the engine and the history say, in Chinese


def test_chinese_window_says_history_repairs_load_stages_and_load_failures_in_chinese(qtbot, chinese, settings,
                                                                                       tmp_path, tiny_model_dir):
    from app.history.store import HistoryStore
    from app.window.mainwindow import MainWindow
    from tests.helpers.faults import make_damaged

    path = tmp_path / "history" / "history.sqlite3"
    path.parent.mkdir()
    path.write_bytes(b"not a database " * 2000)  # repaired at start: set aside, a fresh history in its place
    store = HistoryStore(path)
    (copy,) = path.parent.glob("history.corrupt-*.sqlite3")
    window = MainWindow(settings, store)
    qtbot.addWidget(window)
    window.show()
    said = [window.messages.text()]
    assert said[0].startswith("历史记录文件已损坏（无法作为数据库读取）")
    stages: list[str] = []
    window.bridge.load_progressed.connect(lambda *_: stages.append(window.status_state.text()))  # after the window's
    with qtbot.waitSignal(window.model_ready, timeout=LOAD_TIMEOUT_MS):
        window.load_model(str(tiny_model_dir), "fp32", "cpu")
    assert stages[0] == "正在加载：检查文件" and "正在加载：加载权重" in stages
    missing, damaged = tmp_path / "no-such-model", make_damaged("truncated-safetensors", tiny_model_dir, tmp_path / "d")
    for model in (missing, damaged.path):
        with qtbot.waitSignal(window.bridge.load_failed, timeout=LOAD_TIMEOUT_MS):
            window.load_model(str(model), "fp32", "cpu")
        said.append(window.messages.text())
    facts = window.controller.facts
    assert said[-2].startswith("无法加载模型：找不到") and said[-1].endswith(f"已损坏或不完整（仍在使用 {facts.name}）")
    names = [facts.name, facts.architecture, tiny_model_dir.name, str(tiny_model_dir), str(copy), str(missing),
             str(damaged.path), damaged.path.name, "python -m engine fetch"]  # paths, model names, a command
    english = {text: left for text in said + stages + visible_texts(window) if (left := _english_left(text, names))}
    assert english == {}
    assert window.shutdown() is True
    store.close()


def test_history_notices_are_said_by_kind_with_their_worded_values(chinese):
    notice = HistoryNotice(NoticeKind.IN_MEMORY, path="/data/history.sqlite3",
                           reason=HistoryNotice(NoticeKind.NO_PERMISSION))
    assert notice == ("History at /data/history.sqlite3 cannot be opened (no permission); this session's chats are "
                      "kept in memory only.")  # the English line logs, tests and the CLI read
    assert history_text(notice) == "无法打开历史记录 /data/history.sqlite3（没有权限）；本次会话的对话只保存在内存中。"
    assert history_text("a plain line") == "a plain line"


def test_a_failed_load_in_english_keeps_the_engines_own_line():
    from app.runtime.worker import LoadFailure
    from engine.inputs import LoadSpec

    failure = LoadFailure(ErrorKind.NOT_FOUND, "no model at /x: give a model folder", LoadSpec("/x"))
    assert load_failure_text(failure, "tiny") == "Could not load the model: no model at /x: give a model folder " \
                                                 "(still using tiny)"


# ---------------------------------------------------------------- choosing the language, fonts


@pytest.mark.parametrize(("choice", "system", "expected"), [
    ("system", ["zh-Hans-CN", "en-US"], "zh_CN"), ("system", ["zh-TW"], "zh_CN"), ("system", ["de-DE", "en-GB"], "en"),
    ("system", ["fr-FR"], "en"), ("system", [], "en"), ("en", ["zh-CN"], "en"), ("zh_CN", ["en-US"], "zh_CN")])
def test_the_language_follows_the_setting_then_the_system(choice, system, expected):
    assert i18n.resolve(choice, system) == expected


def test_a_missing_translation_leaves_english(qapp, tmp_path, monkeypatch):
    monkeypatch.setattr(i18n, "TRANSLATIONS", tmp_path)
    assert i18n.install(qapp, "zh_CN") == "en"
    assert QCoreApplication.translate("SidePanel", "Performance") == "Performance"


def test_language_setting_round_trip_and_bad_values(tmp_path):
    settings = Settings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    assert settings.language() == "system"
    settings.set_language("zh_CN")
    assert settings.language() == "zh_CN"
    settings._q.setValue("ui/language", "klingon")
    assert settings.language() == "system"
    with pytest.raises(ValueError):
        settings.set_language("klingon")


def test_settings_dialog_saves_the_language(qtbot, tmp_path):
    from app.widgets.settings_dialog import SettingsDialog

    settings = Settings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    dialog = SettingsDialog(settings)
    qtbot.addWidget(dialog)
    assert dialog.language.currentData() == "system"
    assert [dialog.language.itemText(i) for i in (1, 2)] == ["English", "简体中文"]
    dialog.language.setCurrentIndex(dialog.language.findData("zh_CN"))
    dialog.accept()
    assert settings.language() == "zh_CN"


def test_cjk_fonts_follow_the_system_font_and_charts_fall_back(qapp, monkeypatch):
    from matplotlib import font_manager, rcParams

    from app.ui import theme

    theme.apply(qapp)
    families = qapp.font().families()
    assert families[0] == theme._system_family and "Noto Sans CJK SC" in families and "Microsoft YaHei" in families
    first = rcParams["font.sans-serif"][0]
    found = i18n.configure_chart_fonts()
    assert set(found) <= set(i18n.CJK_FAMILIES) and rcParams["font.sans-serif"][0] == first
    assert rcParams["font.sans-serif"][1:1 + len(found)] == found
    monkeypatch.setattr(font_manager.fontManager, "ttflist", [])  # a machine without any CJK font
    monkeypatch.setattr("engine.lab.fonts.fontconfig_cjk_files", lambda: [])  # (fontconfig knows none either)
    assert i18n.configure_chart_fonts() == [] and rcParams["font.sans-serif"][0] == first
