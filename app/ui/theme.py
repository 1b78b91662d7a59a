"""Light and dark themes that follow the system's colour scheme while the app runs, and the app's stylesheet.

Owns colours, fonts, the Qt style sheet (focus rings included: every control shows where the keyboard is) and
"the theme changed": ``ThemeWatcher``, one per application (``watcher()``), applies the theme the appearance
setting asks for ("system", "light" or "dark", ``APPEARANCES``) and follows the system's colour scheme live
(``QStyleHints.colorSchemeChanged``, and a top-level window's ThemeChange/palette events where a platform reports
a change only that way). Widgets read ``current()`` for the few colours they paint themselves (code blocks, chart
lines) and subscribe to ``watcher().theme_changed`` to repaint them; ``matplotlib_rc`` gives a matplotlib figure
the theme's colours. Offscreen and unknown platforms get the light theme. Owns no layout and no widget.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QCoreApplication, QEvent, QObject, QPointF, Qt, Signal, Slot
from PySide6.QtGui import QColor, QFont, QGuiApplication, QImage, QPainter, QPalette, QPolygonF
from PySide6.QtWidgets import QApplication, QWidget

from app.ui import i18n


@dataclass(frozen=True)
class Theme:
    name: str
    window: str
    surface: str  # panels and the prompt box
    text: str
    muted: str  # footers, secondary labels
    accent: str
    user_bubble: str
    assistant_bubble: str
    border: str
    code_background: str
    pygments_style: str  # a pygments style name whose colours read well on code_background
    error: str
    warning: str
    focus: str  # the focus ring: distinct from the accent, so a focused accent-filled button shows it too
    on_accent: str  # text on an accent fill (primary buttons, selections): white on light's deep blue, dark on dark's
    draft_tint: str  # behind accepted speculative drafts (app.widgets.draft_tint): text >= 4.5:1 on it (11.8 / 6.1)


LIGHT = Theme(name="light", window="#f6f7f9", surface="#ffffff", text="#1f2328", muted="#6b7280",
              accent="#2563eb", user_bubble="#e8f0fe", assistant_bubble="#ffffff", border="#dfe3e8",
              code_background="#f6f8fa", pygments_style="default", error="#b42318", warning="#b54708",
              focus="#111827", on_accent="#ffffff", draft_tint="#bfe8cc")
DARK = Theme(name="dark", window="#1e1f22", surface="#26282c", text="#e6e7e9", muted="#9aa0a6",
             accent="#7aa2f7", user_bubble="#2b3a55", assistant_bubble="#26282c", border="#3a3d42",
             code_background="#1a1b1e", pygments_style="monokai", error="#f97066", warning="#fdb022",
             focus="#f5c542", on_accent="#10131a", draft_tint="#2a5e3f")

THEMES = {"light": LIGHT, "dark": DARK}
APPEARANCES = ("system", "light", "dark")  # the Settings choice: follow the system, or force one theme
_current: Theme = LIGHT
_system_family = ""  # the platform's default UI font family, read once
_arrow_folder: tempfile.TemporaryDirectory[str] | None = None  # this run's arrow images, removed at exit
ARROW_SIZE = (9, 5)  # logical pixels of a spin box's or drop-down's arrow


def current() -> Theme:
    return _current


def system_scheme() -> Qt.ColorScheme:
    """The platform's colour scheme; offscreen and test platforms say Unknown (the light theme)."""
    if QGuiApplication.platformName() in ("offscreen", "minimal"):
        return Qt.ColorScheme.Unknown
    return QGuiApplication.styleHints().colorScheme()


def system_prefers_dark() -> bool:
    """True when the platform reports a dark scheme; offscreen and unknown platforms say light."""
    return system_scheme() == Qt.ColorScheme.Dark


def theme_for(appearance: str, scheme: Qt.ColorScheme) -> Theme:
    """The theme ``appearance`` ("system", "light", "dark") asks for while the system's scheme is ``scheme``."""
    if appearance in THEMES:
        return THEMES[appearance]
    return DARK if scheme == Qt.ColorScheme.Dark else LIGHT


def matplotlib_rc(theme: Theme) -> dict[str, str]:
    """matplotlib rc parameters that draw a figure in ``theme``'s colours (``with matplotlib.rc_context(...)``)."""
    return {"figure.facecolor": theme.surface, "axes.facecolor": theme.surface, "savefig.facecolor": theme.surface,
            "axes.edgecolor": theme.border, "axes.labelcolor": theme.text, "text.color": theme.text,
            "xtick.color": theme.muted, "ytick.color": theme.muted, "grid.color": theme.border,
            "legend.facecolor": theme.surface, "legend.edgecolor": theme.border}


