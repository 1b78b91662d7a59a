"""A Hub model's page: license, gated or not, whether it needs its own Python code (refused), every file with
its size and whether a download takes it, the GGUF quantizations, and the fit estimate of the chosen file.

``show_repo(repo)`` asks ``engine.library.hub.model_page`` off the GUI thread, then
``hub.remote_architecture`` for the chosen download (``config.json``, or the GGUF file's header read with
ranged requests: never the weights), and hands the architecture to the ``FitPanel``. Answers for a model the
user has since left are dropped. "Download" emits ``download_requested(repo, gguf_file_or_None)``; the
window starts it. Owns the page's display and its two questions to the Hub.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QPushButton, QTableWidgetItem, QVBoxLayout, QWidget

from app.library.fit_panel import FitPanel
from app.library.tables import read_only_table
from app.runtime.background import TaskRunner, error_line
from app.ui import theme
from engine import paths
from engine.errors import EngineError
from engine.fmt import format_bytes
from engine.library import hub
from engine.library.hub import ModelPage
from engine.models.safety import PICKLE_SUFFIXES

FILES_VISIBLE_ROWS = 4  # more scroll inside the table


def installed_path(page: ModelPage, file: str | None) -> Path | None:
    """Where a download of ``page`` (or its GGUF ``file``) would land, when something is already there
    (``engine.library.download`` names it so: ``owner--name``, and for the GGUF files of a safetensors repo
    ``owner--name-gguf``; a GGUF from a subfolder of the repo sits at the top of it, ``hub.gguf_local_name``)."""
    try:
        folder = paths.models_dir() / (hub.folder_name(page.repo) + ("-gguf" if file and page.format == "safetensors"
                                                                     else ""))
    except EngineError:
        return None
    target = folder / hub.gguf_local_name(page, file) if file else folder
    return target if target.exists() else None


class ModelPagePanel(QWidget):
    """One Hub model; ``page`` is the ``ModelPage`` shown (None while loading or empty)."""

    download_requested = Signal(str, object)  # repo, the GGUF file to take (None: the safetensors weights)

    def __init__(self, runner: TaskRunner, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._runner = runner
        self._allowed, self._endpoint = False, None
        self._download_busy = False
        self.repo: str | None = None
        self.page: ModelPage | None = None
        self._arches: dict[tuple[str, str | None], Any] = {}  # (repo, file) → (Architecture, DownloadPlan)
        layout = QVBoxLayout(self)
        self.title = QLabel(self.tr("No model selected"))
        font = self.title.font()
        font.setPointSizeF(font.pointSizeF() * 1.3)
        font.setBold(True)
        self.title.setFont(font)
        self.title.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.title)
        self.facts = QLabel(self.tr("Search, then pick a result to see its files and whether it fits."))
        self.facts.setWordWrap(True)
        self.facts.setObjectName("footer")
        layout.addWidget(self.facts)
        self.refusal = QLabel()
        self.refusal.setWordWrap(True)
        self.refusal.setTextFormat(Qt.TextFormat.PlainText)
        self.refusal.hide()
        self.on_theme_changed(theme.current())
        theme.watcher().theme_changed.connect(self.on_theme_changed)  # the colours below follow light/dark
        layout.addWidget(self.refusal)
        files_title = QLabel(self.tr("Files"))
        files_title.setObjectName("sectionTitle")
        layout.addWidget(files_title)
        self.files = read_only_table([self.tr("File"), self.tr("Size"), self.tr("Download takes it?")],
                                     selectable=False, accessible_name=self.tr("Files of this model"))
        layout.addWidget(self.files)
        self.download_row = QWidget()
        row = QHBoxLayout(self.download_row)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(QLabel(self.tr("Download")))
        self.choice = QComboBox()
        self.choice.setToolTip(self.tr("What a download takes: the safetensors weights, or one GGUF quantization"))
        self.choice.currentIndexChanged.connect(self.on_choice_changed)
        row.addWidget(self.choice, 1)
        self.choice.setAccessibleName(self.tr("What to download"))
        self.download_button = QPushButton(self.tr("Download"))
        self.download_button.setObjectName("primary")
        self.download_button.clicked.connect(self.on_download_clicked)
        row.addWidget(self.download_button)
        layout.addWidget(self.download_row)
        self._details = (files_title, self.files, self.download_row)  # shown once a page arrived
        self.fit_panel = FitPanel()
        layout.addWidget(self.fit_panel)
        layout.addStretch(1)
        self._update_buttons()

    # -- state from the window ------------------------------------------------------------------
    def set_access(self, allowed: bool, endpoint: str | None) -> None:
        self._allowed, self._endpoint = allowed, endpoint
        self._update_buttons()

    def set_download_busy(self, busy: bool) -> None:
        self._download_busy = busy
        self._update_buttons()

    def _update_buttons(self) -> None:
        page = self.page
        file = self.choice.currentData()
        blocked = self._block_reason(page, file)
        self.download_button.setEnabled(blocked is None)
        self.download_button.setToolTip(blocked or self.tr("Download into the models folder, verified file by file"))
        self.choice.setEnabled(page is not None and self.choice.count() > 0)
        for widget in self._details:
            widget.setVisible(page is not None)
        self.download_row.setVisible(page is not None and self.choice.count() > 0)

    def _block_reason(self, page: ModelPage | None, file: Any) -> str | None:
        if page is None or self.choice.count() == 0:
            return self.tr("Nothing to download")
        there = installed_path(page, file)
        if there is not None:
            return self.tr("Already installed at {path} (see the Installed tab)").format(path=there)
        if not self._allowed:
            return self.tr("Downloads are off")
        if self._download_busy:
            return self.tr("Another download is under way")
        if page.gated:
            return self.tr("Gated: its owners must grant access first, and Miaohui downloads only open models")
        if file is None and page.refusal:
            return page.refusal
        return None

    # -- the page -------------------------------------------------------------------------------
    def clear(self) -> None:
        self.repo, self.page = None, None
        self.title.setText(self.tr("No model selected"))
        self.facts.setText(self.tr("Search, then pick a result to see its files and whether it fits."))
        self.refusal.hide()
        self.files.setRowCount(0)
        self.choice.blockSignals(True)
        self.choice.clear()
        self.choice.blockSignals(False)
        self.fit_panel.clear()
        self._update_buttons()

    def show_repo(self, repo: str) -> None:
        """Ask the Hub for ``repo``'s page (off the GUI thread); shown when it answers."""
        self.clear()
        self.repo = repo
        self.title.setText(repo)
        self.facts.setText(self.tr("Reading the model's page…"))
        allowed, endpoint = self._allowed, self._endpoint
        self._runner.submit(lambda: hub.model_page(repo, allow_downloads=allowed, endpoint=endpoint),
                            functools.partial(self._on_page, repo), functools.partial(self._on_page_failed, repo))

    def _on_page(self, repo: str, page: ModelPage) -> None:
        if repo != self.repo:
            return
        self.page = page
        gated = self.tr("gated (needs the owners' permission)") if page.gated else self.tr("open")
        code = self.tr("needs its own Python code: refused") if page.needs_remote_code else self.tr("no custom code")
        self.facts.setText(self.tr("{format} · license {license} · {gated} · {code} · {downloads} downloads · "
                                   "updated {updated}").format(
            format=page.format, license=page.license or "?", gated=gated, code=code,
            downloads=f"{page.downloads:,}" if page.downloads is not None else "?",
            updated=(page.last_modified or "?")[:10]))
        self.refusal.setText(page.refusal[:1].upper() + page.refusal[1:] if page.refusal else "")
        self.refusal.setVisible(bool(page.refusal))
        self.choice.blockSignals(True)
        self.choice.clear()
        if page.format == "safetensors" and not page.refusal:
            size = sum(f.size for f in page.files if f.name in page.needed)
            self.choice.addItem(self.tr("safetensors weights + config and tokenizer ({n} files, {size})").format(
                n=len(page.needed), size=format_bytes(size)), None)
        for quant in page.ggufs:
            self.choice.addItem(self.tr("GGUF {quant} · {size} · {file}").format(
                quant=quant.quant, size=format_bytes(quant.size), file=quant.file), quant.file)
        self.choice.blockSignals(False)
        self._fill_files()
        self._update_buttons()
        if self.choice.count():
            self._estimate()
        else:
            self.fit_panel.clear(self.tr("No fit estimate: {why}").format(
                why=page.refusal or self.tr("this model has nothing the engine can load")))

    def _on_page_failed(self, repo: str, exc: BaseException) -> None:
        if repo == self.repo:
            self.facts.setText(error_line(exc))

    @Slot(object)
    def on_theme_changed(self, current: theme.Theme) -> None:
        self.refusal.setStyleSheet(f"color: {current.error};")
        self._fill_files()  # the files the download leaves out are drawn muted

    def _fill_files(self) -> None:
        page = self.page
        if page is None:
            return
        chosen = self.choice.currentData()
        taken = set(page.needed) if chosen is None and self.choice.count() else {chosen}
        muted = QColor(theme.current().muted)
        self.files.setRowCount(len(page.files))
        shown = max(1, min(len(page.files), FILES_VISIBLE_ROWS))
        self.files.setFixedHeight(self.files.horizontalHeader().sizeHint().height() + 2 * self.files.frameWidth()
                                  + shown * self.files.verticalHeader().defaultSectionSize())
        for row, remote in enumerate(page.files):
            if remote.name in taken:
                status = self.tr("yes, verified against its checksum")
            elif remote.name.lower().endswith(PICKLE_SUFFIXES):
                status = self.tr("never: pickle weights can run code")
            elif not self.choice.count():
                status = self.tr("no: the model is refused")
            elif remote.name.lower().endswith(".gguf"):
                status = self.tr("if chosen above")
            else:
                status = self.tr("not needed")
            for column, text in enumerate((remote.name, format_bytes(remote.size), status)):
                item = QTableWidgetItem(text)
                if column == 1:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                    item.setToolTip(f"{remote.size:,} B")
                if remote.name not in taken:
                    item.setForeground(muted)
                self.files.setItem(row, column, item)

    def _estimate(self) -> None:
        """The fit of the chosen download: from the cache, else from the Hub (config or GGUF header)."""
        repo, file = self.repo, self.choice.currentData()
        if repo is None:
            return
        key = (repo, file)
        if key in self._arches:
            return self._show_fit(key)
        self.fit_panel.clear(self.tr("Reading config.json…") if file is None
                             else self.tr("Reading the header of {file}…").format(file=file))
        allowed, endpoint = self._allowed, self._endpoint
        self._runner.submit(lambda: hub.remote_architecture(repo, file=file, allow_downloads=allowed,
                                                            endpoint=endpoint),
                            functools.partial(self._on_architecture, key),
                            functools.partial(self._on_architecture_failed, key))

    def _current_key(self) -> tuple[str | None, Any]:
        return self.repo, self.choice.currentData()

    def _on_architecture(self, key: tuple[str, str | None], result: Any) -> None:
        self._arches[key] = result
        if key == self._current_key():
            self._show_fit(key)

    def _on_architecture_failed(self, key: tuple[str, str | None], exc: BaseException) -> None:
        if key == self._current_key():
            self.fit_panel.clear(self.tr("No fit estimate: {why}").format(why=error_line(exc)))

    def _show_fit(self, key: tuple[str, str | None]) -> None:
        arch, plan = self._arches[key]
        label = key[0] + (f" ({key[1]})" if key[1] else "")
        self.fit_panel.set_architecture(arch, label, plan.total_bytes)

    # -- slots ----------------------------------------------------------------------------------
    @Slot(int)
    def on_choice_changed(self, _index: int) -> None:
        self._fill_files()
        self._update_buttons()
        self._estimate()

    @Slot()
    def on_download_clicked(self) -> None:
        if self.page is not None and self.download_button.isEnabled():
            self.download_requested.emit(self.page.repo, self.choice.currentData())
