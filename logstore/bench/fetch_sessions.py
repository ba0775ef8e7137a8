"""Fetch sessions (KIP-227) measured in bytes: what a consumer of N partitions sends and receives per
Fetch round, sessionless against an incremental fetch session, on an in-process ``KafkaServer``.

``measure(partitions=1000, rounds=5)`` makes one topic of ``partitions`` partitions with one record
each, then runs two consumers over raw Fetch v11 requests (the server's codec on one socket, so the
bytes counted are the frames on the wire, size prefix included), each for ``rounds`` rounds in two
states:

- ``idle``: nothing was appended since the last round;
- ``one_changed``: one record was appended to one partition before the round.

The sessionless consumer names every partition in every request (epoch -1) and gets every partition
back; the session consumer sends one full fetch (epoch 0, not counted in the rounds: it is the
sessionless cost once, nor is the round after it, which names every partition again since all their
offsets moved), then incremental fetches naming only the partitions whose fetch offset moved, and
gets back only the partitions that changed. Every Fetch has ``max_wait_ms`` 0, so nothing is
timed: the figures are bytes and partition counts, the same on any machine.

``python -m logstore.bench.fetch_sessions [--partitions N] [--rounds R] [--json]`` prints the table
with the goal check (an idle incremental round carries no partition and costs no bytes per
partition; a round with one change answers exactly that partition).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile

from ..fs import FileSystem
from ..records import Record
from .wire import RawClient

FETCH = 1
VERSION = 11
MAX_BYTES = 1 << 20


class FetchingConsumer:
    """A consumer of ``topic``'s partitions reduced to its Fetch requests: its fetch offsets, and with
    ``session`` an incremental fetch session (full fetch first, then only what moved)."""

    def __init__(self, wire: RawClient, topic: str, partitions: int, session: bool) -> None:
        self.wire = wire
        self.topic = topic
        self.offsets = dict.fromkeys(range(partitions), 0)
        self.session = session
        self.session_id = 0
        self.epoch = 0 if session else -1
        self.sent: dict[int, int] = {}  # the session's partitions and the fetch offsets it holds

    def fetch(self) -> dict:
        """One Fetch round: {"request_bytes", "response_bytes", "partitions_sent", "partitions_answered"}."""
        if self.session and self.epoch > 0:
            named = {p: o for p, o in self.offsets.items() if self.sent.get(p) != o}
        else:
            named = dict(self.offsets)
        body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": MAX_BYTES, "isolation_level": 0,
                "session_id": self.session_id, "session_epoch": self.epoch, "rack_id": "",
                "forgotten_topics_data": [],
                "topics": [{"topic": self.topic, "partitions": [
                    {"partition": p, "current_leader_epoch": -1, "fetch_offset": o, "log_start_offset": -1,
                     "partition_max_bytes": MAX_BYTES} for p, o in named.items()]}] if named else []}
        response, sent_bytes, received_bytes = self.wire.call(FETCH, VERSION, body)
        if response["error_code"]:
            raise RuntimeError(f"Fetch answered error {response['error_code']}")
        answered = 0
        for entry in response["responses"]:
            for data in entry["partitions"]:
                answered += 1
                if data["records"]:
                    self.offsets[data["partition_index"]] = data["high_watermark"]
        if self.session:
            if response["session_id"]:
                self.epoch = 1 if self.epoch == 0 else self.epoch + 1
                self.session_id = response["session_id"]
                self.sent.update(named)
            else:
                self.session_id, self.epoch, self.sent = 0, 0, {}
        return {"request_bytes": sent_bytes, "response_bytes": received_bytes, "partitions_sent": len(named),
                "partitions_answered": answered}


class _NoSync(FileSystem):
    """The store's file system without fsync (nothing here needs to survive a crash)."""

    def fsync(self, fd: int) -> None:
        pass

    def fsync_dir(self, path: str) -> None:
        pass


