"""The chat's fixed words about a turn, and the conversation a reply answers: small rules ``ChatController`` applies.

Owns why a message cannot be sent now (``cannot_send``), what the status bar says when a reply stops short
(``finish_note``), which messages the engine is given (``engine_conversation``: a grounded turn as grounded), and
the one warning a failing history store earns (``UnsavedWarning``). Holds no chat state: the controller
(app/window/controller.py) decides when each applies. Texts keep the ``ChatController`` translation context they
were written in (lupdate reads the literal ``translate`` calls, so each names it).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from PySide6.QtCore import QCoreApplication

from app.history.store import StoreError
from app.state.chat_messages import ChatMessage
from engine.docs.grounding import grounded_message
from engine.events import Message

translate = QCoreApplication.translate


def cannot_send(text: str, loading: bool, model_loaded: bool) -> tuple[str, str] | None:
    """(message, level) saying why ``text`` cannot go now, when it is the user's to fix; None when it can."""
    if not text.strip():
        return translate("ChatController", "Your message is empty."), "info"
    if loading:
        return translate("ChatController", "The model is still loading; send when it is ready."), "info"
    if not model_loaded:
        return translate("ChatController", "No model loaded: choose a model above and press Load."), "warning"
    return None


def finish_note(reason: str, continuable: bool) -> tuple[str, int] | None:
    """(status-bar note, milliseconds shown) for a reply that stopped short, or None."""
    if reason == "cancelled" and continuable:
        return translate("ChatController", "Stopped: the partial reply is kept; press Continue for more."), 5000
    if reason == "cancelled":
        return translate("ChatController", "Stopped before the reply began."), 5000
    if reason == "length":
        return translate("ChatController",
                         "The reply reached the max new tokens limit: press Continue for more."), 8000
    return None


def engine_conversation(system_prompt: str, messages: Sequence[ChatMessage], upto: int | None = None) -> list[Message]:
    """What a reply answers: the system prompt, then every message before index ``upto`` but the empty or failed
    replies (not something the model said). A user message whose reply was grounded in documents is given as the
    grounded message that reply answered (its instruction, the same numbered sources, then the question): a follow-up
    is answered from the same documents, and the prompt's prefix is the one already in the KV cache."""
    system = [Message("system", system_prompt)] if system_prompt.strip() else []
    shown = messages[:upto]
    return system + [Message(m.role, _as_answered(m, messages[i + 1] if i + 1 < len(messages) else None), m.reasoning)
                     for i, m in enumerate(shown)
                     if m.role == "user" or (m.text.strip() and m.finish_reason != "error")]


def engine_images(system_prompt: str, messages: Sequence[ChatMessage]) -> tuple[tuple[int, tuple[str, ...]], ...]:
    """The pictures of ``engine_conversation``'s messages: (index there, image files), for a vision turn; the same
    messages are left out, so each picture stays before its own message's text."""
    index = 1 if system_prompt.strip() else 0
    found = []
    for m in messages:
        if m.role == "user" or (m.text.strip() and m.finish_reason != "error"):
            if m.images:
                found.append((index, m.images))
            index += 1
    return tuple(found)


def _as_answered(message: ChatMessage, reply: ChatMessage | None) -> str:
    """A user message's text as its reply answered it: grounded in the sources that reply was given, if any."""
    if message.role != "user" or reply is None or reply.role != "assistant" or reply.documents is None:
        return message.text
    return grounded_message(message.text, reply.documents.sources)


class UnsavedWarning:
    """Says "History not saved" once: a read-only history would otherwise repeat it on every save."""

    def __init__(self, notice: Callable[[str, str], None]) -> None:
        self._notice = notice
        self._warned = False

    @classmethod
    def writer(cls, notice: Callable[[str, str], None]) -> tuple[Callable[..., Any], Callable[[StoreError], None]]:
        """(write, warn): ``write(fn, *args)`` runs one store write, a failure warned once and None returned."""
        warning = cls(notice)
        return warning.write, warning.warn

    def warn(self, exc: StoreError) -> None:
        if not self._warned:
            self._notice(translate("ChatController", "History not saved: {why}").format(why=exc), "warning")
            self._warned = True

    def write(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except StoreError as exc:
            self.warn(exc)
            return None
