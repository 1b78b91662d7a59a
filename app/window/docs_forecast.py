"""The composer's documents forecast: with files attached (or collections chosen), what each choice would cost.

Owns ``DocsRequest`` (what the message being written is to be grounded in: attached files, collections and the
mode, "auto" unless the conversation forces one; the meter asks the window for it) and the wording of the two
choices the composer shows under the prompt's figures, before sending:

    ● Whole text: 2,186 tokens to prefill · TTFT ≈ 3.2 s
    ○ Retrieved passages (6): 812 tokens to prefill · TTFT ≈ 1.1 s
    Auto uses the whole text: it fits the context.

The counts are the engine's, made on the worker with the model's tokenizer (``engine.docs.forecast``, asked by
``app.window.prompt_meter`` through ``Bridge.measure_prompt``, debounced there); the times divide the tokens the
KV cache does not hold by the prefill rate recent replies of this model measured (``app.state.rate_estimate``).
No Qt widget, no SQL, no inference: texts in the "DocsForecast" translation context.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QT_TRANSLATE_NOOP, QCoreApplication

from app.state.rate_estimate import RateEstimate
from engine.docs.forecast import ChoiceFigures, DocsForecast

translate = QCoreApplication.translate
RANKINGS = {"hybrid": QT_TRANSLATE_NOOP("DocsForecast", "keywords and embeddings"),
            "keyword": QT_TRANSLATE_NOOP("DocsForecast", "keywords only")}


@dataclass(frozen=True)
class DocsRequest:
    """What the message being written is grounded in when sent."""

    files: tuple[str, ...] = ()  # attached files, absolute paths
    collections: tuple[str, ...] = ()  # collections chosen for the conversation
    mode: str = "auto"  # auto, whole or retrieve (engine.docs.grounding.MODES)

    @property
    def wanted(self) -> bool:
        return bool(self.files or self.collections)


def _n(value: int) -> str:
    return f"{value:,}"


def _duration(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


def _ttft(choice: ChoiceFigures, rate: RateEstimate | None) -> str:
    if rate is None:
        return translate("DocsForecast", "TTFT after the first reply")
    return translate("DocsForecast", "TTFT ≈ %1").replace("%1", _duration(rate.seconds(choice.new_tokens)[0]))


def _prefill(choice: ChoiceFigures) -> str:
    if choice.cached_tokens:
        return (translate("DocsForecast", "%1 tokens to prefill (%2 cached)").replace("%1", _n(choice.new_tokens))
                .replace("%2", _n(choice.cached_tokens)))
    return translate("DocsForecast", "%1 tokens to prefill").replace("%1", _n(choice.new_tokens))


def choice_lines(f: DocsForecast, rate: RateEstimate | None) -> tuple[list[str], str]:
    """(the lines: each choice's, the chosen one marked ●, then which is used and why; a warning, '' for none)."""
    lines, warning = [], ""
    mark = {"whole": "○", "retrieve": "○", f.chosen: "●"}
    if f.whole is not None:
        line = translate("DocsForecast", "Whole text: %1 · %2").replace("%1", _prefill(f.whole)) \
            .replace("%2", _ttft(f.whole, rate))
        if not f.whole.fits:
            line += " · " + translate("DocsForecast", "does not fit")
        lines.append(f"{mark['whole']} {line}")
    if f.retrieve is not None:
        line = translate("DocsForecast", "Retrieved passages (%1): %2 · %3").replace("%1", _n(f.retrieve.passages)) \
            .replace("%2", _prefill(f.retrieve)).replace("%3", _ttft(f.retrieve, rate))
        lines.append(f"{mark['retrieve']} {line}")
    else:
        lines.append(f"{mark['retrieve']} " + translate("DocsForecast", "Retrieved passages: none fits the %1 tokens "
                                                                        "left").replace("%1", _n(f.room)))
    too_big = f.whole is not None and not f.whole.fits
    if f.requested == "auto" and f.chosen == "whole":
        lines.append(translate("DocsForecast", "Auto uses the whole text: it fits the context."))
    elif f.requested == "auto" and too_big:
        lines.append(translate("DocsForecast", "Auto uses retrieved passages: the whole text adds %1 tokens but only "
                                               "%2 fit beside the conversation and the reply.")
                     .replace("%1", _n(f.whole.source_tokens)).replace("%2", _n(f.room)))  # type: ignore[union-attr]
    elif f.requested == "auto":
        lines.append(translate("DocsForecast", "Retrieved passages are used: a collection is searched, not put in "
                                               "whole."))
    elif f.chosen == "whole":
        lines.append(translate("DocsForecast", "Whole text is used (chosen for this conversation)."))
        if too_big:
            warning = (translate("DocsForecast", "The whole text adds %1 tokens but only %2 fit: sending it will be "
                                                 "refused; choose Auto or Retrieved passages.")
                       .replace("%1", _n(f.whole.source_tokens)).replace("%2", _n(f.room)))  # type: ignore[union-attr]
    else:
        lines.append(translate("DocsForecast", "Retrieved passages are used (chosen for this conversation)."))
    if f.chosen == "retrieve" and f.retrieve is None:
        warning = translate("DocsForecast", "No retrieved passage fits the %1 tokens left beside the conversation "
                                            "and the reply: shorten the question or the reply.").replace("%1",
                                                                                                       _n(f.room))
    return lines, warning


def details(f: DocsForecast) -> str:
    """The tooltip: what each count holds and how retrieval ranked."""
    parts = [translate("DocsForecast", "Sources may add %1 tokens beside the conversation and the reply.")
             .replace("%1", _n(f.room))]
    if f.whole is not None:
        parts.append(translate("DocsForecast", "Whole text: %1 pages or files, %2 tokens added.")
                     .replace("%1", _n(f.whole.passages)).replace("%2", _n(f.whole.source_tokens)))
    if f.retrieve is not None:
        parts.append(translate("DocsForecast", "Retrieved: %1 passages, %2 tokens added; the search took %3 (%4).")
                     .replace("%1", _n(f.retrieve.passages)).replace("%2", _n(f.retrieve.source_tokens))
                     .replace("%3", _duration(f.retrieve.seconds))
                     .replace("%4", translate("DocsForecast", RANKINGS[f.retrieval or "keyword"])))
    parts.append(translate("DocsForecast", "TTFT: the tokens the KV cache does not hold ÷ the median prefill rate of "
                                           "recent replies of this model."))
    return "\n".join(parts)
