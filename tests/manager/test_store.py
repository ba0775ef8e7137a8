"""Invariants checked: the store (``LogManager``) over one or more data dirs.

- Topics: create/list/partitions/config/overrides; a second create raises ``TopicExistsError``; unknown
  topics and partitions raise ``UnknownTopicOrPartitionError``.
- Placement: each new partition goes to the data dir holding the fewest partitions (the first listed on
  a tie), checked on disk, and survives a reopen.
- Config: overrides persist across reopen; ``alter_topic_config`` sets and removes (None) overrides,
  applies at once to open logs and persists.
- ``delete_topic`` removes every partition dir (no ``-delete`` leftovers) and the name can be reused
  with fresh, empty logs.
- Two-phase create/delete: a ``creating`` state left in ``topics.json`` is rolled back, a ``deleting`` one finished at the
  next open; a writer SIGKILLed at every mutating file operation of ``create_topic`` and of
  ``delete_topic`` leaves, after reopen, either no trace of the topic or the complete topic (never a
  partial one), and other topics are untouched.
- ``topics.json`` is identical in every data dir; a damaged, stale or missing copy is repaired from the
  newest intact one; all copies damaged is a ``CorruptDataError``.
- A partition whose data dir was left out is listed in ``missing_partitions``/``problems`` and reaching
  it raises ``StorageError``; a partition found in two dirs is refused; the same data dir given twice
  (also via a trailing slash, a relative path or a symlink) is a ``ValueError``.
- ``store.append`` sends a keyed record to Kafka's partition of it (``toPositive(murmur2(key)) %
  partitions``, the same in processes with different hash seeds), keyless records round-robin.
- Records round-trip with key, value, headers and timestamp; AppendInfo offsets; ``read`` at the log end
  returns [], below the log start or past the end raises ``OffsetOutOfRangeError``, and returns at
  least one record however small ``max_bytes`` is; ``truncate_to``, ``roll``.
- Rejected appends (a record over ``max.message.bytes``, a keyless record on a compacted topic) append
  nothing; a larger append is split into several batches.
- ``flush`` fsyncs before it advances the recovery point; an fsync error is fail-stop.
- ``delete_records`` advances the log start offset, deletes whole segments below it, and survives a
  SIGKILL of the writer right after it returns.
- A clean shutdown marker makes the next open read (almost) no segment data; an unclean open
  re-verifies every segment from the checkpointed recovery point on (counted with a ``FileSystem``
  subclass), cuts a torn tail, and a missing or damaged checkpoint means a full re-verification.
- After close, each data dir holds Kafka-format checkpoints for its own partitions and the marker.
- Misuse raises ``ValueError``/``TypeError`` naming the value; every error is a ``LogStoreError`` in
  exactly one of the families ``CorruptDataError``, ``RequestError``, ``StorageError``.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

import pytest

import logstore
from checkpoint_helpers import checkpoint_text
from logstore import (CorruptCheckpointError, CorruptDataError, FileSystem, InvalidConfigError, InvalidRecordError,
                      LogFailedError, LogManager, LogStoreError, OffsetOutOfRangeError, ReadOnlyError, Record,
                      RecordTooLargeError, RequestError, StorageError, StoreClosedError, TopicExistsError,
                      UnknownTopicOrPartitionError)
from logstore.fs import OS_FILE_SYSTEM
from logstore.log.checkpoint import CLEAN_SHUTDOWN_MARKER, LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT
from logstore.manager.topics import CREATING, DELETING, TOPICS_FILE, TopicMetadata, TopicsFile, partition_for_key
from logstore.testing import OperationHookFileSystem
from crash_helpers import read_all, file_snapshot as snapshot

T0 = 1_700_000_000_000


def value_of(i: int, size: int = 60) -> bytes:
    seed = hashlib.sha256(b"%d" % i).digest()
    return (b"%d|" % i + seed * (size // 32 + 1))[:size]


def rec(i: int, size: int = 60, key: bytes | None = b"") -> Record:
    return Record(b"k%d" % i if key == b"" else key, value_of(i, size), (("i", b"%d" % i),), T0 + i)


def expected(i: int, size: int = 60) -> Record:
    return Record(b"k%d" % i, value_of(i, size), (("i", b"%d" % i),), T0 + i, i)


def dirs_of(tmp_path, count: int) -> list[str]:
    return [str(tmp_path / f"d{n}") for n in range(count)]


def partition_dirs(data_dir: str) -> list[str]:
    return sorted(name for name in os.listdir(data_dir) if os.path.isdir(os.path.join(data_dir, name)))


def fork_and_die(fn) -> None:
    """Run ``fn()`` in a forked child that SIGKILLs itself when ``fn`` returns (a writer crash).
    Fails the test if ``fn`` raised or the child died otherwise."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_fd)
            try:
                fn()
            except BaseException:  # noqa: BLE001 - reported to the parent
                os.write(write_fd, traceback.format_exc().encode()[-4000:])
                os._exit(3)
            os.kill(os.getpid(), signal.SIGKILL)
        finally:
            os._exit(4)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        error = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    assert not error, error
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status


class CountingFS(FileSystem):
    """Counts the segment bytes read with ``pread``."""

    def __init__(self) -> None:
        self.preads = 0
        self.bytes_read = 0

    def pread(self, fd: int, size: int, position: int) -> bytes:
        data = super().pread(fd, size, position)
        self.preads += 1
        self.bytes_read += len(data)
        return data


class NoSyncFS(OperationHookFileSystem):
    """Skips fsync: a SIGKILL keeps the page cache, so fsync changes nothing a process crash leaves
    behind, and the enumerated crash tests run several times faster without it (the syncs still
    reach ``before``, so they stay crash points)."""

    def fsync(self, fd):
        self.before("fsync", None)

    def fsync_dir(self, path):
        self.before("fsync_dir", path)

    def msync(self, mapping):
        self.before("msync", None)


class KillAtOpFS(NoSyncFS):
    """SIGKILLs its process just before its N-th mutating file operation once ``armed`` (fsyncs count
    as crash points too)."""

    def __init__(self, kill_at: int) -> None:
        self.kill_at = kill_at
        self.count = 0
        self.armed = False

    def before(self, operation, path):
        if self.armed:
            self.count += 1
            if self.count >= self.kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
                time.sleep(60)


NO_SYNC = NoSyncFS()


# --- topics ------------------------------------------------------------------------------------


