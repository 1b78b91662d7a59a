"""engine.models.safety and its use by the loader: docs/FAULTS.md's cases 7-10.

Every bad model file is refused before anything is deserialised, with one line naming the file and
the problem; a pickle payload never runs; a config asking for remote code never imports anything.
"""

from __future__ import annotations

import builtins
import json
import os
import pickle
import shutil
import socket
import struct
import sys
import threading
from pathlib import Path

import gguf
import numpy as np
import pytest
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from engine.errors import CorruptModelError, EngineError, UnsafeModelError
from engine.models.loader import load_model
from engine.inputs import LoadSpec
from engine.models.safety import check_gguf, check_safetensors, check_source


@pytest.fixture
def model_copy(tiny_model_dir, tmp_path) -> Path:
    """A private copy of the tiny model folder to damage."""
    return Path(shutil.copytree(tiny_model_dir, tmp_path / "model"))


def _refused(folder: Path, error: type[EngineError], *needles: str) -> str:
    """Load ``folder`` and return the one-line message it was refused with."""
    with pytest.raises(error) as info:
        load_model(LoadSpec(model=str(folder), precision="fp32", device="cpu"))
    message = str(info.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message
    return message


# ---------------------------------------------------------------- safetensors


def test_truncated_safetensors_refused(model_copy):
    weights = model_copy / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) - 1000])
    message = _refused(model_copy, CorruptModelError, "corrupt or incomplete", "model.safetensors", "truncated")
    assert str(weights) in message


def test_zero_byte_safetensors_refused(model_copy):
    (model_copy / "model.safetensors").write_bytes(b"")
    _refused(model_copy, CorruptModelError, "model.safetensors", "empty file")


def test_random_bytes_refused(model_copy):
    rng = np.random.default_rng(0)
    (model_copy / "model.safetensors").write_bytes(rng.bytes(4096))
    _refused(model_copy, CorruptModelError, "model.safetensors", "not a safetensors file")


def test_html_saved_as_weights_refused(model_copy):
    page = b"<!DOCTYPE html>\n<html><head><title>Sign in</title></head><body>Please log in</body></html>\n"
    (model_copy / "model.safetensors").write_bytes(page * 20)
    _refused(model_copy, CorruptModelError, "model.safetensors", "HTML")


def test_safetensors_cut_inside_header_refused(model_copy):
    weights = model_copy / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    _refused(model_copy, CorruptModelError, "model.safetensors", "truncated")


def test_safetensors_header_not_json_refused(tmp_path):
    bad = tmp_path / "x.safetensors"
    bad.write_bytes(struct.pack("<Q", 10) + b"{not json}")
    with pytest.raises(CorruptModelError, match="header is not JSON"):
        check_safetensors(bad)


def test_safetensors_offsets_must_match_shapes(tmp_path):
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}).encode()
    bad = tmp_path / "x.safetensors"
    bad.write_bytes(struct.pack("<Q", len(header)) + header + bytes(8))
    with pytest.raises(CorruptModelError, match="needs 16"):
        check_safetensors(bad)


def test_safetensors_counts_elements(tiny_model_dir):
    with safe_open(tiny_model_dir / "model.safetensors", "pt") as handle:
        expected = sum(handle.get_slice(k).get_shape().numel() if hasattr(handle.get_slice(k).get_shape(), "numel")
                       else int(np.prod(handle.get_slice(k).get_shape())) for k in handle.keys())
    assert check_safetensors(tiny_model_dir / "model.safetensors") == expected


# ---------------------------------------------------------------- folder and config


def test_config_not_json_refused(model_copy):
    (model_copy / "config.json").write_text("<html>404 Not Found</html>")
    _refused(model_copy, CorruptModelError, "config.json", "not JSON")


def test_folder_without_weights_refused(model_copy):
    (model_copy / "model.safetensors").unlink()
    _refused(model_copy, CorruptModelError, str(model_copy), "no weights")


