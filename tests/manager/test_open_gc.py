"""A store's open turns the cyclic garbage collector off while it loads its partitions (nothing it
loads is garbage, and each full collection walks every log loaded so far) and always back on."""

from __future__ import annotations

import gc

import pytest

from logstore import LogManager
from logstore.manager import log_dirs


@pytest.fixture
def collector():
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def test_the_collector_is_off_while_partitions_load_and_on_after(tmp_path, monkeypatch, collector):
    with LogManager([str(tmp_path)]) as store:
        store.create_topic("t", 3)
    seen = []
    original = log_dirs.LogDirs.open_log

    def open_log(self, *args, **kwargs):
        seen.append(gc.isenabled())
        return original(self, *args, **kwargs)

    monkeypatch.setattr(log_dirs.LogDirs, "open_log", open_log)
    gc.enable()
    with LogManager([str(tmp_path)]):
        assert gc.isenabled()
    assert seen == [False, False, False]
    gc.disable()  # a program that turned it off keeps it off
    with LogManager([str(tmp_path)]):
        assert not gc.isenabled()


def test_the_collector_is_back_on_when_the_load_fails(tmp_path, monkeypatch, collector):
    with LogManager([str(tmp_path)]) as store:
        store.create_topic("t", 1)

    def broken(self, *args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(log_dirs.LogDirs, "open_log", broken)
    gc.enable()
    with pytest.raises(RuntimeError, match="boom"):
        LogManager([str(tmp_path)])
    assert gc.isenabled()
