"""Light and dark themes that follow the system's colour scheme, and the app's stylesheet.

Owns colours, fonts and the Qt style sheet; widgets read ``current()`` for the few colours they
paint themselves (chat bubbles, chart lines, code blocks). Offscreen and unknown platforms get the
light theme. Owns no layout and no behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFont, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication

from app import i18n


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


LIGHT = Theme(name="light", window="#f6f7f9", surface="#ffffff", text="#1f2328", muted="#6b7280",
              accent="#2563eb", user_bubble="#e8f0fe", assistant_bubble="#ffffff", border="#dfe3e8",
              code_background="#f6f8fa", pygments_style="default", error="#b42318", warning="#b54708")
DARK = Theme(name="dark", window="#1e1f22", surface="#26282c", text="#e6e7e9", muted="#9aa0a6",
             accent="#7aa2f7", user_bubble="#2b3a55", assistant_bubble="#26282c", border="#3a3d42",
             code_background="#1a1b1e", pygments_style="monokai", error="#f97066", warning="#fdb022")

_current: Theme = LIGHT
_system_family = ""  # the platform's default UI font family, read once


def current() -> Theme:
    return _current


def system_prefers_dark() -> bool:
    """True when the platform reports a dark scheme; offscreen and unknown platforms say light."""
    if QGuiApplication.platformName() in ("offscreen", "minimal"):
        return False
    hints = QGuiApplication.styleHints()
    scheme = hints.colorScheme()
    if scheme != Qt.ColorScheme.Unknown:
        return scheme == Qt.ColorScheme.Dark
    return QGuiApplication.palette().color(QPalette.ColorRole.Window).lightness() < 128


def _palette(theme: Theme) -> QPalette:
    palette = QPalette()
    roles = {
        QPalette.ColorRole.Window: theme.window, QPalette.ColorRole.Base: theme.surface,
        QPalette.ColorRole.AlternateBase: theme.window, QPalette.ColorRole.Text: theme.text,
        QPalette.ColorRole.WindowText: theme.text, QPalette.ColorRole.Button: theme.surface,
        QPalette.ColorRole.ButtonText: theme.text, QPalette.ColorRole.Highlight: theme.accent,
        QPalette.ColorRole.HighlightedText: "#ffffff", QPalette.ColorRole.ToolTipBase: theme.surface,
        QPalette.ColorRole.ToolTipText: theme.text, QPalette.ColorRole.PlaceholderText: theme.muted,
        QPalette.ColorRole.Link: theme.accent,
    }
    for role, colour in roles.items():
        palette.setColor(role, QColor(colour))
    palette.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text, QColor(theme.muted))
    palette.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.ButtonText, QColor(theme.muted))
    return palette


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
    QPushButton:disabled {{ color: {theme.muted}; }}
    QPushButton#primary {{ background: {theme.accent}; color: #ffffff; border: 1px solid {theme.accent}; }}
    QPushButton#primary:disabled {{ background: {theme.border}; border-color: {theme.border}; color: {theme.muted}; }}
    QPushButton#danger {{ color: {theme.error}; }}
    QPushButton#danger:disabled {{ color: {theme.muted}; }}
    QPushButton[flat="true"] {{ border: none; background: transparent; color: {theme.accent}; padding: 2px 6px; }}
    QPushButton[flat="true"]:hover {{ text-decoration: underline; }}
    QComboBox, QLineEdit, QSpinBox, QDoubleSpinBox {{ background: {theme.surface}; border: 1px solid {theme.border};
                   border-radius: 6px; padding: 4px 8px; }}
    QPlainTextEdit#prompt {{ background: {theme.surface}; border: 1px solid {theme.border}; border-radius: 10px;
                   padding: 6px 8px; }}
    QPlainTextEdit#prompt:focus {{ border-color: {theme.accent}; }}
    QScrollArea#chat {{ background: {theme.window}; border: none; }}
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
    """Install the palette, font and stylesheet; ``dark=None`` follows the system."""
    global _current, _system_family
    _current = DARK if (system_prefers_dark() if dark is None else dark) else LIGHT
    app.setStyle("Fusion")  # the same look everywhere; native styles ignore parts of the palette
    app.setPalette(_palette(_current))
    font = QFont()
    _system_family = _system_family or QGuiApplication.font().family()  # before the first apply() replaces it
    # Families in order: the system's UI font, Latin fallbacks, then CJK (app.i18n) and emoji fallbacks so
    # Chinese never renders as boxes where a CJK font is installed.
    font.setFamilies(i18n.font_families(_system_family, ("Inter", "Segoe UI", "Noto Sans", "DejaVu Sans"))
                     + ["Noto Color Emoji", "Apple Color Emoji", "Segoe UI Emoji"])
    font.setPointSizeF(10.0)
    app.setFont(font)
    app.setStyleSheet(stylesheet(_current))
    return _current
