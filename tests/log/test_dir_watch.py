"""DirectoryWatcher: wakes on changes in watched directories, times out otherwise, never spins.

Every behavioural test runs in both modes (inotify and the polling fallback) on real files."""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import threading
import time

import pytest

from logstore.log import dir_watch
from logstore.log.dir_watch import DirectoryWatcher

HAVE_INOTIFY = dir_watch._libc() is not None  # None where libc has no inotify (non-Linux)


@pytest.fixture(params=["inotify", "polling"])
def make_watcher(request):
    if request.param == "inotify" and not HAVE_INOTIFY:
        pytest.skip("inotify not available on this platform")
    watchers = []

    def make(paths, **kwargs):
        watcher = DirectoryWatcher([str(p) for p in paths], use_inotify=request.param == "inotify",
                                   poll_interval_ms=20, **kwargs)
        assert watcher.uses_inotify == (request.param == "inotify")
        watchers.append(watcher)
        return watcher

    yield make
    for watcher in watchers:
        watcher.close()


def append(path, data=b"x"):
    with open(path, "ab") as f:
        f.write(data)


def later(action, delay=0.05):
    timer = threading.Timer(delay, action)
    timer.start()
    return timer


def timed_wait(watcher, timeout_ms):
    start = time.monotonic()
    result = watcher.wait(timeout_ms)
    return result, time.monotonic() - start


def test_write_from_another_thread_wakes_the_waiter(tmp_path, make_watcher):
    append(tmp_path / "00.log")
    watcher = make_watcher([tmp_path])
    timer = later(lambda: append(tmp_path / "00.log"))
    changed, elapsed = timed_wait(watcher, 2000)
    timer.join()
    assert changed
    assert elapsed < 1.0  # promptly: nowhere near the 2 s timeout
    # The waiter may wake on the write's IN_MODIFY before the writer's close queues IN_CLOSE_WRITE:
    # a second, spurious wakeup is allowed. Once the writer is done, everything is drained at once.
    watcher.wait(0)
    assert watcher.wait(100) is False


def test_no_change_times_out(tmp_path, make_watcher):
    append(tmp_path / "00.log")
    watcher = make_watcher([tmp_path])
    changed, elapsed = timed_wait(watcher, 100)
    assert changed is False
    assert 0.09 <= elapsed < 1.0


def test_changes_before_wait_are_reported_at_once_and_only_once(tmp_path, make_watcher):
    append(tmp_path / "00.log")
    watcher = make_watcher([tmp_path])
    append(tmp_path / "00.log")
    changed, elapsed = timed_wait(watcher, 2000)
    assert changed and elapsed < 0.5
    assert watcher.wait(100) is False


def test_wait_zero_checks_without_blocking(tmp_path, make_watcher):
    watcher = make_watcher([tmp_path])
    assert watcher.wait(0) is False
    append(tmp_path / "00.log")
    assert watcher.wait(0) is True
    assert watcher.wait(0) is False


def test_creating_a_file_counts(tmp_path, make_watcher):
    watcher = make_watcher([tmp_path])
    timer = later(lambda: (tmp_path / "00.index").touch())
    changed, elapsed = timed_wait(watcher, 2000)
    timer.join()
    assert changed and elapsed < 1.0


def test_renaming_a_file_into_the_dir_counts(tmp_path, make_watcher):
    watched, elsewhere = tmp_path / "p0", tmp_path / "staging"
    watched.mkdir()
    elsewhere.mkdir()
    append(elsewhere / "00.log.tmp", b"data")
    watcher = make_watcher([watched])
    timer = later(lambda: os.rename(elsewhere / "00.log.tmp", watched / "00.log"))
    changed, elapsed = timed_wait(watcher, 2000)
    timer.join()
    assert changed and elapsed < 1.0


def test_deleting_a_file_counts(tmp_path, make_watcher):
    append(tmp_path / "00.log")
    watcher = make_watcher([tmp_path])
    os.unlink(tmp_path / "00.log")
    assert watcher.wait(1000) is True


