"""How a text is cut into tokens: ids, the text each token covers, and counts.

Feeds the GUI's tokenizer view and the attention heatmap's labels. Byte-level BPE tokenizers split
one Chinese character or emoji into several tokens that are not valid text on their own, so each
piece reports the characters it covers (from the fast tokenizer's offset mapping) and which part of
a split character it is; that is what makes "why a name gets split" visible. Works on the loaded
model's tokenizer; plain results (frozen dataclasses of ints and strings) cross to the GUI.
Owns no model and no generation; the chat template is the tokenizer's own.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, replace

from engine.generate.chat_template import render_text
from engine.errors import BadInputError

MAX_CHARS = 200_000  # a tokenizer view of a whole book is not useful and would freeze the table


@dataclass(frozen=True)
class TokenPiece:
    """One token of the text."""

    index: int
    token_id: int
    token: str  # the vocabulary entry as stored (byte-level BPE shows "Ġ" for a space)
    text: str  # the characters this token covers in the input ("" for a special token the template added)
    start: int  # character span in the viewed text
    end: int
    part: int  # 1-based part number when several tokens cover the same characters (a split character)
    parts: int  # how many tokens cover those characters (1 = a whole piece)
    special: bool  # a special token (<|im_start|> ...)
    starts_inside: bool = False  # its first character is also covered by the previous token (cut mid-character)
    ends_inside: bool = False  # its last character is also covered by the next token

    @property
    def label(self) -> str:
        """Short display form: the text, "(part/parts)" for a character cut into several tokens, and "…" on
        a side where the token begins or ends inside a character."""
        shown = self.token if self.special else (self.text or self.token)
        shown = shown.replace("\n", "↵").replace(" ", "·")
        if self.parts > 1:
            return f"{shown}({self.part}/{self.parts})"
        return ("…" if self.starts_inside else "") + shown + ("…" if self.ends_inside else "")


@dataclass(frozen=True)
class TokenView:
    """A text, its tokens, and how many of each."""

    text: str
    pieces: tuple[TokenPiece, ...]
    counts: tuple[tuple[int, int], ...]  # (token id, occurrences), most frequent first
    with_template: bool

    @property
    def token_count(self) -> int:
        return len(self.pieces)

    @property
    def char_count(self) -> int:
        return len(self.text)

    @property
    def byte_count(self) -> int:
        return len(self.text.encode("utf-8"))

    @property
    def split_chars(self) -> int:
        """Characters that more than one token covers: cut between tokens (each counted once)."""
        return len(_coverage(self.pieces)[1])

    @property
    def chars_per_token(self) -> float:
        return self.char_count / self.token_count if self.pieces else 0.0


def _coverage(pieces) -> tuple[Counter, set[int]]:
    """How many tokens cover each character index, and the indices covered more than once."""
    cover: Counter = Counter()
    for piece in pieces:
        cover.update(range(piece.start, piece.end))
    return cover, {i for i, n in cover.items() if n > 1}


def tokenize_view(tokenizer, text: str, *, with_template: bool = False,
                  cancel: threading.Event | None = None) -> TokenView:
    """Tokenise ``text`` as the model sees it; with ``with_template`` as a user turn in the chat template."""
    if len(text) > MAX_CHARS:
        raise BadInputError(f"text too long for the tokenizer view ({len(text):,} characters, at most {MAX_CHARS:,})")
    if with_template:
        text = render_text(tokenizer, [{"role": "user", "content": text}], add_generation_prompt=True,
                           cancel=cancel)
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids: list[int] = list(encoded["input_ids"])
    offsets = [tuple(span) for span in encoded["offset_mapping"]]
    tokens = tokenizer.convert_ids_to_tokens(ids)
    special_ids = set(getattr(tokenizer, "all_special_ids", ()) or ())
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    special_ids.update(i for i, tok in added.items() if getattr(tok, "special", False))
    span_sizes = Counter(offsets)
    seen: Counter = Counter()
    pieces = []
    for index, (token_id, token, (start, end)) in enumerate(zip(ids, tokens, offsets)):
        seen[(start, end)] += 1
        pieces.append(TokenPiece(index=index, token_id=int(token_id), token=str(token), text=text[start:end],
                                 start=int(start), end=int(end), part=seen[(start, end)],
                                 parts=span_sizes[(start, end)], special=int(token_id) in special_ids))
    # Byte-level BPE can also cut a character between two tokens whose spans differ (one ends with the
    # character's first bytes, the next starts with its last): mark the side shared with the neighbour.
    marked = []
    for i, p in enumerate(pieces):
        if p.parts > 1 or p.end <= p.start:
            marked.append(p)
            continue
        before = pieces[i - 1] if i > 0 else None
        after = pieces[i + 1] if i + 1 < len(pieces) else None
        marked.append(replace(p, starts_inside=before is not None and before.end > p.start,
                              ends_inside=after is not None and after.start < p.end))
    pieces = marked
    counts = tuple(sorted(Counter(ids).items(), key=lambda item: (-item[1], item[0])))
    return TokenView(text=text, pieces=tuple(pieces), counts=counts, with_template=with_template)


def token_view(loaded, cancel: threading.Event | None = None, *, text: str,
               with_template: bool = False) -> TokenView:
    """``submit_task``-shaped entry for the GUI: runs on the model's worker thread."""
    return tokenize_view(loaded.tokenizer, text, with_template=with_template, cancel=cancel)
