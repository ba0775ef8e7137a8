"""``Fetcher`` (``logstore.client.fetcher``) on hand-made Fetch answers: control batches are never
returned; ``read_committed`` leaves out the records of aborted transactions and stops at the last
stable offset; a stretch holding nothing to return (control records only) moves the position past it;
a seek drops what was fetched for the old position."""

from __future__ import annotations

from logstore import Record
from logstore.client.fetcher import READ_COMMITTED, READ_UNCOMMITTED, Fetcher
from logstore.server.wire_records.crc32c import crc32c
from logstore.server.wire_records.encode import encode_produce_batch

CONTROL = 0x20


ABORT, COMMIT = 0, 1


def _batch(base_offset: int, count: int, producer_id: int = -1, transactional: bool = False,
           control: bool = False, marker: int = ABORT) -> bytes:
    """A batch of ``count`` records; ``control``: a transaction marker of type ``marker`` (its key:
    version 0, type; its value: version 0, coordinator epoch 0)."""
    records = [Record(b"k%d" % (base_offset + i), b"v%d" % (base_offset + i), (), 1_700_000_000_000)
               for i in range(count)]
    if control:
        records = [Record((0).to_bytes(2, "big") + marker.to_bytes(2, "big"), bytes(6), (), 1_700_000_000_000)]
    data = bytearray(encode_produce_batch(records, producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                                          base_sequence=0 if producer_id >= 0 else -1, base_offset=base_offset,
                                          transactional=transactional))
    if control:  # the attributes (bytes 21-22) are under the CRC (bytes 17-20): set the bit, then the CRC
        data[22] |= CONTROL
        data[17:21] = crc32c(bytes(data[21:])).to_bytes(4, "big")
    return bytes(data)


LOG = b"".join([
    _batch(0, 3, producer_id=7, transactional=True),          # aborted below
    _batch(3, 1, producer_id=7, transactional=True, control=True),   # its abort marker
    _batch(4, 2, producer_id=8, transactional=True),          # committed
    _batch(6, 1, producer_id=8, transactional=True, control=True, marker=COMMIT),   # its commit marker
    _batch(7, 2),                                              # no transaction
])


def _fetcher(isolation: int) -> Fetcher:
    fetcher = Fetcher(None, fetch_min_bytes=1, fetch_max_bytes=1 << 20, max_partition_fetch_bytes=1 << 20,
                      fetch_max_wait_ms=0, max_poll_records=100, isolation_level=isolation, auto_offset_reset="earliest")
    fetcher.assign([("t", 0)])
    fetcher.positions[("t", 0)] = 0
    return fetcher


def _answer(stable: int, aborted=None) -> dict:
    return {"records": LOG, "last_stable_offset": stable, "high_watermark": 9,
            "aborted_transactions": aborted}


def test_read_uncommitted_returns_every_data_record_and_no_control_record():
    fetcher = _fetcher(READ_UNCOMMITTED)
    fetcher._take(("t", 0), 0, _answer(9))
    assert [r.offset for r in fetcher.drain()] == [0, 1, 2, 4, 5, 7, 8]
    assert fetcher.positions[("t", 0)] == 9


def test_read_committed_leaves_out_aborted_transactions_and_waits_at_the_last_stable_offset():
    fetcher = _fetcher(READ_COMMITTED)
    fetcher._take(("t", 0), 0, _answer(9, [{"producer_id": 7, "first_offset": 0}]))
    assert [(r.offset, r.value) for r in fetcher.drain()] == [(4, b"v4"), (5, b"v5"), (7, b"v7"), (8, b"v8")]
    stopped = _fetcher(READ_COMMITTED)
    stopped._take(("t", 0), 0, _answer(7, [{"producer_id": 7, "first_offset": 0}]))
    assert [r.offset for r in stopped.drain()] == [4, 5]
    assert stopped.positions[("t", 0)] == 7  # past the commit marker at 6 (below the stable offset), not past it


def test_a_stretch_of_control_records_moves_the_position_past_it():
    fetcher = _fetcher(READ_UNCOMMITTED)
    fetcher.positions[("t", 0)] = 3
    only_marker = {"records": _batch(3, 1, producer_id=7, transactional=True, control=True),
                   "last_stable_offset": 4, "high_watermark": 4, "aborted_transactions": None}
    fetcher._take(("t", 0), 3, only_marker)
    assert fetcher.drain() == [] and fetcher.positions[("t", 0)] == 4


def test_records_below_the_fetch_offset_are_skipped_and_a_seek_drops_the_buffer():
    fetcher = _fetcher(READ_UNCOMMITTED)
    fetcher.positions[("t", 0)] = 5
    fetcher._take(("t", 0), 5, _answer(9))
    fetcher.seek(("t", 0), 8)
    assert fetcher.drain() == [] and not fetcher.has_buffered()
    fetcher._take(("t", 0), 8, _answer(9))
    assert [r.offset for r in fetcher.drain()] == [8]


def test_only_an_abort_marker_ends_an_aborted_transaction():
    # Producer 7 commits 0-1, then aborts 3-4, then aborts 6-7 again: the COMMIT marker at 2 must not
    # forget the aborted transactions after it, and the ABORT marker at 5 ends only the one before it.
    log = b"".join([
        _batch(0, 2, producer_id=7, transactional=True),
        _batch(2, 1, producer_id=7, transactional=True, control=True, marker=COMMIT),
        _batch(3, 2, producer_id=7, transactional=True),
        _batch(5, 1, producer_id=7, transactional=True, control=True, marker=ABORT),
        _batch(6, 2, producer_id=7, transactional=True),
        _batch(8, 1, producer_id=7, transactional=True, control=True, marker=ABORT),
        _batch(9, 1, producer_id=7, transactional=True),
        _batch(10, 1, producer_id=7, transactional=True, control=True, marker=COMMIT),
    ])
    fetcher = _fetcher(READ_COMMITTED)
    fetcher._take(("t", 0), 0, {"records": log, "last_stable_offset": 11, "high_watermark": 11,
                                "aborted_transactions": [{"producer_id": 7, "first_offset": 6},
                                                         {"producer_id": 7, "first_offset": 3}]})
    assert [r.offset for r in fetcher.drain()] == [0, 1, 9]
    assert fetcher.positions[("t", 0)] == 11
