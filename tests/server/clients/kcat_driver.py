"""kcat (Debian's package: kcat 1.7.1 on librdkafka 2.0.2) behind the drivers' interface (see
``clients/__init__.py``), run as a subprocess with a time limit on every call.

Where kcat is missing ``find_kcat`` skips the test, naming it and its install command (a failure
under LOGSTORE_REQUIRE_TOOLS, as CI sets: ``external_tools``). What kcat can express, from its
source (edenhill/kcat ``kcat.c``, ``json.c``):

- Produce reads stdin split by a message delimiter (``-D``) and a key delimiter (``-K``); both are
  multi-byte strings here that the records must not contain. A line without the key delimiter has a
  null key; ``-Z`` turns an empty key or value into null, so one kcat run cannot send both an empty
  and a null value: records are sent in runs, one kcat process per run of compatible records (and
  per distinct header set, since ``-H`` applies to every message of a run). An empty line is skipped
  by kcat, so a record with a null key and an empty value cannot be sent at all (ValueError).
- Headers: ``-H name=value``, or ``-H name`` for a null value; argv cannot carry a NUL byte.
- kcat cannot set a record's timestamp (``sets_timestamps = False``).
- Offsets come from the delivery reports kcat prints at verbosity 3 (``-v -v``): "Message delivered
  to partition P (offset O)", in the order produced; so a partition must be given.
- Consume (``-C -J``) prints one JSON object per record. yajl escapes only control characters,
  quotes and backslashes and passes other bytes through raw, so decoding each line as Latin-1, then
  ``json.loads``, then encoding the strings back to Latin-1 gives the exact key, value and header
  bytes; nulls are JSON null.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading

import external_tools

from . import EARLIEST, LATEST, ClientError, ClientTimeout, Deadline, Driver, WireRecord, parse_start

MESSAGE_DELIMITER = b"<~kcat-record-end~>"
KEY_DELIMITER = b"<~kcat-key-end~>"
_DELIVERED = re.compile(rb"Message delivered to partition (-?\d+) \(offset (-?\d+)\)")
_FAILED = re.compile(rb"Delivery failed for message: (.*)")
_REACHED_END = re.compile(rb"Reached end of topic .* at offset (-?\d+)")


def find_kcat() -> str:
    """The kcat executable; skips the test where it is missing (fails where it is required; CI
    installs Debian's ``kcat``)."""
    return external_tools.require("kcat")


def _latin1(text: str | None) -> bytes | None:
    return None if text is None else text.encode("latin-1")


class KcatDriver(Driver):
    name = "kcat"
    sets_timestamps = False
    incremental_alter = False
    admin = False  # kcat has metadata (-L) and offsets (-Q) only: list_topics and list_offset

    def __init__(self, librdkafka_dir: str | None = None):
        """``librdkafka_dir``: a directory holding another ``librdkafka.so.1`` to run kcat with
        (LD_LIBRARY_PATH); None runs it with the system's (Debian's) librdkafka."""
        self.executable = find_kcat()
        self.env = dict(os.environ)
        if librdkafka_dir is not None:
            self.env["LD_LIBRARY_PATH"] = librdkafka_dir

    def _run(self, args: list, *, stdin: bytes = b"", timeout_s: float, what: str) -> subprocess.CompletedProcess:
        try:
            done = subprocess.run([self.executable, *args], input=stdin, capture_output=True, env=self.env,
                                  timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise ClientTimeout(f"kcat {what} took more than {timeout_s}s; stderr: {exc.stderr!r}") from exc
        if done.returncode != 0:
            raise ClientError("KCAT_FAILED", f"kcat {what} exited {done.returncode}: "
                                             f"{done.stderr.decode(errors='replace').strip()}")
        return done

    # --- produce ---

    @staticmethod
    def _line(record, null_mode: bool) -> bytes:
        for part in (record.key, record.value):
            if part is not None and (MESSAGE_DELIMITER in part or KEY_DELIMITER in part):
                raise ValueError(f"kcat driver: the record {record!r} contains a delimiter")
        if record.key is None:
            if null_mode:  # -Z: an empty key before the delimiter becomes null
                return KEY_DELIMITER + (record.value or b"")
            return record.value  # no key delimiter: null key
        return record.key + KEY_DELIMITER + (record.value or b"")

    @staticmethod
    def _null_mode(record) -> bool | None:
        """True: the record needs -Z (a null value); False: it must not have it (an empty key or
        value, which -Z would turn into null); None: either works."""
        if record.key is None and record.value == b"":
            raise ValueError("kcat cannot send a record with a null key and an empty value (it skips empty lines)")
        needs = record.value is None
        forbids = record.key == b"" or record.value == b""
        if needs and forbids:
            raise ValueError(f"kcat cannot send {record!r}: -Z would make its empty key or value null")
        return True if needs else False if forbids else None

    def _runs(self, records):
        """Consecutive records that one kcat process can send: same headers, compatible -Z."""
        runs: list[tuple[tuple, bool | None, list]] = []
        for record in records:
            if record.timestamp_ms is not None:
                raise ValueError("kcat cannot set a record's timestamp")
            headers = tuple(record.headers or ())
            mode = self._null_mode(record)
            if runs and runs[-1][0] == headers and (mode is None or runs[-1][1] in (None, mode)):
                last_headers, last_mode, members = runs[-1]
                runs[-1] = (last_headers, last_mode if mode is None else mode, members + [record])
            else:
                runs.append((headers, mode, [record]))
        return runs

    def produce(self, bootstrap, topic, records, *, acks=-1, compression="none", partition=None, timeout_s=30.0,
                config=None):
        if partition is None:
            raise ValueError("kcat driver: give a partition (its delivery reports are matched to records in order)")
        deadline = Deadline(timeout_s)
        results = []
        for headers, null_mode, members in self._runs(records):
            args = ["-b", bootstrap, "-P", "-t", topic, "-p", str(partition), "-K", KEY_DELIMITER,
                    "-D", MESSAGE_DELIMITER, "-v", "-v", "-m", str(max(1, int(deadline.remaining()))),
                    "-X", f"acks={acks}", "-X", f"compression.codec={compression}",
                    "-X", f"message.timeout.ms={int(max(deadline.remaining(), 1) * 1000)}"]
            if compression != "none":
                args += ["-d", "msg"]  # librdkafka says "not compressing batch" at debug level only
            if null_mode:
                args.append("-Z")
            for name, value in headers:
                name_bytes = name.encode()
                if b"=" in name_bytes or b"\x00" in name_bytes or (value is not None and b"\x00" in value):
                    raise ValueError(f"kcat cannot send the header {(name, value)!r} (argv: no '=' in a name, no NUL)")
                args += ["-H", name_bytes if value is None else name_bytes + b"=" + value]
            for key, value in (config or {}).items():
                args += ["-X", f"{key}={value}"]
            stdin = b"".join(self._line(record, bool(null_mode)) + MESSAGE_DELIMITER for record in members)
            done = self._run(args, stdin=stdin, timeout_s=deadline.remaining(), what=f"produce to {topic}")
            # librdkafka logs this (debug "msg") when the broker's ApiVersions lack what it requires
            # for the codec and sends the batch uncompressed: that is not a produce with the codec.
            refused = [line for line in done.stderr.splitlines() if b"not compressing batch" in line]
            if refused:
                raise ClientError("CODEC_NOT_USED", refused[0].decode(errors="replace"))
            failed = _FAILED.findall(done.stderr)
            if failed:
                raise ClientError("DELIVERY_FAILED", failed[0].decode(errors="replace"))
            delivered = [(int(p), int(o)) for p, o in _DELIVERED.findall(done.stderr)]
            if len(delivered) != len(members):
                raise ClientError("KCAT_FAILED", f"kcat reported {len(delivered)} deliveries for {len(members)} "
                                                 f"records: {done.stderr.decode(errors='replace')}")
            results += [(p, o if o >= 0 else None) for p, o in delivered]  # acks=0: offset -1001
        return results

    # --- consume ---

    @staticmethod
    def _record(line: bytes) -> WireRecord:
        message = json.loads(line.decode("latin-1"))
        headers = message.get("headers") or []
        pairs = tuple((_latin1(headers[i]).decode("utf-8"), _latin1(headers[i + 1]))
                      for i in range(0, len(headers), 2))
        return WireRecord(message["offset"], _latin1(message["key"]), _latin1(message["payload"]), pairs,
                          message["ts"])

    def consume(self, bootstrap, topic, partition, *, start=EARLIEST, count, timeout_s=30.0, on_positioned=None,
                config=None):
        kind, ts = parse_start(start)
        offset = {EARLIEST: "beginning", LATEST: "end"}.get(kind) or f"s@{ts}"
        # -u: unbuffered, so records printed before a timeout are not lost in stdio buffers.
        args = [self.executable, "-b", bootstrap, "-C", "-t", topic, "-p", str(partition), "-o", offset,
                "-c", str(count), "-J", "-u", "-m", str(max(1, int(timeout_s)))]
        for key, value in (config or {}).items():
            args += ["-X", f"{key}={value}"]
        deadline = Deadline(timeout_s)
        process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   env=self.env)
        positioned = threading.Event()
        stderr_lines: list[bytes] = []

        def read_stderr():
            for line in process.stderr:
                stderr_lines.append(line)
                if _REACHED_END.search(line):  # printed once the start offset is resolved and reached
                    positioned.set()

        reader = threading.Thread(target=read_stderr, daemon=True)
        reader.start()
        lines: list[bytes] = []

        def read_stdout():
            for line in process.stdout:
                if line.strip():
                    lines.append(line)
                    positioned.set()  # data arrived: the position is resolved too

        writer = threading.Thread(target=read_stdout, daemon=True)
        writer.start()
        try:
            if on_positioned is not None:
                if not positioned.wait(deadline.remaining()):
                    raise ClientTimeout(f"kcat never reached the start of {topic} [{partition}]: "
                                        f"{b''.join(stderr_lines).decode(errors='replace')}")
                on_positioned()
            try:
                process.wait(deadline.remaining())
            except subprocess.TimeoutExpired:
                pass  # what arrived by then is the answer
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()
            writer.join(5)
            reader.join(5)
        if process.returncode not in (0, -9):
            raise ClientError("KCAT_FAILED", f"kcat consume exited {process.returncode}: "
                                             f"{b''.join(stderr_lines).decode(errors='replace')}")
        return [self._record(line) for line in lines]

    def list_offset(self, bootstrap, topic, partition, spec, *, timeout_s=15.0):
        # -Q asks ListOffsets through offsets_for_times; -2 and -1 are Kafka's "earliest" and
        # "latest" timestamps, which librdkafka passes through.
        ts = {EARLIEST: -2, LATEST: -1}.get(spec)
        if ts is None:
            _, ts = parse_start(spec)
        done = self._run(["-b", bootstrap, "-Q", "-t", f"{topic}:{partition}:{ts}", "-J",
                          "-m", str(max(1, int(timeout_s)))], timeout_s=timeout_s, what=f"query offsets of {topic}")
        answer = json.loads(done.stdout)[topic][str(partition)]
        if "error" in answer:
            raise ClientError("KCAT_FAILED", answer["error"])
        return answer["offset"]

    def metadata(self, bootstrap, topic: str | None = None, *, timeout_s=15.0) -> dict:
        """``kcat -L -J``: brokers, controller id, topics with their partitions' leader, replicas, ISR."""
        args = ["-b", bootstrap, "-L", "-J", "-m", str(max(1, int(timeout_s)))] + (["-t", topic] if topic else [])
        return json.loads(self._run(args, timeout_s=timeout_s, what="list metadata").stdout)

    def list_topics(self, bootstrap, *, timeout_s=15.0):
        return {topic["topic"] for topic in self.metadata(bootstrap, timeout_s=timeout_s)["topics"]}


def version() -> str:
    """kcat's version line (it names its librdkafka); RuntimeError where kcat is missing (this is
    for the report header, not a test)."""
    executable = external_tools.find("kcat")
    if executable is None:
        raise RuntimeError(external_tools.reason("kcat"))
    done = subprocess.run([executable, "-V"], capture_output=True, timeout=10)
    return done.stdout.decode(errors="replace").strip().splitlines()[-1]
