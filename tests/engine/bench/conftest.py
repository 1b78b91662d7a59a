"""Fixtures of the bench tests: one quick benchmark run on the tiny model, shared by every module."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from engine.__main__ import main


@pytest.fixture(scope="session")
def quick_json(tiny_model_dir):
    """``python -m engine bench --quick --json`` on the tiny model, parsed (session-scoped: one bench run
    for all checks)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["bench", "--quick", "--json", "--model", str(tiny_model_dir), "--precision", "fp32",
                       "--device", "cpu", "--tokens", "4"])
    assert status == 0
    return json.loads(out.getvalue())