def test_change_in_the_second_of_two_dirs(tmp_path, make_watcher):
    first, second = tmp_path / "orders-0", tmp_path / "orders-1"
    first.mkdir()
    second.mkdir()
    watcher = make_watcher([first, second])
    timer = later(lambda: append(second / "00.log"))
    changed, elapsed = timed_wait(watcher, 2000)
    timer.join()
    assert changed and elapsed < 1.0


def test_add_watches_one_more_dir_and_is_idempotent(tmp_path, make_watcher):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    watcher = make_watcher([first])
    watcher.add(str(second))
    watcher.add(str(second))
    watcher.add(str(tmp_path / "b" / ".." / "b"))  # same directory, different spelling
    append(second / "00.log")
    assert watcher.wait(1000) is True
    assert watcher.wait(50) is False


def test_a_watched_dir_that_disappears_counts_as_a_change(tmp_path, make_watcher):
    gone = tmp_path / "gone"
    gone.mkdir()
    watcher = make_watcher([gone])
    later(lambda: gone.rmdir()).join()
    assert watcher.wait(1000) is True
    assert watcher.wait(50) is False
    gone.mkdir()  # recreated: add() is safe to call again and watches it afresh
    watcher.add(str(gone))
    watcher.wait(0)  # polling may see the recreation itself; only new writes matter below
    append(gone / "00.log")
    assert watcher.wait(1000) is True


@pytest.mark.skipif(not HAVE_INOTIFY, reason="inotify not available on this platform")
def test_an_idle_inotify_wait_uses_no_cpu(tmp_path):
    with DirectoryWatcher([str(tmp_path)]) as watcher:
        assert watcher.uses_inotify
        cpu = time.process_time()
        changed, elapsed = timed_wait(watcher, 300)
        cpu = time.process_time() - cpu
    assert changed is False and elapsed >= 0.29
    assert cpu < 0.05, f"busy polling: {cpu * 1000:.1f} ms CPU in a 300 ms wait"


@pytest.mark.parametrize("use_inotify", [True, False])
def test_bad_arguments(tmp_path, use_inotify):
    a_file = tmp_path / "00.log"
    append(a_file)
    with pytest.raises(ValueError, match="nope"):
        DirectoryWatcher([str(tmp_path / "nope")], use_inotify=use_inotify)
    with pytest.raises(ValueError, match="00.log"):
        DirectoryWatcher([str(a_file)], use_inotify=use_inotify)
    with pytest.raises(TypeError, match="None"):
        DirectoryWatcher([None], use_inotify=use_inotify)
    with pytest.raises(TypeError, match="single path"):
        DirectoryWatcher(str(tmp_path), use_inotify=use_inotify)
    with pytest.raises(ValueError, match="0"):
        DirectoryWatcher([str(tmp_path)], poll_interval_ms=0, use_inotify=use_inotify)
    with pytest.raises(TypeError, match="0.5"):
        DirectoryWatcher([str(tmp_path)], poll_interval_ms=0.5, use_inotify=use_inotify)
    with DirectoryWatcher([str(tmp_path)], use_inotify=use_inotify) as watcher:
        with pytest.raises(ValueError, match="-1"):
            watcher.wait(-1)
        with pytest.raises(TypeError, match="1.5"):
            watcher.wait(1.5)
        with pytest.raises(TypeError, match="True"):
            watcher.wait(True)
        with pytest.raises(ValueError, match="missing"):
            watcher.add(str(tmp_path / "missing"))
        with pytest.raises(ValueError, match="00.log"):
            watcher.add(str(a_file))


@pytest.mark.parametrize("use_inotify", [True, False])
def test_close_is_idempotent_and_a_closed_watcher_refuses_work(tmp_path, use_inotify):
    watcher = DirectoryWatcher([str(tmp_path)], use_inotify=use_inotify)
    watcher.close()
    watcher.close()
    with pytest.raises(ValueError, match="closed"):
        watcher.wait(0)
    with pytest.raises(ValueError, match="closed"):
        watcher.add(str(tmp_path))
    assert watcher.uses_inotify is False
    with DirectoryWatcher([], use_inotify=use_inotify) as empty:
        assert empty.wait(10) is False
    with pytest.raises(ValueError, match="closed"):
        empty.wait(0)


