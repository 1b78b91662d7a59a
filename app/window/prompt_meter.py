"""The figures under the prompt while the user types: ``PromptMeter``.

After a pause in typing (``DEBOUNCE_MS``), the turn that sending the text would start is measured on the
worker thread (``Bridge.measure_prompt``: the message's tokens, the whole trimmed prompt, the prefix the
conversation's KV cache holds, what trimming leaves out), never on the GUI thread; ``app.window.forecast`` turns
those counts and the prefill rate recent replies of the same model measured (their median and range,
``app.state.rate_estimate``; it also gives the panel's "Before truncation" its rate) into the figures, and
the composer shows them with a warning before a send that would leave old messages out of the context. With files
attached, the same measurement counts both documents choices (``engine.docs.forecast``): the figures are then the
chosen one's, and ``app.window.docs_forecast`` words both choices under them. With pictures attached and a vision
model loaded, their image tokens (``app.window.image_costs``: the processor's count, on the engine thread) are a part
of their own ("images: N tokens", with the KV bytes they add), counted in the context and the prefill. Only the
newest request is measured: while one is on the worker, further typing waits for it, so a reply streaming on the worker
never collects a queue of stale measurements. Owns the wording and when to measure; no SQL, no inference.
"""

from __future__ import annotations

from typing import Any, Callable

from PySide6.QtCore import QObject, QTimer, Signal, Slot

from app.runtime.bridge import Bridge
from app.state.rate_estimate import MIN_RATE_TOKENS, RateEstimate, RecentRates, rate_key
from app.ui.engine_texts import engine_text
from app.widgets.prompt_box import Composer
from app.widgets.ttft_view import TtftView
from app.window import docs_forecast
from app.window.attachments import Attachments
from app.window.controller import ChatController
from app.window.docs_forecast import DocsRequest
from app.window.forecast import LEFT_OUT, Forecast, forecast
from app.window.image_costs import ImageCosts
from engine.docs.forecast import DocsForecast, MeasureWithDocuments
from engine.errors import BadInputError
from engine.events import Message
from engine.fmt import format_bytes
from engine.generate.measure import PromptMeasure


DEBOUNCE_MS = 300  # measure after the user pauses typing, not on every keystroke
NO_SESSION = -1  # an unsaved conversation: the worker keeps no session for it


def n(value: int) -> str:
    """A count as it reads in every language: ``1,234``."""
    return f"{value:,}"


def duration(seconds: float) -> str:
    """``45 ms`` under a second, else ``1.2 s`` (units are not translated)."""
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


