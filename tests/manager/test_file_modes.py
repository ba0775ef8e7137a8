"""The modes of the files and directories a store creates: what the user's umask says (0666 and
0777 less it, as every Unix tool does), and never wider; the server's secret files are owner-only
whatever the umask (tests/server/test_credentials.py, test_acl_store.py)."""

from __future__ import annotations

import os
import stat

import pytest

from logstore import LogManager, Record


@pytest.mark.parametrize("umask", [0o002, 0o022, 0o077])
def test_a_stores_files_follow_the_umask(tmp_path, umask):
    data = tmp_path / "data"
    previous = os.umask(umask)
    try:
        with LogManager([str(data)]) as store:
            store.create_topic("orders", partitions=1)
            store.get_log("orders", 0).append([Record(key=b"k", value=b"v")])
    finally:
        os.umask(previous)
    modes = {}
    for root, dirs, files in os.walk(data):
        for name in [*dirs, *files]:
            path = os.path.join(root, name)
            modes[os.path.relpath(path, data)] = (stat.S_IMODE(os.stat(path).st_mode), os.path.isdir(path))
    assert any(name.endswith(".log") for name in modes) and ".lock" in modes and "topics.json" in modes, modes
    for name, (mode, is_dir) in modes.items():
        assert mode == (0o777 if is_dir else 0o666) & ~umask, (name, oct(mode))
    assert stat.S_IMODE(data.stat().st_mode) == 0o777 & ~umask
