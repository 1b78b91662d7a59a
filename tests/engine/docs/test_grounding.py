"""engine/docs/grounding.py: the numbered sources and the instruction in the question's language, and the whole-or-
retrieve policy by the context budget, counted with a real tokenizer (the tiny model's byte-level BPE)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.docs.grounding import (INSTRUCTION, Budget, Source, choose_mode, document_sources, ground,
                                   grounded_message, question_language, sources_block)
from engine.docs.readers import read_document
from engine.errors import BadInputError, ContextTooLongError
from tests.helpers.documents import make_pdf
from tests.helpers.tiny_model import build_tiny_tokenizer

REPORT = Source("/home/u/docs/report.pdf", 2, "The Lyon warehouse closed in March.", None)
NOTES = Source("/home/u/docs/notes.txt", None, "Water the ficus on Fridays.", 0.0325)


@pytest.fixture(scope="module")
def count():
    tokenizer = build_tiny_tokenizer()
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False))


@pytest.mark.parametrize("question, language", [
    ("When did the warehouse close?", "en"),
    ("仓库什么时候关闭的？", "zh"),
    ("这份报告里 Lyon 的仓库什么时候关闭？", "zh"),  # a Chinese question quoting an English name
    ("What does 分级保护 mean in the law?", "en"),  # an English question quoting a Chinese term
])
def test_the_language_is_the_questions(question, language):
    assert question_language(question) == language


def test_the_english_message_numbers_the_sources_and_asks_for_citations():
    message = grounded_message("When did it close?", [REPORT, NOTES])
    assert message.startswith("Answer only from the numbered sources below. Cite the sources you use as [1], [2]")
    assert "[1] report.pdf, page 2\nThe Lyon warehouse closed in March." in message
    assert "[2] notes.txt\nWater the ficus on Fridays." in message
    assert "/home/u" not in message  # the model gets file names, not the user's folders
    assert message.index("[2] notes.txt") < message.index("Question: When did it close?") and \
        message.endswith("Question: When did it close?")


def test_the_chinese_message_says_only_from_the_sources():
    message = grounded_message("仓库什么时候关闭的？", [REPORT])
    assert message.startswith("只根据以下编号的资料回答") and "[1]、[2]" in message
    assert "[1] report.pdf，第 2 页" in message and message.endswith("问题：仓库什么时候关闭的？")


def test_sources_block_separates_sources_by_a_blank_line():
    assert sources_block([REPORT, NOTES], "en") == ("[1] report.pdf, page 2\nThe Lyon warehouse closed in March."
                                                   "\n\n[2] notes.txt\nWater the ficus on Fridays.")


@pytest.mark.parametrize("requested, whole, room, mode", [
    ("auto", 100, 100, "whole"),  # exactly fits
    ("auto", 101, 100, "retrieve"),
    ("auto", None, 10_000, "retrieve"),  # collections only: nothing to put whole
    ("whole", 5_000, 100, "whole"),  # forced (ground() then refuses it as too long)
    ("retrieve", 10, 100, "retrieve"),
])
def test_the_policy(requested, whole, room, mode):
    assert choose_mode(requested, whole, room) == mode


def test_a_bad_mode_or_whole_without_files_is_refused():
    with pytest.raises(BadInputError, match="one of auto, whole, retrieve"):
        choose_mode("everything", 10, 100)
    with pytest.raises(BadInputError, match="collection is searched"):
        choose_mode("whole", None, 100)


def test_budget_room_is_context_minus_conversation_and_reply():
    assert Budget(context_tokens=256, conversation_tokens=60, reply_tokens=32).room == 164
    assert Budget(context_tokens=256, conversation_tokens=250, reply_tokens=32).room == 0


def _never_retrieved():
    raise AssertionError("retrieval ran although the whole text was chosen")


def test_auto_puts_documents_whole_when_they_fit_and_counts_their_tokens(count):
    question = "When did it close?"
    frame = count(grounded_message(question, []))
    grounding = ground(question, [REPORT, NOTES], _never_retrieved, "auto",
                       Budget(context_tokens=4096, conversation_tokens=frame + 10, reply_tokens=64), count)
    assert grounding.mode == "whole" and grounding.sources == (REPORT, NOTES)
    assert grounding.source_tokens == grounding.whole_tokens == count(grounding.message) - frame > 0
    assert grounding.message == grounded_message(question, [REPORT, NOTES])


def test_auto_retrieves_when_the_whole_text_does_not_fit_and_keeps_what_fits_best_first(count):
    question = "When did the Lyon warehouse close?"
    long_page = Source("/d/big.pdf", 1, "Lyon warehouse details. " * 200, None)
    short = Source("/d/big.pdf", 7, "The Lyon warehouse closed in March.", 0.03)
    too_long = Source("/d/big.pdf", 3, "Lyon " * 400, 0.05)
    calls: list[int] = []

    def retrieve():
        calls.append(1)
        return [too_long, short, NOTES]

    one_source = count(grounded_message(question, [short])) - count(grounded_message(question, []))
    budget = Budget(context_tokens=1000, conversation_tokens=500 - one_source - 3, reply_tokens=500)
    grounding = ground(question, [long_page], retrieve, "auto", budget, count)
    assert calls == [1] and grounding.mode == "retrieve"
    assert grounding.whole_tokens is not None and grounding.whole_tokens > budget.room
    # The best passage is too long; the next one fits; the third would overflow the room.
    assert grounding.sources == (short,) and grounding.source_tokens <= budget.room
    assert "[1] big.pdf, page 7\nThe Lyon warehouse closed in March." in grounding.message


def test_forced_whole_that_does_not_fit_is_one_line(count):
    big = Source("/d/big.txt", None, "word " * 500, None)
    with pytest.raises(ContextTooLongError, match=r"the documents are \d+ tokens but 100 fit"):
        ground("What is it?", [big], _never_retrieved, "whole",
               Budget(context_tokens=400, conversation_tokens=200, reply_tokens=100), count)


def test_forced_retrieve_ignores_whole_text_that_would_fit(count):
    grounding = ground("When?", [REPORT], lambda: [NOTES], "retrieve",
                       Budget(context_tokens=4096, conversation_tokens=50, reply_tokens=50), count)
    assert grounding.mode == "retrieve" and grounding.sources == (NOTES,)


def test_no_passage_found_is_an_empty_block_but_none_fitting_is_an_error(count):
    grounding = ground("When?", [], lambda: [], "auto", Budget(4096, 50, 50), count)
    assert grounding.sources == () and grounding.whole_tokens is None and grounding.source_tokens == 0
    assert grounding.message.startswith(INSTRUCTION["en"])
    with pytest.raises(ContextTooLongError, match="no retrieved passage fits"):
        ground("When?", [], lambda: [REPORT], "auto", Budget(256, 250, 32), count)


def test_a_pdf_is_whole_as_one_source_per_page_without_empty_pages(tmp_path: Path):
    pdf = tmp_path / "report.pdf"
    pdf.write_bytes(make_pdf(["Intro page.", "The Lyon warehouse closed in March.", " "]))
    sources = document_sources(read_document(pdf))
    assert [(s.page, s.text.strip(), s.score) for s in sources] == [
        (1, "Intro page.", None), (2, "The Lyon warehouse closed in March.", None)]
    assert sources[1].as_json(2) == {"n": 2, "path": str(pdf), "page": 2, "score": None,
                                     "text": sources[1].text}
