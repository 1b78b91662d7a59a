"""The Models window: the models this machine has, and (with downloads allowed) Hugging Face search, a model's
page with the fit estimate before downloading, and downloads with progress, pause, cancel and resume.

The Recommended tab ranks a curated list of real chat models for this machine (no network).

Non-modal: chat goes on while it is open, and a download goes on while it is hidden. The "Allow downloads from
Hugging Face" checkbox is ``Settings.allow_downloads`` (off at every start of the window); with it off the search controls are
disabled, Resume too, and nothing in this window opens a socket (every Hub call passes the setting to
``engine.library``, which refuses before building a request). Turning it off pauses a download under way.

Public API (for the main window): ``ModelsWindow(settings, parent=None, endpoint=None)``; signals
``model_chosen(str path)`` ("Use this model": a path ``LoadSpec(model=...)`` takes) and ``models_changed()``
(a model was installed or deleted: the model picker may refresh); ``shutdown(timeout_ms)`` pauses a download
(resumable) and waits for the window's threads, and runs by itself when the application quits.

Owns putting the parts together (``app.library``: installed list, search, model page with its fit, download
panel), the downloads switch and the one-line messages; every answer comes from ``engine.library``.
"""

from __future__ import annotations

from PySide6.QtCore import QCoreApplication, Qt, Signal, Slot
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import QCheckBox, QDialog, QHBoxLayout, QLabel, QTabWidget, QVBoxLayout, QWidget

from app.library.download_panel import DownloadPanel
from app.library.installed_tab import InstalledTab
from app.library.recommended_tab import RecommendedTab
from app.library.token_row import HubTokenRow
from app.library.search_tab import SearchTab
from app.runtime.background import TaskRunner
from app.state.hub_token import HubToken
from app.state.settings import Settings
from app.ui import accessibility
from app.widgets.message_area import MessageArea
from engine.errors import EngineError
from engine.library.access import DEFAULT_ENDPOINT, resolve_endpoint

DEFAULT_SIZE = (1180, 820)


