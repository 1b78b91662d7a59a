"""Speculative decoding in the window: the choice under the model bar, the worker's drafter, the tint, the panel's rows.

``Speculation`` puts a ``SpeculationChoice`` in a toolbar under the model bar, a ``SpeculationView``
in the performance panel (after the TTFT rows) and a ``DraftTint`` over the chat. The choice is remembered
(``Settings.speculation``) and every reply asked for carries it (``Bridge.speculation`` → ``GenerateJob``). A choice
other than off is first built on the worker for the loaded model (``Bridge.prepare_speculation``): a draft model whose
vocabulary is not the loaded model's, self-speculation on a GPU or an int4 model, any model on a server, are refused
there with one line, and the choice goes back to what it was (to off after a load). The draft models offered are the
installed ones whose config's vocabulary size is the loaded model's (read off the GUI thread); the worker's check of
the whole vocabulary is the one that decides.

Owns that wiring; not the drafting (``engine.speculate``), the widgets' looks, or the keeping of the drafter
(``engine.core.drafters``).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Qt, Slot
from PySide6.QtWidgets import QMainWindow, QStatusBar, QToolBar

from app.runtime.background import TaskRunner, error_line
from app.runtime.bridge import Bridge
from app.state.chat_messages import ChatMessage
from app.state.settings import Settings
from app.widgets.chat_view import ChatView
from app.widgets.draft_tint import DraftTint
from app.widgets.speculation_choice import SpeculationChoice
from app.widgets.message_area import MessageArea
from app.widgets.perf_panel import PerfPanel
from app.widgets.speculation_view import SpeculationView
from app.window.controller import ChatController
from engine.errors import BadInputError
from engine.inputs import SpeculationConfig

log = logging.getLogger(__name__)


def spec_of(value: str) -> SpeculationConfig | None:
    """The ``SpeculationConfig`` a stored choice names; None for off."""
    return None if value == "off" else SpeculationConfig.parse(value)


def draft_candidates(vocab_size: int | None, loaded_source: str) -> list[tuple[str, str]]:
    """Installed safetensors models, other than the loaded one, whose config gives ``vocab_size``: (name, path)."""
    from engine.library.installed import list_installed

    found = []
    for model in list_installed():
        if model.format != "safetensors" or Path(model.path).resolve() == Path(loaded_source).resolve():
            continue
        try:
            config = json.loads((Path(model.path) / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        size = config.get("vocab_size", (config.get("text_config") or {}).get("vocab_size"))
        if vocab_size is None or size == vocab_size:
            found.append((model.name, model.path))
    return found


class Speculation(QObject):
    """The window's speculative decoding (see the module docstring); no signals of its own. ``window`` is where its
    toolbar goes; the rest is given: what it reads, what it shows in."""

    def __init__(self, window: QMainWindow, controller: ChatController, bridge: Bridge, settings: Settings,
                 chat: ChatView, panel: PerfPanel, messages: MessageArea, status_bar: QStatusBar) -> None:
        super().__init__(window)
        self._bridge, self._settings, self._chat = bridge, settings, chat
        self._messages, self._status_bar = messages, status_bar
        self.choice = SpeculationChoice()
        # A row of its own under the model bar: the model bar already fills a 1440-pixel window, and a widget added
        # to it went into the toolbar's overflow menu, out of sight.
        toolbar = QToolBar(self.tr("Speculative decoding"), window)
        toolbar.setObjectName("speculationToolbar")
        toolbar.setMovable(False)
        toolbar.addWidget(self.choice)
        window.addToolBarBreak(Qt.ToolBarArea.TopToolBarArea)
        window.addToolBar(Qt.ToolBarArea.TopToolBarArea, toolbar)
        self.view = SpeculationView()
        ttft = panel.ttft_view
        column = ttft.parentWidget().layout()
        column.insertWidget(column.indexOf(ttft) + 1, self.view)
        self.tint = DraftTint(self)
        self._runner = TaskRunner(self, max_threads=1, name="miaohui-draft-models")
        self._pending: dict[int, tuple[str, str]] = {}  # prepare task id -> (the choice, the one to go back to)
        stored = self._settings.speculation()
        self._bridge.speculation = spec_of(stored)
        self.choice.set_choice(stored)
        self.choice.set_tint(self._settings.tint_drafts())
        self.tint.enabled = self._tint_on()
        self.choice.choice_changed.connect(self.on_choice_changed)
        self.choice.tint_toggled.connect(self.on_tint_toggled)
        b = self._bridge
        b.model_loaded.connect(self.on_bridge_model_loaded)
        b.task_finished.connect(self.on_bridge_task_finished)
        b.task_failed.connect(self.on_bridge_task_failed)
        b.tokens_received.connect(self.on_bridge_tokens_received)
        b.stats_updated.connect(self.view.show_metrics)
        b.generation_finished.connect(self.on_bridge_generation_finished)
        controller.reply_started.connect(self.on_controller_reply_started)

    def _tint_on(self) -> bool:
        return self._settings.tint_drafts() and self._bridge.speculation is not None

    def _prepare(self, value: str, fallback: str) -> None:
        spec = spec_of(value)
        if spec is None or self._bridge.facts is None:  # nothing to build yet: the load prepares it
            self._use(value)
            return
        self._pending[self._bridge.prepare_speculation(spec)] = (value, fallback)
        self._status_bar.showMessage(self.tr("Preparing speculative decoding…"), 4000)

    def _use(self, value: str) -> None:
        self._settings.set_speculation(value)
        self._bridge.speculation = spec_of(value)
        self.choice.set_choice(value)
        self.tint.set_enabled(self._tint_on())

    @Slot(str)
    def on_choice_changed(self, value: str) -> None:
        try:
            self._prepare(value, self._settings.speculation())
        except BadInputError as exc:  # a stored path no parse accepts: one line, the choice stays as it was
            self._messages.show_message(str(exc), "warning")
            self.choice.set_choice(self._settings.speculation())

    @Slot(bool)
    def on_tint_toggled(self, on: bool) -> None:
        self._settings.set_tint_drafts(on)
        self.tint.set_enabled(self._tint_on())

    @Slot(object)
    def on_bridge_model_loaded(self, facts: Any) -> None:
        self.view.set_model_facts(facts)
        vocab, source = getattr(facts, "vocab_size", None), str(getattr(facts, "source", ""))
        self._runner.submit(lambda: draft_candidates(vocab, source), self.on_candidates_listed,
                            self.on_candidates_failed)
        value = self._settings.speculation()
        if value != "off":
            self._prepare(value, "off")

    @Slot(object)
    def on_candidates_listed(self, models: list) -> None:
        self.choice.set_draft_models(models)

    @Slot(object)
    def on_candidates_failed(self, exc: BaseException) -> None:
        log.warning("draft models not listed: %s", error_line(exc))

    @Slot(int, object)
    def on_bridge_task_finished(self, task_id: int, _result: object) -> None:
        if task_id in self._pending:
            self._use(self._pending.pop(task_id)[0])

    @Slot(int, str)
    def on_bridge_task_failed(self, task_id: int, message: str) -> None:
        if task_id in self._pending:
            _value, fallback = self._pending.pop(task_id)
            self._messages.show_message(
                self.tr("Speculative decoding not used: {reason}").format(reason=message), "warning")
            self._use(fallback)

    @Slot(object)
    def on_controller_reply_started(self, _reply: ChatMessage) -> None:
        chat = self._chat
        if chat.is_streaming() and chat.widgets():
            self.tint.begin(chat.widgets()[-1].browser)

    @Slot(str, list)
    def on_bridge_tokens_received(self, _text: str, tokens: list) -> None:
        self.tint.add_tokens(tokens)

    @Slot(object)
    def on_bridge_generation_finished(self, finished: Any) -> None:
        if finished.reason != "error" and finished.metrics is not None:
            # a live reply, just decoded: the only kind a baseline learns from (one paged back is never shown here)
            self.view.learn_plain(finished.metrics)
            self.view.show_metrics(finished.metrics, final=True)
