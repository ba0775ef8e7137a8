"""A full disk through the file-operations seam: ``ENOSPC`` from allocating index pages
or creating a segment's files is an error, never SIGBUS; the log stays readable; appends go on once
space is back; nothing acknowledged is lost across a reopen.

The real file system version (a full tmpfs, the CLI, SIGBUS seen as a signal) is
``tests/cli/test_full_disk_mount.py``.
"""

from __future__ import annotations

import errno
import os

import pytest

from logstore import LogManager, Record
from logstore.errors import CleaningAbortedError, StorageError
from logstore.fs import FileSystem
from logstore.log.index import OffsetIndex, TimeIndex
from logstore.testing import FaultyFileSystem

TOPIC = "t"


class NoSpaceFS(FileSystem):
    """A real file system that, while ``full``, fails ``allocate`` and the creation of files whose
    name ends with ``fail_create_suffix`` with ``ENOSPC``, as a full disk does."""

    def __init__(self) -> None:
        self.full = False
        self.fail_create_suffix = None
        self.allocations: list[tuple[str, int, int]] = []

    def allocate(self, fd, offset, length):
        if self.full:
            raise OSError(errno.ENOSPC, "injected ENOSPC in allocate")
        self.allocations.append((os.readlink(f"/proc/self/fd/{fd}"), offset, length))
        super().allocate(fd, offset, length)

    def open_file(self, path, *, create=False, writable=True):
        if (create and self.full and self.fail_create_suffix and path.endswith(self.fail_create_suffix)
                and not os.path.exists(path)):
            raise OSError(errno.ENOSPC, f"injected ENOSPC creating {path}")
        return super().open_file(path, create=create, writable=writable)


def value(i: int) -> bytes:
    return b"value-%05d-" % i + b"x" * 40


def append_until_error(log, start: int, count: int) -> tuple[int, BaseException | None]:
    """Append records ``start``.. one at a time; returns the next index and the error that stopped
    it (None when all ``count`` went in)."""
    for i in range(start, start + count):
        try:
            log.append([Record(key=b"k%d" % (i % 7), value=value(i))])
        except StorageError as exc:
            return i, exc
    return start + count, None


def values_of(log) -> list[bytes]:
    return [record.value for record in log.iter_records()]


def test_every_index_byte_written_is_allocated_first(tmp_path):
    """An index entry lands on a page the file system backed beforehand: no SIGBUS on a full disk."""
    fs = NoSpaceFS()
    for cls in (OffsetIndex, TimeIndex):
        path = str(tmp_path / f"0.{cls.__name__}")
        index = cls(fs, path, 0, 1 << 20)
        for n in range(1, 3000):
            if cls is OffsetIndex:
                index.append(n, n * 10)
            else:
                index.maybe_append(n, n)
            backed = max((o + length for p, o, length in fs.allocations if p == path), default=0)
            assert index.size_bytes <= backed, f"{cls.__name__} entry {n} written on an unbacked page"
        index.close()


def test_a_roll_on_a_full_disk_changes_nothing(tmp_path):
    fs = NoSpaceFS()
    with LogManager([str(tmp_path)], fs=fs) as store:
        store.create_topic(TOPIC, 1, {"segment.bytes": 2000})
        log = store.get_log(TOPIC, 0)
        acked, _ = append_until_error(log, 0, 60)
        bases = [segment.base_offset for segment in log.segments]
        files = sorted(os.listdir(log.dir_path))
        # The disk fills: the third file of the next segment cannot be created.
        fs.full, fs.fail_create_suffix = True, ".timeindex"
        acked, error = append_until_error(log, acked, 100)
        assert isinstance(error, StorageError) and "cannot roll" in str(error), error
        assert not log.failed, "a roll on a full disk is an error, not fail-stop"
        assert [segment.base_offset for segment in log.segments] == bases
        assert sorted(os.listdir(log.dir_path)) == files, "the half-made segment's files are removed"
        assert values_of(log) == [value(i) for i in range(acked)], "reads go on"
        again, error = append_until_error(log, acked, 1)
        assert again == acked and isinstance(error, StorageError), "the full active segment takes no more"
        fs.full = False  # space is back: appends go on
        acked, error = append_until_error(log, acked, 40)
        assert error is None and len(log.segments) > len(bases)
    with LogManager([str(tmp_path)]) as store:
        assert values_of(store.get_log(TOPIC, 0)) == [value(i) for i in range(acked)]


