"""A new conversation attaching the same file starts from the first one's document prefix (issue 43), through the
real Bridge and worker thread on the tiny model: in memory, and from the KV folder after a restart."""

from __future__ import annotations

import pytest

from app.runtime.bridge import Bridge
from engine.core.kv_persist import kv_folder
from engine.events import Message
from engine.inputs import LoadSpec, SamplingConfig
from tests.app._gui_fixtures import LOAD_TIMEOUT_MS, REPLY_TIMEOUT_MS, loaded_bridge  # noqa: F401 (fixture)

pytestmark = [pytest.mark.qt_log_ignore("propagateSizeHints")]

SYSTEM = Message("system", "Be brief.")
GREEDY = SamplingConfig(temperature=0.0, top_k=0, top_p=1.0, repetition_penalty=1.0, max_new_tokens=6)


def ask(qtbot, bridge: Bridge, conversation_id: int, question: str, path: str):
    """One grounded first turn: its ReplyStarted and Finished."""
    starts = []
    bridge.generation_started.connect(starts.append)
    try:
        with qtbot.waitSignal(bridge.generation_finished, timeout=REPLY_TIMEOUT_MS) as blocker:
            assert bridge.generate(conversation_id, [SYSTEM, Message("user", question)], GREEDY,
                                   documents=[path], docs_mode="whole")
        qtbot.waitUntil(lambda: not bridge.is_busy(), timeout=5000)  # the prefix is kept after the Finished
    finally:
        bridge.generation_started.disconnect(starts.append)
    assert blocker.args[0].error is None
    return starts[0], blocker.args[0]


def test_a_second_conversation_on_the_same_file_prefills_only_its_question(qtbot, loaded_bridge, tmp_path,
                                                                          tiny_model_dir):
    notes = tmp_path / "notes.txt"
    notes.write_text("The KV cache stores keys and values.\nParis is the capital of France.", encoding="utf-8")
    first, _ = ask(qtbot, loaded_bridge, 1, "What is the capital?", str(notes))
    assert first.reused_tokens == 0 and first.document_prefix_tokens == 0
    kept = loaded_bridge._worker.doc_prefixes.held()
    assert len(kept) == 1 and len(list(kv_folder().glob("p-*.kv"))) == 1

    second, done = ask(qtbot, loaded_bridge, 2, "Hello?", str(notes))
    assert second.document_prefix_tokens == second.reused_tokens == len(kept[0])
    assert done.metrics.prefill_tokens == second.prompt_tokens - len(kept[0]) < 20  # the question and the tail

    restarted = Bridge()  # a new worker: nothing in memory, the KV folder of the same data folder
    try:
        with qtbot.waitSignal(restarted.model_loaded, timeout=LOAD_TIMEOUT_MS):
            restarted.load(LoadSpec(str(tiny_model_dir), "fp32", "cpu"))
        qtbot.waitUntil(lambda: not restarted.is_busy(), timeout=5000)
        third, _ = ask(qtbot, restarted, 3, "Who are you?", str(notes))
        assert third.document_prefix_tokens == third.reused_tokens == len(kept[0])
        assert not restarted._worker.doc_prefixes.discarded
    finally:
        assert restarted.shutdown(5000) is True
