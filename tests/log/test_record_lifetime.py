"""Records a read returned stay whole after the bytes they came from are gone: their segment rolled
away and deleted by ``delete_records``, cut by ``truncate_to``, rewritten by a compaction swap, the
log closed, and the head cache and read buffers reused by later reads. Reads copy every field out of
the read buffer or mapping when they build a record; this pins it for every way a read builds one
(a range, a point read, a cached batch head, runs of one-record batches, ``iter_records``). A
record read can be appended again as it is."""

from __future__ import annotations

from logstore import LogManager, Record

VALUES = [b"v%06d" % i * 40 for i in range(3000)]


def _fill(store: LogManager, topic: str, config: dict | None = None):
    store.create_topic(topic, 1, config=config or {"segment.bytes": "65536"})
    log = store.get_log(topic, 0)
    for start in range(0, 2000, 500):  # large batches (point reads cache their heads)
        log.append([Record(b"k%d" % (i % 50), VALUES[i], (("h", b"%d" % i),), 1_000 + i)
                    for i in range(start, start + 500)])
    for i in range(2000, 2100):  # one-record batches
        log.append([Record(b"k%d" % (i % 50), VALUES[i], (), 1_000 + i)])
    log.flush()
    return log


def _read_every_way(log) -> list:
    got = list(log.read(0, 1 << 20))
    got += [log.read(o, max_records=1)[0] for o in (3, 700, 700, 1999, 2050)]  # the second 700: a cached head
    got += [log.read(o, 1)[0] for o in (1500, 2099)]
    got += list(log.iter_records(1990, 2010))
    return got


def _check(records) -> None:
    for record in records:
        i = record.offset
        assert record == Record(b"k%d" % (i % 50), VALUES[i], (("h", b"%d" % i),) if i < 2000 else (), 1_000 + i, i)


def test_records_outlive_deletion_truncation_and_close(tmp_path):
    store = LogManager([str(tmp_path)])
    log = _fill(store, "t")
    kept = _read_every_way(log)
    _check(kept)
    log.roll()
    log.delete_records(2100)
    store.cleaner.run_retention()  # every segment below the log start offset is deleted
    assert log.log_start_offset == 2100
    _check(kept)
    log2 = _fill(store, "u")
    kept2 = _read_every_way(log2)
    log2.truncate_to(10)  # cut through the first batch; later appends reuse those file bytes
    for i in range(10, 2100, 100):
        log2.append([Record(b"x", b"y" * 4000, (), 5)])
    assert len(log2.read(0, 1 << 20)) == 31 and log2.read(3, max_records=1)[0].offset == 3  # buffers used again
    _check(kept2)
    again = store.get_log("t", 0)  # records read can be appended as they are, alone or together
    again.append([kept[0]])
    again.append(kept[1:3])
    assert [r[:4] for r in again.read(2100)] == [r[:4] for r in kept[:3]]
    store.close()
    _check(kept)
    _check(kept2)


def test_records_outlive_a_compaction_swap(tmp_path):
    store = LogManager([str(tmp_path)])
    log = _fill(store, "c", {"segment.bytes": "65536", "cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0",
                              "min.compaction.lag.ms": "0"})
    kept = _read_every_way(log)
    log.roll()
    before = log.size_bytes
    stats = store.cleaner.compact([("c", 0)])
    assert stats[("c", 0)] is not None and log.size_bytes < before  # segments were swapped for cleaned ones
    _read_every_way(log)
    _check(kept)
    store.close()
    _check(kept)
