"""The engine's and the CLI's faults (docs/FAULTS.md): the gaps the per-module tests left (issue 8's audit).

Owns the CLI's exit 2 for each damaged model that ``tests/helpers/faults.py`` builds,
a CUDA-cache release after an out-of-memory error, the CLI's exit 1 when generation itself fails,
and mixed scripts in a prompt (the 1 MB paste is checked through the window, where a user meets it).
Does not repeat what ``tests/engine/models/test_safety.py``, ``test_session.py``, ``test_loader.py``,
``test_offline.py`` and ``tests/app/history/test_faults.py`` already check; docs/FAULTS.md maps each
case to its test.

Faults are injected through the collaborators the engine accepts (``ChatSession``'s
``runner_factory``) around the real tiny model; nothing here is a stand-in for the engine.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest
import torch

from engine.__main__ import main
from engine.events import Finished, Message, Token
from engine.models.loader import load_model
from engine.inputs import LoadSpec
from engine.executor.runners import make_runner
from engine.inputs import SamplingConfig
from tests.helpers.faults import DAMAGES, FaultyRunner, make_damaged
from engine.generate.session import ChatSession

GREEDY = SamplingConfig(temperature=0.0, max_new_tokens=6)


@pytest.mark.parametrize("kind", DAMAGES)
def test_fault_7_to_10_cli_refuses_a_damaged_model_with_exit_2_and_one_line(kind, tiny_model_dir, tmp_path, capsys):
    damaged = make_damaged(kind, tiny_model_dir, tmp_path)
    rc = main(["chat", "--prompt", "hi", "--model", str(damaged.path), "--precision", "fp32", "--device", "cpu",
               "--max-new-tokens", "2"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    for needle in damaged.needles:
        assert needle in err
    assert not damaged.marker.exists()  # no pickle payload ran, no file of the model folder was imported


# ---------------------------------------------------------------- faults inside generation


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu"))


def _faulty_session(loaded: Any, fail_on: int, error: BaseException) -> ChatSession:
    return ChatSession(loaded, runner_factory=lambda lm, kv: FaultyRunner(make_runner(lm, kv), fail_on, error))


def test_fault_5_oom_during_prefill_empties_the_cuda_cache_and_keeps_the_model(loaded, monkeypatch):
    # No GPU here: pretend one is present so the recovery path runs, and record the allocator release.
    emptied: list[bool] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))
    session = _faulty_session(loaded, 1, torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB"))
    events = list(session.generate([Message("user", "Hello")], GREEDY))
    monkeypatch.undo()
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.reason == "error" and emptied == [True]
    assert "less context" in finished.error and "4-bit" in finished.error and "\n" not in finished.error
    assert not [e for e in events if isinstance(e, Token)] and session.cached_tokens == 0
    assert session.loaded is loaded  # the model stays; the next request just works
    assert list(session.generate([Message("user", "Hello")], GREEDY))[-1].reason == "length"


def test_fault_4_cli_exits_1_with_one_line_when_generation_fails(tiny_model_dir, monkeypatch, capsys):
    import engine.generate.session

    class FailingSession(ChatSession):
        def __init__(self, loaded: Any, **kwargs: Any) -> None:
            super().__init__(loaded, runner_factory=lambda lm, kv: FaultyRunner(
                make_runner(lm, kv), 3, RuntimeError("injected fault\nsecond line")))

    monkeypatch.setattr(engine.generate.session, "ChatSession", FailingSession)  # cli_chat imports it at run time
    rc = main(["chat", "--prompt", "Hello", "--model", str(tiny_model_dir), "--precision", "fp32", "--device", "cpu",
               "--max-new-tokens", "20"])
    out, err = capsys.readouterr()
    assert rc == 1 and "Traceback" not in err
    assert err.splitlines()[-1] == "error: generation failed: RuntimeError: injected fault"
    assert out.endswith("\n")  # what was generated before the fault is still printed


# ---------------------------------------------------------------- context


def test_fault_14_mixed_scripts_stream_and_round_trip(loaded):
    text = "Hello 秒回 — مرحبا بالعالم · नमस्ते · Ελληνικά · e\u0301 😀👩‍👩‍👧 한국어"
    events = list(ChatSession(loaded).generate([Message("user", text)], GREEDY))
    finished = events[-1]
    assert finished.reason == "length" and finished.error is None
    streamed = "".join(e.text for e in events if isinstance(e, Token))
    assert finished.text.startswith(streamed)  # every streamed piece is valid text, flushed or not
    finished.text.encode("utf-8")  # no lone surrogate or half character escaped into the reply


def test_fault_10_remote_code_runs_only_with_the_explicit_opt_in(tiny_model_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "modules"))  # transformers copies remote code here
    damaged = make_damaged("auto-map", tiny_model_dir, tmp_path)
    argv = ["chat", "--prompt", "hi", "--model", str(damaged.path), "--precision", "fp32", "--device", "cpu",
            "--max-new-tokens", "2"]
    assert main(argv) == 2 and not damaged.marker.exists()
    capsys.readouterr()
    # With the opt-in the folder's own code is imported (its module body runs and leaves the marker);
    # this one defines no model class, so the load still ends in one line, never a traceback.
    before = set(sys.modules)
    try:
        rc = main([*argv, "--allow-remote-code"])
    finally:
        # The folder's module stays imported otherwise, and later tests check that no such module ever is.
        for name in set(sys.modules) - before:
            if name.startswith("transformers_modules"):
                del sys.modules[name]
    err = capsys.readouterr().err
    assert damaged.marker.exists()
    assert rc == 2 and err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