class FakeLibc:
    """Real inotify, except for the calls told to fail with a given errno."""

    def __init__(self, fail_init=None, fail_add_after=None, add_errno=errno.ENOSPC):
        self.real = dir_watch._libc()
        self.fail_init, self.fail_add_after, self.add_errno = fail_init, fail_add_after, add_errno
        self.adds = 0

    def inotify_init1(self, flags):
        if self.fail_init is not None:
            ctypes.set_errno(self.fail_init)
            return -1
        return self.real.inotify_init1(flags)

    def inotify_add_watch(self, fd, path, mask):
        self.adds += 1
        if self.fail_add_after is not None and self.adds > self.fail_add_after:
            ctypes.set_errno(self.add_errno)
            return -1
        return self.real.inotify_add_watch(fd, path, mask)


@pytest.mark.skipif(not HAVE_INOTIFY, reason="inotify not available on this platform")
def test_inotify_init_failure_falls_back_to_polling(tmp_path, monkeypatch, caplog):
    fake = FakeLibc(fail_init=errno.EMFILE)
    monkeypatch.setattr(dir_watch, "_libc", lambda: fake)
    with caplog.at_level(logging.DEBUG, logger="logstore.log.dir_watch"):
        watcher = DirectoryWatcher([str(tmp_path)], poll_interval_ms=20)
    with watcher:
        assert not watcher.uses_inotify
        assert "polling" in caplog.text
        timer = later(lambda: append(tmp_path / "00.log"))
        assert watcher.wait(2000) is True
        timer.join()
        watcher.wait(0)  # a poll may have caught the new file empty, before its write
        assert watcher.wait(50) is False


@pytest.mark.skipif(not HAVE_INOTIFY, reason="inotify not available on this platform")
def test_watch_limit_falls_back_to_polling_without_losing_changes(tmp_path, monkeypatch, caplog):
    first, second = tmp_path / "p0", tmp_path / "p1"
    first.mkdir()
    second.mkdir()
    fake = FakeLibc(fail_add_after=1)  # one instance: it counts the add_watch calls
    monkeypatch.setattr(dir_watch, "_libc", lambda: fake)
    with DirectoryWatcher([str(first)], poll_interval_ms=20) as watcher:
        assert watcher.uses_inotify
        append(first / "00.log")  # queued in inotify, must survive the switch
        with caplog.at_level(logging.DEBUG, logger="logstore.log.dir_watch"):
            watcher.add(str(second))  # ENOSPC: whole watcher switches to polling
        assert not watcher.uses_inotify
        assert "polling" in caplog.text
        assert watcher.wait(0) is True
        assert watcher.wait(50) is False
        append(second / "00.log")
        assert watcher.wait(1000) is True
        append(first / "00.log")
        assert watcher.wait(1000) is True


def test_a_watcher_whose_descriptor_is_past_1024_still_waits(tmp_path, make_watcher):
    """A store with many partitions open holds thousands of descriptors: the watcher's own may be
    past FD_SETSIZE, where select() refuses it (it polls instead)."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        if hard != resource.RLIM_INFINITY and hard < 1200:
            pytest.skip(f"RLIMIT_NOFILE's hard limit {hard} is below the 1200 descriptors this needs")
        resource.setrlimit(resource.RLIMIT_NOFILE, (1200, hard))
    filler = []
    try:
        while not filler or filler[-1] < 1100:
            filler.append(os.open(os.devnull, os.O_RDONLY))
        watcher = make_watcher([tmp_path])
        timer = later(lambda: append(tmp_path / "00.log"))
        assert watcher.wait(2000)
        timer.join()
    finally:
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
