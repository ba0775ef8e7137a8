"""OffsetMap against a plain model: a dict of the latest offset per key, with Kafka's "full" rule
(a new key that does not fit is refused, changing nothing) and exact memory accounting."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logstore.cleaner.offset_map import ENTRY_OVERHEAD_BYTES, OffsetMap

keys = st.one_of(st.none(), st.binary(min_size=0, max_size=12))


class Model:
    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self.offsets: dict[bytes, int] = {}
        self.used = 0

    def put_batch(self, batch_keys, batch_offsets) -> int:
        for taken, (key, offset) in enumerate(zip(batch_keys, batch_offsets)):
            if key is None:
                continue
            if key not in self.offsets:
                charge = ENTRY_OVERHEAD_BYTES + len(key)
                if self.used + charge > self.capacity_bytes:
                    return taken
                self.used += charge
            self.offsets[key] = offset
        return len(batch_keys)


@given(memory=st.integers(ENTRY_OVERHEAD_BYTES, 3000), load=st.sampled_from([0.5, 0.9, 1.0]),
       batches=st.lists(st.lists(keys, max_size=25), max_size=12))
def test_put_batch_matches_the_model(memory, load, batches):
    offset_map = OffsetMap(memory, load)
    model = Model(int(memory * load))
    offset = 0
    for batch in batches:
        batch_offsets = list(range(offset, offset + len(batch)))
        offset += len(batch)
        taken = offset_map.put_batch(batch, batch_offsets)
        assert taken == model.put_batch(batch, batch_offsets)
        assert offset_map.used_bytes == model.used <= offset_map.capacity_bytes
        if taken < len(batch):
            break  # a full map ends the round
    assert {key: offset_map.get(key) for key in model.offsets} == model.offsets
    assert len(offset_map) == len(model.offsets)


def test_put_refuses_a_new_key_when_full_but_updates_known_ones():
    offset_map = OffsetMap(ENTRY_OVERHEAD_BYTES * 2 + 2, 1.0)
    assert offset_map.put(b"a", 0) and offset_map.put(b"b", 1)
    assert not offset_map.put(b"c", 2) and offset_map.get(b"c") == -1
    assert offset_map.put(b"a", 3) and offset_map.get(b"a") == 3 and offset_map.latest_offset == 3
    assert offset_map.utilization == 1.0
    offset_map.clear()
    assert len(offset_map) == 0 and offset_map.latest_offset == -1 and offset_map.put(b"c", 4)


def test_a_batch_that_fills_the_map_stops_before_the_first_refused_key():
    offset_map = OffsetMap(ENTRY_OVERHEAD_BYTES * 3 + 3, 1.0)
    taken = offset_map.put_batch([b"a", None, b"b", b"a", b"c", b"d", b"e"], [10, 11, 12, 13, 14, 15, 16])
    assert taken == 5 and offset_map.latest_offset == 14
    assert [offset_map.get(k) for k in (b"a", b"b", b"c", b"d")] == [13, 12, 14, -1]


@pytest.mark.parametrize("bad", [(0, 0.9), (10**6, 0), (10**6, 1.5), ("1", 0.9), (10**6, True)])
def test_bad_sizes_are_rejected(bad):
    with pytest.raises(ValueError):
        OffsetMap(*bad)
