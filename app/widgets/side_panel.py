"""The window's right-hand dock: the tabs of figures and views about the loaded model and the reply.

Owns building the tabs (Performance, Tokens, Model card, Tokenizer, Lab) and the dock that holds them; each tab
is its own widget module and owns its display. Owns no engine work: the tabs that need the model get the bridge.
"""

from __future__ import annotations

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QDockWidget, QTabWidget, QWidget

from app.widgets import accessibility
from app.widgets.lab_tab import LabTab
from app.widgets.model_card import ModelCard
from app.widgets.perf_panel import PerfPanel
from app.widgets.token_inspector import TokenInspector
from app.widgets.tokenizer_view import TokenizerView


class SidePanel(QDockWidget):
    """The dock of tabs; its widgets are attributes so the window can wire them (no signals of its own)."""

    def __init__(self, bridge: QObject, parent: QWidget | None = None) -> None:
        super().__init__(self.tr("Performance"), parent)
        self.setObjectName("perfDock")
        self.perf_panel = PerfPanel()
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
        self.setWidget(self.tabs)
        self.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetClosable
                         | QDockWidget.DockWidgetFeature.DockWidgetMovable
                         | QDockWidget.DockWidgetFeature.DockWidgetFloatable)
