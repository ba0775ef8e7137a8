"""Times as people write them on the command line: `read --from-datetime ISO` (on a store, over a
broker, beside the process hosting a store) starts each partition where `--from-timestamp MS`
would; `read --timestamps ms|iso` and `dump --timestamps` print ISO 8601 UTC with milliseconds;
a time without an offset is the machine's local time (TZ decides), in `read --from-datetime`,
`groups reset-offsets --to-datetime` and `offsets --time` alike; a bad time is a usage error
(exit 2, one line naming the value)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from logstore import LogManager, Record
from logstore.cli.main import main
from logstore.clock import format_iso_ms, parse_iso_ms

BASE_MS = 1_795_957_500_000  # 2026-11-29T13:05:00.000Z
BASE_ISO = "2026-11-29T13:05:00.000Z"


def run(*args: str, tz: str = "UTC0", input: str = "") -> subprocess.CompletedProcess:
    """``logstore ARGS`` in a fresh interpreter (what a user sees), in time zone ``tz``."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("LOGSTORE_")}
    env["TZ"] = tz
    env["PYTHONWARNINGS"] = "default"
    return subprocess.run([sys.executable, "-P", "-m", "logstore.cli", *map(str, args)], input=input,
                          capture_output=True, text=True, env=env, timeout=60, start_new_session=True)


def ok(result) -> str:
    assert result.returncode == 0 and result.stderr == "", (result.returncode, result.stderr)
    return result.stdout


def usage_error(result, *words: str) -> None:
    lines = result.stderr.splitlines()
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert all(word in lines[0] for word in words), lines[0]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    """Topic ``t``: partition 0 holds records at BASE+0s, +2s, +4s (offsets 0..2), partition 1 at
    BASE+1s, +3s (offsets 0..1); the value says the second."""
    path = str(tmp_path_factory.mktemp("times") / "d")
    with LogManager([path]) as manager:
        manager.create_topic("t", 2)
        for second in range(5):
            manager.append("t", [Record(None, f"s{second}".encode(), (), BASE_MS + second * 1000)],
                           partition=second % 2)
    return path


def values(jsonl: str) -> list[str]:
    return [json.loads(line)["value"] for line in jsonl.splitlines()]


def test_iso_parsing_and_formatting():
    assert parse_iso_ms("2026-11-29T13:05:00Z") == BASE_MS
    assert parse_iso_ms(" 2026-11-29T14:05:00.250+01:00 ") == BASE_MS + 250
    assert parse_iso_ms("2026-11-29T08:05:00-05:00") == BASE_MS
    assert parse_iso_ms("1970-01-01T00:00Z") == 0
    assert format_iso_ms(BASE_MS + 7) == "2026-11-29T13:05:00.007Z"
    assert format_iso_ms(0) == "1970-01-01T00:00:00.000Z"
    assert parse_iso_ms(format_iso_ms(BASE_MS + 123)) == BASE_MS + 123
    for bad in ("yesterday", "", "2026-13-01", "1969-12-31T23:59:59Z", "12:00"):
        with pytest.raises(ValueError, match="ISO 8601|before 1970"):
            parse_iso_ms(bad)


def test_from_datetime_starts_where_from_timestamp_does(store):
    for when, expected in ((BASE_ISO, ["s0", "s2", "s4", "s1", "s3"]),
                           ("2026-11-29T13:05:02.500Z", ["s4", "s3"]),  # between records: the next one
                           ("2026-11-29T14:05:03+01:00", ["s4", "s3"]),
                           ("2026-11-29T13:05:06Z", []),  # after every record: each log's end
                           ("2026-11-29", ["s0", "s2", "s4", "s1", "s3"])):  # a date: its midnight
        assert values(ok(run("--dir", store, "read", "t", "--from-datetime", when))) == expected, when
    by_ms = ok(run("--dir", store, "read", "t", "--from-timestamp", BASE_MS + 3000))
    assert ok(run("--dir", store, "read", "t", "--from-datetime", "2026-11-29T13:05:03Z")) == by_ms
    # one partition, and with --max-records
    assert values(ok(run("--dir", store, "read", "t", "-p", "1", "--from-datetime", "2026-11-29T13:05:02Z"))) == ["s3"]
    assert values(ok(run("--dir", store, "read", "t", "--from-datetime", BASE_ISO, "--max-records", "1"))) == ["s0"]


