"""The English texts of the engine and of the history store that the window shows, marked here for translation
(neither imports Qt).

``pyside6-lupdate`` extracts the ``QT_TRANSLATE_NOOP`` entries below; the window looks a text up when it shows it.
The engine's fixed texts (context "engine"; ``engine_text``): the model load's stages (``engine.models.loader``),
the lab's experiment titles and descriptions (``engine.lab.experiments``) and the engine core's fixed refusals
(``engine.core.core``); any other text (a path, an exception's message) appears as the engine wrote it. A failed load
(``load_failure_text``) is said by its ``ErrorKind``, with the model as its variable part: the engine's own line
where the interface is English, the kind's sentence in the interface's language otherwise. The history's notices
(context "history"; ``history_text``) by their ``NoticeKind``, with their values. Tests check that every stage,
experiment and notice kind is listed here. Owns no widget and translates nothing measured: numbers, units, paths
and model names stay as they are.
"""

from __future__ import annotations

import logging
from typing import Any

from PySide6.QtCore import QT_TRANSLATE_NOOP, QCoreApplication

from app.history.notices import HistoryNotice
from engine.errors import ErrorKind
from engine.remote.spec import RemoteSpec

log = logging.getLogger(__name__)

CONTEXT = "engine"
HISTORY = "history"

LOAD_STAGES = (
    QT_TRANSLATE_NOOP("engine", "checking files"), QT_TRANSLATE_NOOP("engine", "reading config"),
    QT_TRANSLATE_NOOP("engine", "loading weights"), QT_TRANSLATE_NOOP("engine", "quantizing"),
    QT_TRANSLATE_NOOP("engine", "quantized weights from the cache"), QT_TRANSLATE_NOOP("engine", "loading tokenizer"),
    QT_TRANSLATE_NOOP("engine", "checking quantized quality"), QT_TRANSLATE_NOOP("engine", "ready"),
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
    QT_TRANSLATE_NOOP("engine", "Speculative decoding"),
    QT_TRANSLATE_NOOP("engine", "Plain and prompt-lookup decoding at draft lengths 1-8 on a repeat-heavy prompt and a "
                                "fresh one: speed-up against draft length and acceptance, tokens per step, identical "
                                "greedy text?"),
    QT_TRANSLATE_NOOP("engine", "Whole text vs retrieval"),
    QT_TRANSLATE_NOOP("engine", "A real document (Vim's tutor, English and Chinese) cut to several lengths, put whole "
                                "into the prompt or as retrieved passages: TTFT, prefill tokens and KV cache bytes "
                                "against its length."),
    QT_TRANSLATE_NOOP("engine", "What an image costs"),
    QT_TRANSLATE_NOOP("engine", "One picture at sizes from 224×224 to 2048×1536 on a vision-language model: TTFT split "
                                "into the vision encoder and the prefill, image tokens and KV cache bytes against its "
                                "resolution."),
)

WORKER_TEXTS = (
    QT_TRANSLATE_NOOP("engine", "cancelled"),
    QT_TRANSLATE_NOOP("engine", "no model loaded: choose a model and press Load"),
)


# What each model of the curated list is good for (engine.library.curated; the Models window’s Recommended tab).
CURATED_NOTES = (
    QT_TRANSLATE_NOOP("engine", "the smallest that answers in Chinese and English; fast anywhere"),
    QT_TRANSLATE_NOOP("engine", "good everyday answers in Chinese and English on a laptop CPU"),
    QT_TRANSLATE_NOOP("engine", "noticeably better answers; wants a desktop CPU or a GPU"),
    QT_TRANSLATE_NOOP("engine", "thinks before answering (can be switched off); strong in Chinese"),
    QT_TRANSLATE_NOOP("engine", "a reasoning model that holds its own on maths and code"),
    QT_TRANSLATE_NOOP("engine", "Google’s small multilingual chat model"),
    QT_TRANSLATE_NOOP("engine", "Meta’s small model; English first"),
    QT_TRANSLATE_NOOP("engine", "Meta’s 3B: better English answers"),
    QT_TRANSLATE_NOOP("engine", "Microsoft’s 3.8B: strong reasoning for its size"),
    QT_TRANSLATE_NOOP("engine", "the default model’s big sibling (same tokenizer); English"),
)


def engine_text(text: str) -> str:
    """``text`` in the interface's language when it is one listed here, else unchanged."""
    return QCoreApplication.translate(CONTEXT, text) if text else text


