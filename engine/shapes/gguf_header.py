"""A GGUF file's header (metadata and tensor table) parsed from its first bytes, before the weights.

The fit estimate needs a GGUF model's architecture (layers, width, heads, KV heads, context) and its tensor
table (shapes and quantization types: the exact parameter count and bytes). Both sit at the start of the file;
the weights follow. ``read_header`` asks a reader for the first 64 KiB and reads four times as far until the
header parses, so a local file is read only that far and a remote one is fetched with HTTP ranges
(``engine.library.hub``), never whole. gguf's own ``GGUFReader`` needs the whole file, so the few struct reads
are done here, with the gguf package's tables for value types and quantization block sizes.

The one GGUF header reader: the library's fit estimate, the loader's structural check (``engine.models.safety``:
every tensor's data inside the file) and the block loader (``engine.quant.gguf_quant.GGUFFile``, which parses
its memory-mapped file here) all read headers through ``parse``. Owns parsing only.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

from engine.errors import CorruptModelError

FIRST_READ = 64 * 1024
MAX_HEADER = 256 * 1024 * 1024  # real headers (a 256k-token vocabulary with merges) are tens of MB
_SCALARS = {GGUFValueType.UINT8: "<B", GGUFValueType.INT8: "<b", GGUFValueType.UINT16: "<H",
            GGUFValueType.INT16: "<h", GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i",
            GGUFValueType.FLOAT32: "<f", GGUFValueType.BOOL: "<?", GGUFValueType.UINT64: "<Q",
            GGUFValueType.INT64: "<q", GGUFValueType.FLOAT64: "<d"}


class NeedMoreBytes(Exception):
    """The bytes given end inside the header."""


@dataclass(frozen=True)
class ArrayInfo:
    """A metadata array, kept as its length (a vocabulary's tokens are not needed, only how many)."""

    item_type: str
    count: int


@dataclass(frozen=True)
class GgufTensor:
    name: str
    shape: tuple[int, ...]  # GGUF order: the innermost (contiguous) dimension first
    quant: str  # "F32", "Q4_K", …
    nbytes: int
    offset: int = 0  # where its data starts, from the start of the data section (``GgufHeader.header_bytes``)

    @property
    def elements(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class GgufHeader:
    version: int
    fields: Mapping[str, Any]  # scalars and strings as values, arrays as ArrayInfo
    tensors: tuple[GgufTensor, ...]
    header_bytes: int  # where the tensor data starts (aligned)

    @property
    def architecture(self) -> str:
        return str(self.fields.get("general.architecture", ""))

    def arch_field(self, key: str) -> Any:
        """``{architecture}.{key}``, e.g. ``block_count``; None when absent."""
        return self.fields.get(f"{self.architecture}.{key}")

    @property
    def elements(self) -> int:
        return sum(t.elements for t in self.tensors)

    @property
    def tensor_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    @property
    def quant_counts(self) -> dict[str, int]:
        """Elements stored in each quantization type: what the file is mostly (its "Q4_K_M")."""
        counts: dict[str, int] = {}
        for tensor in self.tensors:
            counts[tensor.quant] = counts.get(tensor.quant, 0) + tensor.elements
        return counts


class _Cursor:
    def __init__(self, data: bytes, where: str) -> None:
        self.data, self.pos, self.where = data, 0, where

    def take(self, count: int) -> bytes:
        if count < 0 or count > MAX_HEADER:
            raise CorruptModelError(f"corrupt or incomplete: {self.where}: a header length of {count} bytes")
        end = self.pos + count
        if end > len(self.data):
            raise NeedMoreBytes()
        chunk, self.pos = self.data[self.pos:end], end
        return chunk

    def skip_strings(self, count: int) -> None:
        """Walk over ``count`` strings (a vocabulary, its merges) without decoding them: ~5× faster than
        ``string`` per item on a 150k-token vocabulary."""
        length, data, pos = struct.Struct("<Q").unpack_from, self.data, self.pos
        for _ in range(count):
            if pos + 8 > len(data):
                raise NeedMoreBytes()
            size = length(data, pos)[0]
            if size > MAX_HEADER:
                raise CorruptModelError(f"corrupt or incomplete: {self.where}: a header length of {size} bytes")
            pos += 8 + size
        if pos > len(data):
            raise NeedMoreBytes()
        self.pos = pos

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        return self.take(self.unpack("<Q")).decode("utf-8", "replace")

    def value(self, kind: int) -> Any:
        try:
            vtype = GGUFValueType(kind)
        except ValueError:
            raise CorruptModelError(f"corrupt or incomplete: {self.where}: unknown metadata type {kind}") from None
        if vtype == GGUFValueType.STRING:
            return self.string()
        if vtype == GGUFValueType.ARRAY:
            item, count = self.unpack("<I"), self.unpack("<Q")
            try:
                item_type = GGUFValueType(item)
            except ValueError:
                raise CorruptModelError(f"corrupt or incomplete: {self.where}: unknown array type {item}") from None
            if item_type in _SCALARS:
                self.take(count * struct.calcsize(_SCALARS[item_type]))
            elif item_type == GGUFValueType.STRING:
                self.skip_strings(count)
            else:
                for _ in range(count):
                    self.value(item)
            return ArrayInfo(item_type.name, count)
        return self.unpack(_SCALARS[vtype])


def parse(data: bytes, where: str = "GGUF file") -> GgufHeader:
    """Parse the header at the start of ``data``; ``NeedMoreBytes`` if it goes on past its end."""
    cur = _Cursor(data, where)
    if cur.take(4) != b"GGUF":
        raise CorruptModelError(f"corrupt or incomplete: {where}: not a GGUF file (bad magic)")
    version = cur.unpack("<I")
    if version not in (2, 3):
        raise CorruptModelError(f"corrupt or incomplete: {where}: unsupported GGUF version {version}")
    n_tensors, n_fields = cur.unpack("<Q"), cur.unpack("<Q")
    if n_tensors > 1_000_000 or n_fields > 1_000_000:
        raise CorruptModelError(f"corrupt or incomplete: {where}: {n_tensors} tensors, {n_fields} fields")
    fields: dict[str, Any] = {}
    for _ in range(n_fields):
        key = cur.string()
        fields[key] = cur.value(cur.unpack("<I"))
    tensors = []
    for _ in range(n_tensors):
        name = cur.string()
        shape = tuple(cur.unpack("<Q") for _ in range(cur.unpack("<I")))
        kind, offset = cur.unpack("<I"), cur.unpack("<Q")
        try:
            qtype = GGMLQuantizationType(kind)
            block, type_bytes = GGML_QUANT_SIZES[qtype]
        except (ValueError, KeyError):
            raise CorruptModelError(f"corrupt or incomplete: {where}: tensor {name!r} has unknown type {kind}") from None
        tensors.append(GgufTensor(name, shape, qtype.name, math.prod(shape) * type_bytes // block, offset))
    alignment = fields.get("general.alignment")
    alignment = alignment if isinstance(alignment, int) and alignment > 0 else 32
    return GgufHeader(version, fields, tuple(tensors), -(-cur.pos // alignment) * alignment)


def read_header(read: Callable[[int], bytes], where: str, size: int | None = None) -> GgufHeader:
    """Parse a header through ``read(n)`` (the file's first ``n`` bytes), reading more until it parses."""
    want = FIRST_READ if size is None else min(FIRST_READ, size)
    while True:
        data = read(want)
        try:
            return parse(data, where)
        except NeedMoreBytes:
            if len(data) < want or (size is not None and want >= size):
                raise CorruptModelError(f"corrupt or incomplete: {where}: the header runs past the end of the "
                                        "file (truncated)") from None
            if want >= MAX_HEADER:
                raise CorruptModelError(f"corrupt or incomplete: {where}: header larger than "
                                        f"{MAX_HEADER >> 20} MiB") from None
            want = min(want * 4, MAX_HEADER) if size is None else min(want * 4, MAX_HEADER, size)


def read_file_header(path: Path) -> GgufHeader:
    """The header of a local GGUF file, reading only as far as it goes."""
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            def read(count: int) -> bytes:
                handle.seek(0)
                return handle.read(count)

            return read_header(read, str(path), size)
    except OSError as exc:
        raise CorruptModelError(f"corrupt or incomplete: {path}: cannot read ({exc.strerror or exc})") from None
