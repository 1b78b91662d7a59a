"""This machine's memory bandwidth, measured in the same process as the benchmark that needs it.

Owns ``measure_bandwidth(device)``: the read bandwidth (a reduction over a buffer several times the
last-level cache, so it streams from memory) and the copy bandwidth (read + write) of a device, the
best of a few timed passes. The benchmark divides the bandwidth a decode achieves (weights bytes read
per token × tokens/s) by the read figure to get the roofline share. The timing (best of the passes after
an untimed first touch) is ``engine.bench.core.best_seconds``. Knows nothing of models; never changes
torch's thread settings (it measures with the threads the decode uses).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch

from engine.bench.core import best_seconds
from engine.executor.runner import sync

# 256 MiB: 8× the 32 MiB L3 of a typical desktop/server CPU, so the passes stream from DRAM.
CPU_BUFFER_BYTES = 256 * 1024 * 1024
# 2 GiB on a GPU: far beyond its L2 (50-60 MiB on Hopper), still small next to its memory.
CUDA_BUFFER_BYTES = 2 * 1024 * 1024 * 1024


@dataclass(frozen=True)
class Bandwidth:
    """Measured bandwidth of one device, in bytes per second."""

    device: str
    read_bytes_s: float  # sum over the buffer: bytes read ÷ time (the figure decode is bound by)
    copy_bytes_s: float  # copy between two buffers: (read + written) bytes ÷ time
    buffer_bytes: int
    passes: int

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(read_gb_s=self.read_bytes_s / 1e9, copy_gb_s=self.copy_bytes_s / 1e9)
        return data


def measure_bandwidth(device: str | torch.device = "cpu", buffer_bytes: int | None = None,
                      passes: int = 5) -> Bandwidth:
    """Read and copy bandwidth of ``device`` (the second best of ``passes``, see below)."""
    device = torch.device(device)
    if buffer_bytes is None:
        buffer_bytes = CUDA_BUFFER_BYTES if device.type == "cuda" else CPU_BUFFER_BYTES
    elements = max(1, buffer_bytes // 4)
    with torch.inference_mode():
        # Filled with ones, not torch.empty: untouched pages all map to one zero page and read from cache.
        src = torch.ones(elements, dtype=torch.float32, device=device)
        dst = torch.empty_like(src)
        dst.fill_(0.0)
        # The second-best pass: noise mostly slows a pass down, but on a VM one pass in a few hundred came out far
        # faster than the memory allows (47.8 GB/s against 26-30 in every other, 2026-12-03), and a bandwidth set by
        # it halved the roofline shares of that run.
        read_s = best_seconds(lambda: src.sum(), passes, lambda: sync(device), rank=1)
        copy_s = best_seconds(lambda: dst.copy_(src), passes, lambda: sync(device), rank=1)
        nbytes = src.nbytes
        del src, dst
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return Bandwidth(device=str(device), read_bytes_s=nbytes / read_s, copy_bytes_s=2 * nbytes / copy_s,
                     buffer_bytes=nbytes, passes=passes)