def test_topics_create_list_describe(tmp_path):
    dirs = dirs_of(tmp_path, 2)
    with LogManager(dirs) as store:
        assert store.topics() == []
        store.create_topic("orders", partitions=3, config={"cleanup.policy": "compact"})
        store.create_topic("audit")
        store.create_topic("events", 2, {"segment.bytes": 1 << 20, "retention.ms": -1})
        assert store.topics() == ["audit", "events", "orders"]
        assert [store.partitions(t) for t in store.topics()] == [1, 2, 3]
        assert store.topic_overrides("orders") == {"cleanup.policy": "compact"}
        assert store.topic_overrides("audit") == {}
        assert store.topic_config("orders").compact and not store.topic_config("orders").delete
        assert store.topic_config("events").retention_ms == -1
        assert store.topic_config("audit") == store.default_config
        assert len(store.logs()) == 6
        assert [(log.topic, log.partition) for log in store.logs()] == [
            ("audit", 0), ("events", 0), ("events", 1), ("orders", 0), ("orders", 1), ("orders", 2)]
        with pytest.raises(TopicExistsError, match="orders"):
            store.create_topic("orders", 5)
        assert store.partitions("orders") == 3
        for call in (lambda: store.partitions("nope"), lambda: store.get_log("nope", 0),
                     lambda: store.topic_overrides("nope"), lambda: store.delete_topic("nope"),
                     lambda: store.alter_topic_config("nope", {"retention.ms": 1}),
                     lambda: store.append("nope", [Record(b"k", b"v")])):
            with pytest.raises(UnknownTopicOrPartitionError, match="nope"):
                call()
        for partition in (3, -1, "0", None):
            with pytest.raises(UnknownTopicOrPartitionError):
                store.get_log("orders", partition)
    with LogManager(dirs) as store:
        assert store.topics() == ["audit", "events", "orders"]
        assert store.problems == [] and store.missing_partitions == []


@pytest.mark.parametrize("ndirs", [2, 3])
def test_placement_fewest_partitions_first(tmp_path, ndirs):
    dirs = dirs_of(tmp_path, ndirs)

    def on_disk() -> dict[str, int]:
        placed = {}
        for number, data_dir in enumerate(dirs):
            for name in partition_dirs(data_dir):
                assert name not in placed, f"{name} in two dirs"
                placed[name] = number
        return placed

    model = [0] * ndirs
    expected_placement: dict[str, int] = {}

    def place(topic: str, partitions: int) -> None:
        for partition in range(partitions):
            target = min(range(ndirs), key=lambda n: (model[n], n))
            model[target] += 1
            expected_placement[f"{topic}-{partition}"] = target

    with LogManager(dirs) as store:
        for topic, partitions in (("a", 4), ("b", 2), ("c", 3), ("d", 1)):
            store.create_topic(topic, partitions)
            place(topic, partitions)
            assert on_disk() == expected_placement
        for name, number in expected_placement.items():
            topic, partition = name.rsplit("-", 1)
            assert store.log_dir_of(topic, int(partition)) == dirs[number]
            assert store.get_log(topic, int(partition)).dir_path == os.path.join(dirs[number], name)
        store.delete_topic("a")
        for partition in range(4):
            model[expected_placement.pop(f"a-{partition}")] -= 1
        assert on_disk() == expected_placement
    with LogManager(dirs) as store:  # the counts are rebuilt from disk at open
        store.create_topic("e", 5)
        place("e", 5)
        assert on_disk() == expected_placement
        assert sorted(model) == sorted(len(partition_dirs(d)) for d in dirs)
        assert max(model) - min(model) <= 1


def test_config_persisted_and_altered(tmp_path):
    dirs = dirs_of(tmp_path, 2)
    with LogManager(dirs) as store:
        store.create_topic("t", 2, config={"max.message.bytes": 1000, "retention.ms": 5000})
        log = store.get_log("t", 1)
        with pytest.raises(RecordTooLargeError, match="max.message.bytes"):
            log.append([Record(b"k", b"x" * 2000)])
    with LogManager(dirs) as store:
        assert store.topic_overrides("t") == {"max.message.bytes": "1000", "retention.ms": "5000"}
        logs = [store.get_log("t", p) for p in range(2)]
        assert all(log.config.max_message_bytes == 1000 for log in logs)
        with pytest.raises(RecordTooLargeError):
            logs[0].append([Record(b"k", b"x" * 2000)])
        # Remove an override (None) and set another: both apply to the open logs at once.
        new = store.alter_topic_config("t", {"max.message.bytes": None, "segment.bytes": 4096})
        assert new.max_message_bytes == store.default_config.max_message_bytes and new.segment_bytes == 4096
        assert store.topic_overrides("t") == {"retention.ms": "5000", "segment.bytes": "4096"}
        assert store.topic_config("t") == new
        for log in logs:
            assert log.config == new
        info = logs[0].append([Record(b"k", b"x" * 2000)])
        assert info.first_offset == 0
        for i in range(10):
            logs[1].append([Record(b"k", b"y" * 1000)])
        assert len(logs[1].segments) >= 3  # segment.bytes 4096 took effect without a reopen
        # Removing an override that is not set is harmless.
        store.alter_topic_config("t", {"cleanup.policy": None})
        assert store.topic_overrides("t") == {"retention.ms": "5000", "segment.bytes": "4096"}
    with LogManager(dirs) as store:
        assert store.topic_overrides("t") == {"retention.ms": "5000", "segment.bytes": "4096"}
        assert store.get_log("t", 0).config.segment_bytes == 4096
        assert len(read_all(store.get_log("t", 1))) == 10


def test_delete_topic_removes_dirs_and_name_is_reusable(tmp_path):
    dirs = dirs_of(tmp_path, 2)
    with LogManager(dirs) as store:
        store.create_topic("t", 3, {"segment.bytes": 1024})
        store.create_topic("other", 1)
        for p in range(3):
            store.get_log("t", p).append([rec(i) for i in range(50)])
        store.get_log("other", 0).append([rec(0)])
        old_log = store.get_log("t", 0)
        store.delete_topic("t")
        assert store.topics() == ["other"]
        assert old_log.closed
        for data_dir in dirs:
            assert [n for n in partition_dirs(data_dir) if n != "other-0"] == []
        with pytest.raises(UnknownTopicOrPartitionError):
            store.get_log("t", 0)
        store.create_topic("t", 2)
        assert [store.get_log("t", p).log_end_offset for p in range(2)] == [0, 0]
        assert store.read("t", 0, 0) == []
        store.append("t", [Record(None, b"new")])
    with LogManager(dirs) as store:
        assert store.topics() == ["other", "t"] and store.partitions("t") == 2
        assert store.problems == [] and store.missing_partitions == []
        assert sum(store.get_log("t", p).log_end_offset for p in range(2)) == 1
        assert store.read("other", 0, 0) == [expected(0)]
        store.delete_topic("t")
        store.delete_topic("other")
        assert store.topics() == []
    assert all(partition_dirs(d) == [] for d in dirs)


def test_delete_topic_with_longest_name(tmp_path):
    dirs = dirs_of(tmp_path, 1)
    name = "x" * 249
    with LogManager(dirs) as store:
        store.create_topic(name, 2)
        store.append(name, [Record(b"k", b"v")])
        store.delete_topic(name)
        assert store.topics() == []
    with LogManager(dirs) as store:
        assert store.topics() == []
    assert partition_dirs(dirs[0]) == []


# --- two-phase create and delete ---------------------------------------------------------------


