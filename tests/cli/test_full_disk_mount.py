"""A really full file system: a small tmpfs, filled up, under the API and the CLI.

Before the fix the process died of SIGBUS (exit 135) when it wrote an index page the file system could
not back: appending, at a roll, at ``close()``, in ``logstore compact``. Every workload runs in a
subprocess, so a SIGBUS shows as a return code (-7) instead of killing pytest. After space is freed on
the same mount, every acknowledged record must be readable.

Mounting needs root. Where it cannot mount the test skips, unless ``LOGSTORE_REQUIRE_TOOLS`` names
``mount`` (CI, which runs as root, sets ``all``; the older ``LOGSTORE_REQUIRE_MOUNT=1`` does too),
which makes that a failure.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from logstore import LogManager

import external_tools

_TIMEOUT_S = 120
_SIGBUS_EXITS = (-signal.SIGBUS, 128 + signal.SIGBUS)

# Fills the file system, then appends until it is full. Prints one JSON line per acknowledged
# append, then what stopped it and how close() went.
_WORKLOAD = textwrap.dedent('''
    import json, os, sys
    from logstore import LogManager, Record
    from logstore.errors import LogStoreError
    store_dir, filler = sys.argv[1], sys.argv[2]

    def say(**fields):
        print(json.dumps(fields), flush=True)

    store = LogManager([store_dir])
    # "pages": an index entry every 100 bytes, so the next index page is needed soon;
    # "rolls": 2 KB segments, so the full disk is met at rolls. Keys are unique: compaction keeps
    # every record (and still rewrites segments, on a full disk).
    store.create_topic("pages", 1, {"index.interval.bytes": 100, "segment.bytes": 1 << 20})
    store.create_topic("rolls", 1, {"segment.bytes": 2000, "cleanup.policy": "compact"})
    for topic in ("pages", "rolls"):
        for i in range(30):
            info = store.get_log(topic, 0).append([Record(key=b"k%d" % i, value=b"%s-%d" % (topic.encode(), i))])
            say(topic=topic, offset=info.first_offset)
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)  # everything left goes to another file
    try:
        while True:
            os.write(fd, bytes(64 * 1024))
    except OSError:
        pass
    try:
        while True:
            os.write(fd, bytes(512))
    except OSError:
        pass
    os.close(fd)
    for topic in ("pages", "rolls"):
        log = store.get_log(topic, 0)
        for i in range(30, 3000):
            try:
                info = log.append([Record(key=b"k%d" % i, value=b"%s-%d" % (topic.encode(), i))])
            except LogStoreError as exc:
                say(topic=topic, stopped=str(exc), failed=log.failed)
                break
            say(topic=topic, offset=info.first_offset)
    try:
        store.close()
        say(closed="ok")
    except LogStoreError as exc:
        say(closed=str(exc))
''')


def _skip_or_fail(reason: str) -> None:
    external_tools.skip_or_fail("mount", reason)


@pytest.fixture
def small_fs(tmp_path):
    """A 3 MiB tmpfs mounted for the test, unmounted after it."""
    if os.geteuid() != 0:
        _skip_or_fail("mounting a tmpfs needs root")
    mount_dir = tmp_path / "mnt"
    mount_dir.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount_dir)],
                          capture_output=True, text=True)
    if done.returncode:
        _skip_or_fail(f"could not mount a tmpfs: {done.stderr.strip()}")
    try:
        yield str(mount_dir)
    finally:
        subprocess.run(["umount", str(mount_dir)], check=True)


def _run(args: list[str], label: str) -> subprocess.CompletedProcess:
    done = subprocess.run(args, capture_output=True, text=True, timeout=_TIMEOUT_S)
    assert done.returncode not in _SIGBUS_EXITS, f"{label} died of SIGBUS; stderr: {done.stderr[-2000:]}"
    assert done.returncode >= 0, f"{label} died of signal {-done.returncode}; stderr: {done.stderr[-2000:]}"
    return done


def _cli(store_dir: str, *args: str) -> subprocess.CompletedProcess:
    script = os.path.join(os.path.dirname(sys.executable), "logstore")
    command = [script] if os.path.exists(script) else [sys.executable, "-m", "logstore.cli"]
    return _run([*command, "--dir", store_dir, *args], "logstore " + " ".join(args))


def test_a_full_file_system_gives_errors_not_sigbus(small_fs):
    store_dir = os.path.join(small_fs, "store")
    filler = os.path.join(small_fs, "filler")
    workload = _run([sys.executable, "-c", _WORKLOAD, store_dir, filler], "the append workload")
    lines = [json.loads(line) for line in workload.stdout.splitlines()]
    assert workload.returncode == 0, workload.stderr[-2000:]
    acked: dict[str, set[int]] = {"pages": set(), "rolls": set()}
    for line in lines:
        if "offset" in line:
            acked[line["topic"]].add(line["offset"])
    stops = {line["topic"]: line for line in lines if "stopped" in line}
    assert set(stops) == {"pages", "rolls"}, f"both topics ran into the full disk: {lines[-5:]}"
    assert all("No space" in stop["stopped"] for stop in stops.values()), stops
    assert lines[-1].get("closed"), lines[-1]

    # The CLI on the full file system: one line on stderr and a non-zero exit, or success.
    appended = []
    for args in (["append", "rolls", "--key", "cli", "more"], ["compact", "rolls"],
                 ["topics", "create", "fresh", "--partitions", "4"],
                 ["topics", "alter", "rolls", "--config", "segment.ms=3600000"],
                 ["append", "pages", "tail"]):
        done = _cli(store_dir, *args)
        if done.returncode:
            assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr, (args, done.stderr)
        elif args[0] == "append":
            appended.append((args[1], json.loads(done.stdout.splitlines()[-1])["first_offset"]))

    os.remove(filler)  # space again, on the same mount: every acknowledged record is there
    for topic, offset in appended:
        acked[topic].add(offset)
    with LogManager([store_dir]) as store:
        for topic, offsets in acked.items():
            log = store.get_log(topic, 0)
            found = {record.offset: record.value for record in log.iter_records()}
            missing = sorted(offsets - set(found))
            assert not missing, f"{topic}: acknowledged offsets lost: {missing[:10]}"
            for offset in offsets:
                if found[offset] not in (b"%s-%d" % (topic.encode(), offset), b"more", b"tail"):
                    raise AssertionError(f"{topic} offset {offset} holds {found[offset]!r}")
        assert any(s.log_end_offset for s in [store.get_log("pages", 0), store.get_log("rolls", 0)])
