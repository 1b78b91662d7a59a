"""What pictures cost before a Send, in the real window (issue 44, ``app.window.image_costs``): with a random-weight
LLaVA folder loaded (tests/helpers/vision_models.py), a pasted picture's image tokens, counted by the model's processor
on the engine thread, are their own part of the composer's forecast ("images: N tokens (KV …)") and of the context
bar, and equal what the reply then computes; the reply reopened shows its image rows in "Why this TTFT" again. A text
model counts none and still says it cannot see the picture. Screenshots go to $MIAOHUI_SHOTS when set."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.window.image_costs import ImageCosts
from tests.app._gui_fixtures import REPLY_TIMEOUT_MS, make_window, settings, store  # noqa: F401 (fixtures)
from tests.app.window.test_image_turns import LOAD_TIMEOUT_MS, paste_screenshot, shot
from tests.helpers.vision_models import build_vision_family


@pytest.fixture(scope="module")
def llava_dir(tmp_path_factory) -> Path:
    return build_vision_family(tmp_path_factory.mktemp("vision") / "tiny-llava", "llava")


def test_a_pasted_pictures_tokens_are_their_own_part_of_the_forecast_and_the_bar_and_come_back_reopened(
        qtbot, make_window, llava_dir):
    window = make_window(max_new_tokens=2, loaded=False)
    with qtbot.waitSignal(window.model_ready, timeout=LOAD_TIMEOUT_MS):
        window.load_model(str(llava_dir), "fp32", "cpu")
    meter, composer = window.prompt_meter, window.composer
    paste_screenshot(window)
    with qtbot.waitSignal(meter.forecast_shown, timeout=REPLY_TIMEOUT_MS,
                          check_params_cb=lambda f: f is not None and bool(f.image_tokens)) as shown:
        qtbot.keyClicks(window.prompt, "What is in this picture?")
    f = shown.args[0]
    (tokens,) = f.image_tokens
    per_token = window.controller.facts.kv_bytes_per_token
    assert tokens > 0 and f.image_kv_bytes == tokens * per_token
    assert f.context_tokens - tokens > f.text_tokens and f.new_tokens == f.context_tokens  # nothing cached yet
    label = composer.forecast_label.text()
    assert f"images: {tokens} tokens (KV " in label and "\n" not in label
    assert f"({tokens})" in composer.forecast_label.toolTip()  # per picture, in the details
    shot(composer, "composer-image-forecast.png")

    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS):
        qtbot.mouseClick(window.send_button, Qt.MouseButton.LeftButton)
    assert window.last_metrics.image_tokens == (tokens,)  # the forecast counted what the turn computed
    rows = window.perf_panel.ttft_view.shown()

    cid = window.controller.conversation_id
    window.controller.new_conversation()
    bar = window.perf_panel._context_bar
    with qtbot.waitSignal(window.controller.conversation_shown, timeout=REPLY_TIMEOUT_MS):
        window.controller.open(cid)
    reopened = window.perf_panel.ttft_view.shown()
    assert reopened["images"] == rows["images"] and reopened["encoder"] == rows["encoder"] != "—"
    assert f"images: {tokens} tokens" in bar.format()  # the reply's context held its picture: a part of its own
    assert int(bar.format().split(" / ")[0]) == window.last_metrics.context_tokens > tokens
    shot(window.perf_panel, "panel-reopened-image-rows.png")


def test_a_text_model_counts_no_image_tokens_and_still_says_it_cannot_see_the_picture(qtbot, make_window):
    window = make_window(max_new_tokens=2)
    paste_screenshot(window)
    with qtbot.waitSignal(window.prompt_meter.forecast_shown, timeout=REPLY_TIMEOUT_MS,
                          check_params_cb=lambda f: f is not None) as shown:
        qtbot.keyClicks(window.prompt, "What is this?")
    assert shown.args[0].image_tokens == () and "images:" not in window.composer.forecast_label.text()
    assert "cannot see pictures" in window.composer.images_note.text()
    costs = window.findChild(ImageCosts)
    assert costs is not None and not costs.sees_images() and costs.tokens(window.attachments.images()) is None
    qtbot.waitUntil(lambda: not window.bridge.is_busy(), timeout=LOAD_TIMEOUT_MS)


def test_a_conversation_opened_with_a_picture_has_its_image_tokens_on_the_context_bar(qtbot, make_window, llava_dir,
                                                                                      store):
    import io

    from app.history.images import save_images
    from engine.vision import image_store
    from tests.helpers.vision_models import random_image

    data = io.BytesIO()
    random_image().rgb.save(data, "PNG")
    picture = image_store.put(data.getvalue(), "png")  # kept in the images folder, as a pasted picture is
    cid = store.create_conversation("A picture")
    save_images(store, store.add_message(cid, "user", "What is this?"), [str(picture)])
    store.add_message(cid, "assistant", "", finish_reason="error")  # its reply failed: the question is measured
    window = make_window(max_new_tokens=2, loaded=False)
    with qtbot.waitSignal(window.model_ready, timeout=LOAD_TIMEOUT_MS):
        window.load_model(str(llava_dir), "fp32", "cpu")
    bar = window.perf_panel._context_bar
    window.controller.open(cid)
    qtbot.waitUntil(lambda: "images: " in bar.format(), timeout=REPLY_TIMEOUT_MS)  # counted on the engine thread
    costs = window.findChild(ImageCosts)
    (tokens,) = costs.tokens([str(picture)])
    assert f"images: {tokens} tokens" in bar.format() and int(bar.format().split(" / ")[0]) > tokens


def test_a_damaged_picture_counts_zero_alone_and_a_readable_one_asked_with_it_is_still_counted(
        qtbot, make_window, llava_dir, tmp_path):
    from tests.helpers.vision_models import random_image

    good, bad = tmp_path / "good.png", tmp_path / "bad.png"
    random_image().rgb.save(good)
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + b"not the rest of a png")
    window = make_window(max_new_tokens=2, loaded=False)
    with qtbot.waitSignal(window.model_ready, timeout=LOAD_TIMEOUT_MS):
        window.load_model(str(llava_dir), "fp32", "cpu")
    costs = window.findChild(ImageCosts)
    qtbot.waitUntil(lambda: not window.bridge.is_busy(), timeout=LOAD_TIMEOUT_MS)
    files = [str(bad), str(good)]
    with qtbot.waitSignal(costs.counted, timeout=REPLY_TIMEOUT_MS):
        assert costs.tokens(files) is None  # asked, in one engine task
    bad_tokens, good_tokens = costs.tokens(files)
    assert bad_tokens == 0 and good_tokens > 0  # the damaged file did not zero its neighbour (it did, in one task)
    assert costs.tokens([str(bad)]) == (0,)  # known unreadable: not asked again
