"""The "Connect to server" dialog: a model source that is an OpenAI-compatible server.

Asks for the server's base URL and, optionally, its API key; lists the server's models (``GET /v1/models``, off the
GUI thread through ``app.runtime.background``) and lets the user pick one. ``spec()`` is the ``RemoteSpec`` to
connect to; the dialog connects nothing itself (``app.window.remote_source`` has the worker do it).

The key: the field shows it masked. "Remember the key" keeps it between runs (``app.state.api_keys``): in the system
keyring when there is one (ticked by default, the keyring named); with none, the box reads "stored unencrypted in
the settings file", is unticked by default and a warning says what that means. Unticked, the key lives in memory
until Miaohui closes. It never goes to the history, exports or logs. The dialog stores nothing itself:
``remember_key()`` is the user's answer, ``app.window.remote_source`` acts on it once the connection worked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import (QCheckBox, QComboBox, QDialog, QDialogButtonBox, QFormLayout, QHBoxLayout, QLabel,
                               QLineEdit, QPushButton, QVBoxLayout, QWidget)

from app.runtime.background import TaskRunner, error_line
from app.state.api_keys import KeyringInfo
from app.ui import accessibility
from engine.fmt import one_line, outside_text
from engine.remote import RemoteError, RemoteSpec, list_models

EXAMPLE_URL = "http://127.0.0.1:8000/v1"


@dataclass(frozen=True)
class _Listing:
    """How one listing ended: its request number, the served models, or the one line saying why there are none."""

    request: int
    models: tuple = ()
    error: str = ""


class RemoteDialog(QDialog):
    """Base URL, API key, the server's models; accepted with a model chosen.

    ``list_models()`` starts a listing (the "List models" button does); ``listing_done`` is emitted when it ended,
    either way (tests wait on it).
    """

    listing_done = Signal()

    def __init__(self, base_url: str = "", model: str = "", api_key: str | None = None,
                 parent: QWidget | None = None, *, keyring: KeyringInfo = KeyringInfo(None, False),
                 remembered: bool = False) -> None:
        super().__init__(parent)
        self.setWindowTitle(self.tr("Connect to an OpenAI-compatible server"))
        self.setMinimumWidth(520)
        self._wanted_model = model
        self._request = 0
        self._runner = TaskRunner(self, daemon=True, name="miaohui-list-models")  # ends by its timeouts, unwaited

        self.url_edit = QLineEdit(base_url)
        self.url_edit.setPlaceholderText(EXAMPLE_URL)
        self.url_edit.setToolTip(self.tr("vLLM and python -m engine serve: http://host:8000/v1 · llama-server: "
                                          "http://host:8080/v1 · Ollama: http://host:11434/v1 · LM Studio: "
                                          "http://host:1234/v1"))
        self.key_edit = QLineEdit(api_key or "")
        self.key_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.key_edit.setPlaceholderText(self.tr("none"))
        self.list_button = QPushButton(self.tr("List models"))
        self.list_button.clicked.connect(self.list_models)
        self.model_combo = QComboBox()
        self.model_combo.setMinimumContentsLength(28)
        self.model_combo.currentIndexChanged.connect(self._update_buttons)
        self.status = QLabel(self.tr("Enter the server's address, then list its models."))
        self.status.setTextFormat(Qt.TextFormat.PlainText)  # it quotes what the server said: never markup
        self.status.setWordWrap(True)
        if keyring.name is not None:
            self.remember_box = QCheckBox(self.tr("Remember the key in the system keyring ({name})").format(
                name=keyring.name))
            self.remember_box.setChecked(remembered or keyring.recommended)
            warning = "" if keyring.recommended else self.tr(
                "{name} is not a recommended keyring: it may keep the key in a file, unencrypted.").format(
                name=keyring.name)
        else:
            self.remember_box = QCheckBox(self.tr("Remember the key (stored unencrypted in the settings file)"))
            self.remember_box.setChecked(remembered)  # off unless the user chose it before
            warning = self.tr("No system keyring was found. A remembered key is written as plain text to Miaohui's "
                              "settings file, where anyone who can read your files can read it.")
        self.key_warning = QLabel(warning)
        self.key_warning.setObjectName("notice")
        self.key_warning.setWordWrap(True)
        self.key_warning.setVisible(bool(warning))
        key_note = QLabel(self.tr("Unticked, the key is kept in memory until Miaohui closes. It is never written to "
                                  "the history, exports or logs."))
        key_note.setWordWrap(True)

        url_row = QHBoxLayout()
        url_row.addWidget(self.url_edit, 1)
        url_row.addWidget(self.list_button)
        form = QFormLayout()
        form.addRow(self.tr("Base URL"), url_row)
        form.addRow(self.tr("API key (optional)"), self.key_edit)
        form.addRow("", self.remember_box)
        form.addRow(self.tr("Model"), self.model_combo)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.connect_button = self.buttons.addButton(self.tr("Connect"), QDialogButtonBox.ButtonRole.AcceptRole)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        accessibility.name_form_fields(form)
        accessibility.name(self.url_edit, self.tr("Base URL"))
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.status)
        layout.addWidget(self.key_warning)
        layout.addWidget(key_note)
        layout.addWidget(self.buttons)
        self.url_edit.returnPressed.connect(self.list_models)
        self.url_edit.textChanged.connect(self._forget_models)
        self._update_buttons()

    # -- public -----------------------------------------------------------------------------------------------
    def spec(self) -> RemoteSpec:
        """The server and model chosen (``RemoteError``, one line, when the URL cannot be one)."""
        return RemoteSpec(self.url_edit.text(), self.chosen_model(), self.key_edit.text() or None)

    def remember_key(self) -> bool:
        """Whether the user wants the key kept between runs (where: the box's text says)."""
        return self.remember_box.isChecked()

    def chosen_model(self) -> str:
        data = self.model_combo.currentData()
        return str(data) if data is not None else ""

    def models(self) -> list[str]:
        return [str(self.model_combo.itemData(i)) for i in range(self.model_combo.count())]

    @Slot()
    def list_models(self) -> None:
        """List the server's models on a thread; the result fills the model list (or says what went wrong)."""
        try:
            spec = RemoteSpec(self.url_edit.text(), "", self.key_edit.text() or None)
        except RemoteError as exc:
            self._show_failure(str(exc))
            self.listing_done.emit()
            return
        self._request += 1
        request = self._request
        self.status.setText(self.tr("Asking {url} for its models…").format(url=spec.base_url))
        self.list_button.setEnabled(False)

        def work() -> _Listing:
            try:
                return _Listing(request, tuple(list_models(spec)))
            except RemoteError as exc:
                return _Listing(request, error=str(exc))
            except Exception as exc:  # noqa: BLE001 (a bug must still end the listing, as one line)
                return _Listing(request, error=one_line(exc, name_type=True))

        self._runner.submit(work, self.on_listing_ended, self.on_listing_failed)

    # -- slots ------------------------------------------------------------------------------------------------
    @Slot(object)
    def on_listing_ended(self, ended: _Listing) -> None:
        if ended.request != self._request:
            return  # a later listing was asked for
        if ended.error:
            self.list_button.setEnabled(True)
            self._show_failure(ended.error)
            self.listing_done.emit()
            return
        listed = ended.models
        self.list_button.setEnabled(True)
        self.model_combo.clear()
        for served in listed:
            n = served.context_length
            context = self.tr(" · {n} tokens of context").format(n=n) if n else ""
            self.model_combo.addItem(outside_text(served.id) + context, served.id)  # shown escaped, sent as named
        index = self.model_combo.findData(self._wanted_model)
        self.model_combo.setCurrentIndex(max(0, index))
        self.status.setText(self.tr("{n} model(s) served. Choose one and connect.").format(n=len(listed)))
        self._update_buttons()
        self.listing_done.emit()

    @Slot(object)
    def on_listing_failed(self, exc: BaseException) -> None:
        # Not reached: ``work`` turns every exception into its listing's line. Were it, the listing still ends.
        self.on_listing_ended(_Listing(self._request, error=error_line(exc)))

    # -- internals --------------------------------------------------------------------------------------------
    def _show_failure(self, message: str) -> None:
        self.model_combo.clear()
        self.status.setText(self.tr("Could not list the models: {error}").format(error=outside_text(message)))
        self._update_buttons()

    @Slot()
    def _forget_models(self) -> None:
        if self.model_combo.count():
            self._wanted_model = self.chosen_model() or self._wanted_model
            self.model_combo.clear()
        self._update_buttons()

    @Slot()
    def _update_buttons(self) -> None:
        self.connect_button.setEnabled(bool(self.chosen_model()))
