"""The Help menu and its About box: ``About``.

Help → About Miaohui says which version runs (the application's version, which ``app.main`` sets), where its data
and its logs are (links that open the folders), and under which licences the app, its default model and the
libraries it ships with are used. Owns that menu and that box; reads the folders' paths without creating them
(``engine.paths.data_root``), and knows nothing else of the window.
"""

from __future__ import annotations

import html
from pathlib import Path
from PySide6.QtCore import QCoreApplication, QObject, Qt, QUrl, Slot
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMainWindow, QMessageBox

from engine.paths import DEFAULT_MODEL_NAME, data_root

# (what, licence): the app, the model it offers first, and the libraries every install carries.
LICENCES = (("Miaohui 秒回", "Apache-2.0"), (DEFAULT_MODEL_NAME, "Apache-2.0"), ("Qt for Python (PySide6)", "LGPL-3.0"),
            ("PyTorch", "BSD-3-Clause"), ("Hugging Face Transformers", "Apache-2.0"))


def _folder_link(path: Path) -> str:
    """A link that opens ``path`` in the system's file manager, showing the path itself (escaped: it is data)."""
    return f'<a href="{html.escape(QUrl.fromLocalFile(str(path)).toString())}">{html.escape(str(path))}</a>'


class About(QObject):
    """The window's Help menu (no signals): ``box`` is the About box last opened, or None."""

    def __init__(self, window: QMainWindow) -> None:
        super().__init__(window)
        self.window = window
        self.box: QMessageBox | None = None
        self.action: QAction | None = None  # Help → About Miaohui (set by ``attach``)

    @classmethod
    def attach(cls, window: QMainWindow) -> "About":
        """The Help menu, last on ``window``'s menu bar, with its About entry."""
        about = cls(window)
        menu = window.menuBar().addMenu(QCoreApplication.translate("About", "&Help"))
        about.action = menu.addAction(QCoreApplication.translate("About", "About Miaohui"), about.open_box)
        return about

    def text(self) -> str:
        """What the box says (rich text: the folders are links)."""
        data = data_root()
        licences = "<br>".join(f"{html.escape(what)}: {licence}" for what, licence in LICENCES)
        return "<br>".join((
            f"<b>Miaohui 秒回</b> {html.escape(QCoreApplication.applicationVersion())}",  # app.main sets it
            self.tr("A chat app that runs language models on this computer and shows why their replies come fast."),
            "",
            self.tr("Data folder: {path}").format(path=_folder_link(data)),
            self.tr("Logs folder: {path}").format(path=_folder_link(data / "logs")),
            "",
            self.tr("Licences:"),
            licences,
            self.tr("A model you download keeps its own licence: its page in Models… names it.")))

    @Slot()
    def open_box(self) -> QMessageBox:
        """Open the About box (window-modal, not a nested event loop)."""
        self.box = QMessageBox(QMessageBox.Icon.NoIcon, self.tr("About Miaohui"), self.text(),
                               QMessageBox.StandardButton.Close, self.window)
        self.box.setTextFormat(Qt.TextFormat.RichText)
        self.box.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)  # the links open the folders
        self.box.setIconPixmap(self.window.windowIcon().pixmap(64, 64))
        self.box.open()
        return self.box