def set_state(dirs, name: str, state: str, partitions: int = 3, config: dict | None = None) -> None:
    """Rewrite every copy of topics.json as an interrupted create/delete would have left it."""
    topics = TopicsFile(OS_FILE_SYSTEM, dirs)
    topics.load()
    meta = topics.topics.get(name)
    if meta is None:
        meta = topics.topics[name] = TopicMetadata(partitions, dict(config or {}))
    meta.state = state
    topics.save()


def first_copy(data: bytes) -> dict:
    """The first of the two copies of the object a topics.json holds."""
    return json.loads(data[: len(data) // 2])


def copies_of_topics_json(dirs) -> list[bytes]:
    out = []
    for data_dir in dirs:
        with open(os.path.join(data_dir, TOPICS_FILE), "rb") as handle:
            out.append(handle.read())
    return out


def test_interrupted_create_is_rolled_back_at_open(tmp_path):
    """A create never acknowledged (the process died between its 'creating' record and its 'ready'
    one) is rolled back by the next writable open, so a retry of it succeeds."""
    dirs = dirs_of(tmp_path, 2)
    with LogManager(dirs) as store:
        store.create_topic("keep", 1)
        store.append("keep", [rec(0)])
    # The crash came after the 'creating' record and after the first partition dir was made.
    set_state(dirs, "t", CREATING, partitions=3, config={"segment.bytes": "2048"})
    os.mkdir(os.path.join(dirs[1], "t-0"))
    with LogManager(dirs, read_only=True) as reader:  # a reader neither sees nor rolls it back
        assert reader.topics() == ["keep"]
    assert os.path.isdir(os.path.join(dirs[1], "t-0"))
    with LogManager(dirs) as store:
        assert store.topics() == ["keep"]
        assert any("'t' was being created" in problem and "rolled back" in problem for problem in store.problems)
        assert not any(name.startswith("t-") for d in dirs for name in partition_dirs(d))
        store.create_topic("t", 3, {"segment.bytes": "2048"})  # the retry succeeds
        store.append("t", [Record(b"a", b"1")], partition=2)
    copies = copies_of_topics_json(dirs)
    assert copies[0] == copies[1]
    assert first_copy(copies[0])["topics"]["t"]["state"] == "ready"
    with LogManager(dirs) as store:
        assert store.problems == []
        assert store.read("t", 2, 0)[0].value == b"1" and store.read("keep", 0, 0) == [expected(0)]


def test_interrupted_delete_is_finished_at_open(tmp_path):
    dirs = dirs_of(tmp_path, 2)
    with LogManager(dirs) as store:
        store.create_topic("keep", 1)
        store.create_topic("t", 3)
        store.append("keep", [rec(0)])
        for p in range(3):
            store.append("t", [rec(1), rec(2)], partition=p)
    set_state(dirs, "t", DELETING)
    with LogManager(dirs, read_only=True) as reader:
        assert reader.topics() == ["keep"]
    assert sum(name.startswith("t-") for d in dirs for name in partition_dirs(d)) == 3
    with LogManager(dirs) as store:
        assert store.topics() == ["keep"]
        assert [name for d in dirs for name in partition_dirs(d)] == ["keep-0"]
        store.create_topic("t", 1)
        assert store.read("t", 0, 0) == []
        assert store.read("keep", 0, 0) == [expected(0)]
    # A half-removed '-delete' dir (crash inside the removal) is finished at open too.
    doomed = os.path.join(dirs[1], "gone-0.0123456789abcdef0123456789abcdef-delete")
    os.mkdir(doomed)
    with open(os.path.join(doomed, "00000000000000000000.log"), "wb") as handle:
        handle.write(b"x" * 100)
    with LogManager(dirs) as store:
        assert store.topics() == ["keep", "t"]
    assert not os.path.exists(doomed)


def _check_topic_all_or_nothing(dirs, topic: str, partitions: int, keep_records, with_data: bool) -> bool:
    """Reopen (twice: recovery is idempotent) and check ``topic`` is wholly there or wholly gone."""
    outcomes = []
    for _ in range(2):
        with LogManager(dirs, fs=NO_SYNC) as store:
            on_disk = sorted(name for d in dirs for name in partition_dirs(d) if name != "keep-0")
            assert not any(name.endswith("-delete") for name in on_disk), on_disk
            assert store.read("keep", 0, 0, max_records=1000) == keep_records
            assert store.missing_partitions == [], store.problems
            assert not [p for p in store.problems if "not a partition" in p], store.problems
            present = topic in store.topics()
            if present:
                assert store.partitions(topic) == partitions
                assert on_disk == sorted(f"{topic}-{p}" for p in range(partitions))
                for p in range(partitions):
                    log = store.get_log(topic, p)
                    if with_data:
                        assert read_all(log) == [expected(i) for i in range(20)]
                    else:
                        assert log.log_end_offset == 0
            else:
                assert on_disk == [], on_disk
            outcomes.append(present)
    assert outcomes[0] == outcomes[1]
    return outcomes[0]


@pytest.fixture
def fast_tmp(tmp_path):
    """A scratch dir on tmpfs when there is one (the enumerated crash tests create and remove
    thousands of small files; on a journaling disk that dominates their run time), else tmp_path."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        path = tempfile.mkdtemp(prefix="logstore-test-", dir="/dev/shm")
        try:
            yield pathlib.Path(path)
        finally:
            shutil.rmtree(path, ignore_errors=True)
    else:
        yield tmp_path


@pytest.mark.parametrize("operation", ["create", "delete"])
def test_crash_at_every_file_operation_of_create_and_delete(fast_tmp, operation):
    tmp_path = fast_tmp
    template = dirs_of(tmp_path / "template", 2)
    keep_records = [expected(i) for i in range(5)]
    with LogManager(template) as store:
        store.create_topic("keep", 1)
        store.append("keep", [rec(i) for i in range(5)])
        if operation == "delete":
            store.create_topic("t", 3, {"segment.bytes": 1024})
            for p in range(3):
                store.append("t", [rec(i) for i in range(20)], partition=p)
    work = dirs_of(tmp_path / "work", 2)
    outcomes = {True: 0, False: 0}
    completed = False
    kill_at = 0
    while not completed:
        kill_at += 1
        assert kill_at < 400, "the operation never completed"
        shutil.rmtree(tmp_path / "work", ignore_errors=True)
        for source, target in zip(template, work):
            shutil.copytree(source, target)
        pid = os.fork()
        if pid == 0:
            code = 5
            try:
                fs = KillAtOpFS(kill_at)
                store = LogManager(work, fs=fs)
                fs.armed = True
                if operation == "create":
                    store.create_topic("t", 3, {"segment.bytes": 1024})
                else:
                    store.delete_topic("t")
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        if os.WIFEXITED(status):
            assert os.WEXITSTATUS(status) == 0, f"child failed at kill point {kill_at}"
            completed = True
        else:
            assert os.WTERMSIG(status) == signal.SIGKILL
        present = _check_topic_all_or_nothing(work, "t", 3, keep_records, with_data=operation == "delete")
        outcomes[present] += 1
        if completed:
            assert present == (operation == "create")
        if not present:  # the name is free again
            with LogManager(work, fs=NO_SYNC) as store:
                store.create_topic("t", 1)
    print(f"\n{operation}_topic crash points: {kill_at - 1}, topic present after: {outcomes[True]}, "
          f"absent after: {outcomes[False]}, partial topics: 0")
    assert kill_at > 10 and outcomes[True] and outcomes[False]


# --- topics.json replication ---------------------------------------------------------------------


def test_topics_json_replicated_and_repaired(tmp_path):
    dirs = dirs_of(tmp_path, 3)
    with LogManager(dirs) as store:
        store.create_topic("a", 2)
    old_copy = copies_of_topics_json(dirs)[2]
    with LogManager(dirs) as store:
        store.create_topic("b", 3, {"retention.ms": 1000})
    copies = copies_of_topics_json(dirs)
    assert copies[0] == copies[1] == copies[2]
    newest = copies[0]
    assert first_copy(newest)["generation"] > first_copy(old_copy)["generation"]

    def reopen_and_check(expect_problem: bool) -> None:
        with LogManager(dirs) as store:
            assert store.topics() == ["a", "b"]
            assert store.topic_overrides("b") == {"retention.ms": "1000"}
            assert store.missing_partitions == []
            assert any("damaged" in p for p in store.problems) == expect_problem, store.problems
        assert copies_of_topics_json(dirs) == [newest] * 3

    # 1. A damaged copy (one byte flipped in each of the two copies the file holds: the CRC catches it).
    damaged = bytearray(newest)
    damaged[damaged.index(b'"partitions": 3') + len('"partitions": ')] = ord("7")
    damaged[damaged.rindex(b'"partitions": 3') + len('"partitions": ')] = ord("7")
    with open(os.path.join(dirs[1], TOPICS_FILE), "wb") as handle:
        handle.write(damaged)
    with LogManager(dirs, read_only=True) as reader:  # a reader uses the good copies, repairs nothing
        assert reader.partitions("b") == 3
    assert copies_of_topics_json(dirs)[1] == bytes(damaged)
    reopen_and_check(expect_problem=True)
    # 2. A stale copy (an older generation, e.g. from a crash between two copies) in the first dir.
    with open(os.path.join(dirs[0], TOPICS_FILE), "wb") as handle:
        handle.write(old_copy)
    reopen_and_check(expect_problem=False)
    # 3. A missing copy, and a truncated one.
    os.remove(os.path.join(dirs[2], TOPICS_FILE))
    with open(os.path.join(dirs[0], TOPICS_FILE), "wb") as handle:
        handle.write(newest[: len(newest) // 4])  # cut inside the first of its two copies
    reopen_and_check(expect_problem=True)
    # 4. Every copy damaged: refused as corrupt data, and the locks are released.
    for data_dir in dirs:
        with open(os.path.join(data_dir, TOPICS_FILE), "wb") as handle:
            handle.write(b"{ not json")
    with pytest.raises(CorruptCheckpointError, match="topic metadata"):
        LogManager(dirs)
    for data_dir in dirs:
        with open(os.path.join(data_dir, TOPICS_FILE), "wb") as handle:
            handle.write(newest)
    reopen_and_check(expect_problem=False)


# --- missing and misplaced partitions, duplicate dirs -------------------------------------------


def test_partition_in_a_left_out_dir_is_reported(tmp_path):
    dirs = dirs_of(tmp_path, 2)
    with LogManager(dirs) as store:
        store.create_topic("t", 4)
        for p in range(4):
            store.append("t", [rec(p)], partition=p)
    assert partition_dirs(dirs[1]) == ["t-1", "t-3"]
    with LogManager(dirs[:1]) as store:
        assert store.topics() == ["t"] and store.partitions("t") == 4
        assert sorted(store.missing_partitions) == [("t", 1), ("t", 3)]
        for name in ("t-1", "t-3"):
            assert any(name in problem for problem in store.problems), store.problems
        for p in (1, 3):
            with pytest.raises(StorageError, match=f"t-{p}"):
                store.get_log("t", p)
            with pytest.raises(StorageError):
                store.read("t", p, 0)
            with pytest.raises(StorageError):
                store.append("t", [Record(b"k", b"v")], partition=p)
        assert store.read("t", 2, 0) == [Record(b"k2", value_of(2), (("i", b"2"),), T0 + 2, 0)]
        key_for_1 = next(b"key%d" % i for i in range(1000) if partition_for_key(b"key%d" % i, 4) == 1)
        with pytest.raises(StorageError):
            store.append("t", [Record(key_for_1, b"v")])
    with LogManager(dirs, read_only=True) as reader:
        assert reader.missing_partitions == []
    with LogManager(dirs) as store:
        assert store.missing_partitions == [] and store.problems == []
        assert [store.get_log("t", p).log_end_offset for p in range(4)] == [1, 1, 1, 1]


def test_partition_in_two_dirs_and_stray_dirs(tmp_path):
    dirs = dirs_of(tmp_path, 2)
    with LogManager(dirs) as store:
        store.create_topic("t", 1)
    os.mkdir(os.path.join(dirs[1], "unknown-0"))
    os.mkdir(os.path.join(dirs[1], "t-7"))  # beyond the partition count
    with LogManager(dirs) as store:
        assert store.topics() == ["t"]
        for name in ("unknown-0", "t-7"):
            assert any(name in problem for problem in store.problems), store.problems
    assert os.path.isdir(os.path.join(dirs[1], "unknown-0"))  # left alone
    shutil.copytree(os.path.join(dirs[0], "t-0"), os.path.join(dirs[1], "t-0"))
    with pytest.raises(StorageError, match="t-0"):
        LogManager(dirs)
    shutil.rmtree(os.path.join(dirs[1], "t-0"))
    with LogManager(dirs) as store:  # the failed open released its locks
        assert store.topics() == ["t"]


def test_duplicate_data_dirs_rejected(tmp_path, monkeypatch):
    data = str(tmp_path / "data")
    os.mkdir(data)
    os.symlink(data, str(tmp_path / "link"))
    monkeypatch.chdir(tmp_path)
    for dirs in ([data, data], [data, data + "/"], ["data", data], [str(tmp_path / "link"), data],
                 [str(tmp_path / "other"), data, os.path.join(data, ".")]):
        with pytest.raises(ValueError, match="twice"):
            LogManager(dirs)
    assert os.listdir(data) == []  # nothing was created or locked
    with pytest.raises(ValueError):
        LogManager([])
    with LogManager(data) as store:  # a single str is one dir
        assert store.log_dirs == [data]


# --- store.append partitioning -------------------------------------------------------------------


def _keys_by_partition(store, topic: str) -> dict[int, list[bytes]]:
    return {p: [r.key for r in read_all(store.get_log(topic, p))] for p in range(store.partitions(topic))}


def test_append_by_key_and_round_robin(tmp_path):
    dirs = dirs_of(tmp_path, 2)
    keys = [b"user-%d" % i for i in range(200)]
    with LogManager(dirs) as store:
        store.create_topic("t", 4)
        result = store.append("t", [Record(key, b"v1") for key in keys])
        # A new topic places keys as Kafka's producers do (murmur2; tests/client/test_partitioner.py
        # checks partition_for_key against Kafka's vectors and kafka-python).
        assert store.topic_placement("t") == "murmur2"
        assert sorted(result) == sorted({partition_for_key(key, 4) for key in keys})
        assert sum(info.record_count for info in result.values()) == 200
        store.append("t", [Record(key, b"v2") for key in reversed(keys)])
        placed = _keys_by_partition(store, "t")
        for p, found in placed.items():
            assert all(partition_for_key(key, 4) == p for key in found)
        assert sorted(k for found in placed.values() for k in found) == sorted(keys * 2)
        assert min(len(found) for found in placed.values()) > 20
        # Keyless: round-robin within one call and across calls.
        store.create_topic("rr", 3)
        store.append("rr", [Record(None, b"%d" % i) for i in range(6)])
        assert [store.get_log("rr", p).log_end_offset for p in range(3)] == [2, 2, 2]
        for i in range(6):
            store.append("rr", [Record(None, b"single")])
        assert [store.get_log("rr", p).log_end_offset for p in range(3)] == [4, 4, 4]
        # An explicit partition wins over the key.
        key = keys[0]
        other = (partition_for_key(key, 4) + 1) % 4
        assert list(store.append("t", [Record(key, b"here")], partition=other)) == [other]
        assert store.read("t", other, store.get_log("t", other).log_end_offset - 1)[0].value == b"here"
        with pytest.raises(TypeError, match="Record"):
            store.append("t", Record(b"k", b"v"))
        with pytest.raises(TypeError):
            store.append("t", b"raw bytes")


def test_key_partitioning_is_stable_across_processes(tmp_path):
    code = (
        "import sys\n"
        "from logstore import LogManager, Record\n"
        "with LogManager([sys.argv[1]]) as store:\n"
        "    store.create_topic('t', 5)\n"
        "    store.append('t', [Record(b'key-%d' % i, b'v') for i in range(100)])\n")
    layouts = []
    for seed in ("1", "424242", "random"):
        data = str(tmp_path / f"seed-{seed}")
        env = {**os.environ, "PYTHONHASHSEED": seed}
        subprocess.run([sys.executable, "-c", code, data], env=env, check=True, timeout=60)
        with LogManager([data], read_only=True) as store:
            layouts.append(_keys_by_partition(store, "t"))
    expected_layout = {p: sorted(b"key-%d" % i for i in range(100) if partition_for_key(b"key-%d" % i, 5) == p)
                       for p in range(5)}
    for layout in layouts:
        assert {p: sorted(keys) for p, keys in layout.items()} == expected_layout


# --- appends, reads, offsets ---------------------------------------------------------------------


def test_record_round_trip_and_log_api(tmp_path):
    with LogManager(dirs_of(tmp_path, 1)) as store:
        store.create_topic("orders", partitions=3, config={"cleanup.policy": "compact"})
        log = store.get_log("orders", 0)
        info = log.append([Record(key=b"k", value=b"v", headers=[("h", b"x")], timestamp_ms=1700000000000)])
        assert (info.first_offset, info.last_offset, info.record_count, info.batches) == (0, 0, 1, 1)
        info = log.append([Record(b"k2", None, [("a", None), ("b", b"")], 5), Record(b"k3", b"", (), 6)])
        assert (info.first_offset, info.last_offset, info.max_timestamp_ms) == (1, 2, 6)
        records = log.read(0, max_bytes=1 << 20)
        assert records == [Record(b"k", b"v", (("h", b"x"),), 1700000000000, 0),
                           Record(b"k2", None, (("a", None), ("b", b"")), 5, 1),
                           Record(b"k3", b"", (), 6, 2)]
        assert [(r.offset, r.key, r.value, r.timestamp_ms, r.headers) for r in records][0] == (
            0, b"k", b"v", 1700000000000, (("h", b"x"),))
        assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (0, 3, 0)
        assert log.flush() == 3 and log.recovery_point == 3
        before = time.time() * 1000
        info = log.append([Record(b"now", b"t")])
        assert before - 5 <= log.read(3)[0].timestamp_ms <= time.time() * 1000 + 5
        segments = len(log.segments)
        assert log.roll().base_offset == 4 and len(log.segments) == segments + 1
        assert log.segments[-1].size_bytes == 0
        assert log.roll() is log.segments[-1] and len(log.segments) == segments + 1  # empty active: no new one
        log.append([Record(b"k%d" % i, b"v") for i in range(4, 10)])
        assert log.truncate_to(5) is True and log.log_end_offset == 5
        assert log.truncate_to(7) is False
        assert [r.offset for r in log.read(0)] == [0, 1, 2, 3, 4]
        assert log.append([Record(b"again", b"x")]).first_offset == 5
        assert log.read(5)[0].key == b"again"
        assert log.append([]).first_offset is None
    with LogManager(dirs_of(tmp_path, 1)) as store:
        log = store.get_log("orders", 0)
        assert [r.key for r in log.read(0)] == [b"k", b"k2", b"k3", b"now", b"k4", b"again"]
        assert log.recovery_point == log.log_end_offset == 6


def test_read_edges(tmp_path):
    with LogManager(dirs_of(tmp_path, 1)) as store:
        store.create_topic("t", 1, {"segment.bytes": 2048})
        log = store.get_log("t", 0)
        assert log.read(0) == []
        for i in range(100):
            log.append([rec(i)])
        assert len(log.segments) > 3
        leo = log.log_end_offset
        assert log.read(leo) == [] and store.read("t", 0, leo) == []
        for bad in (leo + 1, leo + 1000, -1):
            with pytest.raises(OffsetOutOfRangeError) as caught:
                log.read(bad)
            assert (caught.value.offset, caught.value.log_start_offset, caught.value.log_end_offset) == (bad, 0, leo)
            assert str(bad) in str(caught.value)
        # max_bytes smaller than one record still returns that record (minOneMessage).
        for budget in (0, 1, 10):
            for offset in (0, 37, leo - 1):
                assert log.read(offset, max_bytes=budget) == [expected(offset)]
        # Small budgets walk the whole log contiguously across segment boundaries.
        for budget in (150, 400, 1000):
            offset, seen = 0, []
            while offset < leo:
                batch = log.read(offset, max_bytes=budget)
                assert batch and batch[0].offset == offset
                seen += batch
                offset = batch[-1].offset + 1
            assert seen == [expected(i) for i in range(leo)]
        assert log.read(10, max_records=3) == [expected(i) for i in (10, 11, 12)]
        assert list(log.iter_records()) == [expected(i) for i in range(leo)]
        assert list(log.iter_records(95)) == [expected(i) for i in range(95, 100)]
        # A single record larger than max_bytes, then small ones.
        store.alter_topic_config("t", {"segment.bytes": 1 << 20})
        log.append([Record(b"big", b"x" * 50_000), rec(101)])
        assert [r.key for r in log.read(100, max_bytes=10)] == [b"big"]
        assert [r.key for r in log.read(100, max_bytes=60_000)] == [b"big", b"k101"]
        # After delete_records: below the log start is out of range.
        assert log.delete_records(40) == 40
        with pytest.raises(OffsetOutOfRangeError) as caught:
            log.read(39)
        assert caught.value.log_start_offset == 40
        assert log.read(40, max_bytes=1) == [expected(40)]
        with pytest.raises(OffsetOutOfRangeError):
            log.iter_records(0)
        assert next(log.iter_records()).offset == 40


def test_rejected_appends_append_nothing_and_large_appends_split(tmp_path):
    with LogManager(dirs_of(tmp_path, 1)) as store:
        store.create_topic("t", 1, {"max.message.bytes": 2000})
        store.create_topic("c", 1, {"cleanup.policy": "compact,delete"})
        log = store.get_log("t", 0)
        log.append([rec(0)])
        with pytest.raises(RecordTooLargeError, match="max.message.bytes"):
            log.append([rec(1), Record(b"big", b"x" * 3000), rec(2)])
        assert log.log_end_offset == 1 and log.read(0) == [expected(0)]
        with pytest.raises(RecordTooLargeError):
            log.validate([Record(b"big", b"x" * 3000)])
        # 100 records of ~200 bytes (~20 KB) against a 2000-byte limit: split, contiguous, all there.
        info = log.append([rec(i, 200) for i in range(1, 101)])
        assert (info.first_offset, info.last_offset, info.record_count) == (1, 100, 100)
        assert info.batches >= 10
        assert read_all(log) == [expected(0)] + [expected(i, 200) for i in range(1, 101)]
        sizes = [header.size_bytes for segment in log.segments for _, header, _, _ in segment.scan_headers()]
        assert len(sizes) == 1 + info.batches and max(sizes) <= 2000
        compacted = store.get_log("c", 0)
        with pytest.raises(InvalidRecordError, match="key"):
            compacted.append([Record(b"k", b"v"), Record(None, b"no key")])
        with pytest.raises(InvalidRecordError):
            store.append("c", [Record(None, b"no key")])
        assert compacted.log_end_offset == 0
        compacted.append([Record(b"k", None)])  # a tombstone with a key is fine
        assert compacted.read(0) == [Record(b"k", None, (), compacted.read(0)[0].timestamp_ms, 0)]


def test_store_append_rejection_across_partitions_appends_nothing(tmp_path):
    with LogManager(dirs_of(tmp_path, 1)) as store:
        store.create_topic("t", 3, {"max.message.bytes": 1000})
        keys = {}
        for i in range(100):
            keys.setdefault(partition_for_key(b"k%d" % i, 3), b"k%d" % i)
        with pytest.raises(RecordTooLargeError):
            store.append("t", [Record(keys[0], b"small"), Record(keys[2], b"x" * 5000)])
        assert [store.get_log("t", p).log_end_offset for p in range(3)] == [0, 0, 0]


# --- durability ----------------------------------------------------------------------------------


class WatchingFS(FileSystem):
    """Notes the watched log's recovery point at every fsync; fails fsyncs when ``fail``."""

    def __init__(self) -> None:
        self.log = None
        self.seen: list[int] = []
        self.fail = False

    def fsync(self, fd: int) -> None:
        if self.log is not None:
            self.seen.append(self.log.recovery_point)
        if self.fail:
            raise OSError(errno.EIO, "injected EIO")
        super().fsync(fd)

    def fsync_dir(self, path: str) -> None:
        if self.log is not None:
            self.seen.append(self.log.recovery_point)
        super().fsync_dir(path)


def test_flush_fsyncs_before_advancing_the_recovery_point(tmp_path):
    fs = WatchingFS()
    dirs = dirs_of(tmp_path, 1)
    with LogManager(dirs, fs=fs) as store:
        store.create_topic("t", 1, {"segment.bytes": 1024})
        log = store.get_log("t", 0)
        log.append([rec(i) for i in range(30)])
        assert len(log.segments) > 1 and log.recovery_point == 0
        fs.log = log
        assert log.flush() == 30
        assert fs.seen and set(fs.seen) == {0}, fs.seen  # every fsync ran before the advance
        assert log.recovery_point == 30
        fs.seen.clear()
        assert log.flush() == 30 and fs.seen == []  # nothing new: no fsync
        log.append([rec(30)])
        fs.fail = True
        with pytest.raises(LogFailedError):
            log.flush()
        assert log.recovery_point == 30
        with pytest.raises(LogFailedError):
            log.append([rec(31)])
        with pytest.raises(LogFailedError):
            log.flush()
        assert log.read(30) == [expected(30)]  # reads still work
        fs.fail = False
        fs.log = None


def test_fail_stopped_log_leaves_its_dir_unclean(tmp_path):
    fs = WatchingFS()
    dirs = dirs_of(tmp_path, 1)
    with LogManager(dirs, fs=fs) as store:
        store.create_topic("t", 1)
        log = store.get_log("t", 0)
        log.append([rec(0)])
        fs.fail = True
        with pytest.raises(LogFailedError):
            log.flush()
        fs.fail = False
    assert not os.path.exists(os.path.join(dirs[0], CLEAN_SHUTDOWN_MARKER))


def test_delete_records_survives_a_writer_crash(tmp_path):
    dirs = dirs_of(tmp_path, 2)
    with LogManager(dirs) as store:
        store.create_topic("t", 2, {"segment.bytes": 1024})

    def writer() -> None:
        store = LogManager(dirs)
        for p in range(2):
            log = store.get_log("t", p)
            log.append([rec(i) for i in range(300)])  # never flushed: the page cache keeps it
        store.get_log("t", 0).delete_records(150)
        assert store.get_log("t", 1).delete_records(299) == 299

    fork_and_die(writer)
    with open(os.path.join(dirs[0], LOG_START_OFFSET_CHECKPOINT)) as handle:
        assert "t 0 150" in handle.read().splitlines()
    with open(os.path.join(dirs[1], LOG_START_OFFSET_CHECKPOINT)) as handle:
        assert "t 1 299" in handle.read().splitlines()
    for _ in range(2):
        with LogManager(dirs) as store:
            for p, start in ((0, 150), (1, 299)):
                log = store.get_log("t", p)
                assert (log.log_start_offset, log.log_end_offset) == (start, 300)
                with pytest.raises(OffsetOutOfRangeError):
                    log.read(start - 1)
                assert read_all(log) == [expected(i) for i in range(start, 300)]
                bases = [segment.base_offset for segment in log.segments]
                assert bases[0] <= start and (len(bases) == 1 or bases[1] > start)
                names = sorted(os.listdir(log.dir_path))
                assert [n for n in names if n.endswith(".log")] == [f"{b:020d}.log" for b in bases]
                assert not [n for n in names if n.endswith(".deleted")]


def _fill(dirs, records: int = 1500, size: int = 900) -> int:
    with LogManager(dirs) as store:
        store.create_topic("t", 1, {"segment.bytes": 64 * 1024})
        log = store.get_log("t", 0)
        for start in range(0, records, 50):
            log.append([rec(i, size) for i in range(start, start + 50)])
        return log.log_end_offset


def _segment_sizes(log_dir: str) -> dict[int, int]:
    return {int(name[:20]): os.path.getsize(os.path.join(log_dir, name))
            for name in os.listdir(log_dir) if name.endswith(".log")}


def test_clean_open_reads_nothing_unclean_open_reverifies_from_recovery_point(tmp_path):
    dirs = dirs_of(tmp_path, 1)
    leo = _fill(dirs)
    log_dir = os.path.join(dirs[0], "t-0")
    sizes = _segment_sizes(log_dir)
    total = sum(sizes.values())
    assert len(sizes) >= 15 and total > 1_000_000
    # Clean: the marker is there, the open reads at most a few headers per segment: its index check
    # and its end check (a whole batch ends the file, the next segment starts there).
    assert os.path.exists(os.path.join(dirs[0], CLEAN_SHUTDOWN_MARKER))
    fs = CountingFS()
    with LogManager(dirs, fs=fs) as store:
        assert store.get_log("t", 0).log_end_offset == leo
        clean_bytes, clean_preads = fs.bytes_read, fs.preads
    assert clean_bytes < 64 * 1024 and clean_bytes < total / 20, (clean_bytes, total)
    # Per segment: the end check of the open, and the last entry of each index (read, not mapped: an
    # inactive index holds no descriptor).
    assert clean_preads <= 3 * len(sizes) + 4, clean_preads

    # Unclean: a writer checkpoints its recovery point, appends more, is SIGKILLed.
    def writer() -> None:
        store = LogManager(dirs)
        log = store.get_log("t", 0)
        log.append([rec(i, 900) for i in range(leo, leo + 200)])
        log.flush()
        store.checkpoint()
        log.append([rec(i, 900) for i in range(leo + 200, leo + 300)])

    fork_and_die(writer)
    assert not os.path.exists(os.path.join(dirs[0], CLEAN_SHUTDOWN_MARKER))
    with open(os.path.join(dirs[0], RECOVERY_POINT_CHECKPOINT)) as handle:
        recovery_point = int(handle.read().splitlines()[2].split()[2])
    assert recovery_point == leo + 200
    sizes = _segment_sizes(log_dir)
    first = max(base for base in sizes if base <= recovery_point)
    must_read = sum(size for base, size in sizes.items() if base >= first)
    # A torn tail on the active segment: recovery must cut it.
    last = max(sizes)
    with open(os.path.join(log_dir, f"{last:020d}.log"), "ab") as handle:
        handle.write(b"\x00\x00\x01\x00torn-batch" + os.urandom(300))
    fs = CountingFS()
    with LogManager(dirs, fs=fs) as store:
        log = store.get_log("t", 0)
        assert log.log_end_offset == leo + 300
        unclean_bytes = fs.bytes_read
        assert read_all(log) == [expected(i, 900) for i in range(leo + 300)]
    assert os.path.getsize(os.path.join(log_dir, f"{last:020d}.log")) == sizes[last]
    assert must_read <= unclean_bytes < must_read + 64 * 1024, (must_read, unclean_bytes, total)
    assert unclean_bytes < total / 2

    # No usable checkpoint (missing, then damaged) after a crash: everything is re-verified.
    total = sum(_segment_sizes(log_dir).values())
    for damage in ("remove", "garbage"):
        fork_and_die(lambda: LogManager(dirs))
        path = os.path.join(dirs[0], RECOVERY_POINT_CHECKPOINT)
        if damage == "remove":
            os.remove(path)
        else:
            with open(path, "wb") as handle:
                handle.write(b"0\n1\nt 0 notanumber\n")
        fs = CountingFS()
        with LogManager(dirs, fs=fs) as store:
            assert store.get_log("t", 0).log_end_offset == leo + 300
            assert fs.bytes_read >= total, (fs.bytes_read, total)
            assert any("treated as absent" in p for p in store.problems) == (damage == "garbage")


def test_checkpoint_files_after_close(tmp_path):
    dirs = dirs_of(tmp_path, 2)
    with LogManager(dirs) as store:
        store.create_topic("t", 3, {"segment.bytes": 1024})
        for p in range(3):
            store.append("t", [rec(i) for i in range(10 * (p + 1))], partition=p)
        store.get_log("t", 2).delete_records(25)
    for data_dir in dirs:
        assert os.path.exists(os.path.join(data_dir, CLEAN_SHUTDOWN_MARKER))
    with open(os.path.join(dirs[0], RECOVERY_POINT_CHECKPOINT)) as handle:
        assert handle.read() == checkpoint_text("0\n2\nt 0 10\nt 2 30\n")
    with open(os.path.join(dirs[1], RECOVERY_POINT_CHECKPOINT)) as handle:
        assert handle.read() == checkpoint_text("0\n1\nt 1 20\n")
    with open(os.path.join(dirs[0], LOG_START_OFFSET_CHECKPOINT)) as handle:
        assert handle.read() == checkpoint_text("0\n1\nt 2 25\n")
    with open(os.path.join(dirs[1], LOG_START_OFFSET_CHECKPOINT)) as handle:
        assert handle.read() == checkpoint_text("0\n0\n")
    with LogManager(dirs) as store:
        # The marker is taken at open (a crash from now on is unclean).
        assert not any(os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_MARKER)) for d in dirs)
        assert store.get_log("t", 2).log_start_offset == 25
        assert [store.get_log("t", p).recovery_point for p in range(3)] == [10, 20, 30]