def measure(partitions: int = 1000, rounds: int = 5, work_dir: str | None = None) -> dict:
    """Bytes per Fetch round, sessionless and with a session, idle and with one partition changed
    (see the module docstring). Each figure is the median of ``rounds`` rounds, with every round's."""
    from ..manager import LogManager
    from ..server import KafkaServer

    if partitions < 1 or rounds < 1:
        raise ValueError(f"partitions and rounds must be >= 1, got {partitions!r} and {rounds!r}")
    root = tempfile.mkdtemp(prefix="logstore-fetch-sessions-", dir=work_dir)
    topic = "sessions"
    results: dict = {"partitions": partitions, "rounds": rounds}
    try:
        # Bytes are measured, not time: no fsync and small index files, so making and closing the
        # partitions costs little.
        with LogManager([root], fs=_NoSync()) as store, KafkaServer(store, listen="127.0.0.1:0") as server:
            store.create_topic(topic, partitions, {"segment.index.bytes": 4096})
            for p in range(partitions):
                store.get_log(topic, p).append([Record(value=b"x")])
            for mode in ("sessionless", "session"):
                wire = RawClient(server.bootstrap_servers, "fetch-sessions-bench")
                try:
                    consumer = FetchingConsumer(wire, topic, partitions, session=mode == "session")
                    first = consumer.fetch()  # reads the first record of each partition (a full fetch)
                    consumer.fetch()  # names the offsets that moved (all of them): not counted
                    idle = [consumer.fetch() for _ in range(rounds)]
                    changed = []
                    for r in range(rounds):
                        store.get_log(topic, (r * 7919) % partitions).append([Record(value=b"y")])
                        changed.append(consumer.fetch())
                    results[mode] = {"first": first, "idle": _summary(idle), "one_changed": _summary(changed),
                                     "session_id": consumer.session_id}
                finally:
                    wire.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    session, sessionless = results["session"], results["sessionless"]
    results["goal"] = {
        "idle_answers_no_partition": session["idle"]["partitions_answered"] == 0,
        "one_changed_answers_exactly_one": session["one_changed"]["partitions_answered"] == 1
        and session["one_changed"]["partitions_sent"] <= 1,
        "idle_bytes_ratio": (sessionless["idle"]["request_bytes"] + sessionless["idle"]["response_bytes"])
        / (session["idle"]["request_bytes"] + session["idle"]["response_bytes"]),
    }
    results["goal"]["pass"] = results["goal"]["idle_answers_no_partition"] and \
        results["goal"]["one_changed_answers_exactly_one"]
    return results


def _summary(rows: list[dict]) -> dict:
    out = {key: statistics.median(row[key] for row in rows) for key in rows[0]}
    out["all"] = rows
    return out


def format_table(results: dict) -> str:
    lines = [f"Fetch bytes per round, one consumer of {results['partitions']} partitions "
             f"(Fetch v11, median of {results['rounds']} rounds)",
             f"{'mode':<12} {'round':<12} {'request B':>10} {'response B':>11} {'sent':>6} {'answered':>9}"]
    for mode in ("sessionless", "session"):
        for state in ("idle", "one_changed"):
            row = results[mode][state]
            lines.append(f"{mode:<12} {state:<12} {row['request_bytes']:>10.0f} {row['response_bytes']:>11.0f} "
                         f"{row['partitions_sent']:>6.0f} {row['partitions_answered']:>9.0f}")
    goal = results["goal"]
    lines.append(f"first (full) fetch: request {results['session']['first']['request_bytes']} B, response "
                 f"{results['session']['first']['response_bytes']} B")
    lines.append(f"goal: an idle round answers no partition, one change answers exactly it; idle bytes "
                 f"sessionless/session {goal['idle_bytes_ratio']:.0f}x: {'PASS' if goal['pass'] else 'FAIL'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m logstore.bench.fetch_sessions", description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results = measure(args.partitions, args.rounds)
    print(json.dumps(results, indent=1) if args.json else format_table(results))
    return 0 if results["goal"]["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