def _palette(theme: Theme) -> QPalette:
    palette = QPalette()
    roles = {
        QPalette.ColorRole.Window: theme.window, QPalette.ColorRole.Base: theme.surface,
        QPalette.ColorRole.AlternateBase: theme.window, QPalette.ColorRole.Text: theme.text,
        QPalette.ColorRole.WindowText: theme.text, QPalette.ColorRole.Button: theme.surface,
        QPalette.ColorRole.ButtonText: theme.text, QPalette.ColorRole.Highlight: theme.accent,
        QPalette.ColorRole.HighlightedText: theme.on_accent, QPalette.ColorRole.ToolTipBase: theme.surface,
        QPalette.ColorRole.ToolTipText: theme.text, QPalette.ColorRole.PlaceholderText: theme.muted,
        QPalette.ColorRole.Link: theme.accent,
    }
    for role, colour in roles.items():
        palette.setColor(role, QColor(colour))
    palette.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text, QColor(theme.muted))
    palette.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.ButtonText, QColor(theme.muted))
    return palette


def arrow_image(direction: str, colour: str) -> str:
    """The path of a PNG of an ``"up"`` or ``"down"`` arrow in ``colour``, made once per run.

    A style sheet that frames spin boxes and combo boxes takes over drawing their buttons, and draws their
    arrows only from an image file (``image: url(...)``; Qt's own arrow images are black, unreadable on the dark
    theme), so the arrows are painted here, in the theme's colours, at 4x for high-DPI screens."""
    global _arrow_folder
    if _arrow_folder is None:
        _arrow_folder = tempfile.TemporaryDirectory(prefix="miaohui-arrows-")
    path = Path(_arrow_folder.name) / f"arrow-{direction}-{colour.lstrip('#')}.png"
    if not path.is_file():
        scale = 4
        width, height = ARROW_SIZE[0] * scale, ARROW_SIZE[1] * scale
        image = QImage(width, height, QImage.Format.Format_ARGB32_Premultiplied)
        image.fill(Qt.GlobalColor.transparent)
        tip, base = (0.0, float(height)) if direction == "up" else (float(height), 0.0)
        painter = QPainter(image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(QColor(colour))
        painter.drawPolygon(QPolygonF([QPointF(0, base), QPointF(width, base), QPointF(width / 2, tip)]))
        painter.end()
        image.save(str(path))
    return path.as_posix()  # forward slashes: what a style sheet's url() takes on every platform


def _arrows(theme: Theme) -> str:
    """Spin-box and drop-down buttons with visible arrows (muted when disabled)."""
    width, height = ARROW_SIZE
    up, down, up_off, down_off = (f'url("{arrow_image(direction, colour)}")' for colour in (theme.text, theme.muted)
                                  for direction in ("up", "down"))
    spins = "QSpinBox", "QDoubleSpinBox"
    rules = [f"QComboBox::drop-down {{ subcontrol-origin: padding; subcontrol-position: center right; width: 16px; "
             f"border: none; }}",
             f"QComboBox::down-arrow {{ image: {down}; width: {width}px; height: {height}px; }}",
             f"QComboBox::down-arrow:disabled {{ image: {down_off}; }}"]
    for spin in spins:
        rules += [f"{spin} {{ padding-right: 22px; }}", f"{spin}:focus {{ padding-right: 21px; }}",
                  f"{spin}::up-button {{ subcontrol-origin: border; subcontrol-position: top right; width: 20px; "
                  f"border: none; margin: 2px 2px 0 0; }}",
                  f"{spin}::down-button {{ subcontrol-origin: border; subcontrol-position: bottom right; width: 20px; "
                  f"border: none; margin: 0 2px 2px 0; }}",
                  f"{spin}::up-button:hover, {spin}::down-button:hover {{ background: {theme.window}; "
                  f"border-radius: 3px; }}",
                  f"{spin}::up-arrow {{ image: {up}; width: {width}px; height: {height}px; }}",
                  f"{spin}::down-arrow {{ image: {down}; width: {width}px; height: {height}px; }}",
                  f"{spin}::up-arrow:disabled, {spin}::up-arrow:off {{ image: {up_off}; }}",
                  f"{spin}::down-arrow:disabled, {spin}::down-arrow:off {{ image: {down_off}; }}"]
    return "\n    ".join(rules)


def stylesheet(theme: Theme) -> str:
    return f"""
    QMainWindow, QDialog {{ background: {theme.window}; }}
    QToolBar {{ background: {theme.surface}; border: none; border-bottom: 1px solid {theme.border};
               padding: 6px 8px; spacing: 6px; }}
    QStatusBar {{ background: {theme.surface}; border-top: 1px solid {theme.border}; color: {theme.muted}; }}
    QDockWidget::title {{ background: {theme.surface}; padding: 6px 10px; border-bottom: 1px solid {theme.border}; }}
    QPushButton {{ background: {theme.surface}; border: 1px solid {theme.border}; border-radius: 6px;
                   padding: 5px 10px; }}
    QPushButton:hover {{ border-color: {theme.accent}; }}
    /* Disabled looks disabled: the window's grey instead of the surface, and muted text (not just a shade darker). */
    QPushButton:disabled {{ color: {theme.muted}; background: {theme.window}; border-style: dashed; }}
    QPushButton#primary {{ background: {theme.accent}; color: {theme.on_accent}; border: 1px solid {theme.accent}; }}
    QPushButton#primary:disabled {{ background: {theme.border}; border-color: {theme.border}; color: {theme.muted}; }}
    QPushButton#danger {{ color: {theme.error}; }}
    QPushButton#danger:disabled {{ color: {theme.muted}; }}
    QPushButton[flat="true"] {{ border: 1px solid transparent; background: transparent; color: {theme.accent};
                   padding: 1px 5px; }}
    QPushButton[flat="true"]:hover {{ text-decoration: underline; }}
    QComboBox, QLineEdit, QSpinBox, QDoubleSpinBox {{ background: {theme.surface}; border: 1px solid {theme.border};
                   border-radius: 6px; padding: 4px 8px; }}
    /* Drop-down lists as lists: the menu-like popup a framed QComboBox falls back to draws its highlighted
       entry blank (the fill of the box, the text in the selection's colour); a list takes these colours. */
    QComboBox {{ combobox-popup: 0; }}
    QComboBox QAbstractItemView {{ background: {theme.surface}; color: {theme.text}; outline: 0;
                   selection-background-color: {theme.accent}; selection-color: {theme.on_accent}; }}
    QComboBox QAbstractItemView::item {{ padding: 3px 6px; }}
    QPlainTextEdit#prompt {{ background: {theme.surface}; border: 1px solid {theme.border}; border-radius: 10px;
                   padding: 6px 8px; }}
    /* Focus rings: where the keyboard is, on every control, in both themes. A 2 px ring with 1 px less padding
       keeps each control's size, so moving the focus never shifts the layout. */
    QPushButton:focus, QPushButton#primary:focus, QPushButton#danger:focus {{ border: 2px solid {theme.focus};
                   padding: 4px 9px; }}
    QPushButton[flat="true"]:focus {{ border: 1px solid {theme.focus}; border-radius: 4px; }}
    QComboBox:focus, QLineEdit:focus, QSpinBox:focus, QDoubleSpinBox:focus {{ border: 2px solid {theme.focus};
                   padding: 3px 7px; }}
    QPlainTextEdit#prompt:focus {{ border: 2px solid {theme.focus}; padding: 5px 7px; }}
    {_arrows(theme)}
    QToolButton {{ border: 1px solid transparent; border-radius: 4px; }}
    QToolButton:focus {{ border: 1px solid {theme.focus}; }}
    QCheckBox {{ border: 1px solid transparent; border-radius: 4px; padding: 1px 2px; }}
    QCheckBox:focus {{ border: 1px solid {theme.focus}; }}
    QAbstractItemView, QPlainTextEdit, QTextBrowser {{ border: 1px solid {theme.border}; }}
    QScrollArea, QGraphicsView, QTextBrowser#messageText {{ border: 1px solid transparent; }}
    QAbstractItemView:focus, QPlainTextEdit:focus, QTextBrowser:focus, QScrollArea:focus, QGraphicsView:focus,
    QScrollArea#chat:focus, QTextBrowser#messageText:focus {{ border-color: {theme.focus}; }}
    /* Flat tabs, underlined when chosen: Fusion's framed tabs need ~24 px each beyond their text, which pushed
       the side panel's last tab behind scroll arrows in a 380 px dock. */
    QTabBar::tab {{ background: transparent; color: {theme.muted}; border: none; border-bottom: 2px solid transparent;
                   padding: 5px 8px; }}
    QTabBar::tab:selected {{ color: {theme.text}; border-bottom-color: {theme.accent}; }}
    QTabBar::tab:hover {{ color: {theme.text}; }}
    QTabBar::tab:disabled {{ color: {theme.muted}; }}
    QTabBar:focus {{ border-bottom: 2px solid {theme.focus}; }}
    QScrollArea#chat {{ background: {theme.window}; border: 1px solid transparent; }}
    QWidget#chatCanvas {{ background: {theme.window}; }}
    QFrame#userBubble {{ background: {theme.user_bubble}; border-radius: 12px; }}
    QFrame#assistantBubble {{ background: {theme.assistant_bubble}; border: 1px solid {theme.border};
                   border-radius: 12px; }}
    QLabel#footer {{ color: {theme.muted}; font-size: 11px; }}
    QLabel#role {{ color: {theme.muted}; font-weight: 600; font-size: 11px; }}
    QLabel#notice {{ color: {theme.warning}; }}
    QLabel#metricValue {{ font-weight: 600; }}
    QLabel#sectionTitle {{ color: {theme.muted}; font-weight: 600; font-size: 11px; text-transform: uppercase;
                   padding-top: 6px; }}
    QFrame#messageArea {{ background: {theme.surface}; border: 1px solid {theme.border}; border-radius: 8px; }}
    QFrame#messageArea[level="error"] {{ border-color: {theme.error}; }}
    QFrame#messageArea[level="warning"] {{ border-color: {theme.warning}; }}
    """


def apply(app: QApplication, dark: bool | None = None) -> Theme:
    """Install the palette, font and stylesheet; ``dark=None`` follows the system.

    Sets the theme once and says nothing; a running app changes theme through ``watcher()``, which calls this
    and tells the widgets."""
    global _current, _system_family
    _current = DARK if (system_prefers_dark() if dark is None else dark) else LIGHT
    if app.style().name().lower() != "fusion":
        app.setStyle("Fusion")  # the same look everywhere; native styles ignore parts of the palette
    app.setPalette(_palette(_current))
    font = QFont()
    _system_family = _system_family or QGuiApplication.font().family()  # before the first apply() replaces it
    # Families in order: the system's UI font, Latin fallbacks, then CJK (app.ui.i18n) and emoji fallbacks so
    # Chinese never renders as boxes where a CJK font is installed.
    font.setFamilies(i18n.font_families(_system_family, ("Inter", "Segoe UI", "Noto Sans", "DejaVu Sans"))
                     + ["Noto Color Emoji", "Apple Color Emoji", "Segoe UI Emoji"])
    font.setPointSizeF(10.0)
    app.setFont(font)
    app.setStyleSheet(stylesheet(_current))
    return _current


class ThemeWatcher(QObject):
    """The one place that knows the theme changed: applies the theme the appearance setting and the system's
    colour scheme ask for, and tells the widgets that paint colours of their own.

    Signals:
        theme_changed(object): the ``Theme`` now installed (palette and stylesheet already applied); emitted only
            when it differs from the one before.

    ``read_scheme`` (default ``system_scheme``) is what the palette/ThemeChange fallback asks for the system's scheme;
    tests pass their own, since the offscreen platform's scheme cannot change.
    """

    theme_changed = Signal(object)

    def __init__(self, app: QApplication, appearance: str = "system",
                 read_scheme: Callable[[], Qt.ColorScheme] = system_scheme) -> None:
        super().__init__(app)
        self._app = app
        self._read_scheme = read_scheme
        self._appearance = appearance if appearance in APPEARANCES else "system"
        self._scheme = read_scheme()
        self._applying = False
        QGuiApplication.styleHints().colorSchemeChanged.connect(self.on_color_scheme_changed)

    def appearance(self) -> str:
        return self._appearance

    def set_appearance(self, appearance: str) -> None:
        """Follow the system ("system") or force "light" / "dark"; re-applies at once."""
        if appearance not in APPEARANCES:
            raise ValueError(f"appearance must be one of {', '.join(APPEARANCES)}, not {appearance!r}")
        self._appearance = appearance
        self._install(theme_for(appearance, self._scheme))

    def watch(self, window: QWidget) -> None:
        """Also follow ``window``'s ThemeChange and application-palette events: some platforms report a new
        scheme only that way, without ``colorSchemeChanged``."""
        window.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt override)
        if not self._applying and event.type() in (QEvent.Type.ThemeChange, QEvent.Type.ApplicationPaletteChange):
            self.on_color_scheme_changed(self._read_scheme())
        return False

    @Slot(Qt.ColorScheme)
    def on_color_scheme_changed(self, scheme: Qt.ColorScheme) -> None:
        """The system's colour scheme is now ``scheme``: a forced appearance ignores it."""
        self._scheme = scheme
        self._install(theme_for(self._appearance, scheme))

    def _install(self, theme: Theme) -> None:
        if theme is current() and self._app.styleSheet():
            return  # the same theme again (our own palette change comes back as an event): nothing to redo
        self._applying = True  # apply() sends palette events to the watched window
        try:
            apply(self._app, dark=theme is DARK)
        finally:
            self._applying = False
        self.theme_changed.emit(theme)


def watcher() -> ThemeWatcher:
    """The application's theme watcher (made, following the system, by the first caller when main() made none)."""
    app = QCoreApplication.instance()
    if not isinstance(app, QApplication):
        raise RuntimeError("the theme needs a QApplication")
    found = app.findChild(ThemeWatcher)
    return found if found is not None else ThemeWatcher(app)


def install(app: QApplication, appearance: str = "system") -> ThemeWatcher:
    """Apply the theme ``appearance`` asks for now and keep following the system (``app.main`` at start)."""
    found = app.findChild(ThemeWatcher) or ThemeWatcher(app, appearance)
    found.set_appearance(appearance if appearance in APPEARANCES else "system")
    return found
