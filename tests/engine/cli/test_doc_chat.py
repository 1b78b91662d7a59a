"""``python -m engine chat --doc/--collection/--docs-mode`` through ``main()`` with the tiny model (1024 positions here:
its byte-heavy tokenizer spends ~170 tokens on the instruction alone, which would leave 256 positions no room):
the prompt the model received holds the instruction and the numbered sources, ``--json`` has ``sources`` and the
mode, the text output lists the sources, and the policy follows the budget. The tiny model's replies are random, so
the mechanism is what is checked; the prompt is seen by wrapping the real ``build_prompt`` (it still builds it)."""

from __future__ import annotations

import json

import pytest

from engine.__main__ import main
from tests.helpers.documents import make_pdf
from tests.helpers.prompts import prompts  # noqa: F401 (fixture)

SHORT = "The Lyon warehouse closed in March."
CONTEXT = 1024


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    from tests.helpers.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-1k"), max_position_embeddings=CONTEXT)


def chat(model, *args: str) -> int:
    return main(["chat", "--model", str(model), "--precision", "fp32", "--max-new-tokens", "4", *args])


def test_a_small_pdf_goes_whole_with_numbered_pages_and_json_sources(home, tiny_model_dir, tmp_path, prompts,
                                                                      capsys):
    pdf = tmp_path / "report.pdf"
    pdf.write_bytes(make_pdf(["Intro page.", SHORT]))
    assert chat(tiny_model_dir, "--prompt", "When did Lyon close?", "--doc", str(pdf), "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["docs_mode"] == "whole" and data["retrieval"] is None
    assert [(s["n"], s["page"], s["text"].strip(), s["score"]) for s in data["sources"]] == [
        (1, 1, "Intro page.", None), (2, 2, SHORT, None)]
    assert data["sources"][0]["path"] == str(pdf)
    tokens = data["docs_tokens"]
    assert 0 < tokens["sources"] == tokens["whole"] <= tokens["room"] < CONTEXT
    [prompt] = prompts
    assert prompt.startswith("Answer only from the numbered sources below. Cite the sources you use as [1], [2]")
    assert f"[1] report.pdf, page 1\nIntro page.\n\n[2] report.pdf, page 2\n{SHORT}" in prompt
    assert prompt.endswith("Question: When did Lyon close?")
    assert data["prompt_tokens"] > tokens["sources"]  # the model really received them


def _sections(count: int) -> str:
    """A Markdown file whose sections are short passages (the chunker never joins two sections)."""
    body = [f"## Site {i}\n\nThe site number {i} stores paper and ink." for i in range(count)]
    body[7] = "## Lyon\n\nThe Lyon warehouse closed in March."
    return "# Sites\n\n" + "\n\n".join(body)


def test_a_document_larger_than_the_context_is_retrieved_and_the_best_passage_comes_first(
        home, tiny_model_dir, tmp_path, prompts, capsys):
    notes = tmp_path / "sites.md"
    notes.write_text(_sections(40), encoding="utf-8")
    assert chat(tiny_model_dir, "--prompt", "When did the Lyon warehouse close?", "--doc", str(notes),
                "--json") == 0
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert data["docs_mode"] == "retrieve" and data["retrieval"] == "keyword"
    assert err.count("searching by keywords only") == 1  # no embedder in a fresh data folder: said once
    tokens = data["docs_tokens"]
    assert tokens["whole"] > tokens["room"] >= tokens["sources"] > 0
    first = data["sources"][0]
    assert first["n"] == 1 and first["text"] == SHORT and first["page"] is None and first["score"] > 0
    assert f"[1] sites.md\n{SHORT}" in prompts[0]
    assert not (home / "documents.sqlite3").exists()  # an attached file is not added to the user's collections


def test_forcing_whole_on_a_document_too_large_is_one_line_and_exit_2(home, tiny_model_dir, tmp_path, capsys):
    notes = tmp_path / "sites.md"
    notes.write_text(_sections(40), encoding="utf-8")
    assert chat(tiny_model_dir, "--prompt", "Lyon?", "--doc", str(notes), "--docs-mode", "whole") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the documents are ") and "retrieve passages instead" in err
    assert err.count("\n") == 1


def test_forcing_retrieve_on_a_small_file_retrieves(home, tiny_model_dir, tmp_path, prompts, capsys):
    note = tmp_path / "note.txt"
    note.write_text(SHORT, encoding="utf-8")
    assert chat(tiny_model_dir, "--prompt", "Lyon warehouse?", "--doc", str(note), "--docs-mode", "retrieve",
                "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["docs_mode"] == "retrieve" and [s["text"] for s in data["sources"]] == [SHORT]


def test_a_collection_is_retrieved_and_the_text_output_lists_sources_after_the_reply(
        home, tiny_model_dir, tmp_path, prompts, capsys):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "说明.txt").write_bytes("安装前请先备份数据。升级会清空缓存！".encode("gb18030"))
    (folder / "report.pdf").write_bytes(make_pdf(["Intro page.", SHORT]))
    assert main(["docs", "add", str(folder), "--collection", "work"]) == 0
    capsys.readouterr()
    assert chat(tiny_model_dir, "--prompt", "升级前要备份数据吗？", "--collection", "work") == 0
    out = capsys.readouterr().out
    reply, listed = out.split("\nSources (retrieve, ", 1)  # the sources come after the reply
    assert listed.splitlines()[1] == f"[1] {folder / '说明.txt'}"
    prompt = prompts[0]
    assert prompt.startswith("只根据以下编号的资料回答") and "[1] 说明.txt\n安装前请先备份数据。升级会清空缓存！" in prompt
    assert prompt.endswith("问题：升级前要备份数据吗？")


@pytest.mark.parametrize("args, words", [
    (["--collection", "nope"], "nope"),
    (["--doc", "/nonexistent/file.txt"], "no such file"),
    (["--collection", "work", "--docs-mode", "whole"], "collection is searched"),
    (["--doc", "x.txt", "--base-url", "http://127.0.0.1:9/v1"], "not with --base-url"),
])
def test_bad_document_flags_are_one_line_and_exit_2(home, tiny_model_dir, args, words, capsys):
    assert chat(tiny_model_dir, "--prompt", "hi", *args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and words in err and err.count("\n") == 1


def test_json_has_the_forecast_of_both_choices_and_the_chosen_one_is_what_was_sent(home, tiny_model_dir, tmp_path,
                                                                                    capsys):
    notes = tmp_path / "sites.md"
    notes.write_text(_sections(40), encoding="utf-8")
    assert chat(tiny_model_dir, "--prompt", "When did the Lyon warehouse close?", "--doc", str(notes),
                "--json") == 0
    data = json.loads(capsys.readouterr().out)
    forecast = data["docs_forecast"]
    assert forecast["chosen"] == data["docs_mode"] == "retrieve" and forecast["requested"] == "auto"
    assert forecast["whole_tokens"] == data["docs_tokens"]["whole"] > forecast["room"] == data["docs_tokens"]["room"]
    assert forecast["retrieve_tokens"] == data["docs_tokens"]["sources"]
    assert forecast["retrieve"]["passages"] == len(data["sources"]) and forecast["retrieve"]["fits"]
    assert not forecast["whole"]["fits"] and forecast["reason"].startswith(
        f"the documents are {forecast['whole_tokens']} tokens but {forecast['room']} fit")
    assert forecast["retrieve"]["prompt_tokens"] == data["prompt_tokens"]  # the prompt the model really received
    assert forecast["whole"]["cached_tokens"] == forecast["retrieve"]["cached_tokens"] == 0  # a fresh process
