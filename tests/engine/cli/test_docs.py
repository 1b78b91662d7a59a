"""``python -m engine docs`` through ``engine.__main__.main``: add, list, search --json, remove, and its one-line errors,
on the real store in an isolated data folder (``home``); the default embedder's check runs where it was fetched."""

from __future__ import annotations

import json
import shutil

import pytest

from engine import paths
from engine.__main__ import main
from engine.docs.embed import DEFAULT_EMBEDDER_NAME, is_fetched
from tests.helpers.documents import make_pdf

_REAL_EMBEDDER = paths.data_root() / "embedders" / DEFAULT_EMBEDDER_NAME  # read before `home` moves the data folder


@pytest.fixture
def folder(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "report.pdf").write_bytes(make_pdf(["Intro page.", "The Lyon warehouse closed in March."]))
    (docs / "说明.txt").write_bytes("安装前请先备份数据。升级会清空缓存！".encode("gb18030"))
    return docs


def test_add_list_search_json_and_remove(home, folder, capsys):
    assert main(["docs", "add", str(folder), "--collection", "work"]) == 0
    out, err = capsys.readouterr()
    assert "work: 2 added" in out
    assert "report.pdf: added, 2 passages, 2 pages" in err
    assert err.count("searching by keywords only") == 1  # said once, not per file

    assert main(["docs", "list", "--json"]) == 0
    [listed] = json.loads(capsys.readouterr().out)
    assert (listed["name"], listed["files"], listed["passages"]) == ("work", 2, 3)
    assert (home / "documents.sqlite3").is_file()

    assert main(["docs", "search", "Lyon warehouse", "--collection", "work", "--k", "1", "--json"]) == 0
    [hit] = json.loads(capsys.readouterr().out)
    assert hit["path"].endswith("report.pdf") and hit["page"] == 2 and "Lyon" in hit["text"]
    assert isinstance(hit["score"], float)

    assert main(["docs", "search", "备份数据", "--json"]) == 0
    [hit] = json.loads(capsys.readouterr().out)
    assert hit["page"] is None and hit["text"] == "安装前请先备份数据。升级会清空缓存！"

    assert main(["docs", "remove", "work"]) == 0
    capsys.readouterr()
    assert main(["docs", "list"]) == 0
    assert "no collections" in capsys.readouterr().out


def test_a_second_add_reads_only_what_changed(home, folder, capsys):
    main(["docs", "add", str(folder)])
    capsys.readouterr()
    (folder / "new.md").write_text("# New\n\nA fresh note.", encoding="utf-8")
    assert main(["docs", "add", str(folder)]) == 0
    out, err = capsys.readouterr()
    assert "default: 1 added, 0 updated, 2 unchanged" in out
    assert "report.pdf: unchanged" in err


def test_errors_are_one_line_and_exit_2(home, folder, capsys):
    assert main(["docs", "remove", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no collection named nope") and err.count("\n") == 1
    assert main(["docs", "search", "x", "--collection", "nope"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    (folder / "scan.pdf").write_bytes(make_pdf([None]))
    assert main(["docs", "add", str(folder / "scan.pdf"), str(folder / "gone.txt")]) == 2
    out, err = capsys.readouterr()
    assert "scan.pdf: skipped:" in err and "no text layer" in err and "gone.txt: no such file" in err


@pytest.mark.skipif(not is_fetched(_REAL_EMBEDDER), reason="the default embedder is not fetched "
                    "(`python -m engine docs fetch-embedder`)")
def test_with_the_default_embedder_search_finds_meaning_without_shared_words(home, tmp_path, capsys):
    shutil.copytree(_REAL_EMBEDDER, home / "embedders" / DEFAULT_EMBEDDER_NAME)
    docs = tmp_path / "pets"
    docs.mkdir()
    (docs / "a.txt").write_text("The cat slept on the mat all afternoon.", encoding="utf-8")
    (docs / "b.txt").write_text("Quarterly revenue grew by nine percent.", encoding="utf-8")
    assert main(["docs", "add", str(docs)]) == 0
    assert "2 embedded" in capsys.readouterr().out
    assert main(["docs", "search", "kitten napping", "--json", "--k", "1"]) == 0
    out, err = capsys.readouterr()
    assert "keywords only" not in err
    assert json.loads(out)[0]["path"].endswith("a.txt")  # no word in common: only the vectors can find it
