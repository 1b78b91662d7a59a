"""A conversation's messages as the chat controller keeps and reports them: ``ChatMessage``, ``FinishedReply``,
and ``ShownMessage``, what one bubble of ``app.widgets.chat_view`` shows of a message.

Plain frozen data between ``app.window.controller`` (which builds them from the history store and the bridge) and the
window (which shows them). Owns no behaviour beyond the footer's wording, which is ``PerfRecord``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from app.history.images_cell import is_image_file
from app.history.perf import PerfRecord
from app.history.rows import MessageRow
from app.history.tool_record import ToolCallRecord
from engine.docs.attach import DocumentsUsed
from engine.events import Metrics


@dataclass(frozen=True)
class ChatMessage:
    """One message of the open conversation as the store keeps it (``message_id`` None when unsaved)."""

    role: str  # "user" | "assistant"
    text: str
    message_id: int | None = None
    finish_reason: str | None = None  # None while streaming, and for the user's messages
    perf: PerfRecord | None = None
    reasoning: str = ""  # a reasoning model's thought, shown collapsed above the answer
    tool_calls: tuple[ToolCallRecord, ...] = ()  # the tools it called while replying, as saved
    attachments: tuple[str, ...] = ()  # a user message's attached files (paths): the message is grounded in them
    documents: DocumentsUsed | None = None  # a reply to attached files: its sources and what they added
    images: tuple[str, ...] = ()  # a user message's pictures: files in the images folder (engine.vision.image_store)

    @classmethod
    def of_row(cls, r: MessageRow) -> ChatMessage:
        """The message as the store keeps it."""
        return cls(r.role, r.text, r.id, r.finish_reason, r.perf, r.reasoning, r.tool_calls, r.attachments,
                   r.documents, r.images)

    @classmethod
    def sent(cls, text: str, message_id: int | None, attached: Sequence[str]) -> ChatMessage:
        """A user message as sent with the composer's ``attached`` files: the pictures among them are its images,
        the rest the documents it is grounded in."""
        return cls("user", text, message_id, attachments=tuple(a for a in attached if not is_image_file(a)),
                   images=tuple(a for a in attached if is_image_file(a)))

    @property
    def footer(self) -> str:
        """The figures shown under a reply, e.g. ``41.8 tok/s · TTFT 86 ms · 12 tokens · KV 2.9 MiB``."""
        return self.perf.footer() if self.perf is not None else ""

    @property
    def continuable(self) -> bool:
        """Continue can resume it: a reply cut by its length limit, or stopped by the user after some text."""
        return continuable(self.role, self.finish_reason, self.text, self.reasoning)


def continuable(role: str, finish_reason: str | None, text: str, reasoning: str) -> bool:
    """Whether Continue can resume this message: a reply the length limit cut, or one Stop cut after it said
    something (a reply stopped before its first token has nothing to continue: Regenerate is the action there)."""
    return role == "assistant" and (finish_reason == "length" or (finish_reason == "cancelled"
                                                                   and bool(text or reasoning)))


@dataclass(frozen=True)
class ShownMessage:
    """What a bubble shows (the store's ids travel with it so edits can cut the history there)."""

    role: str  # "user" | "assistant"
    text: str
    message_id: int | None = None
    footer: str = ""
    finish_reason: str | None = None
    reasoning: str = ""  # a reasoning model's thought: the bubble's collapsed "Thinking…" section
    thinking_tokens: int | None = None
    thinking_s: float | None = None
    tool_calls: tuple[ToolCallRecord, ...] = ()  # the bubble's tool-call blocks (``app.widgets.tool_call_view``)
    attachments: tuple[str, ...] = ()  # a user message's attached files, named under its text
    documents: DocumentsUsed | None = None  # a reply's sources list (``app.widgets.sources_view``)
    images: tuple[str, ...] = ()  # a user message's pictures: thumbnails under its text (``app.widgets.image_strip``)

    @property
    def continuable(self) -> bool:
        """The bubble offers Continue (when it is the last reply)."""
        return continuable(self.role, self.finish_reason, self.text, self.reasoning)

    @classmethod
    def of(cls, m: ChatMessage) -> ShownMessage:
        """What the bubble of the controller's ``m`` shows."""
        perf = m.perf
        return cls(m.role, m.text, m.message_id, m.footer, m.finish_reason, m.reasoning,
                   perf.thinking_tokens if perf else None, perf.thinking_s if perf else None, m.tool_calls,
                   m.attachments, m.documents, m.images)


@dataclass(frozen=True)
class FinishedReply:
    """A reply that ended, as saved."""

    message: ChatMessage  # its whole text, store id, finish reason and performance record
    metrics: Metrics | None  # the engine's final figures; None when no token came
    shown: bool  # it belongs to the conversation open now (another one may have been opened meanwhile)
    kept: bool  # False: it failed before any text and was removed from the conversation
