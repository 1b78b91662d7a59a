"""``python -m engine info``: the model card, its JSON form, and one-line errors with exit status 2."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from engine.__main__ import main
from engine.shapes.shape import estimate_weights_bytes


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["info", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_info_text_card(tiny_model_dir, capsys):
    code, out, err = _run(capsys, "--model", str(tiny_model_dir), "--precision", "fp32")
    assert code == 0 and err == ""
    assert "layers (L)          2" in out and "GQA: 4 query heads share 2 key/value heads" in out
    assert "seeds' estimate" in out and "KV bytes / token    512 B" in out  # 2 x 2 x 2 x 16 x 4


def test_info_json(tiny_model_dir, capsys):
    code, out, _ = _run(capsys, "--model", str(tiny_model_dir), "--precision", "bf16", "--json")
    card = json.loads(out)
    assert code == 0
    assert (card["layers"], card["hidden_size"], card["heads"], card["kv_heads"], card["head_dim"]) == (2, 64, 4, 2, 16)
    assert card["kv_bytes_per_token"] == 2 * 2 * 2 * 16 * 2
    assert card["kv_bytes_per_token_no_gqa"] == 2 * 2 * 64 * 2
    assert card["kv_bytes_full_context"] == card["kv_bytes_per_token"] * 256
    assert card["param_estimate"] == card["vocab_size"] * 64 + 12 * 2 * 64 ** 2
    assert card["weights_bytes_estimates"]["bf16"] == card["params"] * 2
    assert card["precision"] == "bf16" and card["attention_kind"] == "GQA"


def test_weights_estimate_matches_bnb_int8_load(tiny_model_dir):
    from engine.models.facts import quantizable_shapes
    from engine.models.loader import load_model
    from engine.inputs import LoadSpec

    loaded = load_model(LoadSpec(model=str(tiny_model_dir), precision="bnb-int8", bnb_compute_dtype="bf16"))
    estimate = estimate_weights_bytes(loaded.facts.params, quantizable_shapes(loaded.model))["bnb-int8"]
    buffers = sum(b.numel() * b.element_size() for b in loaded.model.buffers())
    assert loaded.facts.weights_bytes == estimate + buffers


def test_estimates_are_the_same_whichever_precision_the_model_was_loaded_in(tiny_model_dir, capsys):
    cards = {}
    for precision in ("fp32", "int4", "int8"):
        code, out, _ = _run(capsys, "--model", str(tiny_model_dir), "--precision", precision, "--json")
        assert code == 0
        cards[precision] = json.loads(out)
    assert cards["int4"]["weights_bytes_estimates"] == cards["fp32"]["weights_bytes_estimates"]
    assert cards["int8"]["weights_bytes_estimates"] == cards["fp32"]["weights_bytes_estimates"]
    assert cards["fp32"]["weights_bytes_estimates"]["int4"] < cards["fp32"]["weights_bytes_estimates"]["int8"]


def test_the_card_says_what_auto_chose_and_why(tiny_model_dir, capsys):
    from engine.cli.info import format_card

    code, out, _ = _run(capsys, "--model", str(tiny_model_dir), "--precision", "fp32", "--json")
    card = json.loads(out)
    assert code == 0 and card["auto_choice"] is None and "auto " not in format_card(card)
    card["auto_choice"] = {"precision": "int4", "reference": "bf16", "agreement": 0.965, "bar": 0.9,
                           "rejected": [], "measured_now": False}
    assert ("  auto chose          int4: agrees with bf16 on 96.5% of next tokens (bar 90%; measured at an earlier "
            "load)") in format_card(card).splitlines()
    card["auto_choice"] = {"precision": "bf16", "reference": "bf16", "agreement": None, "bar": None,
                           "rejected": [["int4", 0.84], ["int8", 0.97]], "measured_now": True}
    assert "  auto kept           bf16: int4 agreed on 84.0%, int8 agreed on 97.0%, below the bar" in format_card(card)


def _assert_one_line_error(code: int, out: str, err: str, *needles: str) -> None:
    assert code == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    for needle in needles:
        assert needle in err


def test_missing_model_exits_2(tmp_path, capsys):
    _assert_one_line_error(*_run(capsys, "--model", str(tmp_path / "nothing-here")), "no model at")


def test_missing_default_model_says_fetch(home, capsys):
    _assert_one_line_error(*_run(capsys), "python -m engine fetch")


def test_corrupt_model_exits_2(tiny_model_dir, tmp_path, capsys):
    folder = shutil.copytree(tiny_model_dir, tmp_path / "m")
    (folder / "model.safetensors").write_bytes(b"<html>502 Bad Gateway</html>")
    _assert_one_line_error(*_run(capsys, "--model", str(folder)), "corrupt or incomplete", "model.safetensors")


def test_pickle_model_exits_2(tmp_path, capsys):
    (tmp_path / "model.pt").write_bytes(b"\x80\x04K\x01.")
    _assert_one_line_error(*_run(capsys, "--model", str(tmp_path / "model.pt")), "pickle")


def test_bad_precision_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["info", "--precision", "int3"])
    assert info.value.code == 2


def test_cli_modules_import_no_torch():
    # `python -m engine --help` imports every sub-command module: they must stay light.
    code = ("import sys, engine.cli.info, engine.models.loader, engine.models.safety, engine.models.catalog, engine.models.facts; "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "[]"


@pytest.mark.default_model
def test_info_default_model_json(default_model_dir, capsys):
    code, out, _ = _run(capsys, "--model", str(default_model_dir), "--precision", "bf16", "--json")
    card = json.loads(out)
    assert code == 0 and card["params"] == 134_515_008 and card["param_estimate"] == 147_750_912
    assert card["kv_bytes_per_token"] == 23_040 and card["kv_bytes_per_token_no_gqa"] == 69_120
    assert card["weights_bytes"] == 269_030_272
    estimates = card["weights_bytes_estimates"]
    assert estimates["bf16"] == 2 * card["params"] and estimates["nf4"] < estimates["bnb-int8"] < estimates["bf16"]
    assert estimates["int4"] < estimates["int8"] < estimates["bf16"]
    # engine/quant/quant.py's resident bytes, measured: 134,959,744 (int8) and 94,835,584 (int4)
    assert estimates["int8"] == pytest.approx(134_959_744, rel=0.02)
    assert estimates["int4"] == pytest.approx(94_835_584, rel=0.02)


@pytest.mark.parametrize("damage", ["missing", "corrupt", "fifo"])
def test_a_path_with_control_characters_cannot_forge_a_second_error_line(tiny_model_dir, tmp_path, damage):
    # The real CLI in a subprocess: whatever the path holds, stderr is one line and the exit status 2.
    folder = tmp_path / "m\nerror: forged line\r\x1b[2Kx\u2028y"
    if damage != "missing":
        shutil.copytree(tiny_model_dir, folder)
        weights = folder / "model.safetensors"
        weights.unlink()
        if damage == "corrupt":
            weights.write_bytes(b"<html>502 Bad Gateway</html>")
        else:
            os.mkfifo(weights)  # refused before it is opened, so the run cannot hang
    result = subprocess.run([sys.executable, "-m", "engine", "info", "--model", str(folder)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1 and "\r" not in result.stderr
    assert "\x1b" not in result.stderr and "\u2028" not in result.stderr
    assert "m\\nerror: forged line\\r\\x1b[2Kx\\u2028y" in result.stderr  # shown escaped, still recognisable
