"""A read-only follower beside a busy writer.

A writer process appends continuously to a topic with tiny segments and small ``retention.bytes``
(retention deletes segments all the time) and to a compacted topic (compaction swaps segments in),
for a few seconds. Meanwhile, in this process, read-only views follow both topics with ``fetch``
(which refreshes the views, re-reading the segment lists) and ``Log.read``, and a
``logstore read --follow`` subprocess tails the first topic.

Invariants: never a raw ``OSError`` (a segment lost to retention or a swap makes the reader re-read
the segment list and go on); the records of the deleting topic are contiguous and exactly what the
writer wrote; those of the compacted topic have increasing offsets and the writer's keys and
values; ``OffsetOutOfRangeError`` only for an offset retention really removed (below the log start
the view then reports).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time

from crash_helpers import collect_child, fork_child
from logstore import LogManager, OffsetOutOfRangeError, Record
from logstore.fs import FileSystem

WRITE_SECONDS = 4.0
# The writer goes on past WRITE_SECONDS until it has done the work the followers must survive
# (a loaded host does less of it in a given time), for at most WORK_BOUND_S.
MIN_RETENTION_DELETED = 11
MIN_COMPACTIONS = 6
WORK_BOUND_S = 60.0
MAX_ROUNDS = 4000
PER_APPEND = 5
KEYS = 5
DELETING = {"segment.bytes": 1024, "retention.bytes": 3072, "file.delete.delay.ms": 0, "index.interval.bytes": 256}
COMPACTED = {"segment.bytes": 1024, "cleanup.policy": "compact", "file.delete.delay.ms": 0,
             "index.interval.bytes": 256, "min.cleanable.dirty.ratio": 0.01}


def value_of(offset: int) -> bytes:
    return b"value-%d-" % offset + b"x" * (offset % 40)


def key_of(offset: int) -> bytes:
    return b"k%d" % (offset % KEYS)


def _busy_writer(data_dir: str) -> dict:
    counts = {"rounds": 0, "retention_deleted": 0, "compactions": 0}
    with LogManager([data_dir]) as store:
        started = time.monotonic()
        offset = 0

        def more() -> bool:
            elapsed = time.monotonic() - started
            if counts["rounds"] >= MAX_ROUNDS or elapsed >= WORK_BOUND_S:
                return False
            return elapsed < WRITE_SECONDS or (counts["retention_deleted"] < MIN_RETENTION_DELETED
                                               or counts["compactions"] < MIN_COMPACTIONS)

        while more():
            for topic in ("t", "c"):
                store.append(topic, [Record(key_of(n), value_of(n)) for n in range(offset, offset + PER_APPEND)])
            offset += PER_APPEND
            counts["rounds"] += 1
            if counts["rounds"] % 2 == 0:
                counts["retention_deleted"] += sum(len(result.deleted) for result in store.cleanup_logs("t"))
            if counts["rounds"] % 5 == 0:
                store.compact("c")
                counts["compactions"] += 1
    counts["records"] = offset
    return counts


class RacingFileSystem(FileSystem):
    """A read-only view's file system on which the writer acts at the worst moment: ``race(path)``
    runs once, just before the view opens the ``.log`` file ``target`` (a name) after it was armed
    (the view listed the directory and is opening what it listed)."""

    def __init__(self) -> None:
        super().__init__()
        self.race = None
        self.target = ".log"

    def open_file(self, path: str, *, create: bool = False, writable: bool = True) -> int:
        race = self.race
        if race is not None and path.endswith(self.target):
            self.race = None
            race(path)
        return super().open_file(path, create=create, writable=writable)


def test_view_refresh_racing_retention_rereads_the_segment_list(tmp_path):
    data_dir = str(tmp_path / "data")
    with LogManager([data_dir]) as writer:
        writer.create_topic("t", 1, DELETING)
        writer.append("t", [Record(key_of(n), value_of(n)) for n in range(100)])
        racing = RacingFileSystem()
        with LogManager([data_dir], read_only=True, fs=racing) as view:
            assert [r.offset for r in view.fetch({("t", 0): 0})[("t", 0)]][:3] == [0, 1, 2]
            writer.append("t", [Record(key_of(n), value_of(n)) for n in range(100, 160)])  # rolls
            racing.race = lambda path: writer.cleanup_logs("t")  # the oldest segments go meanwhile
            log_start = None
            try:
                view.fetch({("t", 0): 0})
            except OffsetOutOfRangeError as exc:
                log_start = exc.log_start_offset
            assert racing.race is None, "the race happened"
            writer_log = writer.get_log("t", 0)
            assert log_start == writer_log.log_start_offset > 0
            records = view.fetch({("t", 0): log_start}, max_bytes=1 << 20)[("t", 0)]
            assert [(r.offset, r.value) for r in records] == [(n, value_of(n)) for n in range(log_start, 160)]


def test_view_refresh_racing_a_compaction_swap_rereads_the_segment_list(tmp_path):
    data_dir = str(tmp_path / "data")
    with LogManager([data_dir]) as writer:
        writer.create_topic("c", 1, COMPACTED)
        writer.append("c", [Record(key_of(n), value_of(n)) for n in range(150)])
        writer.compact("c")  # small cleaned segments: the next round groups them into one
        racing = RacingFileSystem()
        with LogManager([data_dir], read_only=True, fs=racing) as view:
            assert view.fetch({("c", 0): 0})[("c", 0)]
            writer.append("c", [Record(key_of(n), value_of(n)) for n in range(150, 200)])  # rolls
            # The cleaner groups small segments into one: the second one's files go away.
            racing.target = f"{view.get_log('c', 0).segments[1].base_offset:020d}.log"
            racing.race = lambda path: writer.compact("c")  # segments swapped for cleaned ones meanwhile
            records = view.fetch({("c", 0): 0}, max_bytes=1 << 20)[("c", 0)]
            assert racing.race is None, "the race happened"
            problems: list[str] = []
            _check_records("c", records, 0, problems)
            assert not problems, problems
            # A view may still hold records compaction removed since, never miss a live one.
            live = [record.offset for record in writer.get_log("c", 0).iter_records()]
            assert set(live) <= {record.offset for record in records}, (live, [r.offset for r in records])


def _cli_command() -> list[str]:
    script = os.path.join(os.path.dirname(sys.executable), "logstore")
    return [script] if os.path.exists(script) else [sys.executable, "-m", "logstore.cli"]


def _last_offset(path) -> int | None:
    lines = path.read_bytes().splitlines()
    try:
        return json.loads(lines[-1])["offset"] if lines else None
    except ValueError:  # a line being written
        return None


def _check_records(topic: str, records, start: int, problems: list[str]) -> int:
    """Check records read from ``start``; returns the next position."""
    expect = start
    for record in records:
        if record.value != value_of(record.offset) or record.key != key_of(record.offset):
            problems.append(f"{topic}: wrong record at {record.offset}: {record!r:.80}")
        if record.offset < expect or (topic == "t" and record.offset != expect):
            problems.append(f"{topic}: offset {record.offset} where {expect} was next")
        expect = record.offset + 1
    return expect


def test_read_only_follower_beside_retention_and_compaction(tmp_path):
    data_dir = str(tmp_path / "data")
    with LogManager([data_dir]) as store:
        store.create_topic("t", 1, DELETING)
        store.create_topic("c", 1, COMPACTED)
    writer = fork_child(lambda: _busy_writer(data_dir))
    cli_out_file, cli_err_file = open(tmp_path / "cli.out", "w+b"), open(tmp_path / "cli.err", "w+b")
    # Files, not pipes: a full pipe would block the follower's writes while nobody reads.
    cli = subprocess.Popen([*_cli_command(), "--dir", data_dir, "read", "t", "--follow"],
                           stdout=cli_out_file, stderr=cli_err_file)
    problems: list[str] = []
    stats = {"fetches": 0, "records": 0, "out_of_range": 0, "refreshes": 0}
    positions = {("t", 0): 0, ("c", 0): 0}
    deadline = time.monotonic() + WORK_BOUND_S + 1
    view = None
    try:
        # Until the writer is done (its answer is readable), and once more after: what it wrote last.
        writing = True
        while writing and time.monotonic() < deadline and len(problems) < 20:
            poller = select.poll()  # (not select: a test process may hold more than 1024 descriptors)
            poller.register(writer.read_fd, select.POLLIN)
            writing = not poller.poll(0)
            try:
                if view is None:
                    view = LogManager([data_dir], read_only=True)
                if stats["fetches"] % 3 == 2:  # Log.read after a refresh, without fetch's waits
                    log = view.get_log("t", 0)
                    stats["refreshes"] += log.refresh()
                    found = {("t", 0): log.read(positions[("t", 0)], 2048)}
                else:
                    found = view.fetch(positions, max_bytes=2048, max_wait_ms=20 if stats["fetches"] % 10 == 0 else 0)
                stats["fetches"] += 1
                for (topic, partition), records in found.items():
                    positions[(topic, partition)] = _check_records(topic, records, positions[(topic, partition)],
                                                                   problems)
                    stats["records"] += len(records)
            except OffsetOutOfRangeError as exc:
                stats["out_of_range"] += 1
                log = view.get_log("t", 0)
                if exc.offset >= log.log_start_offset:
                    problems.append(f"out of range at {exc.offset}, yet the log starts at {log.log_start_offset}")
                positions[("t", 0)] = log.log_start_offset  # a follower that fell behind starts again there
            except OSError as exc:
                problems.append(f"raw {exc!r}")
    finally:
        if view is not None:
            view.close()
        outcome = collect_child(writer, WORK_BOUND_S + 60)
        last = outcome.result["records"] - 1 if outcome.status == "ok" else None
        for _ in range(100):  # up to 10 s for the follower to print the writer's last record
            if cli.poll() is not None or last is None or _last_offset(tmp_path / "cli.out") == last:
                break
            time.sleep(0.1)
        cli.send_signal(signal.SIGINT)
        try:
            cli.wait(timeout=30)
        except subprocess.TimeoutExpired:
            cli.kill()
            cli.wait()
        cli_out, cli_err = (path.read_bytes() for path in (tmp_path / "cli.out", tmp_path / "cli.err"))
        cli_out_file.close()
        cli_err_file.close()
    assert outcome.status == "ok", outcome.result
    written = outcome.result
    cli_offsets = [json.loads(line)["offset"] for line in cli_out.decode().splitlines()]
    print(f"\nwriter: {written}; follower: {stats}; logstore read --follow printed offsets "
          f"{cli_offsets[:1]}..{cli_offsets[-1:]}, exit {cli.returncode}")
    assert written["retention_deleted"] >= MIN_RETENTION_DELETED and written["compactions"] >= MIN_COMPACTIONS, \
        written
    assert stats["records"] > 100, stats
    assert not problems, problems
    cli_err = cli_err.decode(errors="replace")
    assert "Traceback" not in cli_err and "No such file" not in cli_err, cli_err
    assert cli.returncode == 0 or "out of range" in cli_err, (cli.returncode, cli_err)
    if cli.returncode == 0:  # it followed to the end
        assert cli_offsets and cli_offsets[-1] == written["records"] - 1, (cli_offsets[-1:], written)
    expect = None
    for line in cli_out.decode().splitlines():
        record = json.loads(line)
        assert record["value"] == value_of(record["offset"]).decode(), record
        assert expect is None or record["offset"] == expect, (record["offset"], expect)
        expect = record["offset"] + 1


def test_lazy_scan_goes_on_across_a_compaction_swap_and_stops_at_retention(tmp_path):
    """``iter_records`` is lazy: segments ahead of it may be swapped out by compaction (it goes on
    from the next offset on the new segments) or deleted below a new log start (it raises
    ``OffsetOutOfRangeError``), never a raw error of a closed file."""
    with LogManager([str(tmp_path)]) as store:
        store.create_topic("c", 1, COMPACTED)
        store.append("c", [Record(key_of(n), value_of(n)) for n in range(200)])
        log = store.get_log("c", 0)
        assert len(log.segments) > 4
        scan = log.iter_records(0)
        first = [next(scan) for _ in range(3)]
        store.compact("c")  # the segments after the first are swapped for cleaned ones
        rest = list(scan)
        problems: list[str] = []
        _check_records("c", first + rest, 0, problems)
        assert not problems, problems
        live = {record.offset for record in log.iter_records()}
        assert live <= {record.offset for record in first + rest}

        store.create_topic("t", 1, DELETING)
        store.append("t", [Record(key_of(n), value_of(n)) for n in range(100)])
        log = store.get_log("t", 0)
        scan = log.iter_records(0)
        assert next(scan).offset == 0
        log.delete_records(log.segments[3].base_offset)  # segments ahead of the scan go
        try:
            list(scan)
            raise AssertionError("the scan went on past deleted records")
        except OffsetOutOfRangeError as exc:
            assert exc.offset < log.log_start_offset


def test_a_view_opened_as_a_writer_starts_reads_its_write_in_progress_as_a_torn_tail(tmp_path):
    # The view finds the clean-shutdown marker; before it reads the segment, a writer opens (taking
    # the marker) and is half-way through writing a batch. That is a torn tail, not damage.
    data_dir = str(tmp_path / "data")
    with LogManager([data_dir]) as store:
        store.create_topic("t", 1, DELETING)
        store.append("t", [Record(key_of(n), value_of(n)) for n in range(10)])
    writers = []

    def writer_starts(path: str) -> None:
        writer = LogManager([data_dir])
        writers.append(writer)
        with open(path, "ab") as segment:  # the first bytes of the writer's next batch
            segment.write(b"\x00\x00\x00\x00\x00\x00\x00\x0a\x00\x00\x01")

    racing = RacingFileSystem()
    racing.race = writer_starts
    try:
        with LogManager([data_dir], read_only=True, fs=racing) as view:
            assert racing.race is None, "the race happened"
            assert not view.damaged_partitions, [d.description for d in view.damaged_partitions.values()]
            records = view.fetch({("t", 0): 0}, max_bytes=1 << 20)[("t", 0)]
            assert [(r.offset, r.value) for r in records] == [(n, value_of(n)) for n in range(10)]
    finally:
        for writer in writers:
            writer.close()
