"""The models this machine has: name, format, size on disk, parameters, the precisions it loads in, where it
came from, when it was last used, the default marked; and the downloads that stopped part-way.

Reads ``engine.library.installed`` (local files only: config or GGUF header, never weights, never the
network). "Use this model" emits ``use_requested(path)``; "Open folder" asks the desktop to show the folder;
"Delete…" asks first (saying so when it is the default model) and deletes through the library, which refuses
anything outside the models folder. Paused downloads offer Resume (``resume_requested(repo, file)``, which
the window starts when downloads are allowed) and Discard. Owns this list and its confirmations.
"""

from __future__ import annotations

import os
from pathlib import Path

import psutil
from PySide6.QtCore import Qt, QUrl, Signal, Slot
from PySide6.QtGui import QDesktopServices, QFont
from PySide6.QtWidgets import QHBoxLayout, QLabel, QMessageBox, QPushButton, QTableWidgetItem, QVBoxLayout, QWidget

from app.library.tables import read_only_table
from app.runtime.background import error_line
from engine import paths
from engine.errors import EngineError
from engine.fmt import format_bytes
from engine.library import download, installed
from engine.library.installed import InstalledModel, PartialDownload

MODEL_COLUMNS = 7
PARTIAL_TABLE_HEIGHT = 110


