"""Consumer-group members of real clients as processes, for the group tests (``test_clients_groups``).

``GroupMember`` starts one member (``group_member.py`` for the Python clients,
``kafkajs_group_member.js`` under node for kafkajs), reads the JSON lines it prints in a thread and
lets a test wait for what it reports: its assignment after each rebalance, the records it consumed,
the offsets it committed, the errors it met. A member is stopped cleanly with ``close()`` (a line
on its stdin: the client closes, which sends LeaveGroup for a dynamic member) or with ``kill()``
(SIGKILL: nothing more goes to the broker). Every wait is bounded; ``stop()`` kills what is still
running, and the tests' fixture calls it for every member in a finalizer.

``describe_group`` asks the broker (DescribeGroups, through kafka-python's admin client) for the
group's state and members, without the clients under test.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

from .kafkajs_driver import find_kafkajs, find_node, node_env

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_MEMBER = os.path.join(HERE, "group_member.py")
KAFKAJS_MEMBER = os.path.join(HERE, "kafkajs_group_member.js")
GROUP_CLIENTS = ("kafka-python", "confluent-kafka", "aiokafka", "kafkajs")


class GroupMember:
    """One member process. ``events`` is what it printed so far (dicts, in order); ``name`` labels it
    in failure messages; its stderr goes to ``log_dir/<name>.stderr``."""

    def __init__(self, client: str, bootstrap: str, group: str, topic: str, *, log_dir: Path, name: str,
                 session_timeout_ms: int = 6000, heartbeat_interval_ms: int = 500,
                 rebalance_timeout_ms: int = 15000, instance_id: str | None = None,
                 assignor: list[str] | None = None, group_protocol: str | None = None,
                 stop_after: int | None = None, max_run_s: float = 60.0, extra_args: list[str] | None = None):
        if client not in GROUP_CLIENTS:
            raise ValueError(f"no group member runner for {client!r}")
        self.client, self.name, self.group, self.topic = client, name, group, topic
        self.session_timeout_ms = session_timeout_ms
        self.events: list[dict] = []
        self._changed = threading.Condition()
        self.stderr_path = Path(log_dir) / f"{name}.stderr"
        if client == "kafkajs":
            if instance_id or assignor or group_protocol or extra_args:
                raise ValueError("kafkajs has no static membership, assignor choice or group.protocol")
            node = find_node()
            find_kafkajs()
            options = {"brokers": [bootstrap], "group": group, "topic": topic, "client_id": name,
                       "session_timeout_ms": session_timeout_ms, "heartbeat_interval_ms": heartbeat_interval_ms,
                       "rebalance_timeout_ms": rebalance_timeout_ms, "stop_after": stop_after,
                       "max_run_s": max_run_s}
            command = [node, KAFKAJS_MEMBER, json.dumps(options)]
        else:
            command = [sys.executable, PYTHON_MEMBER, "--client", client, "--bootstrap", bootstrap, "--group", group,
                       "--topic", topic, "--client-id", name, "--session-timeout-ms", str(session_timeout_ms),
                       "--heartbeat-interval-ms", str(heartbeat_interval_ms),
                       "--rebalance-timeout-ms", str(rebalance_timeout_ms), "--max-run-s", str(max_run_s)]
            if instance_id:
                command += ["--instance-id", instance_id]
            for name_ in assignor or ():
                command += ["--assignor", name_]
            if group_protocol:
                command += ["--group-protocol", group_protocol]
            if stop_after is not None:
                command += ["--stop-after", str(stop_after)]
            command += list(extra_args or ())
        self._stderr = open(self.stderr_path, "wb")
        self.started_at = time.monotonic()
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                        cwd=HERE, env=node_env() if client == "kafkajs" else None)
        self._reader = threading.Thread(target=self._read, name=f"member-{name}", daemon=True)
        self._reader.start()

    def _read(self):
        for raw in self.process.stdout:
            line = raw.decode("utf-8", "replace").strip()
            if not line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                event = {"event": "garbage", "line": line}
            event["at"] = time.monotonic()  # when the test saw it (monotonic, comparable with the test's)
            with self._changed:
                self.events.append(event)
                self._changed.notify_all()
        with self._changed:
            self.events.append({"event": "exited", "at": time.monotonic()})
            self._changed.notify_all()

    # --- what it reported ---

    def of(self, kind: str, since: int = 0) -> list[dict]:
        with self._changed:
            return [e for e in self.events[since:] if e["event"] == kind]

    @property
    def assignment(self) -> set[int] | None:
        """The partitions it holds now, from its last rebalance callback (None before the first)."""
        with self._changed:
            for event in reversed(self.events):
                if event["event"] in ("assigned", "revoked", "lost"):
                    return set(event["assignment"])
        return None

    def consumed(self) -> list[tuple[int, int, str | None]]:
        return [tuple(r) for e in self.of("consumed") for r in e["records"]]

    def committed(self) -> dict[int, int]:
        offsets = {}
        for event in self.of("committed"):
            offsets.update({int(p): o for p, o in event["offsets"].items()})
        return offsets

    def errors(self) -> list[dict]:
        return self.of("error")

    def mark(self) -> int:
        """A position in ``events``: ``of(kind, since=mark)`` then sees only what came after."""
        with self._changed:
            return len(self.events)

    def wait_for(self, predicate, timeout_s: float, what: str, since: int = 0) -> dict:
        """The first event from ``since`` on for which ``predicate(event)`` holds, waiting up to
        ``timeout_s``; AssertionError (with what the member printed) otherwise."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                for event in self.events[since:]:
                    if predicate(event):
                        return event
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (self.events and self.events[-1]["event"] == "exited"):
                    break
                self._changed.wait(min(remaining, 0.5))
        raise AssertionError(f"{self.name}: no {what} within {timeout_s}s\n{self.report()}")

    def wait_assignment(self, expected, timeout_s: float, since: int = 0) -> dict:
        """Wait until a rebalance callback leaves it holding exactly ``expected`` (a set of partitions)."""
        expected = set(expected)
        return self.wait_for(
            lambda e: e["event"] in ("assigned", "revoked", "lost") and set(e["assignment"]) == expected,
            timeout_s, f"assignment {sorted(expected)}", since)

    def report(self, lines: int = 40) -> str:
        """What it printed (the last ``lines`` events, records abbreviated) and its stderr's tail."""
        with self._changed:
            tail = self.events[-lines:]
        shown = []
        for event in tail:
            event = {k: v for k, v in event.items() if k != "at"}
            if event.get("event") == "consumed":
                event["records"] = f"{len(event['records'])} records"
            shown.append(json.dumps(event))
        try:
            stderr = self.stderr_path.read_text(errors="replace")[-3000:]
        except OSError:
            stderr = ""
        return (f"--- {self.name} ({self.client}, pid {self.process.pid}, exit {self.process.poll()}) events:\n"
                + "\n".join(shown) + f"\n--- {self.name} stderr (tail):\n{stderr}")

    # --- stopping ---

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self, timeout_s: float = 20.0) -> None:
        """Ask it to close its consumer and exit; waits for the exit (kills it after ``timeout_s``,
        and fails)."""
        if self.alive:
            try:
                self.process.stdin.write(b"close\n")
                self.process.stdin.flush()
            except (BrokenPipeError, OSError):
                pass
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.name} did not close within {timeout_s}s\n{self.report()}") from None
        self._reader.join(5)

    def kill(self) -> None:
        """SIGKILL: no LeaveGroup, no commit, nothing more to the broker."""
        if self.alive:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)
        self._reader.join(5)

    def wait_exit(self, timeout_s: float) -> int:
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} did not exit within {timeout_s}s\n{self.report()}") from None

    def stop(self) -> None:
        """For finalizers: kill it if it runs, release its pipes."""
        try:
            self.kill()
        finally:
            for stream in (self.process.stdin, self.process.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
            self._stderr.close()


def wait_split(members, partitions, timeout_s: float, what: str = "", sizes=None, since=None) -> dict:
    """Wait until ``members`` hold disjoint assignments that together are ``partitions``, of
    ``sizes`` (default: equal shares), as their last rebalance callbacks say; returns
    {member name: assignment}. ``since``: per member, a mark from which a callback must have come."""
    partitions = set(partitions)
    if sizes is None:
        share, extra = divmod(len(partitions), len(members))
        sizes = sorted([share + 1] * extra + [share] * (len(members) - extra))
    deadline = time.monotonic() + timeout_s
    while True:
        holding = {m.name: m.assignment for m in members}
        fresh = since is None or all(
            any(e["event"] in ("assigned", "revoked", "lost") for e in m.events[since[i]:])
            for i, m in enumerate(members))
        if fresh and all(a is not None for a in holding.values()):
            together = [p for a in holding.values() for p in a]
            if (sorted(together) == sorted(partitions) and sorted(len(a) for a in holding.values()) == sorted(sizes)):
                return holding
        if time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    reports = "\n".join(m.report() for m in members)
    raise AssertionError(f"{what or 'split'}: the members never split {sorted(partitions)} as {sizes} within "
                         f"{timeout_s}s; they hold {holding}\n{reports}")


def decode_assignment(data: bytes | None) -> dict[str, list[int]]:
    """The consumer protocol's assignment bytes (version, [topic, [partition]], user data) as
    {topic: partitions}; {} for empty bytes (a member without an assignment)."""
    if not data:
        return {}
    data = bytes(data)
    position = 2  # the version
    (topics,) = struct.unpack_from(">i", data, position)
    position += 4
    out = {}
    for _ in range(max(topics, 0)):
        (length,) = struct.unpack_from(">h", data, position)
        name = data[position + 2:position + 2 + length].decode()
        position += 2 + length
        (count,) = struct.unpack_from(">i", data, position)
        position += 4
        out[name] = list(struct.unpack_from(f">{max(count, 0)}i", data, position))
        position += 4 * max(count, 0)
    return out


def describe_group(bootstrap: str, group: str, timeout_s: float = 10.0) -> dict:
    """DescribeGroups (API 15) through kafka-python's admin client, without the clients under test:
    {"state", "protocol_type", "protocol", "members": [{"member_id", "group_instance_id",
    "client_id", "assignment": {topic: partitions}}]}.

    kafka-python asks for the authorized operations and cannot parse some answers to that (Tansu's),
    and decodes the assignments its own way; this asks for none and decodes them here."""
    from kafka import KafkaAdminClient
    from kafka.protocol.admin import DescribeGroupsRequest

    class Admin(KafkaAdminClient):
        def _describe_groups_request(self, group_ids):
            return DescribeGroupsRequest(groups=list(group_ids), include_authorized_operations=False)

        def _describe_groups_process_response(self, response):
            out = {}
            for g in response.groups:
                out[g.group_id] = {
                    "error_code": g.error_code, "state": g.group_state, "protocol_type": g.protocol_type,
                    "protocol": g.protocol_data,
                    "members": [{"member_id": m.member_id, "group_instance_id": getattr(m, "group_instance_id", None),
                                 "client_id": m.client_id, "assignment": decode_assignment(m.member_assignment)}
                                for m in g.members]}
            return out

    admin = Admin(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout_s * 1000))
    try:
        return admin.describe_groups([group])[group]
    finally:
        admin.close()