class ModelsWindow(QDialog):
    """The model library window; open it with ``show()`` / ``raise_()`` / ``activateWindow()``."""

    model_chosen = Signal(str)  # "Use this model": the model's path (a folder or a .gguf file)
    models_changed = Signal()  # a model was installed or deleted

    def __init__(self, settings: Settings, parent: QWidget | None = None, *, endpoint: str | None = None,
                 tokens: HubToken | None = None) -> None:
        super().__init__(parent)
        self._settings = settings
        self.tokens = tokens or HubToken()  # the Hugging Face token of gated models, in the system keyring
        self._endpoint = endpoint  # None: HF_ENDPOINT, else huggingface.co (engine.library.access)
        self.setWindowTitle(self.tr("Models"))
        self.setModal(False)
        self.setWindowFlag(Qt.WindowType.WindowMaximizeButtonHint, True)
        self.setSizeGripEnabled(True)
        self.resize(*DEFAULT_SIZE)
        self.runner = TaskRunner(self)

        layout = QVBoxLayout(self)
        top = QHBoxLayout()
        self.allow_box = QCheckBox(self.tr("Allow downloads from Hugging Face"))
        self.allow_box.setToolTip(self.tr("Off by default. When on, this window searches huggingface.co (or the "
                                          "HF_ENDPOINT you set) and downloads the models you choose. A token is sent "
                                          "only when you save one below, and only there."))
        self.allow_box.setAccessibleDescription(self.allow_box.toolTip())
        top.addWidget(self.allow_box)
        self.access_note = QLabel()
        self.access_note.setObjectName("footer")
        self.access_note.setWordWrap(True)
        top.addWidget(self.access_note, 1)
        layout.addLayout(top)
        self.token_row = HubTokenRow(self.tokens, self.hub_endpoint)
        layout.addWidget(self.token_row)
        self.messages = MessageArea()
        layout.addWidget(self.messages)

        self.tabs = QTabWidget()
        self.installed_tab = InstalledTab(settings.recent_models())
        self.search_tab = SearchTab(self.runner)
        self.tabs.addTab(self.installed_tab, self.tr("Installed"))
        self.recommended_tab = RecommendedTab(self.runner)
        self.tabs.addTab(self.recommended_tab, self.tr("Recommended"))
        self.tabs.addTab(self.search_tab, self.tr("Search Hugging Face"))
        accessibility.name(self.tabs, self.tr("Model library"), self.tr("Installed models and Hugging Face search"))
        self.tabs.tabBar().setAccessibleName(self.tr("Model library sections"))
        layout.addWidget(self.tabs, 1)
        self.download_panel = DownloadPanel(self.runner)
        layout.addWidget(self.download_panel)

        self.installed_tab.use_requested.connect(self.on_use_requested)
        self.installed_tab.resume_requested.connect(self.on_download_requested)
        self.installed_tab.changed.connect(self.models_changed)
        self.installed_tab.error.connect(self.show_error)
        self.installed_tab.info.connect(self.show_info)
        self.search_tab.error.connect(self.show_error)
        self.recommended_tab.error.connect(self.show_error)
        self.recommended_tab.open_requested.connect(self.open_repo_page)
        self.recommended_tab.download_requested.connect(self.on_download_requested)
        self.search_tab.model_page.download_requested.connect(self.on_download_requested)
        self.download_panel.busy_changed.connect(self.on_download_busy)
        self.download_panel.finished.connect(self.on_download_finished)
        self.download_panel.stopped.connect(self.on_download_stopped)
        self.download_panel.failed.connect(self.on_download_failed)

        self.allow_box.setChecked(settings.allow_downloads())
        self.allow_box.toggled.connect(self.on_allow_toggled)
        self._apply_access()
        app = QCoreApplication.instance()
        if app is not None:
            app.aboutToQuit.connect(self.on_about_to_quit)

    # -- the downloads switch -------------------------------------------------------------------
    def downloads_allowed(self) -> bool:
        return self.allow_box.isChecked()

    def set_downloads_allowed(self, allowed: bool) -> None:
        """The same as ticking the checkbox (saved in the settings)."""
        self.allow_box.setChecked(allowed)

    def hub_endpoint(self) -> str:
        """The Hub this window talks to (its token is kept for this URL); the default one if the set one is bad."""
        try:
            return resolve_endpoint(self._endpoint)
        except EngineError:
            return resolve_endpoint(DEFAULT_ENDPOINT)

    def _apply_access(self) -> None:
        allowed = self.downloads_allowed()
        if allowed:
            try:
                where = resolve_endpoint(self._endpoint)
            except EngineError as exc:
                where = str(exc)
            self.access_note.setText(self.tr("On: searches and downloads go to {where}; a saved token goes there "
                                             "only.").format(where=where))
        else:
            self.access_note.setText(self.tr("Off: nothing in this window touches the network. Installed models "
                                             "work as always."))
        self.search_tab.set_access(allowed, self._endpoint)
        self.recommended_tab.set_access(allowed)
        self.installed_tab.set_resume_allowed(allowed and not self.download_panel.is_busy())

    @Slot(bool)
    def on_allow_toggled(self, allowed: bool) -> None:
        self._settings.set_allow_downloads(allowed)
        if not allowed and self.download_panel.is_busy():
            self.download_panel.pause()  # "off" means off: the partial files stay for a resume
        self._apply_access()

    # -- messages -------------------------------------------------------------------------------
    @Slot(str)
    def show_error(self, line: str) -> None:
        self.messages.show_message(line, "error")

    @Slot(str)
    def show_info(self, line: str) -> None:
        self.messages.show_message(line, "info")

    # -- installed models -----------------------------------------------------------------------
    def show_installed(self) -> None:
        """Bring the Installed tab forward, read afresh (and the recently used models from the settings)."""
        self.installed_tab.set_recent(self._settings.recent_models())
        self.installed_tab.refresh()
        self.tabs.setCurrentWidget(self.installed_tab)

    def show_recommended(self) -> None:
        """Bring the Recommended tab forward (the first start's note on the tiny default model asks for it)."""
        self.tabs.setCurrentWidget(self.recommended_tab)

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 - Qt's name
        """Each time the window opens: the models folder and the recently used models read afresh."""
        self.installed_tab.set_recent(self._settings.recent_models())
        self.installed_tab.refresh()
        self.recommended_tab.refresh()  # free memory changes as models load and unload
        self.search_tab.model_page.fit_panel.set_kv_precision(self._settings.kv_precision())  # the model bar's choice
        super().showEvent(event)

    @Slot(str)
    def open_repo_page(self, repo: str) -> None:
        """A model's Hub page (files, license, fit, download) in the search tab; downloads must be allowed."""
        if not self.downloads_allowed():
            self.show_error(self.tr("Downloads from Hugging Face are off: tick “Allow downloads from Hugging Face” "
                                    "first."))
            return
        self.tabs.setCurrentWidget(self.search_tab)
        self.search_tab.query.setText(repo)
        self.search_tab.model_page.show_repo(repo)

    @Slot(str)
    def on_use_requested(self, path: str) -> None:
        self.model_chosen.emit(path)

    # -- downloads ------------------------------------------------------------------------------
    def start_download(self, repo: str, file: str | None = None) -> bool:
        """Download ``repo`` (or its GGUF ``file``); False (with a message) when it cannot start now."""
        if not self.downloads_allowed():
            self.show_error(self.tr("Downloads from Hugging Face are off: tick “Allow downloads from Hugging Face” "
                                    "first."))
            return False
        token = self.tokens.load(self.hub_endpoint())  # None: the Hub refuses a gated model and says why
        if not self.download_panel.start(repo, file, allow_downloads=True, endpoint=self._endpoint, token=token):
            self.show_error(self.tr("Another download is under way: wait for it, or pause it first."))
            return False
        self.messages.on_close_clicked()
        return True

    @Slot(str, object)
    def on_download_requested(self, repo: str, file: object) -> None:
        self.start_download(repo, file if isinstance(file, str) else None)

    @Slot(bool)
    def on_download_busy(self, busy: bool) -> None:
        self.search_tab.model_page.set_download_busy(busy)
        self.installed_tab.set_resume_allowed(self.downloads_allowed() and not busy)
        self.installed_tab.refresh()

    @Slot(str)
    def on_download_finished(self, path: str) -> None:
        self.installed_tab.refresh()
        self.installed_tab.select_model(path)
        self.show_info(self.tr("Installed {path}: it is in the Installed tab, ready to use.").format(path=path))
        self.models_changed.emit()

    @Slot(str)
    def on_download_stopped(self, line: str) -> None:
        self.installed_tab.refresh()
        self.show_info(line)

    @Slot(str)
    def on_download_failed(self, line: str) -> None:
        self.installed_tab.refresh()
        self.show_error(line)

    # -- closing --------------------------------------------------------------------------------
    def shutdown(self, timeout_ms: int = 5000) -> bool:
        """Pause a download under way (it stays resumable) and wait for this window's threads; True when done."""
        self.download_panel.pause()
        return self.runner.wait(timeout_ms)

    @Slot()
    def on_about_to_quit(self) -> None:
        self.shutdown()
