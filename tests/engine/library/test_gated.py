"""A gated model through the real huggingface_hub client against the fake Hub: refused without a token (saying
how to get access), refused for a token not granted, downloaded with a granted one; the token goes to the Hub's
endpoint only and never into the files a download writes."""

from __future__ import annotations

import pytest

from engine import paths
from engine.errors import GatedModelError
from engine.library import access, hub
from engine.library.download import download as pull
from tests.engine.library.conftest import TINY

GATED = "miaohui-test/gated-chat"
TOKEN = "hf_test_granted_0123456789"


@pytest.fixture
def gated_hub(fake_hub, tiny_model_dir):
    fake_hub.add_folder(GATED, tiny_model_dir, gated="manual",
                        tags=["transformers", "safetensors", "llama", "text-generation", "license:llama3.2"])
    fake_hub.grant(GATED, TOKEN)
    return fake_hub


def test_a_gated_model_is_refused_without_a_token_and_says_how_to_get_access(home, gated_hub, only_fake_hub):
    with pytest.raises(GatedModelError, match="accept its licence at .*/miaohui-test/gated-chat.*token"):
        pull(GATED, allow_downloads=True, endpoint=gated_hub.url)
    assert [e.status for e in gated_hub.log if "/resolve/" in e.path] == [401]
    assert all(e.auth is None for e in gated_hub.log)
    with pytest.raises(GatedModelError, match="has no access yet"):
        pull(GATED, allow_downloads=True, endpoint=gated_hub.url, token="hf_someone_else")
    assert not list(paths.models_dir().glob("*gated*"))


def test_a_granted_token_downloads_it_and_is_written_nowhere(home, gated_hub, only_fake_hub):
    result = pull(GATED, allow_downloads=True, endpoint=gated_hub.url, token=TOKEN)
    assert result.path.endswith("miaohui-test--gated-chat")
    hub_requests = [e for e in gated_hub.log if not e.path.startswith("/cdn/")]
    assert hub_requests and all(e.auth == f"Bearer {TOKEN}" for e in hub_requests)
    written = [p for p in paths.data_root().rglob("*") if p.is_file()]
    assert written and not any(TOKEN.encode() in p.read_bytes() for p in written)
    before = len(gated_hub.log)
    pull(TINY, allow_downloads=True, endpoint=gated_hub.url)  # a call without a token sends none
    assert len(gated_hub.log) > before and all(e.auth is None for e in gated_hub.log[before:])


def test_the_token_is_handed_only_to_the_blocks_endpoint():
    with access.online(True, "https://huggingface.co", token=TOKEN):
        assert access.auth_token("https://huggingface.co/x/y/resolve/main/config.json") == TOKEN
        assert access.auth_token("https://cdn-lfs.huggingface.co/abc") is False
        assert access.auth_token("http://huggingface.co/x") is False  # not over plain HTTP to the same name
        assert access.auth_token("https://huggingface.co.evil.example/x") is False
    assert access.auth_token("https://huggingface.co/x") is False  # outside the block
    with access.online(True, "https://huggingface.co"):
        assert access.auth_token("https://huggingface.co/x") is False  # no token given: none sent


def test_the_model_page_of_a_gated_model_is_public_and_says_gated(gated_hub, only_fake_hub):
    page = hub.model_page(GATED, allow_downloads=True, endpoint=gated_hub.url)
    assert page.gated is True and page.license == "llama3.2"
