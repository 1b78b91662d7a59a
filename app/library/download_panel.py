"""The download under way: a progress bar with bytes, speed and time left, Pause and Cancel.

``start(repo, file, allow_downloads=..., endpoint=...)`` runs ``engine.library.download.download`` on a pool
thread (one download at a time); its progress reaches the GUI thread through the runner's queued signals and
is redrawn at most ten times a second (the latest figures always shown). Pause stops within one chunk and
keeps the partial files (the Installed tab lists the download; resuming is another ``start`` of the same repo
and file, also after a restart); Cancel stops the same way and removes them. Ends in one of
``finished(path)``, ``stopped(line)`` (paused or cancelled) or ``failed(line)``; ``busy_changed`` brackets the
download. Owns the transfer's controls and display.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from PySide6.QtCore import Signal, Slot
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QProgressBar, QPushButton, QVBoxLayout, QWidget

from app.runtime.background import TaskRunner, error_line
from app.ui.throttle import Throttle
from engine.errors import CancelledError
from engine.fmt import format_bytes
from engine.library import download
from engine.library.download import DownloadProgress, DownloadResult

CHUNK_BYTES = 256 << 10  # Pause and Cancel act within one chunk
BAR_STEPS = 1000  # the bar counts permille: a byte count would overflow its int range past 2 GiB
REDRAW_MS = 100


@dataclass
class DownloadJob:
    repo: str
    file: str | None  # the GGUF file, or None for the safetensors weights
    cancel: threading.Event = field(default_factory=threading.Event)
    pause: threading.Event = field(default_factory=threading.Event)
    last: DownloadProgress | None = None

    @property
    def label(self) -> str:
        return self.repo + (f" ({self.file})" if self.file else "")


class DownloadPanel(QFrame):
    """Hidden while idle; ``job`` is the download under way (None when idle)."""

    finished = Signal(str)  # the installed model's path (what "Use this model" and LoadSpec take)
    stopped = Signal(str)  # paused or cancelled: one line
    failed = Signal(str)  # one line
    busy_changed = Signal(bool)

    def __init__(self, runner: TaskRunner, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._runner = runner
        self.chunk_bytes = CHUNK_BYTES
        self.job: DownloadJob | None = None
        self._redraw = Throttle(self._show_progress, REDRAW_MS, self)
        self.setObjectName("messageArea")
        layout = QVBoxLayout(self)
        top = QHBoxLayout()
        self.title = QLabel()
        self.title.setObjectName("metricValue")
        top.addWidget(self.title, 1)
        self.pause_button = QPushButton(self.tr("Pause"))
        self.pause_button.setToolTip(self.tr("Stop now and keep what arrived: resume it later from the Installed tab"))
        self.pause_button.clicked.connect(self.on_pause_clicked)
        top.addWidget(self.pause_button)
        self.cancel_button = QPushButton(self.tr("Cancel"))
        self.cancel_button.setObjectName("danger")
        self.cancel_button.setToolTip(self.tr("Stop now and delete what arrived"))
        self.cancel_button.clicked.connect(self.on_cancel_clicked)
        top.addWidget(self.cancel_button)
        layout.addLayout(top)
        self.bar = QProgressBar()
        self.bar.setRange(0, BAR_STEPS)
        self.bar.setTextVisible(False)
        layout.addWidget(self.bar)
        self.detail = QLabel()
        self.detail.setObjectName("footer")
        layout.addWidget(self.detail)
        self.hide()

    def is_busy(self) -> bool:
        return self.job is not None

    def start(self, repo: str, file: str | None, *, allow_downloads: bool, endpoint: str | None,
              token: str | None = None) -> bool:
        """Start downloading ``repo`` (or its GGUF ``file``); False when one is already under way. ``token``: the
        Hugging Face token for a gated model (sent to ``endpoint`` only), or None."""
        if self.job is not None:
            return False
        job = self.job = DownloadJob(repo, file)
        self.title.setText(self.tr("Downloading {model}").format(model=job.label))
        self.detail.setText(self.tr("Reading the file list and checking free disk space…"))
        self.bar.setRange(0, 0)  # busy until the first bytes arrive
        self.pause_button.setEnabled(True)
        self.cancel_button.setEnabled(True)
        self.show()
        chunk = self.chunk_bytes

        def run(report):  # on a pool thread
            return download.download(repo, file=file, allow_downloads=allow_downloads, endpoint=endpoint,
                                     progress=report, cancel=job.cancel,
                                     pause=job.pause, chunk_bytes=chunk, token=token)

        self._runner.submit(run, self._on_done, self._on_failed, self._on_progress, with_report=True)
        self.busy_changed.emit(True)
        return True

    def pause(self) -> None:
        if self.job is not None:
            self.job.pause.set()
            self._stopping(self.tr("Pausing…"))

    def cancel(self) -> None:
        if self.job is not None:
            self.job.cancel.set()
            self._stopping(self.tr("Cancelling…"))

    def _stopping(self, text: str) -> None:
        self.pause_button.setEnabled(False)
        self.cancel_button.setEnabled(False)
        self.detail.setText(text)

    # -- from the download thread (queued) ------------------------------------------------------
    def _on_progress(self, progress: DownloadProgress) -> None:
        job = self.job
        if job is None:
            return
        job.last = progress
        self._redraw()

    def _show_progress(self) -> None:
        job = self.job
        if job is None or job.last is None or job.pause.is_set() or job.cancel.is_set():
            return
        progress = job.last
        self.bar.setRange(0, BAR_STEPS)
        self.bar.setValue(int(BAR_STEPS * progress.done / progress.total) if progress.total else BAR_STEPS)
        self.detail.setText(self.progress_text(progress))

    def progress_text(self, p: DownloadProgress) -> str:
        share = p.done / p.total if p.total else 1.0
        speed = self.tr("{rate}/s").format(rate=format_bytes(p.speed_bytes_s)) if p.speed_bytes_s else "…"
        left = self.tr("{time} left").format(time=self.duration(p.eta_s)) if p.eta_s is not None else self.tr(
            "time left: measuring")
        return self.tr("{done} of {total} ({share:.0%}) · {speed} · {left} · {file}").format(
            done=format_bytes(p.done), total=format_bytes(p.total), share=share, speed=speed, left=left, file=p.file)

    def duration(self, seconds: float) -> str:
        seconds = max(0, round(seconds))
        if seconds < 60:
            return self.tr("{s} s").format(s=seconds)
        if seconds < 3600:
            return self.tr("{m} min {s} s").format(m=seconds // 60, s=seconds % 60)
        return self.tr("{h} h {m} min").format(h=seconds // 3600, m=seconds % 3600 // 60)

    def _end(self) -> DownloadJob:
        job, self.job = self.job, None
        self._redraw.cancel()
        self.hide()
        self.busy_changed.emit(False)
        return job  # type: ignore[return-value]

    def _on_done(self, result: DownloadResult) -> None:
        self._end()
        self.finished.emit(result.path)

    def _on_failed(self, exc: BaseException) -> None:
        job = self._end()
        if isinstance(exc, CancelledError) and job.cancel.is_set():
            self.stopped.emit(self.tr("The download of {model} was cancelled; nothing was installed.").format(
                model=job.label))
        elif isinstance(exc, CancelledError) and job.pause.is_set():
            got = self.tr(" at {done} of {total}").format(done=format_bytes(job.last.done),
                                                          total=format_bytes(job.last.total)) if job.last else ""
            self.stopped.emit(self.tr("The download of {model} is paused{got}: resume it from the Installed tab.")
                              .format(model=job.label, got=got))
        else:
            self.failed.emit(error_line(exc))

    # -- slots ----------------------------------------------------------------------------------
    @Slot()
    def on_pause_clicked(self) -> None:
        self.pause()

    @Slot()
    def on_cancel_clicked(self) -> None:
        self.cancel()
