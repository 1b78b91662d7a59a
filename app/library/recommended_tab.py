"""The Models window's "Recommended" tab: real chat models to move to from the 135M demo, ranked for this machine.

Shows ``engine.library.curated.recommend``: each model's name and what it is good for, its weights in the
precision the engine would use here (int4 on a CPU, bf16 on a GPU), whether it fits the free memory, and the
decode ceiling, memory bandwidth ÷ bytes read per token (the seeds' lesson: decoding reads every weight once a
token). The bandwidth is the one measured earlier and kept in the data folder (``engine.bench.roofline``);
without one the speed column says so and "Measure bandwidth" measures it (about a second) off the GUI thread.
Nothing here touches the network: the list carries its architectures. "Open its page" emits
``open_requested(repo)``, which the window turns into the model's Hub page; "Download" emits
``download_requested(repo, None)``, which the window's download panel (progress, pause, cancel) runs — both only
once downloads are allowed. A gated model (Llama, Gemma) says so in the Access column, and the line under the
table links its licence page on the Hub, where its owners grant access to the account of the token saved above.

Owns this table and its buttons; the list, the ranking and the measuring are the engine's.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QTableWidgetItem, QVBoxLayout, QWidget

from app.library.tables import read_only_table
from app.runtime.background import TaskRunner, error_line
from app.ui.engine_texts import engine_text
from engine.bench import roofline
from engine.fmt import format_bytes, format_rate
from engine.library import curated, fit
from engine.library.access import DEFAULT_ENDPOINT
from engine.library.curated import Recommendation


def _rank(remeasure: bool = False) -> tuple[list[Recommendation], dict | None]:
    """Off the GUI thread: this machine's memory, the stored (or newly measured) bandwidth, the ranking."""
    memory = fit.machine_memory()
    device = memory.device
    measured = roofline.measure_and_store(device, force=True) if remeasure else roofline.stored_bandwidth(device)
    bandwidth = float(measured["read_bytes_s"]) if measured else None
    return curated.recommend(memory, bandwidth), measured


