"""``serial_here``: the calling thread's torch operations on one core, no other thread's count changed."""

from __future__ import annotations

import sys
import threading
from typing import Any

import pytest
import torch

from engine.executor.omp_team import serial_here


def _on_a_thread(fn: Any) -> Any:
    out: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: out.setdefault("value", fn()))
    thread.start()
    thread.join()
    return out["value"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="torch's OpenMP runtime found in /proc/self/maps")
def test_one_thread_goes_serial_and_every_other_keeps_its_count():
    if torch.get_num_threads() < 2:
        pytest.skip("torch runs on one thread here: nothing to take away")
    before = torch.get_num_threads()
    logits = torch.randn(3, 49152, generator=torch.Generator().manual_seed(0))  # past torch's parallel grain

    def serial() -> tuple[bool, int, torch.Tensor]:
        took = serial_here()
        return took, torch.get_num_threads(), logits.argmax(dim=-1)

    took, count, chosen = _on_a_thread(serial)
    assert took and count == 1
    assert torch.equal(chosen, logits.argmax(dim=-1))  # the same result, computed on one core
    assert torch.get_num_threads() == before  # this thread, untouched
    assert _on_a_thread(torch.get_num_threads) == before  # and a thread started later starts from torch's count