def test_generation_config_not_json_refused(model_copy):
    (model_copy / "generation_config.json").write_bytes(b"\x00\x01binary")
    _refused(model_copy, CorruptModelError, "generation_config.json", "not JSON")


def test_folder_without_tokenizer_refused(model_copy):
    (model_copy / "tokenizer.json").unlink()
    _refused(model_copy, CorruptModelError, str(model_copy), "no tokenizer")


def test_missing_weight_refused_not_randomly_initialised(model_copy):
    # A well-formed file that lacks a tensor: transformers would fill it with random values.
    weights = load_file(model_copy / "model.safetensors")
    del weights["model.layers.1.mlp.down_proj.weight"]
    save_file(weights, model_copy / "model.safetensors", metadata={"format": "pt"})
    _refused(model_copy, CorruptModelError, "1 weights missing", "model.layers.1.mlp.down_proj.weight")


def test_sharded_index_missing_shard_refused(model_copy):
    weights = model_copy / "model.safetensors"
    weights.rename(model_copy / "model-00001-of-00002.safetensors")
    index = {"metadata": {}, "weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
                                            "model.norm.weight": "model-00002-of-00002.safetensors"}}
    (model_copy / "model.safetensors.index.json").write_text(json.dumps(index))
    _refused(model_copy, CorruptModelError, "model.safetensors.index.json", "model-00002-of-00002.safetensors",
             "missing")


# ---------------------------------------------------------------- not a regular file