class RecommendedTab(QWidget):
    """``recommendations`` is what the table shows, best first.

    Signals:
        open_requested(str): show this curated model's Hub page (its repo id).
        download_requested(str, object): download this repo (the file: None, its safetensors weights).
        error(str): one line to show.
    """

    open_requested = Signal(str)
    download_requested = Signal(str, object)
    error = Signal(str)

    def __init__(self, runner: TaskRunner, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._runner = runner
        self._allowed = False
        self.recommendations: list[Recommendation] = []
        self.bandwidth: dict | None = None
        layout = QVBoxLayout(self)
        self.intro = QLabel(self.tr(
            "The default 135M model is there to watch the engine work, not for answers. These models answer for "
            "real and run on Miaohui's fast path; they are ranked for this machine: what fits its free memory "
            "first, then how fast it can decode."))
        self.intro.setWordWrap(True)
        layout.addWidget(self.intro)
        self.table = read_only_table([self.tr("Model"), self.tr("Good for"), self.tr("Weights"), self.tr("Fits?"),
                                      self.tr("Speed ceiling"), self.tr("Access")], stretch=1,
                                     accessible_name=self.tr("Recommended models"))
        self.table.horizontalHeaderItem(2).setToolTip(self.tr(
            "The weights in the precision Miaohui would load here: int4 on a CPU (half a byte per weight plus a "
            "scale and zero per 32), bf16 on a GPU. MiB = 1,048,576 bytes."))
        self.table.horizontalHeaderItem(3).setToolTip(self.tr(
            "Weights + the KV cache at 4,096 tokens + 10% working memory + 256 MiB, against the free memory now: "
            "fits within 80% of it, tight within all of it."))
        self.table.horizontalHeaderItem(4).setToolTip(self.tr(
            "The most tokens per second this machine's memory allows: measured bandwidth ÷ bytes read per token "
            "(every weight once, plus the KV cache). Real decoding reaches about half to four fifths of it."))
        self.table.itemSelectionChanged.connect(self._update_buttons)
        layout.addWidget(self.table, 1)
        self.bandwidth_note = QLabel()
        self.bandwidth_note.setObjectName("footer")
        self.bandwidth_note.setWordWrap(True)
        layout.addWidget(self.bandwidth_note)
        self.licence_note = QLabel()  # the selected gated model's licence page, a link the system browser opens
        self.licence_note.setWordWrap(True)
        self.licence_note.setTextFormat(Qt.TextFormat.RichText)
        self.licence_note.setOpenExternalLinks(True)
        layout.addWidget(self.licence_note)
        buttons = QHBoxLayout()
        self.measure_button = QPushButton(self.tr("Measure bandwidth"))
        self.measure_button.setToolTip(self.tr("Reads a 256 MiB buffer a few times to measure how fast this "
                                               "machine's memory streams (about a second; kept for next time)."))
        self.measure_button.clicked.connect(self.on_measure_clicked)
        buttons.addWidget(self.measure_button)
        buttons.addStretch(1)
        self.open_button = QPushButton(self.tr("Open its page"))
        self.open_button.clicked.connect(self.on_open_clicked)
        buttons.addWidget(self.open_button)
        self.download_button = QPushButton(self.tr("Download"))
        self.download_button.clicked.connect(self.on_download_clicked)
        buttons.addWidget(self.download_button)
        layout.addLayout(buttons)
        self._update_buttons()

    def set_access(self, allowed: bool) -> None:
        self._allowed = allowed
        self._update_buttons()

    def refresh(self, remeasure: bool = False) -> None:
        """Rank again (off the GUI thread), measuring the bandwidth first when ``remeasure``."""
        self.measure_button.setEnabled(False)
        self._runner.submit(lambda: _rank(remeasure=remeasure), self._on_ranked, self._on_failed)

    def _on_ranked(self, result: tuple[list[Recommendation], dict | None]) -> None:
        self.recommendations, self.bandwidth = result
        self.measure_button.setEnabled(True)
        self.table.setRowCount(len(self.recommendations))
        for row, r in enumerate(self.recommendations):
            e = r.estimate
            speed = (self.tr("≤ {rate:.0f} tok/s").format(rate=r.ceiling_tokens_per_s)
                     if r.ceiling_tokens_per_s is not None else self.tr("not measured"))
            cells = [r.model.name, engine_text(r.model.note), f"{format_bytes(e.weights_bytes)} · {e.precision}",
                     self._verdict(e.verdict), speed,
                     self.tr("gated: accept its licence, save a token") if r.model.gated else self.tr("open")]
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(f"{r.model.repo}\n{e.summary()}" if column in (0, 3) else text)
                self.table.setItem(row, column, item)
        if self.bandwidth:
            self.bandwidth_note.setText(self.tr("Speeds use this machine's measured memory bandwidth, {rate}.")
                                        .format(rate=format_rate(self.bandwidth["read_bytes_s"])))
        else:
            self.bandwidth_note.setText(self.tr("The memory bandwidth has not been measured on this machine yet: "
                                                "press “Measure bandwidth” to see how fast each model can decode."))
        self._update_buttons()

    def _verdict(self, verdict: str) -> str:
        return {"fits": self.tr("fits"), "tight": self.tr("tight"), "will not fit": self.tr("will not fit")}[verdict]

    def _on_failed(self, exc: BaseException) -> None:
        self.measure_button.setEnabled(True)
        self.error.emit(error_line(exc))

    def selected(self) -> Recommendation | None:
        rows = self.table.selectionModel().selectedRows()
        return self.recommendations[rows[0].row()] if rows and rows[0].row() < len(self.recommendations) else None

    def _update_buttons(self) -> None:
        chosen = self.selected()
        self.open_button.setEnabled(chosen is not None and self._allowed)
        self.download_button.setEnabled(chosen is not None and self._allowed)
        self.download_button.setToolTip(self.tr("Download its weights and tokenizer; the progress shows below.")
                                        if self._allowed else self.tr("Allow downloads from Hugging Face above to "
                                                                      "download it."))
        if chosen is not None and chosen.model.gated:
            page = f"{DEFAULT_ENDPOINT}/{chosen.model.repo}"
            self.licence_note.setText(self.tr(
                "{name} is gated: accept its licence on <a href=\"{url}\">its Hugging Face page</a> with your "
                "account, then save a token of that account above.").format(name=chosen.model.name, url=page))
        else:
            self.licence_note.setText("")
        self.open_button.setToolTip(self.tr("Its files, license and download on Hugging Face.") if self._allowed
                                    else self.tr("Allow downloads from Hugging Face above to open its page."))

    @Slot()
    def on_measure_clicked(self) -> None:
        self.refresh(remeasure=True)

    @Slot()
    def on_download_clicked(self) -> None:
        chosen = self.selected()
        if chosen is not None and self._allowed:
            self.download_requested.emit(chosen.model.repo, None)

    @Slot()
    def on_open_clicked(self) -> None:
        chosen = self.selected()
        if chosen is not None and self._allowed:
            self.open_requested.emit(chosen.model.repo)
