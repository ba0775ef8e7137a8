"""One-record appends (``Log._append_one``, the short path) against the general path they stand in for.

Two stores on one manual clock get the same records, one at a time: one through ``append([record])``
(the short path whenever it takes the record), the other through ``append_prepared(prepare([record]))``
(always the general path). Whatever the records (null keys and values, headers, given and missing
timestamps, invalid ones), the topic config (timestamp type, compaction, compression, limits, small
segments and indexes that roll on size, time and full indexes, ``flush.messages``) and config changes
between appends, both must answer the same (``AppendInfo`` or the same error), read the same, and
leave the same bytes in every file of the partition.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from hypothesis import given, settings, strategies as st

from logstore import LogManager, ManualClock, Record
from logstore.log import log as log_module

TOPIC = "t"
BASE_TS = 1_700_000_000_000
SMALL = {"segment.bytes": 1500, "segment.index.bytes": 96, "index.interval.bytes": 64, "segment.ms": 40_000}

keys = st.one_of(st.none(), st.just(b""), st.binary(max_size=12), st.just(bytearray(b"ba")), st.just("text"))
values = st.one_of(st.none(), st.just(b""), st.binary(max_size=80), st.binary(min_size=300, max_size=400))
headers = st.one_of(st.just(()), st.lists(st.tuples(st.text(max_size=4), st.one_of(st.none(), st.binary(max_size=4))),
                                          max_size=2), st.just([("h", "not bytes")]))
# (a first record at a negative time makes the segment's age, not record time, decide time rolls)
timestamps = st.one_of(st.none(), st.integers(BASE_TS - 60_000, BASE_TS + 200_000), st.integers(-3, 0),
                       st.just("soon"), st.just(2**64))
records = st.builds(Record, keys, values, headers, timestamps)
configs = st.fixed_dictionaries({
    "message.timestamp.type": st.sampled_from(["CreateTime", "LogAppendTime"]),
    "cleanup.policy": st.sampled_from(["delete", "compact"]),
    "compression.type": st.sampled_from(["producer", "producer", "gzip"]),
    "max.message.bytes": st.sampled_from([200, 1000]),
    "flush.messages": st.sampled_from([3, 2**62]),
})
steps = st.lists(st.one_of(records.map(lambda record: ("append", record)),
                           st.integers(0, 30_000).map(lambda delta: ("tick", delta)),
                           configs.map(lambda config: ("config", config))), max_size=40)


def outcome(append):
    try:
        return append()
    except Exception as exc:  # the error itself is compared
        return type(exc), str(exc)


def files_of(dir_path: str) -> dict[str, bytes]:
    found = {}
    for root, _dirs, names in os.walk(dir_path):
        for name in names:
            if name.endswith((".log", ".index", ".timeindex")):
                with open(os.path.join(root, name), "rb") as file:
                    found[os.path.relpath(os.path.join(root, name), dir_path)] = file.read()
    return found


@settings(max_examples=60, deadline=None)
@given(configs, steps)
def test_one_record_appends_match_the_general_path(config, script):
    dirs = [tempfile.mkdtemp(prefix="logstore-single-") for _ in range(2)]
    clock = ManualClock(BASE_TS)
    stores = [LogManager([dir_path], clock=clock) for dir_path in dirs]
    try:
        for store in stores:
            store.create_topic(TOPIC, 1, {**SMALL, **config})
        short, general = (store.get_log(TOPIC, 0) for store in stores)
        for kind, argument in script:
            if kind == "tick":
                clock.advance(argument)
            elif kind == "config":
                for store in stores:
                    store.alter_topic_config(TOPIC, argument)
            else:
                expected = outcome(lambda: general.append_prepared(general.prepare([argument])))
                assert outcome(lambda: short.append([argument])) == expected
                assert outcome(lambda: short.append((argument,))) == outcome(
                    lambda: general.append_prepared(general.prepare([argument])))
        assert (short.log_end_offset, short.recovery_point) == (general.log_end_offset, general.recovery_point)
        assert [s.base_offset for s in short.segments] == [s.base_offset for s in general.segments]
        assert list(short.iter_records(0)) == list(general.iter_records(0))
        for store in stores:
            store.close()
        stores = []
        assert files_of(dirs[0]) == files_of(dirs[1])
    finally:
        for store in stores:
            store.close()
        for dir_path in dirs:
            shutil.rmtree(dir_path, ignore_errors=True)


def test_an_append_that_comes_first_moves_the_base_offset(tmp_path, monkeypatch):
    """Another append landing between the encoding (outside the lock) and the write: the short path
    encodes again at the new log end offset."""
    store = LogManager([str(tmp_path)], clock=ManualClock(BASE_TS))
    try:
        store.create_topic(TOPIC, 1)
        log = store.get_log(TOPIC, 0)
        encode_one = log_module.encode_one
        calls = []

        def racing(base_offset, *args):
            calls.append(base_offset)
            if len(calls) == 1:  # another writer takes offsets 0 and 1 meanwhile
                log.append_prepared(log.prepare([Record(b"a", b"1"), Record(b"b", b"2")]))
            return encode_one(base_offset, *args)

        monkeypatch.setattr(log_module, "encode_one", racing)
        info = log.append([Record(b"c", b"3")])
        assert calls == [0, 2] and (info.first_offset, info.last_offset) == (2, 2)
        assert [(r.key, r.offset) for r in log.iter_records(0)] == [(b"a", 0), (b"b", 1), (b"c", 2)]
        assert log.read(2, 1)[0].value == b"3"
    finally:
        store.close()


def test_a_segment_whose_first_record_has_no_time_rolls_on_its_age(tmp_path):
    """A first record at a negative time: ``segment.ms`` counts from the segment's creation on the
    clock (read by the segment when the record brings its own time), on both paths."""
    clock = ManualClock(BASE_TS)
    stores = [LogManager([str(tmp_path / name)], clock=clock) for name in ("short", "general")]
    try:
        for store in stores:
            store.create_topic(TOPIC, 1, {"segment.ms": 1000})
        short, general = (store.get_log(TOPIC, 0) for store in stores)
        for step, timestamp_ms in enumerate([-1, 5, BASE_TS, BASE_TS + 10]):
            clock.advance(600)  # the second append finds the segment 1200 ms old: a roll
            record = Record(b"k%d" % step, b"v", (), timestamp_ms)
            assert short.append([record]) == general.append_prepared(general.prepare([record]))
            assert [s.base_offset for s in short.segments] == [s.base_offset for s in general.segments]
        assert [s.base_offset for s in short.segments] == [0, 1, 2]  # on age, then on record time
    finally:
        for store in stores:
            store.close()


def test_a_record_before_the_epoch_reports_the_general_max_timestamp(tmp_path):
    """``AppendInfo.max_timestamp_ms`` is at least -1 on the general path: the short path agrees."""
    store = LogManager([str(tmp_path)], clock=ManualClock(BASE_TS))
    try:
        store.create_topic(TOPIC, 1)
        log = store.get_log(TOPIC, 0)
        for timestamp_ms in (-2, -1, 0, 7):
            record = Record(None, None, (), timestamp_ms)
            assert log.append([record]).max_timestamp_ms == log.append_prepared(log.prepare([record])).max_timestamp_ms
            assert log.append([record]).max_timestamp_ms == max(timestamp_ms, -1)
    finally:
        store.close()
