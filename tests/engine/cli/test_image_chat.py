"""``python -m engine chat --image PATH`` (engine/cli/image_chat.py) on a random-weight LLaVA saved with its processor
(tests/helpers/vision_models.py): the reply and, with --json, the image token counts and encoder time; a bad image, a
text model, or a flag an image turn does not take: one line, exit status 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from engine.__main__ import main
from tests.helpers.vision_models import build_vision_family


@pytest.fixture(scope="module")
def llava_dir(tmp_path_factory) -> Path:
    return build_vision_family(tmp_path_factory.mktemp("cli-vlm") / "llava", "llava")


@pytest.fixture
def pictures(tmp_path) -> list[Path]:
    paths = []
    for seed, (width, height) in enumerate([(80, 60), (30, 90)]):
        pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
        paths.append(tmp_path / f"shot{seed}.png")
        Image.fromarray(pixels).save(paths[-1])
    return paths


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert lines and lines[-1].startswith("error: ") and "Traceback" not in err
    return lines[-1]


def test_json_gives_image_tokens_per_image_and_encoder_time(llava_dir, pictures, capsys):
    rc = main(["chat", "--model", str(llava_dir), "--precision", "fp32", "--prompt", "Compare them.",
               "--image", str(pictures[0]), "--image", str(pictures[1]), "--max-new-tokens", "4", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["finish_reason"] == "length" and data["generated_tokens"] == 4
    assert data["image_tokens"] == [16, 16] and data["vision_encoder_s"] > 0 and data["prefill_s"] > 0
    assert [(i["name"], i["width"], i["height"], i["tokens"]) for i in data["images"]] == \
        [("shot0.png", 80, 60, 16), ("shot1.png", 30, 90, 16)]
    assert data["model"]["runner"] == "fast" and data["model"]["architecture"] == "LlavaForConditionalGeneration"


def test_text_output_names_the_image_tokens(llava_dir, pictures, capsys):
    rc = main(["chat", "--model", str(llava_dir), "--precision", "bf16", "--prompt", "What is it?",
               "--image", str(pictures[0]), "--max-new-tokens", "3"])
    out, err = capsys.readouterr()
    assert rc == 0 and out.endswith("\n")
    assert "[images] 16 image tokens · vision encoder" in err and "[length] TTFT" in err


@pytest.mark.parametrize("make, words", [
    (lambda folder: folder / "missing.png", "is gone"),
    (lambda folder: (folder / "notes.png").write_text("not a picture") and folder / "notes.png", "not an image"),
])
def test_a_bad_image_is_one_line_and_status_2(llava_dir, tmp_path, capsys, make, words):
    rc = main(["chat", "--model", str(llava_dir), "--prompt", "hi", "--image", str(make(tmp_path))])
    assert rc == 2 and words in _one_line(capsys.readouterr().err)


def test_a_text_model_says_it_has_no_vision(tiny_model_dir, pictures, capsys):
    rc = main(["chat", "--model", str(tiny_model_dir), "--prompt", "hi", "--image", str(pictures[0])])
    assert rc == 2 and "this model has no vision" in _one_line(capsys.readouterr().err)


def test_flags_an_image_turn_does_not_take_are_refused(llava_dir, pictures, capsys):
    rc = main(["chat", "--model", str(llava_dir), "--prompt", "hi", "--image", str(pictures[0]),
               "--speculative", "prompt-lookup"])
    assert rc == 2 and "--image does not go with --speculative" in _one_line(capsys.readouterr().err)


def test_a_vision_model_asked_without_an_image_answers(llava_dir, capsys):
    rc = main(["chat", "--model", str(llava_dir), "--precision", "fp32", "--prompt", "hi", "--max-new-tokens", "3",
               "--json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["generated_tokens"] == 3 and data["image_tokens"] == [] and data["images"] == []
    assert data["vision_encoder_s"] is None
    rc = main(["chat", "--model", str(llava_dir), "--prompt", "hi", "--speculative", "prompt-lookup"])
    assert rc == 2 and "a vision-language model does not go with --speculative" in _one_line(capsys.readouterr().err)


def test_images_go_to_a_server_with_base_url(llava_dir, pictures, capsys):
    from engine.inputs import LoadSpec
    from engine.serve.app import create_app
    from engine.serve.server import BackgroundServer
    from engine.serve.vision_worker import VisionWorker
    from engine.vision.vlm import load_vision_model

    worker = VisionWorker(load_vision_model(LoadSpec(model=str(llava_dir), precision="fp32", device="cpu"))).start()
    server = BackgroundServer(create_app(worker)).start()
    try:
        ask = ["chat", "--prompt", "What is it?", "--image", str(pictures[0]), "--max-new-tokens", "3", "--json"]
        rc = main([*ask, "--base-url", server.url + "/v1"])
        remote = json.loads(capsys.readouterr().out)
        rc_local = main([*ask, "--model", str(llava_dir), "--precision", "fp32"])
        local = json.loads(capsys.readouterr().out)
    finally:
        server.stop()
        worker.close()
    assert rc == rc_local == 0
    assert remote["prompt_tokens"] == local["prompt_tokens"]  # the server counted the same image tokens
    assert remote["images"] == [{"name": "shot0.png", "width": 80, "height": 60, "note": ""}]
