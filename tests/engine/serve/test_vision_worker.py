"""engine/serve/vision_worker.py: a random-weight LLaVA (tests/helpers/vision_models.py) served on a real server on an
ephemeral port, asked with the official ``openai`` client about an image in a data: URL: the reply, streamed and not,
is the in-process ``VisionChat`` turn's own greedy text, and the usage counts the image's tokens; what a vision model
does not serve (raw completions, tools) is a 400, and a bad image a 400 with its line, the server serving on."""

from __future__ import annotations

import openai
import pytest

from engine.events import Finished, Message
from engine.inputs import LoadSpec, SamplingConfig
from engine.serve.app import create_app
from engine.serve.server import BackgroundServer
from engine.serve.vision_worker import VisionWorker
from engine.vision.image_input import read_image
from engine.vision.turn import VisionChat, build_prompt
from engine.vision.vlm import load_vision_model
from tests.engine.serve.conftest import KEY, Served
from tests.engine.serve.test_images import data_url, png_bytes, with_image
from tests.helpers.vision_models import build_vision_family

QUESTION = "What is in this picture?"
MAX_TOKENS = 6


@pytest.fixture(scope="module")
def vision(tmp_path_factory):
    folder = build_vision_family(tmp_path_factory.mktemp("served-llava") / "llava", "llava")
    return load_vision_model(LoadSpec(model=str(folder), precision="fp32", device="cpu"))


@pytest.fixture(scope="module")
def served(vision):
    worker = VisionWorker(vision).start()
    http_server = BackgroundServer(create_app(worker, api_key=KEY)).start()
    yield Served(http_server.url, worker, http_server.port)
    http_server.stop()
    worker.close()


def _in_process(vision, image: bytes) -> Finished:
    # the API's defaults, greedy
    config = SamplingConfig(temperature=0, top_p=1.0, repetition_penalty=1.0, max_new_tokens=MAX_TOKENS)
    events = list(VisionChat(vision).generate([Message("user", QUESTION)], {0: [read_image(image)]}, config))
    return events[-1]


def test_a_served_vision_model_answers_about_the_image(served, vision):
    image = png_bytes(seed=4)
    expected = _in_process(vision, image)
    reply = served.client().chat.completions.create(model="default", messages=with_image(data_url(image), QUESTION),
                                                    max_tokens=MAX_TOKENS, temperature=0)
    assert reply.choices[0].message.content == expected.text
    prompt = build_prompt(vision, [Message("user", QUESTION)], {0: [read_image(image)]})
    assert sum(prompt.image_tokens) > 0
    assert reply.usage.prompt_tokens == len(prompt.ids) == expected.metrics.prompt_tokens
    assert reply.usage.completion_tokens == expected.metrics.generated_tokens


def test_a_streamed_reply_is_the_same_with_usage(served, vision):
    image = png_bytes(seed=5)
    expected = _in_process(vision, image)
    stream = served.client().chat.completions.create(
        model="default", messages=with_image(data_url(image), QUESTION), max_tokens=MAX_TOKENS, temperature=0,
        stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == expected.text
    assert chunks[-1].usage.prompt_tokens == expected.metrics.prompt_tokens


def test_a_text_only_question_is_answered_too(served):
    reply = served.client().chat.completions.create(model="default", max_tokens=3, temperature=0,
                                                    messages=[{"role": "user", "content": "hello"}])
    assert reply.usage.completion_tokens >= 1


def test_what_a_vision_model_does_not_serve_is_a_400(served):
    client = served.client()
    with pytest.raises(openai.BadRequestError, match="raw completions"):
        client.completions.create(model="default", prompt="once upon", max_tokens=2)
    with pytest.raises(openai.BadRequestError, match="image 1"):
        client.chat.completions.create(model="default", messages=with_image(data_url(b"GIF89a broken")), max_tokens=2)
    reply = client.chat.completions.create(model="default", messages=with_image(data_url(png_bytes())), max_tokens=2)
    assert reply.choices[0].finish_reason in ("stop", "length")
