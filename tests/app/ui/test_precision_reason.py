"""Why ``auto`` chose a precision: said beside the precision in the model bar, and on the model card."""

from __future__ import annotations

from dataclasses import replace

from app.ui.precision_reason import auto_reason
from app.widgets.model_bar import ModelBar
from app.widgets.model_card import card_rows
from engine.models.model import AutoChoice
from tests.app.widgets.test_model_card import SMOLLM2

INT4 = replace(SMOLLM2, precision="int4", weights_bytes=94_800_000,
               auto_choice=AutoChoice("int4", "bf16", 0.988, 0.90, measured_now=True))


def test_the_reason_names_the_agreement_the_bar_and_the_bytes_read():
    why = auto_reason(INT4)
    assert "int4" in why and "98.8%" in why and "90.0%" in why and "bf16" in why
    assert "0.35×" in why  # 94.8 MB of 134.5 M parameters × 2 bytes
    assert "this load" in why
    remembered = replace(INT4, auto_choice=replace(INT4.auto_choice, measured_now=False))
    assert "earlier load" in auto_reason(remembered)


def test_candidates_that_missed_are_named_and_a_kept_float_says_so():
    int8 = replace(INT4, precision="int8", auto_choice=AutoChoice("int8", "bf16", 0.991, 0.98, (("int4", 0.84),)))
    assert "int4 agreed on 84.0%" in auto_reason(int8)
    kept = replace(SMOLLM2, auto_choice=AutoChoice("bf16", "bf16", None, None, (("int4", 0.84), ("int8", 0.97))))
    why = auto_reason(kept)
    assert why.startswith("auto kept bf16") and "int8 agreed on 97.0%" in why


def test_no_reason_without_an_auto_choice():
    assert auto_reason(SMOLLM2) is None
    assert all(value != "" or label != "" for label, value in card_rows(SMOLLM2))


def test_model_bar_shows_what_auto_chose_and_why_and_the_card_repeats_it(qtbot, tmp_path):
    from app.state.settings import Settings

    bar = ModelBar(Settings.in_file(tmp_path / "s.ini"))
    qtbot.addWidget(bar)
    bar.show()
    bar.set_state(False, INT4)
    assert bar.chosen.isVisible() and bar.chosen.text() == "→ int4"
    assert bar.chosen.toolTip() == auto_reason(INT4) and "int4" in bar.chosen.accessibleName()
    bar.set_state(True, SMOLLM2)  # an explicit precision: nothing to explain
    assert not bar.chosen.isVisible() and bar.load_button.text() != "Load"
    assert ("", auto_reason(INT4)) in card_rows(INT4)
