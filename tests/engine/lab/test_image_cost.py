"""engine/lab/image_cost.py through the catalogue and ``python -m engine lab``: on a random-weight LLaVA and Idefics3
(tests/helpers/vision_models.py) the table's image tokens are the processor's own count at each size (LLaVA's one
resized square: the same at every size; the test Idefics3's processor resizes to at most 56 pixels, so its tiles do
not grow here), the KV bytes grow with the prompt, the chart and CSV are written; a text model asked for it, and a vision model asked for another, are refused
in one line before anything runs. Times are measured, never asserted."""

from __future__ import annotations

import json
import threading

import pytest

from engine.__main__ import main
from engine.errors import BadInputError
from engine.events import Message
from engine.inputs import LoadSpec
from engine.lab.experiments import LabOptions, check_runnable, run_all, run_experiment
from engine.lab.image_cost import QUESTION, picture, run_image_cost
from engine.vision.turn import build_prompt
from engine.vision.vlm import load_vision_model
from tests.helpers.vision_models import build_vision_family

SIZES = ((40, 30), (120, 90))


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("lab-vision")
    return {name: build_vision_family(root / name, name) for name in ("llava", "idefics3")}


@pytest.mark.parametrize("family", ["llava", "idefics3"])
def test_image_tokens_and_kv_bytes_against_resolution(folders, family):
    vision = load_vision_model(LoadSpec(model=str(folders[family]), precision="fp32", device="cpu"))
    result = run_image_cost(vision, threading.Event(), sizes=SIZES, reps=1)
    tokens = [row[2] for row in result.rows]
    expected = [sum(build_prompt(vision, [Message("user", QUESTION)], {0: [picture(w, h)]}).image_tokens)
                for w, h in SIZES]
    assert tokens == expected and all(n > 0 for n in tokens)
    if family == "llava":
        assert tokens[1] == tokens[0]  # one resized square, whatever the size
    kv = [row[7] for row in result.rows]
    assert all(value > 0 for value in kv) and (kv[1] > kv[0]) == (tokens[1] > tokens[0])
    assert {s.name for s in result.series} >= {"vision encoder", "language prefill", "TTFT", "KV cache"}
    print(family, result.rows)


def test_the_catalogue_refuses_the_other_kind_of_model():
    with pytest.raises(BadInputError, match="has no vision"):
        check_runnable(("image_cost",), remote=False, vision=False)
    with pytest.raises(BadInputError, match="image_cost"):
        check_runnable(("greedy20",), remote=False, vision=True)


def test_run_all_writes_the_chart_and_the_table(folders, tmp_path):
    vision = load_vision_model(LoadSpec(model=str(folders["llava"]), precision="fp32", device="cpu"))
    document = run_all(vision, tmp_path, threading.Event(), LabOptions(quick=True), keys=("image_cost",))
    assert set(document["files"]) == {"image_cost.csv", "image_cost.png"}
    assert (tmp_path / "image_cost.png").stat().st_size > 0
    assert json.loads((tmp_path / "results.json").read_text())["experiments"]["image_cost"]["rows"]
    with pytest.raises(BadInputError, match="has no vision"):
        run_experiment("image_cost", object.__new__(type("Text", (), {"facts": None})), threading.Event())


def test_the_cli_runs_it_on_a_vision_folder_and_refuses_it_on_a_text_one(folders, tiny_model_dir, tmp_path, capsys):
    rc = main(["lab", "--model", str(tiny_model_dir), "--out", str(tmp_path / "text"), "--only", "image_cost"])
    assert rc == 2 and "has no vision" in capsys.readouterr().err.strip().splitlines()[-1]
    rc = main(["lab", "--model", str(folders["llava"]), "--precision", "fp32", "--out", str(tmp_path / "v"),
               "--quick"])
    out = capsys.readouterr().out
    assert rc == 0 and "What an image costs" in out and (tmp_path / "v" / "image_cost.csv").exists()
