"""engine.cli.bench: a model that cannot load, or an unknown ``--vision`` family, is one ``error:`` line and exit 2;
loading the command (as ``python -m engine --help`` does) loads no torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from engine.__main__ import main

ROOT = Path(__file__).resolve().parents[3]


def test_bad_model_is_one_line_exit_2(tmp_path, capsys):
    assert main(["bench", "--quick", "--model", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ")


def test_an_unknown_vision_family_is_one_line_exit_2(capsys):
    assert main(["bench", "--vision", "gemma-3-4b,llava-9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: unknown vision family llava-9; known: gemma-3-4b, qwen2.5-vl-3b, qwen3-vl-2b, "
                   "smolvlm-256m, llava-1.5-7b, llava-onevision-0.5b"]


def test_the_command_loads_without_torch():
    code = "import sys, engine.cli.bench; print('torch' in sys.modules, 'transformers' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["False", "False"]
