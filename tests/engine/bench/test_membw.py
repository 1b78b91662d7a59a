"""engine.bench.membw measures a positive bandwidth."""

from __future__ import annotations

import pytest

from engine.bench.membw import measure_bandwidth


def test_memory_bandwidth_is_measured():
    bw = measure_bandwidth("cpu", buffer_bytes=8 * 1024 * 1024, passes=2)
    assert bw.read_bytes_s > 0 and bw.copy_bytes_s > 0 and bw.buffer_bytes == 8 * 1024 * 1024
    assert bw.to_dict()["read_gb_s"] == pytest.approx(bw.read_bytes_s / 1e9)
