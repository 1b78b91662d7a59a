"""Search, model pages and the choice of files, through the real huggingface_hub client against the fake Hub."""

from __future__ import annotations

import hashlib
import threading

import pytest
from huggingface_hub import constants

from engine.errors import BadInputError, DownloadsDisabledError, HubError, ModelNotFoundError, UnsafeModelError
from engine.library import access, hub
from tests.engine.library.conftest import CLASSIFIER, GGUF_F16, GGUF_Q8, GGUF_REPO, PICKLE_ONLY, REMOTE_CODE, TINY


def test_search_pages_through_text_generation_models_by_downloads(fake_hub, only_fake_hub):
    first = hub.search("", allow_downloads=True, endpoint=fake_hub.url, page_size=3)
    # The pickle-only repo has neither safetensors nor GGUF: "any" keeps the two formats only.
    assert [h.repo for h in first.hits] == [TINY, GGUF_REPO]
    assert first.more is True
    assert CLASSIFIER not in [h.repo for h in first.hits]  # not a text-generation model
    # The fake Hub pages by 2: the client followed the Link header for the third item.
    assert sum(1 for e in fake_hub.log if e.path == "/api/models") >= 2
    second = hub.search("", allow_downloads=True, endpoint=fake_hub.url, page=1, page_size=3)
    assert [h.repo for h in second.hits] == [REMOTE_CODE] and second.more is False
    tiny = first.hits[0]
    assert tiny.formats == ("safetensors",) and tiny.downloads == 500 and tiny.license == "apache-2.0"
    assert first.hits[1].formats == ("gguf",)
    assert only_fake_hub == []


def test_search_by_text_format_and_recency(fake_hub, only_fake_hub):
    ggufs = hub.search("tiny", allow_downloads=True, endpoint=fake_hub.url, fmt="gguf")
    assert [h.repo for h in ggufs.hits] == [GGUF_REPO]
    recent = hub.search("miaohui-test", allow_downloads=True, endpoint=fake_hub.url, sort="recent", fmt="safetensors")
    assert [h.repo for h in recent.hits] == [TINY, REMOTE_CODE]  # 2025-02 before the undated (2025-01) one
    assert hub.search("no-such-model", allow_downloads=True, endpoint=fake_hub.url).hits == ()
    with pytest.raises(BadInputError, match="unknown sort"):
        hub.search("x", allow_downloads=True, endpoint=fake_hub.url, sort="stars")


def test_model_page_lists_files_with_checksums_and_only_the_needed_ones(fake_hub, only_fake_hub):
    page = hub.model_page(TINY, allow_downloads=True, endpoint=fake_hub.url)
    assert page.revision == fake_hub.repos[TINY].sha and page.format == "safetensors"
    assert page.license == "apache-2.0" and page.gated is False and page.needs_remote_code is False
    assert page.refusal is None
    files = {f.name: f for f in page.files}
    weights = files["model.safetensors"]
    assert weights.sha256 == fake_hub.sha256(TINY, "model.safetensors")
    assert weights.size == len(fake_hub.repos[TINY].files["model.safetensors"])
    assert files["config.json"].sha256 is None and files["config.json"].blob_id  # small files: a git blob id
    assert "pytorch_model.bin" in files and "pytorch_model.bin" not in page.needed
    assert "onnx/model.onnx" not in page.needed and "README.md" not in page.needed
    assert set(page.needed) == {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                                "chat_template.jinja", "model.safetensors"}
    assert page.weights_bytes == weights.size


def test_gguf_page_lists_quantizations(fake_hub, only_fake_hub, gguf_files):
    page = hub.model_page(GGUF_REPO, allow_downloads=True, endpoint=fake_hub.url)
    assert page.format == "gguf" and page.license == "mit"
    assert [(q.file, q.quant, q.size) for q in page.ggufs] == [
        (GGUF_F16, "F16", len(gguf_files[GGUF_F16])), (GGUF_Q8, "Q8_0", len(gguf_files[GGUF_Q8]))]
    with pytest.raises(BadInputError, match="pick one with --file"):
        hub.plan_download(GGUF_REPO, allow_downloads=True, endpoint=fake_hub.url)
    plan = hub.plan_download(GGUF_REPO, file=GGUF_Q8, allow_downloads=True, endpoint=fake_hub.url)
    assert plan.kind == "gguf" and [f.name for f in plan.files] == [GGUF_Q8]
    assert plan.files[0].sha256 == hashlib.sha256(gguf_files[GGUF_Q8]).hexdigest()


