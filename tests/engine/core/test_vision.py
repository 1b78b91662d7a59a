"""``engine.core.vision`` through ``EngineCore``: a vision-language folder (random-weight LLaVA,
tests/helpers/vision_models.py) loaded by the vision loader, a turn with a stored image file streaming ImagesEncoded
and Finished with its image tokens, a follow-up reusing the image prefix; images refused by a text model in one line;
a vision task (``TaskJob(vision=True)``: counting a picture's image tokens before a Send) given the ``VisionModel``, and
refused by a text model in one line."""

from __future__ import annotations

from engine.core.core import EngineCore
from engine.core.jobs import GenerateJob, LoadJob, QueuedJob, ReplyStarted, TaskJob
from engine.core.vision import ImageTokens, count_image_tokens
from engine.events import Finished, ImagesEncoded, Message
from engine.inputs import LoadSpec, SamplingConfig
from tests.engine.core.test_core import Recorder
from tests.helpers.vision_models import build_vision_family, random_image

GREEDY = SamplingConfig(temperature=0.0, max_new_tokens=3)


def test_a_vision_folder_loads_and_a_turn_with_an_image_then_a_follow_up_reuses_it(tmp_path, home):
    folder = build_vision_family(tmp_path / "llava", "llava")
    picture = tmp_path / "cat.png"
    random_image().rgb.save(picture)
    reports = Recorder()
    core = EngineCore(reports)
    core.run(QueuedJob(1, LoadJob(LoadSpec(str(folder), precision="fp32", device="cpu"))))
    assert reports.of("loaded") and core.vision.holds(core.loaded)
    first = (Message("user", "What is this?"),)
    core.run(QueuedJob(2, GenerateJob(3, first, GREEDY, images=((0, (str(picture),)),))))
    events = reports.of("event")
    encoded = [e for e in events if isinstance(e, ImagesEncoded)]
    assert isinstance(events[0], ReplyStarted) and isinstance(events[-1], Finished) and events[-1].error is None
    assert len(encoded) == 1 and encoded[0].image_tokens[0] > 0 and encoded[0].reused_images == 0
    assert events[-1].metrics.image_tokens == encoded[0].image_tokens
    reports.got.clear()
    follow = first + (Message("assistant", events[-1].text), Message("user", "And its colour?"))
    core.run(QueuedJob(4, GenerateJob(3, follow, GREEDY, images=((0, (str(picture),)),))))
    events = reports.of("event")
    (again,) = [e for e in events if isinstance(e, ImagesEncoded)]
    assert again.reused_images == 1 and again.encoder_s == 0.0
    assert events[0].reused_tokens > sum(again.image_tokens)


def test_a_text_model_refuses_an_image_in_one_line(tiny_model_dir, tmp_path, home):
    picture = tmp_path / "cat.png"
    random_image().rgb.save(picture)
    reports = Recorder()
    core = EngineCore(reports)
    core.run(QueuedJob(1, LoadJob(LoadSpec(str(tiny_model_dir), precision="fp32", device="cpu"))))
    core.run(QueuedJob(2, GenerateJob(3, (Message("user", "hi"),), GREEDY, images=((0, (str(picture),)),))))
    (finished,) = reports.of("event")
    assert finished.reason == "error" and "has no vision" in finished.error and "\n" not in finished.error


def test_a_vision_task_counts_each_pictures_image_tokens_as_the_turn_then_spends_them(tmp_path, home):
    folder = build_vision_family(tmp_path / "idefics3", "idefics3")  # tiles: the count follows the picture's size
    small, wide = tmp_path / "small.png", tmp_path / "wide.png"
    random_image(20, 20).rgb.save(small)
    random_image(120, 40, seed=1).rgb.save(wide)
    reports = Recorder()
    core = EngineCore(reports)
    core.run(QueuedJob(1, LoadJob(LoadSpec(str(folder), precision="fp32", device="cpu"))))
    files = (str(small), str(wide))
    core.run(QueuedJob(2, TaskJob(lambda vision, _cancel: count_image_tokens(vision, files), vision=True)))
    (counted,) = reports.of("task")
    assert isinstance(counted, ImageTokens) and counted.files == files
    assert all(n > 0 for n in counted.tokens) and counted.tokens[0] != counted.tokens[1]
    core.run(QueuedJob(3, GenerateJob(3, (Message("user", "Compare them."),), GREEDY, images=((0, files),))))
    (encoded,) = [e for e in reports.of("event") if isinstance(e, ImagesEncoded)]
    assert encoded.image_tokens == counted.tokens  # the forecast's count is what the turn computes


def test_a_vision_task_on_a_text_model_fails_in_one_line(tiny_model_dir, home):
    reports = Recorder()
    core = EngineCore(reports)
    core.run(QueuedJob(1, LoadJob(LoadSpec(str(tiny_model_dir), precision="fp32", device="cpu"))))
    core.run(QueuedJob(2, TaskJob(lambda vision, _cancel: vision, vision=True)))
    (message,) = reports.of("task_failed")
    assert "has no vision" in message and "\n" not in message


def test_a_damaged_picture_beside_a_readable_one_fails_alone_and_the_readable_one_is_still_counted(tmp_path, home):
    from engine.errors import ImageError

    folder = build_vision_family(tmp_path / "llava", "llava")
    good, bad = tmp_path / "good.png", tmp_path / "bad.png"
    random_image().rgb.save(good)
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + b"not the rest of a png")  # a PNG's signature, then nothing it can read
    reports = Recorder()
    core = EngineCore(reports)
    core.run(QueuedJob(1, LoadJob(LoadSpec(str(folder), precision="fp32", device="cpu"))))
    files = (str(bad), str(good))
    core.run(QueuedJob(2, TaskJob(lambda vision, _cancel: count_image_tokens(vision, files), vision=True)))
    core.run(QueuedJob(3, TaskJob(lambda vision, _cancel: count_image_tokens(vision, (str(good),)), vision=True)))
    both, alone = reports.of("task")
    assert not reports.of("task_failed")
    assert both.files == files and both.tokens == (0, alone.tokens[0]) and alone.tokens[0] > 0
    assert isinstance(both.error_of(0), ImageError) and "bad.png" in str(both.error_of(0))
    assert both.error_of(1) is None and alone.errors == ()