def test_a_time_without_an_offset_is_local_time(store):
    # 18:35:03 in India (+05:30, no daylight saving) is 13:05:03Z; in UTC it is after every record.
    india = values(ok(run("--dir", store, "read", "t", "--from-datetime", "2026-11-29T18:35:03", tz="IST-5:30")))
    assert india == ["s4", "s3"]
    assert values(ok(run("--dir", store, "read", "t", "--from-datetime", "2026-11-29T18:35:03"))) == []
    # the same rule in offsets --time (UTC before) and groups reset-offsets --to-datetime
    assert ok(run("--dir", store, "offsets", "t", "--time", "2026-11-29T18:35:03", tz="IST-5:30")) == "t:0:2\nt:1:1\n"
    assert ok(run("--dir", store, "offsets", "t", "--time", "2026-11-29T13:05:03Z", tz="IST-5:30")) == "t:0:2\nt:1:1\n"
    plan = ok(run("--dir", store, "groups", "reset-offsets", "g", "--topic", "t", "--to-datetime",
                  "2026-11-29T18:35:03", tz="IST-5:30"))
    rows = [line.split() for line in plan.splitlines()[1:3]]
    assert [row[-1] for row in rows] == ["2", "1"], plan


@pytest.mark.parametrize("args, words", [
    (["--from-datetime", "yesterday"], ["--from-datetime", "'yesterday'", "ISO 8601"]),
    (["--from-datetime", "2026-11-29T25:00"], ["--from-datetime", "2026-11-29T25:00"]),
    (["--from-datetime", "1969-07-20T20:17:40Z"], ["--from-datetime", "before 1970"]),
    (["--from-datetime", BASE_ISO, "--from-timestamp", "5"], ["--from-datetime", "--from-timestamp"]),
    (["--from-datetime", BASE_ISO, "--offset", "end"], ["--from-datetime", "--offset"]),
    (["--from-datetime", BASE_ISO, "--group", "g"], ["--group", "--from-datetime"]),
    (["--timestamps", "utc"], ["--timestamps", "utc"]),
])
def test_bad_times_are_usage_errors(store, args, words):
    usage_error(run("--dir", store, "read", "t", *args), *words)


def test_other_bad_times_are_usage_errors(store):
    usage_error(run("--dir", store, "groups", "reset-offsets", "g", "--topic", "t", "--to-datetime", "soon"),
                "--to-datetime", "'soon'", "ISO 8601")
    usage_error(run("--dir", store, "offsets", "t", "--time", "1960-01-01T00:00:00Z"), "--time", "before 1970")
    usage_error(run("dump", "--timestamps", "utc", store), "--timestamps")


def test_timestamps_iso_in_jsonl_and_value_output(store):
    printed = ok(run("--dir", store, "read", "t", "-p", "0", "--timestamps", "iso"))
    lines = [json.loads(line) for line in printed.splitlines()]
    assert [line["timestamp"] for line in lines] == [BASE_ISO, "2026-11-29T13:05:02.000Z", "2026-11-29T13:05:04.000Z"]
    as_ms = [json.loads(line) for line in ok(run("--dir", store, "read", "t", "-p", "0")).splitlines()]
    assert [line["timestamp"] for line in as_ms] == [BASE_MS, BASE_MS + 2000, BASE_MS + 4000]  # the default: ms
    assert ok(run("--dir", store, "read", "t", "-p", "0", "--timestamps", "ms")) == \
        ok(run("--dir", store, "read", "t", "-p", "0"))
    # value: a timestamp column only when asked for
    assert ok(run("--dir", store, "read", "t", "-p", "1", "--format", "value")) == "s1\ns3\n"
    assert ok(run("--dir", store, "read", "t", "-p", "1", "--format", "value", "--timestamps", "iso")) == \
        "2026-11-29T13:05:01.000Z\ts1\n2026-11-29T13:05:03.000Z\ts3\n"
    assert ok(run("--dir", store, "read", "t", "-p", "1", "--format", "value", "--timestamps", "ms")) == \
        f"{BASE_MS + 1000}\ts1\n{BASE_MS + 3000}\ts3\n"


