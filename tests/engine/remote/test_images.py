"""engine/remote/images.py through engine/remote/session.py: a turn's image sent to a remote engine as OpenAI
``image_url`` parts. Against a real ``engine serve`` of a random-weight LLaVA on an ephemeral port
(tests/engine/serve/test_vision_worker.py's), the remote reply is the local ``VisionChat`` turn's own greedy text: the
PNG the client sends is the very pixels the local turn saw. A text-only server's refusal is its one line, and an
image on an assistant's message is refused before anything is sent."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image

from engine.errors import BadInputError
from engine.events import Finished, Message
from engine.inputs import SamplingConfig
from engine.remote import RemoteSpec
from engine.remote.client import connect
from engine.remote.images import data_url, message_content
from engine.remote.session import RemoteSession, request_body
from engine.vision.image_input import read_image
from engine.vision.turn import VisionChat
from tests.engine.serve.test_images import png_bytes
from tests.engine.serve.test_vision_worker import served, vision  # noqa: F401  (the served LLaVA's fixtures)

GREEDY = SamplingConfig(temperature=0, top_p=1.0, repetition_penalty=1.0, max_new_tokens=6)
QUESTION = [Message("user", "What is in this picture?")]


def test_the_png_sent_holds_the_pixels_read():
    image = read_image(png_bytes(seed=7))
    url = data_url(image)
    assert url.startswith("data:image/png;base64,")
    sent = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert sent.tobytes() == image.rgb.tobytes()
    parts = message_content("hi", [image])
    assert [p["type"] for p in parts] == ["image_url", "text"] and parts[1]["text"] == "hi"
    assert message_content("hi", []) == "hi"


def test_a_remote_vision_model_answers_as_the_local_turn(served, vision):  # noqa: F811
    image = read_image(png_bytes(seed=8))
    local = list(VisionChat(vision).generate(QUESTION, {0: [image]}, GREEDY))[-1]
    remote = connect(RemoteSpec(served.url, "default", served.key))
    try:
        finished = list(RemoteSession(remote).generate(QUESTION, GREEDY, images={0: [image]}))[-1]
    finally:
        remote.close()
    assert isinstance(finished, Finished) and finished.error is None
    assert finished.text == local.text
    assert finished.metrics.prompt_tokens == local.metrics.prompt_tokens  # the server's usage: image tokens counted


def test_a_text_only_server_says_so_in_one_line(spec):
    remote = connect(spec)
    try:
        finished = list(RemoteSession(remote).generate(QUESTION, GREEDY, images={0: [read_image(png_bytes())]}))[-1]
    finally:
        remote.close()
    assert finished.reason == "error" and "has no vision" in finished.error and "\n" not in finished.error


def test_an_image_on_an_assistant_message_is_refused_before_sending():
    conversation = [Message("user", "hi"), Message("assistant", "hello"), Message("user", "and this?")]
    with pytest.raises(BadInputError, match="user's messages"):
        request_body("m", conversation, GREEDY, {1: [read_image(png_bytes())]})