class PromptMeter(QObject):
    """Measures the prompt being written and shows what sending it will use and cost, in the window's composer.

    Signals:
        forecast_shown(object): the ``Forecast`` now shown (None: the figures were cleared).
    """

    forecast_shown = Signal(object)

    def __init__(self, controller: ChatController, bridge: Bridge, composer: Composer, ttft_view: TtftView,
                 attachments: Attachments, images: ImageCosts, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._controller, self._bridge, self._composer = controller, bridge, composer
        self._attachments, self._images = attachments, images
        self._pictures: tuple[str, ...] = ()  # the pictures attached to the text measured
        self._counting = False  # some of them are still being counted on the engine thread
        images.counted.connect(self.schedule)
        self.forecast: Forecast | None = None  # what is shown
        self.docs_forecast: DocsForecast | None = None  # with documents: both choices, as shown
        # What a Send grounds the message in: the attached files; a conversation's collections and forced mode are
        # added by whoever owns them, by replacing this. ``attachments``: the files attached to the message written.
        self.documents: Callable[[], DocsRequest] = lambda: DocsRequest(tuple(attachments.usable()))
        attachments.changed.connect(self.schedule)  # a file attached, removed or read: both choices again
        self.rates = RecentRates()  # measured on this machine by recent replies, per model, precision and device
        self._ttft_view = ttft_view  # its "Before truncation" uses the same estimate
        self._editing: int | None = None
        self._pending = 0  # the measurement on the worker (task id), 0 when none
        self._stale = False  # the text or the conversation changed while it was measured
        self._asked = 0  # max new tokens of the request measured
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(DEBOUNCE_MS)
        self._timer.timeout.connect(self.measure)
        c = self._controller
        self._composer.prompt.textChanged.connect(self.schedule)
        c.conversation_shown.connect(self.schedule)
        c.editing_changed.connect(self.on_controller_editing_changed)
        c.reply_finished.connect(self.on_controller_reply_finished)
        c.model_ready.connect(self.on_controller_model_ready)
        self._bridge.task_finished.connect(self.on_bridge_task_finished)
        self._bridge.task_failed.connect(self.on_bridge_task_failed)

    @Slot()
    def schedule(self, *_args: Any) -> None:
        """Measure again after the usual pause (an emptied prompt, e.g. just sent, clears the figures at once)."""
        if self._composer.prompt.document().isEmpty():
            self.measure()
        else:
            self._timer.start()

    @Slot()
    def measure(self) -> int:
        """Measure the text in the prompt now; the task id, or 0 when nothing was submitted."""
        self._timer.stop()
        c = self._controller
        text = self._composer.prompt.toPlainText()
        # A model on a server (its facts say ``remote``) has no tokenizer here: nothing to measure before sending.
        if not text.strip() or c.facts is None or getattr(c.facts, "remote", False):
            self._show(None)
            self._stale = self._pending != 0  # an answer on its way is for other text
            return 0
        if self._pending:
            self._stale = True  # measured again once the one on the worker is back
            return 0
        try:
            config = c.chat_settings().sampling_config()
        except BadInputError:
            self._show(None)  # Send will say what is wrong with the settings
            return 0
        messages = c.conversation_for_engine(self._editing) + [Message("user", text)]
        cid = c.conversation_id
        self._asked, self._stale = config.max_new_tokens, False
        self._pictures = tuple(self._attachments.images())
        docs = self.documents()
        self._pending = self._bridge.measure_prompt(cid if cid is not None else NO_SESSION, messages, config,
                                                    docs.files, docs.collections, docs.mode)
        return self._pending

    # -- slots --------------------------------------------------------------------------------------
    @Slot(object)
    def on_controller_editing_changed(self, index: int | None) -> None:
        self._editing = index
        self.schedule()

    @property
    def estimate(self) -> RateEstimate | None:
        """The prefill rate of the loaded model on this machine (None: no reply of it measured one yet)."""
        return self.rates.estimate(rate_key(self._controller.facts))

    @Slot(object)
    def on_controller_reply_finished(self, finished: Any) -> None:
        metrics = finished.metrics
        if metrics is not None and not getattr(metrics, "unknown", ()):
            self.rates.add(rate_key(self._controller.facts), metrics.prefill_tok_s, metrics.prefill_tokens)
        self._ttft_view.set_prefill_estimate(self.estimate)
        self.schedule()  # the cache now holds this turn

    @Slot(object)
    def on_controller_model_ready(self, _facts: object) -> None:
        self._ttft_view.set_prefill_estimate(self.estimate)  # another model (or device): its own rates, if any
        self.schedule()

    @Slot(int, object)
    def on_bridge_task_finished(self, task_id: int, result: object) -> None:
        if task_id != self._pending or not task_id:
            return
        self._pending = 0
        if self._stale:
            self.measure()
            return
        docs, docs_error = None, None
        if isinstance(result, MeasureWithDocuments):
            result, docs, docs_error = result.prompt, result.documents, result.error
        if isinstance(result, PromptMeasure):
            # With documents, the prompt is the grounded one the chosen way: its length and cached prefix count.
            chosen = None if docs is None else (docs.whole if docs.chosen == "whole" else docs.retrieve)
            prompt, cached = ((chosen.prompt_tokens, chosen.cached_tokens) if chosen is not None
                              else (result.prompt_tokens, result.cached_tokens))
            counts = self._images.tokens(self._pictures) if self._pictures else ()
            self._counting = counts is None and self._images.sees_images()
            self._show(forecast(result.text_tokens, prompt, cached, result.context_max, self.estimate,
                                result.dropped_turns, result.reply_budget, self._asked, counts or (),
                                self._images.kv_bytes_per_token()), docs, docs_error)

    @Slot(int, str)
    def on_bridge_task_failed(self, task_id: int, message: str) -> None:
        if task_id != self._pending or not task_id:
            return
        self._pending = 0
        if self._stale or message == "cancelled":  # Stop cancels every job, this one with them
            self.schedule()
            return
        self.forecast = self.docs_forecast = None
        self._composer.show_docs_forecast("")
        self._composer.show_forecast("", "⚠ " + message)  # e.g. the message cannot fit the context at all
        self.forecast_shown.emit(None)

    # -- wording ------------------------------------------------------------------------------------
    def _show(self, f: Forecast | None, docs: DocsForecast | None = None, docs_error: str | None = None) -> None:
        self.forecast, self.docs_forecast = f, docs
        docs_warning = ""
        if docs is not None:
            lines, docs_warning = docs_forecast.choice_lines(docs, self.estimate)
            self._composer.show_docs_forecast("\n".join(lines), docs_forecast.details(docs))
        else:  # a file that cannot be read says so here (its chip says so too)
            self._composer.show_docs_forecast("⚠ " + engine_text(docs_error) if docs_error and f is not None else "")
        if f is None:
            self._composer.show_forecast("")
            self.forecast_shown.emit(None)
            return
        figures = [self.tr("message: %1 tokens").replace("%1", n(f.text_tokens))]
        if any(f.image_tokens):  # a picture the engine could not read counts 0: its chip says why
            images = self.tr("images: %1 tokens").replace("%1", n(sum(f.image_tokens)))
            figures.append(images + (self.tr(" (KV %1)").replace("%1", format_bytes(f.image_kv_bytes))
                                     if f.image_kv_bytes else ""))
        elif self._counting:
            figures.append(self.tr("images: counting…"))
        if f.context_fraction is not None:
            figures.append(self.tr("context after sending: %1 of %2 tokens (%3%)").replace("%1", n(f.context_tokens))
                           .replace("%2", n(f.context_max)).replace("%3", f"{100 * f.context_fraction:.0f}"))
        else:
            figures.append(self.tr("context after sending: %1 tokens").replace("%1", n(f.context_tokens)))
        est = self.estimate
        if f.ttft_s is not None and f.ttft_low_s is not None and f.ttft_high_s is not None and est is not None:
            figures.append(self.tr("TTFT forecast: ~%1 (%2–%3)").replace("%1", duration(f.ttft_s))
                           .replace("%2", duration(f.ttft_low_s)).replace("%3", duration(f.ttft_high_s)))
            details = (self.tr("Prefill computes the %1 prompt tokens the KV cache does not hold (%2 are reused); at "
                               "%3 tok/s, the median prefill rate of the last %4 replies of this model, precision "
                               "and device (%5–%6 tok/s), that takes about %7.")
                       .replace("%1", n(f.new_tokens)).replace("%2", n(f.reused_tokens))
                       .replace("%3", f"{est.median:,.0f}").replace("%4", n(est.samples))
                       .replace("%5", f"{est.low:,.0f}").replace("%6", f"{est.high:,.0f}")
                       .replace("%7", duration(f.ttft_s)))
        else:
            figures.append(self.tr("TTFT forecast after the first reply"))
            details = (self.tr("Prefill computes the %1 prompt tokens the KV cache does not hold (%2 are reused); "
                               "how long that takes is forecast once a reply of this model has prefilled at least "
                               "%3 tokens (a shorter prefill measures the cost of a call, not the rate).")
                       .replace("%1", n(f.new_tokens)).replace("%2", n(f.reused_tokens))
                       .replace("%3", n(MIN_RATE_TOKENS)))
        if any(f.image_tokens):
            details += "\n" + (self.tr("Each picture becomes the tokens the model's processor makes of it (%1); all "
                                        "are computed by the prefill and kept in the KV cache.")
                               .replace("%1", " + ".join(n(t) for t in f.image_tokens)))
        warning = "\n".join(w for w in (self._warning(f), "⚠ " + docs_warning if docs_warning else "") if w)
        self._composer.show_forecast(" · ".join(figures), warning, details)
        self.forecast_shown.emit(f)

    def _warning(self, f: Forecast) -> str:
        warning = f.warning
        if warning is None:
            return ""
        kind, count = warning
        if kind == LEFT_OUT:
            text = (self.tr("Sending this leaves out the oldest message to fit the %2-token context.") if count == 1
                    else self.tr("Sending this leaves out the %1 oldest messages to fit the %2-token context."))
            return "⚠ " + text.replace("%1", n(count)).replace("%2", n(f.context_max))
        return "⚠ " + (self.tr("The context leaves room for only %1 tokens of reply (max new tokens: %2).")
                       .replace("%1", n(count)).replace("%2", n(self._asked)))