def _load_within(seconds: float, model: Path, release: Path | None = None) -> BaseException | None:
    """Load ``model`` on a daemon thread; return what it raised. Fails if it is still running after ``seconds``.

    ``release``: a FIFO a hung load is blocked opening; it is opened for writing once so the thread ends.
    """
    outcome: list[BaseException | None] = []

    def target() -> None:
        try:
            load_model(LoadSpec(model=str(model), precision="fp32", device="cpu"))
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001  (handed to the test thread)
            outcome.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        if release is not None:
            os.close(os.open(release, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail(f"loading {model} still blocked after {seconds} s")
    return outcome[0]


def _make_special(path: Path, kind: str, monkeypatch) -> socket.socket | None:
    """Replace ``path`` with a ``kind`` of non-regular file; a socket is returned so the caller keeps it open."""
    if path.exists():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "device":
        path.symlink_to("/dev/zero")
    elif kind == "socket":
        monkeypatch.chdir(path.parent)  # a relative name: socket paths are limited to ~100 bytes
        server = socket.socket(socket.AF_UNIX)
        server.bind(path.name)
        return server
    return None


@pytest.mark.parametrize("name,kind", [("model.safetensors", "fifo"), ("model.safetensors", "folder"),
                                       ("model.safetensors", "socket"), ("model.safetensors", "device"),
                                       ("generation_config.json", "fifo"), ("tokenizer.json", "fifo")])
def test_weights_or_side_file_that_is_not_a_regular_file_is_refused_before_opening(model_copy, monkeypatch,
                                                                                   name, kind):
    path = model_copy / name
    server = _make_special(path, kind, monkeypatch)
    error = _load_within(20, model_copy, release=path if kind == "fifo" else None)
    if server is not None:
        server.close()
    assert isinstance(error, CorruptModelError), error
    message = str(error)
    assert "\n" not in message and str(path) in message and "not a regular file" in message
    assert {"fifo": "FIFO", "folder": "folder", "socket": "socket", "device": "character device"}[kind] in message


def test_gguf_fifo_is_refused_before_opening(tmp_path):
    direct = tmp_path / "direct" / "m.gguf"
    direct.parent.mkdir()
    os.mkfifo(direct)
    for model in (direct, direct.parent):  # the file picked, or the folder whose only model it is
        error = _load_within(20, model, release=direct)
        assert isinstance(error, CorruptModelError) and "not a regular file (a FIFO)" in str(error), error
        assert str(direct) in str(error)


def test_symlinks_to_regular_files_are_fine(model_copy, tmp_path):
    elsewhere = tmp_path / "blobs"
    elsewhere.mkdir()
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        (model_copy / name).rename(elsewhere / name)
        (model_copy / name).symlink_to(elsewhere / name)
    assert check_source(model_copy).param_count > 0


# ---------------------------------------------------------------- pickle


class _Payload:
    """Unpickling this creates ``marker``: proof that code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return builtins.open, (str(self.marker), "w")


def _write_pickle(path: Path, marker: Path) -> Path:
    path.write_bytes(pickle.dumps({"model.embed_tokens.weight": _Payload(marker)}))
    return path


def test_payload_really_runs_when_unpickled(tmp_path):
    # The control: without the check this file executes code, so the tests below are meaningful.
    marker = tmp_path / "ran"
    with open(_write_pickle(tmp_path / "p.bin", marker), "rb") as handle:
        pickle.load(handle)["model.embed_tokens.weight"].close()
    assert marker.exists()


@pytest.mark.parametrize("name", ["pytorch_model.bin", "model.pt", "weights.pth", "last.ckpt", "model.pkl"])
def test_pickle_checkpoint_never_unpickled(model_copy, tmp_path, name):
    marker = tmp_path / "PWNED"
    (model_copy / "model.safetensors").unlink()
    _write_pickle(model_copy / name, marker)
    _refused(model_copy, UnsafeModelError, name, "pickle")
    assert not marker.exists()


@pytest.mark.parametrize("name", ["evil.pt", "evil.pth", "pytorch_model.bin"])
def test_pickle_file_opened_directly_refused(tmp_path, name):
    marker = tmp_path / "PWNED"
    path = _write_pickle(tmp_path / name, marker)
    _refused(path, UnsafeModelError, name)
    assert not marker.exists()


def test_pickle_next_to_safetensors_is_never_opened(model_copy, tmp_path):
    # Hub folders often hold both; only the safetensors file is read.
    marker = tmp_path / "PWNED"
    _write_pickle(model_copy / "pytorch_model.bin", marker)
    _write_pickle(model_copy / "training_args.bin", marker)
    loaded = load_model(LoadSpec(model=str(model_copy), precision="fp32"))
    assert loaded.facts.params > 0
    assert not marker.exists()


# ---------------------------------------------------------------- remote code


def _add_remote_code(folder: Path, marker: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "evil_config.EvilConfig", "AutoModelForCausalLM": "evil_model.EvilModel"}
    (folder / "config.json").write_text(json.dumps(config))
    code = f"open({str(marker)!r}, 'w').close()\n"
    (folder / "evil_config.py").write_text(code)
    (folder / "evil_model.py").write_text(code)


def test_auto_map_refused_and_no_module_imported(model_copy, tmp_path):
    marker = tmp_path / "IMPORTED"
    _add_remote_code(model_copy, marker)
    _refused(model_copy, UnsafeModelError, "config.json", "auto_map")
    assert not marker.exists()
    # This model's own modules (evil_config, evil_model): another test that opted in to remote code may have imported
    # a different model's "evil" module earlier in the same process (tests/app/window/test_controller.py).
    assert not any(name.rsplit(".", 1)[-1] in ("evil_config", "evil_model") for name in sys.modules)


def test_auto_map_in_tokenizer_config_refused(model_copy, tmp_path):
    config = json.loads((model_copy / "tokenizer_config.json").read_text())
    config["auto_map"] = {"AutoTokenizer": ["evil_tok.EvilTokenizer", None]}
    (model_copy / "tokenizer_config.json").write_text(json.dumps(config))
    _refused(model_copy, UnsafeModelError, "tokenizer_config.json")


def test_auto_map_passes_checks_with_explicit_opt_in(model_copy, tmp_path):
    marker = tmp_path / "IMPORTED"
    _add_remote_code(model_copy, marker)
    report = check_source(model_copy, allow_remote_code=True)
    assert report.weight_files == (model_copy / "model.safetensors",)
    assert not marker.exists()  # the checks themselves never import anything


# ---------------------------------------------------------------- GGUF


def _write_gguf(path: Path, elements: int = 1024) -> Path:
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.arange(elements, dtype=np.float32).reshape(-1, 16))
    writer.add_tensor("output_norm.weight", np.ones(16, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_gguf_header_parsed(tmp_path):
    assert check_gguf(_write_gguf(tmp_path / "m.gguf")) == 1024 + 16


def test_gguf_tensor_data_out_of_bounds_refused(tmp_path):
    path = _write_gguf(tmp_path / "m.gguf")
    data = path.read_bytes()
    path.write_bytes(data[:-200])  # the last tensor's data now runs past the end
    message = _refused(path, CorruptModelError, "m.gguf", "past the end of the file")
    assert "token_embd.weight" in message or "output_norm.weight" in message


def test_gguf_truncated_header_refused(tmp_path):
    path = _write_gguf(tmp_path / "m.gguf")
    path.write_bytes(path.read_bytes()[:40])
    _refused(path, CorruptModelError, "m.gguf", "truncated")


def test_gguf_deeply_nested_metadata_refused(tmp_path):
    # key "k", value: an array of one array of one array ... (type 9 = array).
    nested = struct.pack("<IQ", 9, 1) * 20000
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"k" + struct.pack("<I", 9)
                     + nested + struct.pack("<IQ", 4, 0))
    _refused(path, CorruptModelError, "m.gguf", "nested too deeply")


@pytest.mark.parametrize("content,problem", [(b"", "empty file"), (b"<html>not a model</html>", "bad magic")])
def test_gguf_garbage_refused(tmp_path, content, problem):
    path = tmp_path / "m.gguf"
    path.write_bytes(content)
    _refused(path, CorruptModelError, "m.gguf", problem)


# ---------------------------------------------------------------- names an index gives (issue 31, defect 1)


@pytest.mark.parametrize("shard", ["../outside.safetensors", "ABSOLUTE", "sub/../../outside.safetensors",
                                   "..\\outside.safetensors", "C:outside.safetensors", "outside\x00.safetensors",
                                   "...", ".. /outside.safetensors", "NUL.safetensors"])
def test_an_index_naming_a_shard_outside_the_folder_is_refused(model_copy, tmp_path, shard):
    # The weights really are there, outside the folder: only the name keeps the load from reading them.
    outside = tmp_path / "outside.safetensors"
    shutil.move(model_copy / "model.safetensors", outside)
    shard = str(outside) if shard == "ABSOLUTE" else shard
    with safe_open(str(outside), "pt") as handle:
        weight_map = {name: shard for name in handle.keys()}
    (model_copy / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    message = _refused(model_copy, UnsafeModelError, "model.safetensors.index.json", "only files inside the model's "
                       "own folder are taken")
    assert repr(shard)[1:-1] in message or shard in message


def test_an_index_naming_shards_in_a_subfolder_still_loads(model_copy):
    (model_copy / "weights").mkdir()
    shutil.move(model_copy / "model.safetensors", model_copy / "weights" / "model.safetensors")
    with safe_open(str(model_copy / "weights" / "model.safetensors"), "pt") as handle:
        weight_map = {name: "weights/model.safetensors" for name in handle.keys()}
    (model_copy / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    assert check_source(model_copy).weight_files == (model_copy / "weights" / "model.safetensors",)


# ---------------------------------------------------------------- a GGUF with nothing to run (issue 31, defect 11d)


def test_gguf_without_architecture_or_tensors_refused(tmp_path):
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 0))  # version 3, no tensors, no metadata
    _refused(empty, CorruptModelError, "empty.gguf", "no general.architecture")
    writer = gguf.GGUFWriter(str(tmp_path / "header-only.gguf"), "llama")
    writer.add_block_count(2)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    _refused(tmp_path / "header-only.gguf", CorruptModelError, "header-only.gguf", "no tensors")
