"""The status bar's "In memory: …" label: the real window on the tiny model shows the one model the engine core holds,
with its size; records of two models show both, their kinds in the tooltip; none hides it."""

from __future__ import annotations

from app.widgets.models_label import ModelsLabel
from engine.core.models import ModelRecord
from engine.fmt import format_bytes
from tests.app._gui_fixtures import make_window, settings, store  # noqa: F401 (fixtures)


def test_the_window_shows_the_one_model_in_memory(qtbot, make_window):
    window = make_window()
    label, facts = window.findChild(ModelsLabel), window.controller.facts
    qtbot.waitUntil(label.isVisible)
    assert label.text() == f"In memory: {facts.name} ({format_bytes(facts.weights_bytes)})"
    assert window.bridge.loaded_models() == (ModelRecord(facts.name, "chat", facts.weights_bytes),)


def test_two_models_are_listed_with_their_kinds_and_none_hides_the_label(qtbot):
    label = ModelsLabel()
    qtbot.addWidget(label)
    label.show_models((ModelRecord("tiny", "chat", 2048), ModelRecord("bge", "embedding", 1 << 20)))
    assert not label.isHidden()
    assert label.text() == f"In memory: tiny ({format_bytes(2048)}), bge ({format_bytes(1 << 20)})"
    assert label.toolTip().splitlines() == [f"chat model: tiny, {format_bytes(2048)}",
                                            f"embedding model: bge, {format_bytes(1 << 20)}"]
    label.show_models(())
    assert label.isHidden() and label.text() == ""


def test_the_tooltip_ends_with_the_cores_memory_budget_when_given_one(qtbot):
    label = ModelsLabel(budget=lambda: 3 << 30)
    qtbot.addWidget(label)
    label.show_models((ModelRecord("tiny", "chat", 2048),))
    assert label.toolTip().splitlines() == [f"chat model: tiny, {format_bytes(2048)}",
                                            f"Memory budget for models: {format_bytes(3 << 30)} (past it the least "
                                            "recently used is unloaded)"]

