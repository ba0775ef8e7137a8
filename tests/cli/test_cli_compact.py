"""`logstore compact`: compaction to completion from the command line, its per-partition summary,
its refusals (a store held by another process, a topic that is not compacted, a missing partition),
and the README's end-to-end example (append updates and a tombstone, compact, read the latest values)."""

from __future__ import annotations

import os
import sys

from click.testing import CliRunner

from logstore import LogManager, Record
from logstore.cli.main import main
from logstore.log.checkpoint import CLEANER_OFFSET_CHECKPOINT


def run(store_dir, *args, input=None):
    return CliRunner().invoke(main, ["--dir", str(store_dir), *map(str, args)], input=input)


def ok(result):
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exc_info)
    return result


def one_line_error(result, *fragments):
    assert result.exit_code == 1, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert "Traceback" not in result.stderr


def make_profiles(path, updates=40):
    ok(run(path, "topics", "create", "profiles", "--partitions", "2", "--config", "cleanup.policy=compact",
           "--config", "segment.bytes=2000"))
    lines = "".join(f'{{"key": "user-{i % 8}", "value": "version {i}"}}\n' for i in range(updates))
    ok(run(path, "append", "profiles", "--input-format", "jsonl", input=lines))
    ok(run(path, "append", "profiles", "--key", "user-3", "--tombstone"))
    with LogManager([str(path)]) as store:  # roll, so that everything appended is cleanable
        for partition in range(2):
            store.get_log("profiles", partition).roll()


def latest_by_key(path):
    latest = {}
    with LogManager([str(path)], read_only=True) as store:
        for partition in range(store.partitions("profiles")):
            for record in store.get_log("profiles", partition).iter_records():
                latest[record.key] = record.value
    return latest


def test_compact_keeps_the_latest_value_per_key_and_prints_a_summary(tmp_path):
    path = tmp_path / "data"
    make_profiles(path)
    before = latest_by_key(path)
    out = ok(run(path, "compact")).stdout.splitlines()
    summaries = [line for line in out if line.startswith("profiles-")]
    assert len(summaries) == 2 and out[-1] == "Compacted 2 of 2 partitions."
    for line in summaries:
        for fragment in ("bytes", "records kept", "dropped", "tombstones removed", "pass", " ms"):
            assert fragment in line, line
    assert latest_by_key(path) == before  # the latest value of every key (the tombstone too) survives
    with LogManager([str(path)], read_only=True) as store:
        records = [r for p in range(2) for r in store.get_log("profiles", p).iter_records()]
        assert len(records) == len({r.key for r in records}) == 8  # one record per key
        assert all(r.value == (None if r.key == b"user-3" else f"version {32 + int(r.key[-1:])}".encode())
                   for r in records)
    assert os.path.exists(path / CLEANER_OFFSET_CHECKPOINT)
    again = ok(run(path, "compact", "profiles", "--partition", "1")).stdout.splitlines()
    assert again == ["profiles-1: nothing to compact (no dirty segment below the active one)",
                     "Compacted 0 of 1 partition."]


def test_compact_refusals_are_one_line_errors(tmp_path):
    path = tmp_path / "data"
    make_profiles(path, updates=10)
    ok(run(path, "topics", "create", "events"))
    one_line_error(run(path, "compact", "events"), "cleanup.policy=delete", "topics alter events")
    one_line_error(run(path, "compact", "profiles", "--partition", "5"), "no partition 5")
    one_line_error(run(path, "compact", "nope"), "unknown topic")
    one_line_error(run(path, "compact", "--partition", "0"), "needs its topic")
    with LogManager([str(path)]) as writer:  # another process holds the store for writing
        writer.append("profiles", [Record(b"user-1", b"while held", (), None)])
        one_line_error(run(path, "compact"), "locked", f"process {os.getpid()}")
    # Nothing was lost to the refusals, and the compaction works once the writer has gone.
    assert latest_by_key(path)[b"user-1"] == b"while held"
    ok(run(path, "compact"))
    assert latest_by_key(path)[b"user-1"] == b"while held"


def test_compact_drops_a_tombstone_after_delete_retention(tmp_path):
    path = tmp_path / "data"
    ok(run(path, "topics", "create", "kv", "--config", "cleanup.policy=compact", "--config", "delete.retention.ms=0"))
    ok(run(path, "append", "kv", "first", "--key", "a"))
    ok(run(path, "append", "kv", "--key", "a", "--tombstone"))
    ok(run(path, "append", "kv", "kept", "--key", "b"))
    with LogManager([str(path)]) as store:
        store.get_log("kv", 0).roll()
    first = ok(run(path, "compact")).stdout
    assert "0 tombstones removed" in first  # the first cleaning gives it a horizon (now + 0 ms)
    with LogManager([str(path)]) as store:  # new data, so the log is dirty again
        store.append("kv", [Record(b"c", b"new", (), None)])
        store.get_log("kv", 0).roll()
    second = ok(run(path, "compact")).stdout
    assert "1 tombstones removed" in second
    with LogManager([str(path)], read_only=True) as store:
        assert [(r.key, r.value) for r in store.get_log("kv", 0).iter_records()] == [(b"b", b"kept"), (b"c", b"new")]


def test_the_readme_example(tmp_path):
    """The engine guide's "Compaction: the latest value per key": the same commands, the same output (but the time)."""
    path = tmp_path / "data"
    ok(run(path, "topics", "create", "profiles", "--config", "cleanup.policy=compact", "--config", "segment.bytes=1000"))
    for i in range(1, 31):
        ok(run(path, "append", "profiles", f"v{i}", "--key", f"user-{i % 4}"))
    ok(run(path, "append", "profiles", "--key", "user-1", "--tombstone"))
    out = ok(run(path, "compact", "profiles")).stdout.splitlines()
    summary = out[0].rsplit(", ", 2)
    assert summary[0] == ("profiles-0: 2220 -> 628 bytes (-71.7%), 4 records kept (one per key), 23 dropped, "
                          "0 tombstones removed, 1 pass")
    assert summary[1].endswith(" ms") and summary[2] == "offsets below 27 clean"
    assert out[1] == "Compacted 1 of 1 partition."
    values = ok(run(path, "read", "profiles", "--format", "value")).stdout
    assert values == "v24\nv25\nv26\nv27\nv28\nv29\nv30\nnull\n"
    readme = (os.path.dirname(__file__) + "/../../docs/guide/engine.md")
    with open(readme, encoding="utf-8") as handle:
        text = handle.read()
    assert out[0].rsplit(", ", 2)[0] in text and "\n" + values in text


def test_the_spark_engine_without_pyspark_is_one_clear_line(tmp_path, monkeypatch):
    make_profiles(tmp_path)
    monkeypatch.setitem(sys.modules, "pyspark", None)  # as if the spark extra were not installed
    result = run(tmp_path, "compact", "--engine", "spark", "profiles")
    one_line_error(result, "pip install 'kafka-logstore[spark]'")
    with LogManager([str(tmp_path)], read_only=True) as store:  # nothing was compacted
        assert sum(len(list(store.get_log("profiles", p).iter_records())) for p in range(2)) == 41