def test_pickle_only_and_remote_code_repos_are_refused(fake_hub, only_fake_hub):
    page = hub.model_page(PICKLE_ONLY, allow_downloads=True, endpoint=fake_hub.url)
    assert page.format == "pickle only" and "pickle" in page.refusal
    with pytest.raises(UnsafeModelError, match="pickle checkpoints"):
        hub.plan_download(PICKLE_ONLY, allow_downloads=True, endpoint=fake_hub.url)
    remote = hub.model_page(REMOTE_CODE, allow_downloads=True, endpoint=fake_hub.url)
    assert remote.needs_remote_code and "own Python code" in remote.refusal
    with pytest.raises(UnsafeModelError, match="auto_map"):
        hub.plan_download(REMOTE_CODE, allow_downloads=True, endpoint=fake_hub.url)
    assert not fake_hub.requests_for("pytorch_model.bin") and not fake_hub.requests_for("model.safetensors")


def test_unknown_repo_and_bad_ids_are_one_line(fake_hub, only_fake_hub):
    with pytest.raises(ModelNotFoundError) as info:
        hub.model_page("nobody/nothing", allow_downloads=True, endpoint=fake_hub.url)
    assert "no model nobody/nothing" in str(info.value) and "\n" not in str(info.value)
    for bad in ("no-slash", "a/b/c", "../x", "a/..", ""):
        with pytest.raises(BadInputError):
            hub.model_page(bad, allow_downloads=True, endpoint=fake_hub.url)
    with pytest.raises(BadInputError, match="not an http"):
        hub.model_page(TINY, allow_downloads=True, endpoint="ftp://example")


def test_unreachable_hub_is_a_one_line_error(only_fake_hub):
    # A closed port on 127.0.0.1: connection refused, reported as such.
    probe = __import__("socket").socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    with pytest.raises(Exception) as info:
        hub.model_page(TINY, allow_downloads=True, endpoint=f"http://127.0.0.1:{port}")
    assert isinstance(info.value, HubError) and "cannot reach" in str(info.value)  # HubUnreachableError, at once


def test_downloads_off_opens_no_socket(fake_hub, no_network):
    for call in (lambda: hub.search("tiny", allow_downloads=False, endpoint=fake_hub.url),
                 lambda: hub.model_page(TINY, allow_downloads=False, endpoint=fake_hub.url),
                 lambda: hub.plan_download(TINY, allow_downloads=False, endpoint=fake_hub.url),
                 lambda: hub.remote_architecture(TINY, allow_downloads=False, endpoint=fake_hub.url)):
        with pytest.raises(DownloadsDisabledError, match="--allow-downloads"):
            call()
    assert no_network == [] and fake_hub.log == []


def test_offline_mode_is_lifted_only_inside_the_block_and_thread(fake_hub):
    assert constants.is_offline_mode() is True
    seen = {}
    with access.online(True, fake_hub.url):
        seen["inside"] = constants.is_offline_mode()
        other = threading.Thread(target=lambda: seen.setdefault("other thread", constants.is_offline_mode()))
        other.start()
        other.join()
    assert seen == {"inside": False, "other thread": True}
    assert constants.is_offline_mode() is True and constants.HF_HUB_OFFLINE is True


def test_endpoint_comes_from_hf_endpoint_when_not_given(fake_hub, only_fake_hub, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    assert access.resolve_endpoint() == fake_hub.url
    assert hub.model_page(TINY, allow_downloads=True).repo == TINY
    monkeypatch.delenv("HF_ENDPOINT")
    assert access.resolve_endpoint() == "https://huggingface.co"