# --- read-only, closed, misuse, errors -----------------------------------------------------------


def test_read_only_and_closed_store(tmp_path):
    dirs = dirs_of(tmp_path, 2)
    with LogManager(dirs) as store:
        store.create_topic("t", 2)
        store.append("t", [rec(0)], partition=1)
    before = snapshot(tmp_path)
    with LogManager(dirs, read_only=True) as reader:
        assert reader.topics() == ["t"] and reader.read("t", 1, 0) == [expected(0)]
        with pytest.raises(ReadOnlyError):
            reader.create_topic("u")
        with pytest.raises(ReadOnlyError):
            reader.delete_topic("t")
        with pytest.raises(ReadOnlyError):
            reader.alter_topic_config("t", {"retention.ms": 1})
        with pytest.raises(ReadOnlyError):
            reader.get_log("t", 1).append([rec(1)])
        with pytest.raises(ReadOnlyError):
            reader.append("t", [rec(1)], partition=0)
        with LogManager(dirs) as writer:  # the reader holds no lock
            writer.append("t", [rec(1)], partition=0)
        assert reader.get_log("t", 0).log_end_offset == 0  # a snapshot taken at open
    with pytest.raises(StorageError, match="does not exist"):
        LogManager([str(tmp_path / "absent")], read_only=True)
    assert not (tmp_path / "absent").exists()
    store = LogManager(dirs)
    log = store.get_log("t", 0)
    store.close()
    store.close()  # a second close does nothing
    assert log.closed
    for call in (lambda: store.get_log("t", 0), lambda: store.create_topic("u"), lambda: log.read(0),
                 lambda: log.append([rec(2)]), lambda: store.read("t", 0, 0)):
        with pytest.raises(StoreClosedError):
            call()
    with LogManager(dirs, read_only=True) as reader:
        assert reader.read("t", 0, 0) == [expected(1)._replace(offset=0)]
    after = snapshot(tmp_path)
    assert set(after) == set(before)


