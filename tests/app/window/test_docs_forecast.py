"""The composer's documents forecast in the real window on the tiny model (1024 positions here, so a small file fits
whole beside the ~170-token instruction): with a real .txt and a real PDF attached, typing shows both choices counted
on the worker, the one auto takes, and after a first reply their TTFT; the prompt the send computed is the one the
chosen choice forecast; a file too large for the context shows why retrieval is used. The wording is
``app.window.docs_forecast``'s, checked against its pure lines too."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.state.rate_estimate import RateEstimate
from app.window.docs_forecast import DocsRequest, choice_lines
from engine.docs.forecast import ChoiceFigures, DocsForecast
from tests.app._gui_fixtures import REPLY_TIMEOUT_MS, make_window, settings, store  # noqa: F401 (fixtures)
from tests.app.window.test_attachments import drop_files, wait_read
from tests.helpers.documents import make_pdf

SHORT = "The Lyon warehouse closed in March."


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    from tests.helpers.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-1k"), max_position_embeddings=1024)


def wait_docs_forecast(qtbot, meter, check=lambda d: True):
    """Until the meter shows a forecast with documents passing ``check``; that forecast."""
    qtbot.waitUntil(lambda: meter.docs_forecast is not None and check(meter.docs_forecast),
                    timeout=REPLY_TIMEOUT_MS)
    return meter.docs_forecast


@pytest.mark.qt_log_ignore("propagateSizeHints")
def test_attached_txt_and_pdf_show_both_choices_before_sending_and_the_send_computes_the_chosen_one(
        qtbot, make_window, tmp_path):
    window = make_window(max_new_tokens=4)
    meter, composer = window.prompt_meter, window.composer
    notes = tmp_path / "notes.txt"
    notes.write_text("The kettle in room 4 boils water in ninety seconds.\n\nTea is served at ten.", encoding="utf-8")
    pdf = tmp_path / "report.pdf"
    pdf.write_bytes(make_pdf(["Intro page.", SHORT]))
    drop_files(composer, [notes, pdf])
    for chip in composer.chips.chips():
        wait_read(qtbot, chip)
    assert meter.documents() == DocsRequest((str(notes), str(pdf)))
    qtbot.keyClicks(window.prompt, "When did the Lyon warehouse close?")
    docs = wait_docs_forecast(qtbot, meter, lambda d: d.whole is not None and d.whole.passages == 3)
    assert docs.chosen == "whole" and docs.requested == "auto" and docs.reason is None
    assert docs.whole.fits and docs.retrieve is not None and docs.retrieve.fits
    assert 0 < docs.retrieve.source_tokens < docs.whole.source_tokens
    lines = composer.docs_forecast_label.text().split("\n")
    assert composer.docs_forecast_label.isVisible()
    assert lines == [f"● Whole text: {docs.whole.new_tokens:,} tokens to prefill · TTFT after the first reply",
                     f"○ Retrieved passages ({docs.retrieve.passages}): {docs.retrieve.new_tokens:,} tokens to "
                     f"prefill · TTFT after the first reply",
                     "Auto uses the whole text: it fits the context."]
    assert "Retrieved: " in composer.docs_forecast_label.toolTip()
    # the prompt's own figures are the chosen choice's: the grounded prompt, not the bare question
    assert meter.forecast.context_tokens == docs.whole.prompt_tokens

    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS):
        qtbot.mouseClick(window.send_button, Qt.MouseButton.LeftButton)
    assert window.last_metrics.prompt_tokens == docs.whole.prompt_tokens  # the forecast counted the real prompt
    reply = window.chat.widgets()[-1]
    assert reply.sources is not None and reply.sources.used.source_tokens == docs.whole.source_tokens
    assert reply.sources.summary.text().startswith("Sources (whole text): 3 added · ")
    assert not composer.docs_forecast_label.isVisible()  # sent: the chips and their forecast went

    # the same files attached to a follow-up: a rate is measured now, and both choices get a TTFT
    drop_files(composer, [notes, pdf])
    for chip in composer.chips.chips():
        wait_read(qtbot, chip)
    qtbot.keyClicks(window.prompt, "And the kettle?")
    docs = wait_docs_forecast(qtbot, meter, lambda d: d.whole is not None and d.whole.cached_tokens > 0)
    text = composer.docs_forecast_label.text()
    assert text.count("TTFT ≈ ") == 2 and "cached)" in text
    rate = meter.estimate
    assert rate is not None and f"{docs.whole.new_tokens:,} tokens to prefill ({docs.whole.cached_tokens:,} cached)" \
        in text


@pytest.mark.qt_log_ignore("propagateSizeHints")
def test_a_file_too_large_for_the_context_shows_why_passages_are_retrieved(qtbot, make_window, tmp_path):
    window = make_window(max_new_tokens=4)
    meter, composer = window.prompt_meter, window.composer
    sites = tmp_path / "sites.md"
    body = [f"## Site {i}\n\nThe site number {i} stores paper and ink." for i in range(40)]
    body[7] = f"## Lyon\n\n{SHORT}"
    sites.write_text("# Sites\n\n" + "\n\n".join(body), encoding="utf-8")
    drop_files(composer, [sites])
    wait_read(qtbot, composer.chips.chips()[0])
    qtbot.keyClicks(window.prompt, "When did the Lyon warehouse close?")
    docs = wait_docs_forecast(qtbot, meter)
    assert docs.chosen == "retrieve" and not docs.whole.fits and docs.retrieve.fits
    lines = composer.docs_forecast_label.text().split("\n")
    assert lines[0].startswith("○ Whole text: ") and lines[0].endswith(" · does not fit")
    assert lines[1].startswith(f"● Retrieved passages ({docs.retrieve.passages}): ")
    assert lines[2] == (f"Auto uses retrieved passages: the whole text adds {docs.whole.source_tokens:,} tokens but "
                        f"only {docs.room:,} fit beside the conversation and the reply.")
    assert meter.forecast.context_tokens == docs.retrieve.prompt_tokens < 1024
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS):
        qtbot.mouseClick(window.send_button, Qt.MouseButton.LeftButton)
    reply = window.chat.widgets()[-1]
    assert reply.sources.used.mode == "retrieve" and reply.sources.used.source_tokens == docs.retrieve.source_tokens
    assert SHORT in reply.sources.used.sources[0].text
    summary = reply.sources.summary.text()
    assert summary.startswith(f"Sources (retrieved passages): {docs.retrieve.passages} passages · ")
    assert " tokens added · retrieval " in summary and summary.endswith(" ms")


def figures(mode, tokens, fits=True, cached=0):
    return ChoiceFigures(mode, tokens, 2, tokens + 200, cached, fits, 0.01)


def test_forced_whole_that_does_not_fit_warns_and_forced_retrieve_says_so():
    rate = RateEstimate(1000.0, 800.0, 1200.0, 3)
    forced = DocsForecast("whole", "whole", figures("whole", 5000, fits=False), figures("retrieve", 300), 700,
                          "keyword", "too big")
    lines, warning = choice_lines(forced, rate)
    assert lines[0] == "● Whole text: 5,200 tokens to prefill · TTFT ≈ 5.2 s · does not fit"
    assert lines[1] == "○ Retrieved passages (2): 500 tokens to prefill · TTFT ≈ 500 ms"
    assert lines[2] == "Whole text is used (chosen for this conversation)."
    assert warning.startswith("The whole text adds 5,000 tokens but only 700 fit: sending it will be refused")
    retrieve = DocsForecast("retrieve", "retrieve", figures("whole", 400), None, 20, "hybrid", "no passage fits")
    lines, warning = choice_lines(retrieve, None)
    assert lines[1] == "● Retrieved passages: none fits the 20 tokens left"
    assert lines[2] == "Retrieved passages are used (chosen for this conversation)."
    assert warning.startswith("No retrieved passage fits the 20 tokens left")
    collections = DocsForecast("auto", "retrieve", None, figures("retrieve", 300, cached=100), 900, "hybrid", None)
    lines, warning = choice_lines(collections, None)
    assert lines == ["● Retrieved passages (2): 400 tokens to prefill (100 cached) · TTFT after the first reply",
                     "Retrieved passages are used: a collection is searched, not put in whole."] and warning == ""


@pytest.mark.qt_log_ignore("propagateSizeHints")
def test_an_attached_file_that_vanished_is_one_line_under_the_message_figures(qtbot, make_window, tmp_path):
    window = make_window(max_new_tokens=4)
    meter, composer = window.prompt_meter, window.composer
    notes = tmp_path / "notes.txt"
    notes.write_text("The kettle boils in ninety seconds.", encoding="utf-8")
    drop_files(composer, [notes])
    wait_read(qtbot, composer.chips.chips()[0])
    notes.unlink()  # gone before the message is measured (moved, deleted)
    qtbot.keyClicks(window.prompt, "How fast?")
    qtbot.waitUntil(lambda: composer.docs_forecast_label.text().startswith("⚠ "), timeout=REPLY_TIMEOUT_MS)
    line = composer.docs_forecast_label.text()
    assert "\n" not in line and "notes.txt" in line and "Traceback" not in line
    assert meter.docs_forecast is None and meter.forecast is not None and composer.forecast_label.isVisible()
