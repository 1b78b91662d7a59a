"""Grounded prompts: the user's question with numbered sources and the instruction to answer only from them.

Owns: the sources block ("[1] report.pdf, page 2" then the text), the instruction ("answer only from the numbered
sources, cite them as [1], [2]") in English or Chinese chosen by the question's language, and the policy that decides
whether the documents go in whole or as retrieved passages. Does not own reading files, retrieving passages, the
tokenizer or the chat template: the caller passes the whole text, a function that retrieves, and a token counter,
so every function here is pure and testable without a model.

Why the instruction: a language model continues text, it does not check facts; given enough material and told
explicitly to answer only from it ("只根据以下内容回答"), it makes up far less, and numbered sources let the reply say
where each claim came from. Why the policy: putting a document whole into the context costs prefill (quadratic in
the prompt) and KV cache, but misses nothing and its prefix can be reused by a follow-up; retrieval costs little
and may miss. So: whole when the documents fit the room the context leaves beside the conversation and the reply,
retrieved passages when they do not ("auto"); the caller may force either.

The grounded text goes into the user's message, not the system prompt: every chat template renders user messages,
some drop or merge system prompts, and the user's own system prompt stays theirs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePath
from typing import TYPE_CHECKING, Callable, Literal, Sequence

from engine.docs.readers import Document
from engine.errors import BadInputError, ContextTooLongError

if TYPE_CHECKING:  # only named in hints: retrieval pulls in the store, the segmenter and numpy, which every
    # `python -m engine` start would otherwise import through engine chat's --doc options
    from engine.docs.retrieve import Hit

Mode = Literal["auto", "whole", "retrieve"]
MODES: tuple[str, ...] = ("auto", "whole", "retrieve")
Language = Literal["en", "zh"]

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_LATIN_WORD = re.compile(r"[A-Za-z]+")

INSTRUCTION: dict[str, str] = {
    "en": ("Answer only from the numbered sources below. Cite the sources you use as [1], [2] after the sentences "
           "they support. If the sources do not contain the answer, say so instead of guessing."),
    "zh": ("只根据以下编号的资料回答。引用资料时在句末标注编号，如 [1]、[2]。"
           "如果资料中没有答案，请直接说明，不要猜测。"),
}
_SOURCES_HEADER = {"en": "Sources:", "zh": "资料："}
_QUESTION_HEADER = {"en": "Question:", "zh": "问题："}


@dataclass(frozen=True)
class Source:
    """One numbered source: a document's page or whole text, or a retrieved passage."""

    path: str
    page: int | None  # the PDF page; None where the format has no pages
    text: str
    score: float | None  # retrieval's fused score; None for text put in whole (nothing was ranked)

    def label(self, language: Language) -> str:
        """The line above the text: the file's name (the model needs no folders) and its page."""
        name = PurePath(self.path).name or self.path
        if self.page is None:
            return name
        return f"{name}，第 {self.page} 页" if language == "zh" else f"{name}, page {self.page}"

    def as_json(self, number: int) -> dict[str, object]:
        return {"n": number, "path": self.path, "page": self.page, "text": self.text,
                "score": None if self.score is None else round(self.score, 6)}


@dataclass(frozen=True)
class Budget:
    """The context's room for sources, in tokens of the model's tokenizer."""

    context_tokens: int  # the model's context length
    conversation_tokens: int  # the rendered prompt without sources: system, question, instruction, template
    reply_tokens: int  # kept free for the reply (the request's max_new_tokens)

    @property
    def room(self) -> int:
        return max(0, self.context_tokens - self.conversation_tokens - self.reply_tokens)


@dataclass(frozen=True)
class Grounding:
    """What the model receives and what the user is shown."""

    mode: Literal["whole", "retrieve"]  # the policy's choice (or the caller's, when forced)
    sources: tuple[Source, ...]  # numbered from 1 in this order
    message: str  # the user message: instruction, sources, question
    source_tokens: int  # tokens the sources add to the prompt
    whole_tokens: int | None  # what the whole text costs (None: nothing to put in whole, e.g. only collections)
    room: int  # Budget.room when it was decided


def document_sources(document: Document) -> list[Source]:
    """A document put whole: one source per PDF page (so a citation names its page), one for other formats;
    pages without text are left out."""
    return [Source(path=str(document.path), page=page.number, text=page.text, score=None)
            for page in document.pages if page.text.strip()]


def hit_sources(hits: Sequence[Hit]) -> list[Source]:
    return [Source(path=hit.path, page=hit.page, text=hit.text, score=hit.score) for hit in hits]


def question_language(question: str) -> Language:
    """"zh" when the question has more CJK characters than Latin words (a Chinese question quoting an English name
    stays Chinese, an English one quoting a Chinese term stays English), else "en"."""
    return "zh" if len(_CJK.findall(question)) > len(_LATIN_WORD.findall(question)) else "en"


