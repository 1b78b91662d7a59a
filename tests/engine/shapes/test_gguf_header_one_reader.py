"""engine.shapes.gguf_header is the one GGUF header reader (issue 25): the block loader's tensor table
(engine.quant.gguf_quant.GGUFFile) and the safety check (engine.models.safety.check_gguf) read headers through it,
and its tensor offsets and metadata agree with gguf's own reader on a real file."""

from __future__ import annotations

import gguf
import numpy as np

from engine.shapes.gguf_header import read_file_header
from engine.quant.gguf_quant import GGUFFile
from engine.models.safety import check_gguf


def test_offsets_and_metadata_agree_with_ggufs_reader_for_every_consumer(tmp_path):
    path = tmp_path / "m.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_token_list([f"t{i}" for i in range(300)])  # a string array: walked over, kept as its length
    writer.add_custom_alignment(64)
    rng = np.random.default_rng(0)
    writer.add_tensor("a.weight", rng.standard_normal((3, 64)).astype(np.float32))
    writer.add_tensor("b.weight", gguf.quants.quantize(rng.standard_normal((2, 64)).astype(np.float32),
                                                       gguf.GGMLQuantizationType.Q8_0),
                      raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    theirs = {t.name: t for t in gguf.GGUFReader(str(path)).tensors}
    header = read_file_header(path)
    assert header.fields["llama.block_count"] == 1 and header.fields["tokenizer.ggml.tokens"].count == 300
    ours = GGUFFile(path)
    for tensor in header.tensors:
        assert header.header_bytes + tensor.offset == theirs[tensor.name].data_offset
        assert ours.tensors[tensor.name].start == theirs[tensor.name].data_offset
        assert ours.tensors[tensor.name].nbytes == theirs[tensor.name].n_bytes
    assert ours.metadata["general.alignment"] == 64
    assert check_gguf(path) == 3 * 64 + 2 * 64
