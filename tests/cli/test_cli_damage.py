"""Damaged partitions from the command line: `check`, `read`,
`status` and `topics describe` report them, writable commands neither cut them nor fail for the
other topics, and `logstore repair` cuts them, saying what it removed (and, without --yes, what it
would remove, changing nothing)."""

from __future__ import annotations

import json
import os

from click.testing import CliRunner

from logstore.cli.main import main
from logstore.records.decoder import read_header


def run(store_dir, *args, input=None):
    return CliRunner().invoke(main, ["--dir", str(store_dir), *map(str, args)], input=input)


def ok(result):
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exc_info)
    return result


def make_store(path, count=300):
    """``ev`` (several segments, an index entry every ~100 bytes) and ``other``, cleanly closed."""
    ok(run(path, "topics", "create", "ev", "--config", "segment.bytes=1500", "--config", "index.interval.bytes=100"))
    ok(run(path, "topics", "create", "other"))
    lines = "".join(f"event number {i:04d} with some padding\n" for i in range(count))
    ok(run(path, "append", "ev", "--batch-size", "5", input=lines))


def segment_files(path):
    return sorted(os.path.join(path, "ev-0", name) for name in os.listdir(path / "ev-0") if name.endswith(".log"))


def data(path):
    return {name: open(name, "rb").read() for name in segment_files(path)}


def batch_positions(file_path):
    content = open(file_path, "rb").read()
    positions, position = [], 0
    while position < len(content):
        positions.append(position)
        position += read_header(content, position, whole=False).size_bytes
    return positions


def flip(file_path, position):
    with open(file_path, "r+b") as handle:
        handle.seek(position)
        byte = handle.read(1)
        handle.seek(position)
        handle.write(bytes([byte[0] ^ 0x55]))


def read_offsets(path, *args):
    result = run(path, "read", "ev", *args)
    return result, [json.loads(line)["offset"] for line in result.stdout.splitlines() if line.startswith("{")]


def assert_repaired(path):
    """`repair` without --yes changes nothing; with --yes it cuts, says what, and check passes."""
    before = data(path)
    dry = ok(run(path, "repair", "ev"))
    assert "would cut" in dry.stdout or "would remove" in dry.stdout, dry.stdout
    assert "Nothing was changed" in dry.stdout
    assert data(path) == before
    done = ok(run(path, "repair", "ev", "--partition", "0", "--yes"))
    line = done.stdout.splitlines()[0]
    assert line.startswith("ev-0: ") and ("removed" in line or "cut" in line), done.stdout
    ok(run(path, "check"))
    ok(run(path, "append", "ev", "after the repair"))
    result, offsets = read_offsets(path, "--partition", "0")
    ok(result)
    assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), "contiguous after the repair"
    return line


def test_d4_a_writable_command_does_not_cut_damage_below_the_recovery_point(tmp_path):
    path = tmp_path / "data"
    make_store(path)
    first = segment_files(path)[0]
    flip(first, batch_positions(first)[-1] + 2)  # a header byte of a batch an index entry points at
    assert run(path, "check").exit_code == 1
    before = data(path)
    ok(run(path, "topics", "alter", "other", "--config", "retention.ms=100000"))  # a writable command
    ok(run(path, "append", "other", "still works"))
    assert data(path) == before, "no fsynced record was cut"
    check = run(path, "check")
    assert check.exit_code == 1 and "ev-0 is damaged" in check.stdout
    result = run(path, "append", "ev", "--partition", "0", "refused")
    assert result.exit_code == 1 and "logstore repair ev --partition 0" in result.stderr
    assert "\n" not in result.stderr.strip(), "one line, no traceback"
    status = json.loads(ok(run(path, "status", "--json")).stdout)
    damaged = {(log["topic"], log["partition"]): log.get("damaged") for d in status["dirs"] for log in d["logs"]}
    assert "ev-0" in damaged[("ev", 0)] and damaged[("other", 0)] is None
    assert "DAMAGED" in ok(run(path, "status")).stdout
    described = json.loads(ok(run(path, "topics", "describe", "ev")).stdout)
    assert "damaged" in described["partitions"][0]
    line = assert_repaired(path)
    assert "readable records" in line


def test_d6_read_only_view_of_a_clean_store_reports_a_damaged_last_batch(tmp_path):
    path = tmp_path / "data"
    make_store(path)
    last = segment_files(path)[-1]
    flip(last, batch_positions(last)[-1] + 40)
    result, offsets = read_offsets(path)
    assert result.exit_code == 1 and "damaged" in result.stderr
    assert run(path, "check").exit_code == 1
    assert_repaired(path)


def test_d6_a_cut_last_byte_of_a_clean_store_is_an_error(tmp_path):
    path = tmp_path / "data"
    make_store(path)
    last = segment_files(path)[-1]
    os.truncate(last, os.path.getsize(last) - 1)
    check = run(path, "check")
    assert check.exit_code == 1 and "ERROR" in check.stdout and "torn tail" in check.stdout
    assert_repaired(path)


def test_d7_a_missing_segment_is_a_hole_not_skipped(tmp_path):
    path = tmp_path / "data"
    make_store(path)
    victim = segment_files(path)[2]
    missing_from = int(os.path.basename(victim)[:20])
    os.remove(victim)
    result, offsets = read_offsets(path, "--partition", "0", "--offset", missing_from + 1)
    assert result.exit_code == 1 and "missing" in result.stderr, (result.stdout, result.stderr)
    assert missing_from + 1 not in offsets and not [o for o in offsets if o > missing_from]
    ok(run(path, "topics", "alter", "other", "--config", "retention.ms=100000"))
    check = run(path, "check")
    assert check.exit_code == 1 and "missing" in check.stdout, check.stdout
    line = assert_repaired(path)
    assert f"offsets {missing_from}.." in line


def test_d10_a_zero_tail_blocks_no_other_topic_and_is_never_cut_silently(tmp_path):
    path = tmp_path / "data"
    make_store(path)
    last = segment_files(path)[-1]
    with open(last, "ab") as handle:
        handle.write(bytes(64))
    before = data(path)
    ok(run(path, "append", "other", "one"))  # the next writable command works for the others
    ok(run(path, "append", "other", "two"))  # and the one after cuts nothing
    assert data(path) == before
    assert run(path, "check").exit_code == 1
    line = assert_repaired(path)
    assert "64 bytes" in line