def test_read_only_store_refuses_compaction_with_read_only_error(tmp_path):
    # A read-only store has no cleaner: compaction and its planning refuse with ReadOnlyError (they
    # raised AttributeError on the missing cleaner).
    dirs = dirs_of(tmp_path, 1)
    with LogManager(dirs) as store:
        store.create_topic("c", 1, {"cleanup.policy": "compact"})
    with LogManager(dirs, read_only=True) as reader:
        for call in (lambda: reader.compact("c"), lambda: reader.compaction_ranges("c"),
                     lambda: reader.compaction_estimate_bytes("c")):
            with pytest.raises(ReadOnlyError):
                call()


def test_read_only_open_runs_no_recovery_and_reads_the_valid_prefix(tmp_path):
    dirs = dirs_of(tmp_path, 1)
    with LogManager(dirs) as store:
        store.create_topic("t", 1, {"segment.bytes": 2048})

    def writer() -> None:
        store = LogManager(dirs)
        store.get_log("t", 0).append([rec(i) for i in range(100)])

    fork_and_die(writer)  # unclean: no marker
    log_dir = os.path.join(dirs[0], "t-0")
    last = max(name for name in os.listdir(log_dir) if name.endswith(".log"))
    with open(os.path.join(log_dir, last), "ab") as handle:
        handle.write(b"\x00\x00\x00" + os.urandom(200))  # a torn tail
    with open(os.path.join(log_dir, "00000000000000000000.log.deleted"), "wb") as handle:
        handle.write(b"left by a crash")
    before = snapshot(tmp_path)
    for _ in range(2):
        with LogManager(dirs, read_only=True) as reader:
            log = reader.get_log("t", 0)
            assert (log.log_start_offset, log.log_end_offset) == (0, 100)
            assert list(log.iter_records()) == [expected(i) for i in range(100)]
            assert log.read(100) == []
            with pytest.raises(OffsetOutOfRangeError):
                log.read(101)
    assert snapshot(tmp_path) == before  # no truncation, no cleanup, no marker, no lock content
    with LogManager(dirs) as store:  # the writer recovers: tail cut, leftovers removed
        assert store.get_log("t", 0).log_end_offset == 100
        assert any("torn" in problem for problem in store.problems), store.problems
    assert not os.path.exists(os.path.join(log_dir, "00000000000000000000.log.deleted"))