def test_dump_timestamps_iso(store):
    segment = Path(store) / "t-0" / "00000000000000000000"
    text = ok(run("dump", "--records", "--timestamps", "iso", f"{segment}.log"))
    assert f"base_timestamp: {BASE_ISO} max_timestamp: {BASE_ISO} " in text
    assert f"| offset: 2 timestamp: 2026-11-29T13:05:04.000Z key: null value: b's4'" in text
    assert "_ms:" not in text
    assert f"timestamp_ms: {BASE_MS + 4000} " in ok(run("dump", "--records", f"{segment}.log"))  # the default
    index = ok(run("dump", "--timestamps", "iso", f"{segment}.timeindex"))
    assert "entry: 0 timestamp: 2026-11-29T13:05:04.000Z offset: 2" in index  # the largest so far


def test_read_through_click_takes_the_same_options(store):
    result = CliRunner().invoke(main, ["--dir", store, "read", "t", "-p", "1", "--from-datetime",
                                       "2026-11-29T13:05:02Z", "--format", "value", "--timestamps", "iso"])
    assert (result.exit_code, result.stdout) == (0, "2026-11-29T13:05:03.000Z\ts3\n"), result.stderr


def _serve(path: str) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen([sys.executable, "-P", "-m", "logstore.cli", "--dir", path, "serve", "--listen",
                                "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = process.stdout.readline()
    assert "listening on " in line, process.stderr.read() if process.poll() is not None else line
    return process, line.split("listening on ", 1)[1].split()[0]


def test_from_datetime_and_iso_timestamps_over_a_broker(store, tmp_path):
    copy = tmp_path / "served"
    ok(run("mirror", "--from", store, "--to", copy, "t"))
    server, address = _serve(str(copy))
    try:
        for when in ("2026-11-29T13:05:02.500Z", "2026-11-29T18:35:02.500"):
            over = ok(run("--bootstrap-server", address, "read", "t", "--from-datetime", when, "--timestamps", "iso",
                          tz="IST-5:30"))
            assert sorted(over.splitlines()) == sorted(
                ok(run("--dir", store, "read", "t", "--from-datetime", when, "--timestamps", "iso",
                       tz="IST-5:30")).splitlines())
            assert sorted(values(over)) == ["s3", "s4"]
        assert json.loads(over.splitlines()[0])["timestamp"].endswith("Z")
        usage_error(run("--bootstrap-server", address, "read", "t", "--from-datetime", "noon"), "--from-datetime",
                    "'noon'")
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(60) == 0
        server.stdout.close()
        server.stderr.close()


def test_from_datetime_beside_the_process_hosting_the_store(store, tmp_path):
    copy = tmp_path / "hosted"
    ok(run("mirror", "--from", store, "--to", copy, "t"))
    # a reader of group g hosts the store (it serves it to the group's other readers)
    host = subprocess.Popen([sys.executable, "-P", "-m", "logstore.cli", "--dir", str(copy), "read", "t", "--group",
                             "g", "--follow", "--format", "value"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        assert host.stdout.readline() != ""  # it has read: the store is hosted
        assert values(ok(run("--dir", copy, "read", "t", "--from-datetime", "2026-11-29T13:05:03Z"))) == ["s4", "s3"]
    finally:
        host.send_signal(signal.SIGINT)
        _out, err = host.communicate(timeout=60)
    assert host.returncode == 0 and err == "", err