def test_no_space_for_index_pages_fails_the_append_before_anything_is_written(tmp_path):
    fs = NoSpaceFS()
    with LogManager([str(tmp_path)], fs=fs) as store:
        store.create_topic(TOPIC, 1, {"segment.bytes": 1 << 20, "index.interval.bytes": 100})
        log = store.get_log(TOPIC, 0)
        acked, _ = append_until_error(log, 0, 5)
        fs.full = True
        stopped, error = append_until_error(log, acked, 20_000)
        assert isinstance(error, StorageError) and ("No space" in str(error) or "ENOSPC" in str(error)), error
        assert not log.failed
        size = log.active_segment.size_bytes
        assert os.path.getsize(log.active_segment.log_path) == size, "nothing written past the last batch"
        assert log.log_end_offset == stopped
        assert values_of(log) == [value(i) for i in range(stopped)]
        fs.full = False
        acked, error = append_until_error(log, stopped, 50)
        assert error is None
    with LogManager([str(tmp_path)]) as store:
        log = store.get_log(TOPIC, 0)
        assert values_of(log) == [value(i) for i in range(acked)]
        assert [r.offset for r in log.iter_records()] == list(range(acked))


def test_open_and_close_on_a_full_disk(tmp_path):
    with LogManager([str(tmp_path)]) as store:
        store.create_topic(TOPIC, 1, {"segment.bytes": 2000})
        acked, _ = append_until_error(store.get_log(TOPIC, 0), 0, 100)
    fs = NoSpaceFS()
    fs.full, fs.fail_create_suffix = True, ".log"
    store = LogManager([str(tmp_path)], fs=fs)  # the active index is mapped again: no space needed
    log = store.get_log(TOPIC, 0)
    assert values_of(log) == [value(i) for i in range(acked)]
    try:
        store.close()  # may report the disk, never dies
    except StorageError as exc:
        assert "No space" in str(exc) or "ENOSPC" in str(exc)
    with LogManager([str(tmp_path)]) as store:
        assert values_of(store.get_log(TOPIC, 0)) == [value(i) for i in range(acked)]


@pytest.mark.parametrize("fail_create", [None, ".log"])
def test_compaction_on_a_full_disk_is_an_aborted_round(tmp_path, fail_create):
    fs = NoSpaceFS()
    with LogManager([str(tmp_path)], fs=fs) as store:
        store.create_topic(TOPIC, 1, {"segment.bytes": 2000, "cleanup.policy": "compact",
                                      "index.interval.bytes": 100})
        log = store.get_log(TOPIC, 0)
        acked, _ = append_until_error(log, 0, 200)
        log.roll()
        before = values_of(log)
        files = sorted(os.listdir(log.dir_path))
        fs.full, fs.fail_create_suffix = True, fail_create
        with pytest.raises(CleaningAbortedError, match="No space|ENOSPC"):
            store.compact(TOPIC)
        assert sorted(os.listdir(log.dir_path)) == files, "the old segments stay, no copy is left"
        assert values_of(log) == before and not log.failed
        # The background cleaner's round: aborted and logged, the log not marked uncleanable.
        assert store.cleaner.clean_filthiest_log() is None
        assert not store.cleaner.cleaner_manager.uncleanable_logs()
        fs.full = False
        store.compact(TOPIC)
        compacted = values_of(log)
        assert len(compacted) < len(before)
    with LogManager([str(tmp_path)]) as store:
        assert values_of(store.get_log(TOPIC, 0)) == compacted


def test_fault_injection_sees_allocate(tmp_path):
    """``FaultyFileSystem`` injects ENOSPC into ``allocate`` like any other operation of the seam."""
    fs = FaultyFileSystem({"allocate"}, fail_at=1, errno_code=errno.ENOSPC, persistent=True)
    with LogManager([str(tmp_path)], fs=fs) as store:
        store.create_topic(TOPIC, 1, {"index.interval.bytes": 100})
        log = store.get_log(TOPIC, 0)
        stopped, error = append_until_error(log, 0, 100)
        assert isinstance(error, StorageError) and "injected ENOSPC in allocate" in str(error)
        assert fs.failures == 1 and not log.failed
        fs.operations = set()  # space again
        acked, error = append_until_error(log, stopped, 100)
        assert error is None
    with LogManager([str(tmp_path)]) as store:
        assert values_of(store.get_log(TOPIC, 0)) == [value(i) for i in range(acked)]
