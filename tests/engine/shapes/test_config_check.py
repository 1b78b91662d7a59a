"""engine.shapes.config_check through the loader and the CLI: a config that disagrees with its weights is refused.

Copies of the tiny model whose config.json says something its model.safetensors does not hold are
refused with one line naming config.json, before anything is allocated: in well under two seconds, and
from the CLI without torch ever being imported.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from engine.errors import CorruptModelError
from engine.models.loader import load_model
from engine.inputs import LoadSpec
from engine.models.safety import check_source

ROOT = Path(__file__).resolve().parents[3]


def _copy_with(tiny_model_dir: Path, folder: Path, **changes: object) -> Path:
    """A copy of the tiny model whose config.json has ``changes`` applied (a value of ... deletes the key)."""
    shutil.copytree(tiny_model_dir, folder)
    path = folder / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    for key, value in changes.items():
        if value is ...:
            config.pop(key, None)
        else:
            config[key] = value
    path.write_text(json.dumps(config), encoding="utf-8")
    return folder


# (config change, words the refusal must hold). The tiny model: 2 layers, hidden 64, 4 heads of 16,
# 2 KV heads, intermediate 128, vocab 400, 256 positions.
DISAGREEING = {
    "fewer-layers-than-weights": ({"num_hidden_layers": 1}, "num_hidden_layers is 1 but the weights hold 2 layers"),
    "more-layers-than-weights": ({"num_hidden_layers": 30}, "num_hidden_layers is 30 but the weights hold 2 layers"),
    "negative-layers": ({"num_hidden_layers": -1}, "num_hidden_layers is -1, not a whole number"),
    "absurd-layers": ({"num_hidden_layers": 100000}, "num_hidden_layers is 100000"),
    "zero-layers": ({"num_hidden_layers": 0}, "num_hidden_layers is 0"),
    "hidden-size-mismatch": ({"hidden_size": 128}, "has shape [400, 64] but the config implies [400, 128]"),
    "vocab-mismatch": ({"vocab_size": 500}, "model.embed_tokens.weight has shape [400, 64] but the config implies [500, 64]"),
    "kv-heads-mismatch": ({"num_key_value_heads": 4}, "k_proj.weight has shape [32, 64] but the config implies [64, 64]"),
    "heads-mismatch": ({"num_attention_heads": 8}, "o_proj.weight has shape [64, 64] but the config implies [64, 128]"),
    "head-dim-mismatch": ({"head_dim": 8}, "k_proj.weight has shape [32, 64] but the config implies [16, 64]"),
    "intermediate-mismatch": ({"intermediate_size": 256}, "mlp.down_proj.weight has shape [64, 128] but the config implies [64, 256]"),
    "heads-not-a-multiple-of-kv-heads": ({"num_key_value_heads": 3}, "not a multiple of num_key_value_heads 3"),
    "negative-context": ({"max_position_embeddings": -1}, "max_position_embeddings is -1"),
    "absurd-vocab": ({"vocab_size": 10**12}, "vocab_size is 1000000000000"),
    "string-number": ({"hidden_size": "64"}, "hidden_size is '64', not a whole number"),
    "float-number": ({"num_attention_heads": 4.0}, "num_attention_heads is 4.0, not a whole number"),
    "bool-number": ({"intermediate_size": True}, "intermediate_size is True, not a whole number"),
}


@pytest.mark.parametrize("case", list(DISAGREEING), ids=list(DISAGREEING))
def test_config_disagreeing_with_weights_is_refused_fast_with_one_line(tiny_model_dir, tmp_path, case):
    changes, needle = DISAGREEING[case]
    folder = _copy_with(tiny_model_dir, tmp_path / "model", **changes)
    start = time.perf_counter()
    with pytest.raises(CorruptModelError) as info:
        load_model(LoadSpec(model=str(folder), precision="fp32", device="cpu"))
    elapsed = time.perf_counter() - start
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"corrupt or incomplete: {folder / 'config.json'}: ")
    assert needle in message
    assert elapsed < 2.0, f"refused only after {elapsed:.1f} s"


def test_head_dim_derived_from_hidden_size_is_checked(tiny_model_dir, tmp_path):
    # Without head_dim transformers uses hidden/heads: 64/8 = 8 per head, so k_proj should be 4 x 8 = 32 rows
    # (it is) and q_proj 8 x 8 = 64 (it is): the copy agrees. With 2 KV heads k_proj would need 16 rows.
    agreeing = _copy_with(tiny_model_dir, tmp_path / "ok", head_dim=..., num_attention_heads=8, num_key_value_heads=4)
    assert check_source(agreeing).param_count > 0
    folder = _copy_with(tiny_model_dir, tmp_path / "bad", head_dim=..., num_attention_heads=8, num_key_value_heads=2)
    with pytest.raises(CorruptModelError, match=r"k_proj\.weight has shape \[32, 64\] but the config implies \[16, 64\]"):
        check_source(folder)


def test_the_unchanged_tiny_model_passes(tiny_model_dir):
    assert check_source(tiny_model_dir).param_count > 0


@pytest.mark.parametrize("changes", [{"model_type": "made_up", "num_hidden_layers": 1, "hidden_size": 128},
                                     {"quantization_config": {"quant_method": "gptq"}, "hidden_size": 128}],
                         ids=["unknown-architecture", "pre-quantized"])
def test_shapes_are_not_checked_where_the_layout_is_unknown(tiny_model_dir, tmp_path, changes):
    assert check_source(_copy_with(tiny_model_dir, tmp_path / "model", **changes)).param_count > 0


def test_unknown_architecture_still_refuses_absurd_numbers(tiny_model_dir, tmp_path):
    folder = _copy_with(tiny_model_dir, tmp_path / "model", model_type="made_up", n_layer=-3,
                        text_config={"vocab_size": 0})
    with pytest.raises(CorruptModelError, match="n_layer is -3"):
        check_source(folder)
    folder = _copy_with(tiny_model_dir, tmp_path / "nested", model_type="made_up", text_config={"vocab_size": 0})
    with pytest.raises(CorruptModelError, match="vocab_size is 0"):
        check_source(folder)


def test_sharded_weights_are_checked_as_one_model(tiny_model_dir, tmp_path):
    folder = _copy_with(tiny_model_dir, tmp_path / "model", num_hidden_layers=3)
    tensors = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    first = {k: v for k, v in tensors.items() if ".layers.1." not in k}
    save_file(first, folder / "model-00001-of-00002.safetensors", metadata={"format": "pt"})
    save_file({k: v for k, v in tensors.items() if k not in first}, folder / "model-00002-of-00002.safetensors",
              metadata={"format": "pt"})
    index = {"metadata": {}, "weight_map": {k: "model-00001-of-00002.safetensors" for k in first}
             | {k: "model-00002-of-00002.safetensors" for k in tensors if k not in first}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
    with pytest.raises(CorruptModelError, match="num_hidden_layers is 3 but the weights hold 2 layers"):
        check_source(folder)
    _copy_with(folder, tmp_path / "fixed", num_hidden_layers=2)
    assert check_source(tmp_path / "fixed").param_count == sum(t.numel() for t in tensors.values())


@pytest.mark.parametrize("changes,needle", [({"num_hidden_layers": 1}, "num_hidden_layers is 1"),
                                            ({"num_hidden_layers": -1}, "num_hidden_layers is -1"),
                                            ({"num_hidden_layers": 100000}, "num_hidden_layers is 100000"),
                                            ({"hidden_size": 128}, "the config implies [400, 128]"),
                                            ({"vocab_size": 500}, "the config implies [500, 64]")],
                         ids=["one-layer", "minus-one", "100000", "hidden-size", "vocab"])
def test_cli_refuses_with_exit_2_and_one_line_before_importing_torch(tiny_model_dir, tmp_path, changes, needle):
    folder = _copy_with(tiny_model_dir, tmp_path / "model", **changes)
    # The info command in a fresh interpreter (its module alone: what other commands import is theirs);
    # afterwards it reports whether torch was ever imported.
    code = ("import argparse, sys\nfrom engine.cli import info as cli_info\nparser = argparse.ArgumentParser()\n"
            "cli_info.add_arguments(parser)\ncode = cli_info.run(parser.parse_args(['--model', sys.argv[1]]))\n"
            "print('torch imported' if 'torch' in sys.modules else 'torch not imported')\nsys.exit(code)")
    result = subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True, text=True, cwd=ROOT,
                            timeout=120)
    assert result.returncode == 2 and result.stdout == "torch not imported\n"
    assert result.stderr.startswith("error: corrupt or incomplete: ") and result.stderr.count("\n") == 1
    assert needle in result.stderr and "config.json" in result.stderr


def test_cli_subprocess_refuses_a_disagreeing_config(tiny_model_dir, tmp_path):
    folder = _copy_with(tiny_model_dir, tmp_path / "model", num_hidden_layers=1)
    result = subprocess.run([sys.executable, "-m", "engine", "info", "--model", str(folder)], capture_output=True,
                            text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "num_hidden_layers is 1 but the weights hold 2 layers" in result.stderr
