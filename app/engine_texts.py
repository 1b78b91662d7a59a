"""The engine's fixed English texts that the window shows, marked here for translation (the engine imports no Qt).

``pyside6-lupdate`` extracts the ``QT_TRANSLATE_NOOP`` entries below into the context "engine"; ``engine_text``
looks a text up when it is shown, so a text listed here appears translated and any other one (a path, an
exception's message, a text the engine added later) appears as the engine wrote it. Listed: the model load's
stages (``engine.models.loader``), the lab's experiment titles and descriptions (``engine.lab.experiments``; a
test checks that each one is here) and the worker's fixed refusals (``app.worker``).
Owns no widget and translates nothing measured: numbers and units stay as they are.
"""

from __future__ import annotations

from PySide6.QtCore import QT_TRANSLATE_NOOP, QCoreApplication

CONTEXT = "engine"

LOAD_STAGES = (
    QT_TRANSLATE_NOOP("engine", "checking files"), QT_TRANSLATE_NOOP("engine", "reading config"),
    QT_TRANSLATE_NOOP("engine", "loading weights"), QT_TRANSLATE_NOOP("engine", "quantizing"),
    QT_TRANSLATE_NOOP("engine", "quantized weights from the cache"), QT_TRANSLATE_NOOP("engine", "loading tokenizer"),
    QT_TRANSLATE_NOOP("engine", "ready"),
)

EXPERIMENT_TEXTS = (
    QT_TRANSLATE_NOOP("engine", "1 · Greedy decode, 20 tokens"),
    QT_TRANSLATE_NOOP("engine", "Greedy decode of 20 tokens, repeated: total time, TTFT and average tok/s (median and "
                                "spread)."),
    QT_TRANSLATE_NOOP("engine", "2 · TTFT vs prompt length"),
    QT_TRANSLATE_NOOP("engine", "English and Chinese prompts from ~10 to ~500 characters: TTFT and prefill tok/s."),
    QT_TRANSLATE_NOOP("engine", "3 · KV cache on vs off"),
    QT_TRANSLATE_NOOP("engine", "The same input with the KV cache on and off: latency per generated token, ratio, same "
                                "text?"),
    QT_TRANSLATE_NOOP("engine", "4 · Sampling vs greedy"),
    QT_TRANSLATE_NOOP("engine", "Temperature 0.9 + top-p 0.9 against greedy over several seeds: repetition rate, "
                                "distinct-1/2."),
    QT_TRANSLATE_NOOP("engine", "5 · Attention heatmap"),
    QT_TRANSLATE_NOOP("engine", "Attention weights of one layer and head over a sentence with a pronoun; sink/collapse "
                                "flags."),
    QT_TRANSLATE_NOOP("engine", "Precision A/B (bf16 / int8 / int4)"),
    QT_TRANSLATE_NOOP("engine", "Loads the model again in bf16, int8 and int4, one after another (temporarily uses "
                                "extra memory): decode tok/s, TTFT, weights size, identical greedy text?"),
)

WORKER_TEXTS = (
    QT_TRANSLATE_NOOP("engine", "cancelled"),
    QT_TRANSLATE_NOOP("engine", "no model loaded: choose a model and press Load"),
)


def engine_text(text: str) -> str:
    """``text`` in the interface's language when it is one listed here, else unchanged."""
    return QCoreApplication.translate(CONTEXT, text) if text else text