def downloader_pid(partial: PartialDownload) -> int | None:
    """The live process downloading into ``partial``'s work folder right now, if any."""
    try:
        pid = int((Path(partial.path) / download.OWNER).read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if psutil.pid_exists(pid) else None


def _same_path(a: str, b: str) -> bool:
    try:
        return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()
    except (OSError, RuntimeError, ValueError):
        return a == b


class InstalledTab(QWidget):
    """``models`` and ``partial`` are what the tables show, in their order."""

    use_requested = Signal(str)  # a model's path
    resume_requested = Signal(str, object)  # repo, GGUF file or None
    changed = Signal()  # a model or a paused download was deleted
    error = Signal(str)
    info = Signal(str)

    def __init__(self, recent: list[str] | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.models: list[InstalledModel] = []
        self.partial: list[PartialDownload] = []
        self._recent = list(recent or [])
        self._resume_allowed = False
        layout = QVBoxLayout(self)
        self.folder_label = QLabel()
        self.folder_label.setObjectName("footer")
        self.folder_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.folder_label)
        self.table = read_only_table([self.tr("Model"), self.tr("Format"), self.tr("Size on disk"),
                                      self.tr("Parameters"), self.tr("Loads in"), self.tr("From"),
                                      self.tr("Last used")], stretch=4, accessible_name=self.tr("Installed models"))
        self.table.itemSelectionChanged.connect(self._update_buttons)
        self.table.itemDoubleClicked.connect(self.on_use_clicked)
        layout.addWidget(self.table, 1)
        self.empty_note = QLabel(self.tr("No models here yet. Allow downloads and search Hugging Face, or run "
                                         "`python -m engine fetch` for the default model."))
        self.empty_note.setWordWrap(True)
        self.empty_note.setObjectName("footer")
        layout.addWidget(self.empty_note)
        buttons = QHBoxLayout()
        self.use_button = QPushButton(self.tr("Use this model"))
        self.use_button.setObjectName("primary")
        self.use_button.clicked.connect(self.on_use_clicked)
        buttons.addWidget(self.use_button)
        self.open_button = QPushButton(self.tr("Open folder"))
        self.open_button.clicked.connect(self.on_open_clicked)
        buttons.addWidget(self.open_button)
        buttons.addStretch(1)
        self.refresh_button = QPushButton(self.tr("Refresh"))
        self.refresh_button.clicked.connect(self.refresh)
        buttons.addWidget(self.refresh_button)
        self.delete_button = QPushButton(self.tr("Delete…"))
        self.delete_button.setObjectName("danger")
        self.delete_button.clicked.connect(self.on_delete_clicked)
        buttons.addWidget(self.delete_button)
        layout.addLayout(buttons)

        self.partial_box = QWidget()
        partial = QVBoxLayout(self.partial_box)
        partial.setContentsMargins(0, 8, 0, 0)
        title = QLabel(self.tr("Downloads that stopped part-way"))
        title.setObjectName("sectionTitle")
        partial.addWidget(title)
        self.partial_table = read_only_table([self.tr("Model"), self.tr("Downloaded")],
                                             accessible_name=self.tr("Paused downloads"))
        self.partial_table.setFixedHeight(PARTIAL_TABLE_HEIGHT)
        self.partial_table.itemSelectionChanged.connect(self._update_buttons)
        partial.addWidget(self.partial_table)
        row = QHBoxLayout()
        self.resume_button = QPushButton(self.tr("Resume"))
        self.resume_button.clicked.connect(self.on_resume_clicked)
        row.addWidget(self.resume_button)
        self.discard_button = QPushButton(self.tr("Discard…"))
        self.discard_button.setObjectName("danger")
        self.discard_button.clicked.connect(self.on_discard_clicked)
        row.addWidget(self.discard_button)
        row.addStretch(1)
        partial.addLayout(row)
        layout.addWidget(self.partial_box)
        self.refresh()

    # -- the lists ------------------------------------------------------------------------------
    @Slot()
    def refresh(self) -> None:
        """Read the models folder again (local files only)."""
        try:
            self.folder_label.setText(self.tr("Models folder: {folder}").format(folder=paths.models_dir()))
            self.models = installed.list_installed()
            # a download under way in this window is the progress bar's, not a stopped one
            self.partial = [p for p in installed.partial_downloads() if downloader_pid(p) != os.getpid()]
        except EngineError as exc:
            self.models, self.partial = [], []
            self.error.emit(error_line(exc))
        except OSError as exc:  # a folder renamed or removed while it was read (a download finishing)
            self.models, self.partial = [], []
            self.error.emit(self.tr("Could not read the models folder: {why}").format(why=exc.strerror or exc))
        self._fill_models()
        self._fill_partial()
        self._update_buttons()

    def set_recent(self, recent: list[str]) -> None:
        self._recent = list(recent)
        self._fill_models()

    def _last_used(self, model: InstalledModel) -> str:
        for rank, path in enumerate(self._recent):
            if (model.default and path == "default") or _same_path(path, model.path):
                return self.tr("last") if rank == 0 else self.tr("{n} models ago").format(n=rank)
        return "—"

    def _fill_models(self) -> None:
        selected = self.selected_model()
        self.table.blockSignals(True)
        self.table.setRowCount(len(self.models))
        for row, m in enumerate(self.models):
            name = m.name + (self.tr("  ★ default") if m.default else "")
            precisions = " ".join(m.precisions) if not m.problem else self.tr("unreadable: {why}").format(why=m.problem)
            cells = [name, "GGUF" if m.format == "gguf" else "safetensors", format_bytes(m.size_bytes),
                     f"{m.params:,}" if m.params is not None else "—", precisions, m.repo or "—",
                     self._last_used(m)]
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setData(Qt.ItemDataRole.UserRole, row)
                item.setToolTip(m.path if column == 0 else text)
                if column in (2, 3):
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if m.default:
                    font = QFont(item.font())
                    font.setBold(True)
                    item.setFont(font)
                self.table.setItem(row, column, item)
        self.table.blockSignals(False)
        if selected is not None:
            self.select_model(selected.path)
        self.empty_note.setVisible(not self.models)

    def _fill_partial(self) -> None:
        self.partial_table.setRowCount(len(self.partial))
        for row, p in enumerate(self.partial):
            total = format_bytes(p.total_bytes) if p.total_bytes else "?"
            pid = downloader_pid(p)
            elsewhere = self.tr("  (being downloaded by process {pid})").format(pid=pid) if pid else ""
            cells = [(p.repo or p.name) + elsewhere,
                     self.tr("{done} of {total}").format(done=format_bytes(p.done_bytes), total=total)]
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(p.path)
                self.partial_table.setItem(row, column, item)
        self.partial_box.setVisible(bool(self.partial))

    # -- selection ------------------------------------------------------------------------------
    def selected_model(self) -> InstalledModel | None:
        rows = self.table.selectionModel().selectedRows()
        return self.models[rows[0].row()] if rows and rows[0].row() < len(self.models) else None

    def select_model(self, path: str) -> bool:
        for row, m in enumerate(self.models):
            if _same_path(m.path, path):
                self.table.selectRow(row)
                return True
        return False

    def selected_partial(self) -> PartialDownload | None:
        rows = self.partial_table.selectionModel().selectedRows()
        return self.partial[rows[0].row()] if rows and rows[0].row() < len(self.partial) else None

    def set_resume_allowed(self, allowed: bool) -> None:
        """Resume needs downloads allowed and no other download under way."""
        self._resume_allowed = allowed
        self._update_buttons()

    @Slot()
    def _update_buttons(self) -> None:
        model = self.selected_model()
        for button in (self.use_button, self.open_button, self.delete_button):
            button.setEnabled(model is not None)
        partial = self.selected_partial()
        idle = partial is not None and downloader_pid(partial) is None
        resumable = idle and self.resume_target(partial) is not None  # type: ignore[arg-type]
        self.resume_button.setEnabled(self._resume_allowed and resumable)
        self.resume_button.setToolTip(self.tr("Continue from where it stopped") if self._resume_allowed
                                      else self.tr("Allow downloads (and let any other download finish) to resume"))
        self.discard_button.setEnabled(idle)

    @staticmethod
    def resume_target(partial: PartialDownload) -> tuple[str, str | None] | None:
        """(repo, GGUF file or None) that downloading again resumes, from the work folder's saved plan."""
        state = download.read_state(Path(partial.path)) or {}
        files = state.get("files") if isinstance(state.get("files"), list) else []
        repo = state.get("repo")
        if not isinstance(repo, str) or not files:
            return None
        if state.get("kind") == "gguf":
            name = files[0].get("name") if isinstance(files[0], dict) else None
            return (repo, name) if isinstance(name, str) else None
        return repo, None

    # -- actions --------------------------------------------------------------------------------
    @Slot()
    def on_use_clicked(self) -> None:
        model = self.selected_model()
        if model is not None:
            self.use_requested.emit(model.path)

    @Slot()
    def on_open_clicked(self) -> None:
        model = self.selected_model()
        if model is None:
            return
        path = Path(model.path)
        folder = path if path.is_dir() else path.parent
        if not QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder))):
            self.error.emit(self.tr("Could not open {folder}: no file manager answered.").format(folder=folder))

    @Slot()
    def on_delete_clicked(self) -> None:
        model = self.selected_model()
        if model is None:
            return
        text = self.tr("Delete {name} ({size}) from disk?\n\n{path}").format(
            name=model.name, size=format_bytes(model.size_bytes), path=model.path)
        if model.default:
            text += "\n\n" + self.tr("This is the default model. Without it Miaohui starts with no model until you "
                                     "choose another one or fetch it again (python -m engine fetch).")
        answer = QMessageBox.question(self, self.tr("Delete model"), text,
                                      QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
                                      QMessageBox.StandardButton.No)
        if answer != QMessageBox.StandardButton.Yes:
            return
        try:
            removed = installed.delete(model.name, allow_default=model.default)
        except EngineError as exc:
            self.error.emit(error_line(exc))
        except OSError as exc:
            self.error.emit(self.tr("Could not delete {name}: {why}").format(name=model.name, why=exc.strerror or exc))
        else:
            self.info.emit(self.tr("Deleted {path}.").format(path=removed))
        self.refresh()
        self.changed.emit()

    @Slot()
    def on_resume_clicked(self) -> None:
        partial = self.selected_partial()
        target = self.resume_target(partial) if partial is not None else None
        if target is not None and self._resume_allowed:
            self.resume_requested.emit(*target)

    @Slot()
    def on_discard_clicked(self) -> None:
        partial = self.selected_partial()
        if partial is None:
            return
        text = self.tr("Discard the partial download of {model} ({size} so far)?").format(
            model=partial.repo or partial.name, size=format_bytes(partial.done_bytes))
        answer = QMessageBox.question(self, self.tr("Discard download"), text,
                                      QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
                                      QMessageBox.StandardButton.No)
        if answer != QMessageBox.StandardButton.Yes:
            return
        try:
            installed.delete_partial(partial.name)
        except EngineError as exc:
            self.error.emit(error_line(exc))
        except OSError as exc:
            self.error.emit(self.tr("Could not discard it: {why}").format(why=exc.strerror or exc))
        self.refresh()
        self.changed.emit()
