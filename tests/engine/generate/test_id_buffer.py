"""``engine.generate.id_buffer.IdBuffer``: appends (ints and device tensors), extends, truncates to a prefix, grows by
doubling with the valid ids kept, stops at its limit, and hands out a view (no copy) of the valid ids."""

from __future__ import annotations

import torch

from engine.generate.id_buffer import IdBuffer


def test_appends_and_extends_in_order_and_the_view_shares_the_buffers_storage():
    buffer = IdBuffer("cpu", capacity=4)
    buffer.append(7)
    buffer.append(torch.tensor([8]))  # a sampler's (1,) choice, written device to device
    buffer.extend([9, 10])
    view = buffer.view()
    assert view.shape == (1, 4) and view.dtype == torch.long and view.tolist() == [[7, 8, 9, 10]]
    assert buffer.capacity == 4 and view.data_ptr() == buffer.view().data_ptr()  # full, not yet grown: no copy


def test_grows_by_doubling_keeping_the_ids_and_only_when_full():
    buffer = IdBuffer("cpu", capacity=2)
    capacities = []
    for token in range(9):
        buffer.append(token)
        capacities.append(buffer.capacity)
    assert capacities == [2, 2, 4, 4, 8, 8, 8, 8, 16]
    assert buffer.view().tolist() == [list(range(9))]
    buffer.extend(list(range(100, 140)))  # past double the capacity: grown to what is needed at once
    assert buffer.capacity == 49 and buffer.view()[0].tolist() == list(range(9)) + list(range(100, 140))


def test_truncate_rewinds_to_a_prefix_without_a_copy_and_later_writes_overwrite_the_rest():
    buffer = IdBuffer("cpu", capacity=8)
    buffer.extend([1, 2, 3, 4, 5])
    storage = buffer.view().data_ptr()
    buffer.truncate(2)
    assert len(buffer) == 2 and buffer.view().tolist() == [[1, 2]]
    buffer.extend([30, 40])
    assert buffer.view().tolist() == [[1, 2, 30, 40]] and buffer.view().data_ptr() == storage
    buffer.truncate(10)  # past the end: nothing to rewind
    assert len(buffer) == 4
    buffer.truncate(-1)
    assert len(buffer) == 0 and buffer.view().shape == (1, 0)


def test_the_limit_caps_growth_and_drops_ids_past_it():
    buffer = IdBuffer("cpu", capacity=3, limit=5)
    buffer.extend([1, 2, 3, 4])
    assert buffer.capacity == 5  # doubled to 6, capped at the limit
    buffer.append(5)
    buffer.append(6)  # past the budget: never read, never stored
    buffer.extend([7, 8])
    assert len(buffer) == 5 and buffer.capacity == 5 and buffer.view().tolist() == [[1, 2, 3, 4, 5]]
    assert IdBuffer("cpu", capacity=10**12, limit=4).capacity == 4  # never the whole budget up front
