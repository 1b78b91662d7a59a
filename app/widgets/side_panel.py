"""The window's right-hand dock: the tabs of figures and views about the loaded model and the reply.

Owns building the tabs (Performance, Tokens, Model card, Tokenizer, Lab) and the dock that holds them; each tab
is its own widget module and owns its display. Owns no engine work: the tabs that need the model get the bridge.

The panel's width is the window's and the user's to set, never its contents': the tab widget's minimum width is
what its tab bar needs to show every tab (no scroll arrows), which also replaces the tabs' own minimum sizes, so a
long tokenized line or a wide table cannot push the panel wider (each tab wraps or scrolls inside instead).
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import QDockWidget, QTabWidget, QWidget

from app.ui import accessibility
from app.widgets.lab_tab import LabTab
from app.widgets.model_card import ModelCard
from app.widgets.perf_panel import PerfPanel
from app.widgets.token_inspector import TokenInspector
from app.widgets.tokenizer_view import TokenizerView


class SidePanel(QDockWidget):
    """The dock of tabs; its widgets are attributes so the window can wire them (no signals of its own)."""

    def __init__(self, bridge: QObject, parent: QWidget | None = None, controller: QObject | None = None) -> None:
        super().__init__(self.tr("Performance"), parent)
        self.setObjectName("perfDock")
        self.perf_panel = PerfPanel()
        self.perf_panel.roofline.attach(bridge)  # the weights read per token and the bandwidth: worker tasks
        if controller is not None:  # a conversation opened: its last reply's stored figures
            controller.conversation_shown.connect(self.perf_panel.show_stored)  # type: ignore[attr-defined]
            # the roofline's verdict rests on a CPU share measured live only: kept with the reply's record
            controller.perf_notes = self.perf_panel.roofline.notes  # type: ignore[attr-defined]
        self.token_inspector = TokenInspector()
        self.model_card = ModelCard(bridge)
        self.tokenizer_view = TokenizerView(bridge)
        self.lab_tab = LabTab(bridge)
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        for widget, title in ((self.perf_panel, self.tr("Performance")), (self.token_inspector, self.tr("Tokens")),
                              (self.model_card, self.tr("Model card")), (self.tokenizer_view, self.tr("Tokenizer")),
                              (self.lab_tab, self.tr("Lab"))):
            self.tabs.addTab(widget, title)
        accessibility.name(self.tabs, self.tr("Figures and views"),
                           self.tr("Performance, tokens, model card, tokenizer and lab"))
        self.tabs.tabBar().setAccessibleName(self.tr("Side panel tabs"))
        self._fit_tabs()
        self.setWidget(self.tabs)
        self.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetClosable
                         | QDockWidget.DockWidgetFeature.DockWidgetMovable
                         | QDockWidget.DockWidgetFeature.DockWidgetFloatable)

    def _fit_tabs(self) -> None:
        """The panel is at least as wide as all its tabs side by side, and its contents never ask for more."""
        frame = self.tabs.style().pixelMetric(self.tabs.style().PixelMetric.PM_DefaultFrameWidth, None, self.tabs)
        self.tabs.setMinimumWidth(self.tabs.tabBar().sizeHint().width() + 2 * frame)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt override)
        super().changeEvent(event)
        if event.type() in (QEvent.Type.StyleChange, QEvent.Type.FontChange):  # the tabs' widths changed with them
            self._fit_tabs()