def test_misuse_raises_value_or_type_error_naming_the_value(tmp_path):
    with LogManager(dirs_of(tmp_path, 1)) as store:
        for partitions in (0, -3, 10_001, "3", 2.0, True, None):
            with pytest.raises((ValueError, TypeError)) as caught:
                store.create_topic("t", partitions)
            assert not isinstance(caught.value, LogStoreError)
            assert repr(partitions) in str(caught.value)
        assert store.topics() == []
        store.create_topic("t", 1)
        log = store.get_log("t", 0)
        log.append([rec(0)])
        cases = [(lambda: log.read("0"), "'0'"), (lambda: log.read(0.0), "0.0"), (lambda: log.read(True), "True"),
                 (lambda: log.read(0, max_bytes=-1), "-1"), (lambda: log.read(0, max_records=0), "0"),
                 (lambda: log.truncate_to(-1), "-1"), (lambda: log.truncate_to("1"), "'1'"),
                 (lambda: log.append(rec(1)), "Record"), (lambda: log.append(b"bytes"), "bytes"),
                 (lambda: log.append("text"), "str"), (lambda: log.append(None), "NoneType"),
                 (lambda: log.offset_for_timestamp(-5), "-5"),
                 (lambda: store.alter_topic_config("t", "retention.ms=1"), "retention.ms=1"),
                 (lambda: store.create_topic("u", 1, ["retention.ms"]), "retention.ms")]
        for call, shown in cases:
            with pytest.raises((ValueError, TypeError)) as caught:
                call()
            assert not isinstance(caught.value, LogStoreError) or isinstance(caught.value, InvalidConfigError)
            assert shown in str(caught.value), str(caught.value)
        assert log.log_end_offset == 1 and store.topics() == ["t"]


