"""engine/serve/images.py: OpenAI ``image_url`` parts through a real server on an ephemeral port with the official
``openai`` client: a text-only model refuses an image with a 400 saying it has no vision (and keeps serving), a bad
image is a 400 with its one line, a web URL is refused while downloads are off, and ``fetch_image`` against a real
local HTTP server reads an image and gives up past its byte bound declared or not."""

from __future__ import annotations

import base64
import http.server
import io
import threading
from typing import Iterator

import numpy as np
import openai
import pytest
from PIL import Image

from engine.errors import ImageError
from engine.serve.images import ImageRef, fetch_image, resolve_images
from engine.serve.errors import ApiError


def png_bytes(width: int = 40, height: int = 30, seed: int = 0) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "PNG")
    return buffer.getvalue()


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode()


def with_image(url: str, text: str = "What is in this picture?") -> list[dict]:
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                         {"type": "text", "text": text}]}]


class _Files(http.server.BaseHTTPRequestHandler):
    """Serves ``/img.png`` (a PNG), ``/big`` (300 kB declaring no length: read to the connection's close),
    ``/declared`` (declaring 300 kB) and ``/missing`` (404)."""

    body = png_bytes()

    def do_GET(self) -> None:  # noqa: N802  (http.server's name)
        if self.path == "/img.png":
            payload, declared = self.body, len(self.body)
        elif self.path in ("/big", "/declared"):
            payload, declared = b"\x89PNG" + bytes(300_000), None if self.path == "/big" else 300_004
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        if declared is not None:
            self.send_header("Content-Length", str(declared))
        self.end_headers()
        try:
            self.wfile.write(payload)
        except OSError:  # the client gave up on the bound: what is being tested
            pass

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def files() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Files)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_text_only_model_refuses_an_image_and_keeps_serving(server):
    client = server.client()
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="default", messages=with_image(data_url(png_bytes())), max_tokens=2)
    assert refused.value.status_code == 400
    assert "has no vision" in refused.value.message
    reply = client.chat.completions.create(model="default", messages=[{"role": "user", "content": "hi"}],
                                           max_tokens=2, temperature=0)
    assert reply.choices[0].finish_reason in ("stop", "length")


def test_text_parts_alone_are_still_one_message(server):
    reply = server.client().chat.completions.create(
        model="default", max_tokens=2, temperature=0,
        messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "there"}]}])
    assert reply.usage.prompt_tokens > 0


def test_a_part_of_another_type_is_a_400(server):
    status, _, body = server.raw("POST", "/v1/chat/completions", {
        "messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]})
    assert status == 400 and b"image_url" in body


def test_data_urls_are_read_in_message_order():
    refs = (ImageRef(0, data_url(png_bytes(seed=1))), ImageRef(2, data_url(png_bytes(20, 10, seed=2))),
            ImageRef(2, data_url(png_bytes(seed=3))))
    found = resolve_images(refs, allow_downloads=False)
    assert sorted(found) == [0, 2]
    assert [(i.width, i.height) for i in found[2]] == [(20, 10), (40, 30)]


@pytest.mark.parametrize("url, line", [
    (data_url(b"not an image at all"), "image 1"),
    (data_url(png_bytes()[:60]), "image 1"),
    ("data:text/plain;base64,aGk=", "not an image"),
    ("ftp://example.invalid/a.png", "data: URL"),
])
def test_a_bad_image_is_a_400_with_its_line(url, line):
    with pytest.raises(ApiError) as refused:
        resolve_images((ImageRef(0, url),), allow_downloads=False)
    assert refused.value.status == 400 and line in str(refused.value)


def test_a_web_url_is_refused_while_downloads_are_off(files):
    with pytest.raises(ApiError) as refused:
        resolve_images((ImageRef(0, files + "/img.png"),), allow_downloads=False)
    assert refused.value.status == 400 and "--allow-downloads" in str(refused.value)


def test_a_web_url_is_fetched_when_downloads_are_allowed(files):
    found = resolve_images((ImageRef(0, files + "/img.png"),), allow_downloads=True)
    assert (found[0][0].width, found[0][0].height) == (40, 30)


@pytest.mark.parametrize("path", ["/big", "/declared"])
def test_a_fetch_gives_up_past_its_bound(files, path):
    with pytest.raises(ImageError, match="over"):
        fetch_image(files + path, max_bytes=100_000)


def test_a_failed_fetch_is_one_line(files):
    with pytest.raises(ImageError, match="HTTP 404"):
        fetch_image(files + "/missing", max_bytes=1 << 20)