def sources_block(sources: Sequence[Source], language: Language) -> str:
    """``[n] label`` then the text, one blank line between sources."""
    return "\n\n".join(f"[{n}] {source.label(language)}\n{source.text.strip()}"
                       for n, source in enumerate(sources, start=1))


def grounded_message(question: str, sources: Sequence[Source], language: Language | None = None) -> str:
    """The user message: the instruction, the numbered sources, then the question (last, nearest the reply).
    With no sources it is the frame alone, which the caller renders to measure the conversation's tokens."""
    language = language or question_language(question)
    parts = [INSTRUCTION[language], _SOURCES_HEADER[language]]
    if sources:
        parts.append(sources_block(sources, language))
    parts.append(question_part(question, language))
    return "\n\n".join(parts)


def question_part(question: str, language: Language) -> str:
    """The grounded message's last part, after the sources: "Question: …" / "问题：…"."""
    return f"{_QUESTION_HEADER[language]} {question}" if language == "en" else f"{_QUESTION_HEADER[language]}{question}"


def documents_part(message: str, question: str) -> str | None:
    """The grounded ``message`` up to the end of its sources block (the instruction and the sources: what two
    messages grounded in the same documents share whatever their questions), or None when ``message`` is not
    ``grounded_message(question, …)``. ``engine.docs.kv_prefix`` keeps the KV cache of this part."""
    tail = "\n\n" + question_part(question, question_language(question))
    return message[:-len(tail)] if message.endswith(tail) else None


def choose_mode(requested: str, whole_tokens: int | None, room: int) -> Literal["whole", "retrieve"]:
    """The policy: ``requested`` when forced; "auto" puts the documents whole when they fit ``room``, else
    retrieves. Nothing to put whole (``whole_tokens`` None: collections only) is always retrieved."""
    if requested not in MODES:
        raise BadInputError(f"the documents mode must be one of {', '.join(MODES)}, not {requested!r}")
    if requested == "whole":
        if whole_tokens is None:
            raise BadInputError("a collection is searched, not put in whole: attach files to put them in whole")
        return "whole"
    if requested == "retrieve" or whole_tokens is None:
        return "retrieve"
    return "whole" if whole_tokens <= room else "retrieve"


def ground(question: str, whole: Sequence[Source], retrieve: Callable[[], Sequence[Source]], requested: str,
           budget: Budget, count: Callable[[str], int]) -> Grounding:
    """Decide whole or retrieved and build the message.

    ``whole``: the attached documents' text (one source per page or file), empty when only collections are named;
    ``retrieve``: called only when retrieval is chosen, the passages best first; ``budget``: its
    ``conversation_tokens`` measured on ``grounded_message(question, [])``; ``count``: tokens of a text with the
    model's tokenizer. The sources' cost is measured as the message's growth, so the separators are counted too.
    Retrieved passages are kept best first while they fit the room; a lower-ranked shorter one may still fit after
    a longer one did not. Raises ``ContextTooLongError`` when the whole text is forced and does not fit, or when
    passages were found and not even one fits (no passage found is not an error: the model is told the sources are
    empty and says it cannot answer).
    """
    if not question.strip():
        raise BadInputError("the question is empty")
    language = question_language(question)
    frame = count(grounded_message(question, (), language))

    def cost(sources: Sequence[Source]) -> int:
        return count(grounded_message(question, sources, language)) - frame

    whole_tokens = cost(whole) if whole else None
    room = budget.room
    mode = choose_mode(requested, whole_tokens, room)
    if mode == "whole":
        if whole_tokens is not None and whole_tokens > room:  # (choose_mode refused "whole" without whole text)
            raise ContextTooLongError(
                f"the documents are {whole_tokens} tokens but {room} fit beside the conversation and the reply "
                f"(context {budget.context_tokens}): retrieve passages instead")
        chosen: tuple[Source, ...] = tuple(whole)
    else:
        ranked = list(retrieve())
        chosen = _fit(ranked, room, cost)
        if ranked and not chosen:
            raise ContextTooLongError(
                f"no retrieved passage fits the {room} tokens left beside the conversation and the reply "
                f"(context {budget.context_tokens}): shorten the question or the reply")
    return Grounding(mode=mode, sources=chosen, message=grounded_message(question, chosen, language),
                     source_tokens=cost(chosen) if chosen else 0, whole_tokens=whole_tokens, room=room)


def _fit(ranked: list[Source], room: int, cost: Callable[[Sequence[Source]], int]) -> tuple[Source, ...]:
    kept: list[Source] = []
    for source in ranked:
        if cost([*kept, source]) <= room:
            kept.append(source)
    return tuple(kept)