def test_delete_records_misuse_names_the_value(tmp_path):
    with LogManager(dirs_of(tmp_path, 1)) as store:
        store.create_topic("t", 1)
        log = store.get_log("t", 0)
        log.append([rec(0)])
        with pytest.raises(TypeError, match="'1'"):
            log.delete_records("1")


def test_error_families(tmp_path):
    families = (CorruptDataError, RequestError, StorageError)
    errors = [getattr(logstore, name) for name in logstore.__all__
              if isinstance(getattr(logstore, name), type) and issubclass(getattr(logstore, name), BaseException)]
    assert len(errors) >= 18
    for error in errors:
        assert issubclass(error, LogStoreError), error
        if error in families or error is LogStoreError:
            continue
        assert sum(issubclass(error, family) for family in families) == 1, error
    assert issubclass(logstore.InvalidConfigError, ValueError) and issubclass(logstore.InvalidTopicError, ValueError)
    assert issubclass(logstore.LockedError, StorageError) and issubclass(logstore.CorruptRecordError, CorruptDataError)
    # Errors raised by real calls land in the expected family.
    dirs = dirs_of(tmp_path, 1)
    raised = {}
    with LogManager(dirs) as store:
        store.create_topic("t", 1, {"max.message.bytes": 100})
        for family, call in ((RequestError, lambda: store.create_topic("t")),
                             (RequestError, lambda: store.get_log("x", 0)),
                             (RequestError, lambda: store.read("t", 0, 5)),
                             (RequestError, lambda: store.append("t", [Record(b"k", b"x" * 500)])),
                             (RequestError, lambda: store.create_topic("..")),
                             (RequestError, lambda: store.create_topic("u", 1, {"segment.bytes": -1})),
                             (StorageError, lambda: LogManager(dirs)),
                             (StorageError, lambda: LogManager([os.path.join(dirs[0], TOPICS_FILE)])),
                             (RequestError, lambda: LogManager(dirs, read_only=True).create_topic("v"))):
            with pytest.raises(LogStoreError) as caught:
                call()
            assert isinstance(caught.value, family), caught.value
            raised[type(caught.value).__name__] = family.__name__
    with open(os.path.join(dirs[0], TOPICS_FILE), "wb") as handle:
        handle.write(b"garbage")
    with pytest.raises(CorruptDataError):
        LogManager(dirs)
    assert raised["LockedError"] == "StorageError" and raised["TopicExistsError"] == "RequestError"
