"""A ``create_topic`` that fails half-way (a descriptor limit, a full disk, an I/O error) is
rolled back, so the retry of the same create succeeds and the store is consistent. The failure is
injected at every file operation of a create (``FaultyFileSystem``), and once for real with
``RLIMIT_NOFILE`` in a subprocess."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap

import pytest

from logstore import LogManager, Record
from logstore.errors import StorageError
from logstore.testing import FaultyFileSystem, OperationHookFileSystem

OPERATIONS = {"create", "pwrite", "truncate", "fsync", "msync", "fsync_dir", "rename", "remove", "mkdir",
              "remove_dir", "set_mtime", "open_file"}


class Counting(OperationHookFileSystem):
    def __init__(self) -> None:
        self.count = 0

    def before(self, operation, path):
        self.count += 1

    def open_file(self, path, *, create=False, writable=True):
        self.count += 1
        return super().open_file(path, create=create, writable=writable)


def _make_store(dirs) -> None:
    with LogManager(dirs) as store:
        store.create_topic("keep", 1)
        store.append("keep", [Record(b"k", b"v")])


def _count_operations_of_a_create(tmp_path, dirs) -> int:
    probe = [str(tmp_path / "probe" / os.path.basename(d)) for d in dirs]
    _make_store(probe)
    fs = Counting()
    with LogManager(probe, fs=fs) as store:
        before = fs.count
        store.create_topic("t", 3)
        return fs.count - before


def _consistent(dirs) -> None:
    with LogManager(dirs) as store:
        assert store.topics() == ["keep", "t"] and store.problems == []
        assert sorted(name for d in dirs for name in os.listdir(d) if name.startswith("t-")) == ["t-0", "t-1", "t-2"]
        store.append("t", [Record(None, b"x")], partition=2)
        assert store.read("keep", 0, 0)[0].value == b"v"


@pytest.mark.parametrize("errno_code", [errno.EMFILE])
def test_a_create_that_fails_at_any_file_operation_is_rolled_back(tmp_path, errno_code):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    total = _count_operations_of_a_create(tmp_path, dirs)
    assert total > 20
    for fail_at in range(1, total + 1):
        home = tmp_path / f"run{fail_at}"
        run_dirs = [str(home / "a"), str(home / "b")]
        _make_store(run_dirs)
        fs = FaultyFileSystem(OPERATIONS, 10**9, errno_code)  # armed once open: a shortage fails an open
        with LogManager(run_dirs, fs=fs) as store:
            fs.calls, fs.fail_at = 0, fail_at
            with pytest.raises(StorageError):
                store.create_topic("t", 3)
            assert store.topics() == ["keep"], fail_at
            store.create_topic("t", 3)  # the retry in the same process succeeds
        _consistent(run_dirs)
        # And the retry by a new process, after a failure whose rollback failed too (persistent).
        home = tmp_path / f"persistent{fail_at}"
        run_dirs = [str(home / "a"), str(home / "b")]
        _make_store(run_dirs)
        fs = FaultyFileSystem(OPERATIONS, 10**9, errno_code, persistent=True)
        try:
            store = LogManager(run_dirs, fs=fs)
            fs.calls, fs.fail_at = 0, fail_at
            with pytest.raises(StorageError):
                store.create_topic("t", 3)
            fs.operations = set()  # the limit is lifted: the close can write again
            store.close()
        except StorageError:
            pass  # the close failed: the dir is left unclean, which the next open recovers
        with LogManager(run_dirs) as store:
            # Rolled back, unless the 'ready' record had reached a copy of topics.json before the
            # failure and the rollback could write nothing: then the topic is complete.
            if "t" not in store.topics():
                store.create_topic("t", 3)
        _consistent(run_dirs)


def test_a_create_that_hits_the_descriptor_limit_is_rolled_back(tmp_path):
    """A real ``RLIMIT_NOFILE`` in a child process: the create fails with EMFILE, then a retry in a
    new process (no limit) succeeds."""
    data = str(tmp_path / "data")
    _make_store([data])
    script = textwrap.dedent(f"""
        import resource, sys
        from logstore import LogManager
        store = LogManager([{data!r}])
        used = len(__import__("os").listdir("/proc/self/fd"))
        resource.setrlimit(resource.RLIMIT_NOFILE, (used + 2, used + 2))  # a new partition holds none: its making needs a few at once
        try:
            store.create_topic("t", 20)
        except Exception as exc:
            print("failed:", type(exc).__name__, exc)
        else:
            print("created")
        try:
            store.close()
        except Exception as exc:
            print("close failed:", exc)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.stdout.startswith("failed: StorageError") and "Too many open files" in result.stdout, result
    with LogManager([data]) as store:
        assert store.topics() == ["keep"]
        store.create_topic("t", 20)
        assert store.partitions("t") == 20
