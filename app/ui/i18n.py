"""The interface's language and the fonts that let it render: which language, loading its translations.

The language is the ``language`` setting (``app.state.settings``): "system" (the default) follows the system's
preferred UI languages (the first of them that Miaohui has: any Chinese gives 简体中文, English or anything
else gives English); "en" or "zh_CN" choose one. It is chosen once, before the window is built, so a change
in Settings applies at the next start (every label would otherwise need re-translating in place).

``install`` loads Miaohui's own translation ``assets/i18n/miaohui_<lang>.qm`` and Qt's ``qtbase_<lang>.qm``
(the buttons of standard dialogs: Yes/No, Cancel, the file dialog) from Qt's translations folder. The ``.qm``
is built from the ``.ts`` source kept in the repository by ``pyside6-lrelease`` (``make i18n``, part of
``make install``; ``packaging/miaohui.spec`` ships it). A missing ``.qm`` leaves the interface in English with
one logged warning, never a failed start.

The window's font is a family list (``app.ui.theme``): the system's default first, then Latin and CJK fallbacks
(``CJK_FAMILIES``) so Chinese renders wherever one of them is installed. The lab's matplotlib charts put an
installed CJK font in their own fallback list (``engine.lab.charts``); ``configure_chart_fonts`` does the same
for any matplotlib text drawn outside them. Neither fails when no CJK font is installed: Chinese then shows as
the platform draws missing glyphs.
Owns no widget and no setting.
"""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QLibraryInfo, QLocale, QTranslator

from app.ui.assets import ASSETS

log = logging.getLogger(__name__)

LANGUAGES = ("system", "en", "zh_CN")  # the values of the ``language`` setting
TRANSLATIONS = ASSETS / "i18n"  # also inside the frozen bundle
# Simplified Chinese faces on Linux, Windows and macOS, most common first; Qt and matplotlib skip absent ones.
CJK_FAMILIES = ("Noto Sans CJK SC", "Source Han Sans SC", "Noto Sans SC", "Microsoft YaHei UI", "Microsoft YaHei",
                "PingFang SC", "Hiragino Sans GB", "WenQuanYi Micro Hei", "WenQuanYi Zen Hei", "Noto Sans CJK JP")

_installed: list[QTranslator] = []  # the translators in effect (kept referenced: Qt does not own them)


def resolve(choice: str, ui_languages: list[str] | None = None) -> str:
    """The language to show, "en" or "zh_CN", for the setting ``choice``.

    "system" looks through ``ui_languages`` (default: the system's, most preferred first) for the first one
    Miaohui has; Traditional Chinese readers get 简体中文 too, closer to them than English.
    """
    if choice in ("en", "zh_CN"):
        return choice
    for name in QLocale.system().uiLanguages() if ui_languages is None else ui_languages:
        code = name.replace("_", "-").lower()
        if code.startswith("zh"):
            return "zh_CN"
        if code.startswith("en"):
            return "en"
    return "en"


def qm_path(language: str) -> Path:
    """Where Miaohui's compiled translation for ``language`` is (built by ``make i18n``)."""
    return TRANSLATIONS / f"miaohui_{language}.qm"


def _qt_translations() -> list[str]:
    """Folders that may hold Qt's own ``qtbase_*.qm``: Qt's configured one, then PySide6's wheel layout."""
    folders = [QLibraryInfo.path(QLibraryInfo.LibraryPath.TranslationsPath)]
    try:
        import PySide6

        folders.append(str(Path(PySide6.__file__).resolve().parent / "Qt" / "translations"))
    except (ImportError, TypeError):  # a frozen build may carry no package path
        pass
    return folders


def install(app: QCoreApplication, choice: str) -> str:
    """Install the translators for the setting ``choice`` (replacing any installed before); returns the
    language now shown: "en", or "zh_CN" when its ``.qm`` loaded."""
    uninstall(app)
    language = resolve(choice)
    if language == "en":
        return "en"
    own = QTranslator(app)
    path = qm_path(language)
    if not own.load(str(path)):
        log.warning("no translation at %s (run `make i18n`); the interface stays in English", path)
        return "en"
    app.installTranslator(own)
    _installed.append(own)
    qt = QTranslator(app)
    if any(qt.load(f"qtbase_{language}", folder) for folder in _qt_translations()):
        app.installTranslator(qt)
        _installed.append(qt)
    else:
        log.info("Qt's own %s translation was not found; standard dialog buttons stay in English", language)
    return language


def uninstall(app: QCoreApplication) -> None:
    """Remove the translators ``install`` put in (tests, and ``app.main`` when it returns)."""
    while _installed:
        app.removeTranslator(_installed.pop())


def font_families(default_family: str, latin: tuple[str, ...] | list[str]) -> list[str]:
    """The window's font families: the system default first, then ``latin``, then the CJK faces; each once."""
    return list(dict.fromkeys([f for f in (default_family, *latin, *CJK_FAMILIES) if f]))


def configure_chart_fonts() -> list[str]:
    """Put the installed CJK faces after matplotlib's default sans-serif font (it falls back glyph by glyph
    along the list, since matplotlib 3.6); returns the ones added, none on a machine without them."""
    import matplotlib
    from matplotlib import font_manager

    from engine.lab.fonts import refresh_cjk_fonts

    refresh_cjk_fonts()  # a CJK font installed after matplotlib cached its font list: added, cache rewritten
    installed = {entry.name for entry in font_manager.fontManager.ttflist}
    found = [name for name in CJK_FAMILIES if name in installed]
    current = [name for name in matplotlib.rcParams["font.sans-serif"] if name not in found]
    matplotlib.rcParams["font.sans-serif"] = current[:1] + found + current[1:]
    return found