# What a failed load of a local model is, by kind ({model}: what was asked for: "default", a folder, a file).
LOAD_FAILURES = {
    ErrorKind.NOT_FOUND: QT_TRANSLATE_NOOP("engine", "{model} was not found: open a model folder or a .gguf file (the "
                                                     "default model needs `python -m engine fetch` once)"),
    ErrorKind.CORRUPT: QT_TRANSLATE_NOOP("engine", "a file of {model} is damaged or incomplete"),
    ErrorKind.UNSAFE: QT_TRANSLATE_NOOP("engine", "{model} was refused: loading it could run code hidden in its "
                                                  "files"),
    ErrorKind.REMOTE_CODE_REFUSED: QT_TRANSLATE_NOOP("engine", "{model} asks to run its own Python code"),
    ErrorKind.OUT_OF_MEMORY: QT_TRANSLATE_NOOP("engine", "not enough memory for {model}: try int8 or int4, or "
                                                         "another device"),
    ErrorKind.CANCELLED: QT_TRANSLATE_NOOP("engine", "loading {model} was cancelled"),
    ErrorKind.BAD_INPUT: QT_TRANSLATE_NOOP("engine", "{model} cannot be loaded with this precision on this device"),
    ErrorKind.OTHER: QT_TRANSLATE_NOOP("engine", "{model} could not be loaded"),
}
# The same for a model on a server ({model}: its name, {server}: host and port).
REMOTE_FAILURES = {
    ErrorKind.NOT_FOUND: QT_TRANSLATE_NOOP("engine", "{server} does not serve the model {model}: choose one it lists"),
    ErrorKind.BAD_INPUT: QT_TRANSLATE_NOOP("engine", "the server's address {server} cannot be used"),
    ErrorKind.CANCELLED: QT_TRANSLATE_NOOP("engine", "connecting to {server} was cancelled"),
    ErrorKind.OTHER: QT_TRANSLATE_NOOP("engine", "could not connect to {server} or use its model {model}"),
}

HISTORY_TEXTS = (  # each app.history.notices.NoticeKind's wording
    QT_TRANSLATE_NOOP("history", "History file was damaged ({problem}); a copy is kept at {copy}. Recovered "
                                 "{conversations} conversations and {messages} messages."),
    QT_TRANSLATE_NOOP("history", "Opened {file} read-only: it was written by a newer Miaohui (schema v{version}); new "
                                 "chats will not be saved."),
    QT_TRANSLATE_NOOP("history", "Opened {file} read-only: it was written by a newer Miaohui (schema v{version}) and "
                                 "looks damaged ({problem})."),
    QT_TRANSLATE_NOOP("history", "History at {path} cannot be written ({reason}); it is shown read-only and new chats "
                                 "will not be saved."),
    QT_TRANSLATE_NOOP("history", "History at {path} cannot be opened ({reason}); this session's chats are kept in "
                                 "memory only."),
    QT_TRANSLATE_NOOP("history", "History upgraded from schema v{old} to v{new}; a backup of the old file is at "
                                 "{backup}."),
    QT_TRANSLATE_NOOP("history", "Some history from the newer version cannot be read here."),
    QT_TRANSLATE_NOOP("history", "{count} damaged messages cannot be shown (ids {ids})."),
    QT_TRANSLATE_NOOP("history", "{count} damaged messages were repaired for display (ids {ids})."),
    QT_TRANSLATE_NOOP("history", "{count} damaged conversations were repaired for display (ids {ids})."),
    QT_TRANSLATE_NOOP("history", "it cannot be read as a database"),
    QT_TRANSLATE_NOOP("history", "it fails SQLite's integrity check"),
    QT_TRANSLATE_NOOP("history", "not a Miaohui history file"),
    QT_TRANSLATE_NOOP("history", "tables are missing"),
    QT_TRANSLATE_NOOP("history", "no permission"),
    QT_TRANSLATE_NOOP("history", "another Miaohui has been opening it for too long"),
    QT_TRANSLATE_NOOP("history", "a file stands where its folder should be"),
    QT_TRANSLATE_NOOP("history", "the disk is full"),
    QT_TRANSLATE_NOOP("history", "a newer Miaohui upgraded it meanwhile"),
    QT_TRANSLATE_NOOP("history", "{detail}"),
)


def load_failure_text(failure: Any, current: str | None) -> str:
    """The notice for a failed load (an ``engine.core.jobs.LoadFailure``), saying which model stays loaded (``current``).

    The engine's line is English and worded per case; where the interface has a translation, the failure is said by
    its kind in the interface's language instead, and the engine's line goes to the log.
    """
    spec = failure.spec
    if isinstance(spec, RemoteSpec):
        source = REMOTE_FAILURES.get(failure.kind, REMOTE_FAILURES[ErrorKind.OTHER])
        values = {"model": spec.model or "—", "server": spec.host}
    else:
        source = LOAD_FAILURES.get(failure.kind, LOAD_FAILURES[ErrorKind.OTHER])
        values = {"model": spec.model}
    translated = QCoreApplication.translate(CONTEXT, source)
    if translated == source:  # no translation installed: English, the engine's own line says it best
        why = failure.message
    else:
        log.info("load failed (%s): %s", failure.kind.value, failure.message)
        why = translated.format(**values)
    kept = (QCoreApplication.translate("ChatController", " (still using {name})").format(name=current)
            if current else "")
    return QCoreApplication.translate("ChatController", "Could not load the model: {0}{1}").format(why, kept)


def history_text(notice: str) -> str:
    """A history notice in the interface's language, said by its kind with its values (worded ones translated
    too); a plain string is returned as it is."""
    if not isinstance(notice, HistoryNotice):
        return notice
    values = {name: history_text(value) if isinstance(value, HistoryNotice) else value
              for name, value in notice.values.items()}
    return QCoreApplication.translate(HISTORY, notice.kind.value).format(**values)
