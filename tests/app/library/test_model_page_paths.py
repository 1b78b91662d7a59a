"""The Models window's "Already installed" check finds a GGUF pulled from a subfolder of its Hub repo where the
download put it: at the top of its model folder (issue 31, defect 11c)."""

from __future__ import annotations

from app.library.model_page import installed_path
from engine import paths
from engine.library import hub
from engine.library.download import download
from tests.helpers.fake_hub import FakeHub, make_gguf

REPO = "miaohui-test/sub-GGUF"


def test_a_subfolder_gguf_is_found_where_it_was_pulled(home, tmp_path):
    fake = FakeHub().start()
    try:
        data = make_gguf(tmp_path / "m.gguf", "Q8_0").read_bytes()
        fake.add_repo(REPO, {"Q8_0/tiny-Q8_0.gguf": data, "F16/tiny-F16.gguf": data[::-1]}, config=None,
                      tags=["gguf", "text-generation"])
        page = hub.model_page(REPO, allow_downloads=True, endpoint=fake.url)
        assert installed_path(page, "Q8_0/tiny-Q8_0.gguf") is None
        result = download(REPO, file="Q8_0/tiny-Q8_0.gguf", allow_downloads=True, endpoint=fake.url)
    finally:
        fake.stop()
    assert installed_path(page, "Q8_0/tiny-Q8_0.gguf") == paths.models_dir() / "miaohui-test--sub-GGUF" / "tiny-Q8_0.gguf"
    assert str(installed_path(page, "Q8_0/tiny-Q8_0.gguf")) == result.path
    assert installed_path(page, "F16/tiny-F16.gguf") is None
