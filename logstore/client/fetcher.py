"""``Fetcher``: the consumer's reading half: positions, Fetch requests to each partition's leader,
fetched records buffered until ``poll`` hands them out, and offsets looked up with ListOffsets.

What it owns:
- a position per assigned partition (the offset of the next record ``poll`` returns), or None until
  it is known (a committed offset, a reset, a seek);
- fetching ahead: one Fetch request in flight per broker, for the partitions whose buffer is empty
  and whose position is known; ``drain`` hands out buffered records (at most ``max.poll.records``) and
  advances the positions, and the consumer sends the next requests before the application processes
  what it got, so the broker reads while the application works;
- what a response means per partition: records from the fetch offset on (a batch may begin before
  it), control batches skipped, and with ``read_committed`` records up to the last stable offset
  only and the aborted transactions' records left out; a partition whose batches held nothing to
  return moves past them (a compacted or control-only stretch); ``OFFSET_OUT_OF_RANGE`` resets the
  position by ``auto.offset.reset`` (or raises with ``none``); a leader change refreshes the metadata;
- a seek discards what was buffered or is in flight for the partition (a response for an offset
  other than the position is dropped);
- ListOffsets: ``list_offsets({tp: timestamp})`` for resets (``EARLIEST``, ``LATEST``) and
  ``offsets_for_times``;
- an incremental fetch session per broker (``fetch_session.FetchSessionHandler``, KIP-227): after
  the first, full, Fetch a request names only the partitions whose fetch offset changed and an
  answer holds only the partitions that changed, so a consumer of many partitions sends and
  receives what changed; sessionless where the broker keeps none.

Not thread-safe: the consumer's thread owns it (the heartbeat thread never touches it).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Iterable

from ..errors import OffsetOutOfRangeError
from ..group.consumer import ConsumerRecord
from ..server.protocol import errors as kafka_errors
from ..server.wire_records.decode import decode_fetch
from .cluster import NetworkClient
from .errors import BrokerResponseError, NetworkError, NoOffsetForPartitionError
from .fetch_session import FetchSessionHandler

logger = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
EARLIEST, LATEST = -2, -1  # ListOffsets' special timestamps
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
_REFRESH_ERRORS = {kafka_errors.NOT_LEADER_OR_FOLLOWER, kafka_errors.UNKNOWN_TOPIC_OR_PARTITION,
                   kafka_errors.LEADER_NOT_AVAILABLE, kafka_errors.KAFKA_STORAGE_ERROR,
                   kafka_errors.FETCH_SESSION_ID_NOT_FOUND}


_SESSION_ERRORS = {kafka_errors.FETCH_SESSION_ID_NOT_FOUND, kafka_errors.INVALID_FETCH_SESSION_EPOCH}


def _error(what: str, code: int, message: str | None = None) -> BrokerResponseError:
    name = kafka_errors.NAMES.get(code, f"error {code}")
    return BrokerResponseError(f"{what}: {name}{': ' + message if message else ''}", code, name)


class Fetcher:
    """Positions and fetched records of the assigned partitions (see the module docstring)."""

    def __init__(self, network: NetworkClient, *, fetch_min_bytes: int, fetch_max_bytes: int,
                 max_partition_fetch_bytes: int, fetch_max_wait_ms: int, max_poll_records: int,
                 isolation_level: int, auto_offset_reset: str, fetch_sessions: bool = True) -> None:
        self._network = network
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.max_poll_records = max_poll_records
        self.isolation_level = isolation_level
        self.auto_offset_reset = auto_offset_reset
        self.positions: dict[TopicPartition, int | None] = {}
        self.high_watermarks: dict[TopicPartition, int] = {}
        self._buffers: dict[TopicPartition, list[ConsumerRecord]] = {}
        self._buffer_ends: dict[TopicPartition, int] = {}  # the next offset to fetch after a buffer
        # connection -> (correlation id, offsets, fetch session)
        self._in_flight: dict[object, tuple[int, dict[TopicPartition, int], FetchSessionHandler]] = {}
        self._paused: set[TopicPartition] = set()
        self.fetch_sessions = fetch_sessions
        self._sessions: dict[int, FetchSessionHandler] = {}  # broker node id -> its fetch session

    # --- assignment and positions ----------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Hold exactly ``partitions``: positions of partitions kept stay, others are forgotten."""
        wanted = list(dict.fromkeys(partitions))
        self.positions = {tp: self.positions.get(tp) for tp in wanted}
        self._buffers = {tp: records for tp, records in self._buffers.items() if tp in self.positions}
        self._paused &= set(wanted)

    def forget_positions(self, partitions: Iterable[TopicPartition]) -> None:
        """Positions unknown again (and nothing buffered) for ``partitions``: after a rebalance
        they start again from the group's commits."""
        for tp in partitions:
            self.positions[tp] = None
            self._buffers.pop(tp, None)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """The next record returned for ``tp`` is at ``offset``; what was fetched before is dropped."""
        if tp not in self.positions:
            raise ValueError(f"{tp[0]}-{tp[1]} is not assigned to this consumer (assigned: {sorted(self.positions)})")
        self.positions[tp] = offset
        self._buffers.pop(tp, None)

    def pause(self, partitions: Iterable[TopicPartition], paused: bool) -> None:
        """Stop (or resume) fetching ``partitions``; their positions stay."""
        for tp in partitions:
            if paused:
                self._paused.add(tp)
            else:
                self._paused.discard(tp)

    def missing_positions(self) -> list[TopicPartition]:
        """Assigned partitions whose position is not known yet."""
        return [tp for tp, offset in self.positions.items() if offset is None]

    def reset_positions(self, partitions: list[TopicPartition], strategy: str | None = None) -> None:
        """Positions from ``auto.offset.reset`` (or ``strategy``): the log start or end offset."""
        strategy = strategy or self.auto_offset_reset
        if not partitions:
            return
        if strategy == "none":
            names = ", ".join(f"{topic}-{partition}" for topic, partition in partitions)
            raise NoOffsetForPartitionError(f"no position for {names} and auto.offset.reset is none: seek "
                                            "first, or set auto.offset.reset to earliest or latest", partitions)
        found = self.list_offsets({tp: EARLIEST if strategy == "earliest" else LATEST for tp in partitions})
        for tp, (offset, _) in found.items():
            if tp in self.positions:
                self.positions[tp] = offset
                self._buffers.pop(tp, None)

    # --- ListOffsets -----------------------------------------------------------------------------

    def list_offsets(self, timestamps: dict[TopicPartition, int]) -> dict[TopicPartition, tuple[int, int]]:
        """``list_offsets`` on this consumer's network client, at its isolation level."""
        return list_offsets(self._network, timestamps, self.isolation_level)

    # --- fetching --------------------------------------------------------------------------------

    def has_buffered(self) -> bool:
        return any(self._buffers.values())

    def send_fetches(self) -> int:
        """A Fetch to each broker that has none in flight, for its fetchable partitions; how many
        were sent."""
        busy = {tp for _, offsets, _ in self._in_flight.values() for tp in offsets}
        by_leader: dict[int, dict[TopicPartition, int]] = defaultdict(dict)
        for tp, offset in self.positions.items():
            buffered = self._buffers.get(tp)
            # A partition is fetched again while less than one poll's worth is buffered, so its
            # next records are on the way before the buffer runs dry.
            if offset is None or tp in busy or tp in self._paused or \
                    (buffered and len(buffered) >= self.max_poll_records):
                continue
            if buffered:
                offset = self._buffer_ends[tp]
            try:
                by_leader[_leader_of(self._network, tp)][tp] = offset
            except NetworkError as exc:
                logger.warning("consumer: no leader for %s-%d: %s", tp[0], tp[1], exc)
        sent = 0
        for leader, offsets in by_leader.items():
            try:
                connection = self._network.connection(leader)
            except NetworkError:
                continue  # backing off: the next poll tries again
            if connection in self._in_flight:
                continue
            session = self._sessions.get(leader)
            if session is None:
                session = self._sessions[leader] = FetchSessionHandler(leader, enabled=self.fetch_sessions)
            try:
                version = connection.version_of("Fetch")
            except NetworkError:
                version = 0
            max_bytes = self.max_partition_fetch_bytes
            session_id, epoch, named, forgotten = session.build(
                {tp: (offset, max_bytes) for tp, offset in offsets.items()}, version)
            topics: dict[str, list] = defaultdict(list)
            for (topic, partition), (offset, partition_max_bytes) in named.items():
                topics[topic].append({"partition": partition, "fetch_offset": offset,
                                      "partition_max_bytes": partition_max_bytes})
            forgotten_topics: dict[str, list] = defaultdict(list)
            for topic, partition in forgotten:
                forgotten_topics[topic].append(partition)
            body = {"replica_id": -1, "max_wait_ms": self.fetch_max_wait_ms, "min_bytes": self.fetch_min_bytes,
                    "max_bytes": self.fetch_max_bytes, "isolation_level": self.isolation_level,
                    "session_id": session_id, "session_epoch": epoch, "rack_id": "",
                    "forgotten_topics_data": [{"topic": name, "partitions": parts}
                                              for name, parts in forgotten_topics.items()],
                    "topics": [{"topic": name, "partitions": parts} for name, parts in topics.items()]}
            try:
                self._in_flight[connection] = (connection.send("Fetch", body), offsets, session)
            except NetworkError as exc:
                session.failed()
                logger.warning("consumer: fetch from broker %d failed: %s", leader, exc)
                continue
            sent += 1
        return sent

    @property
    def waiting(self) -> bool:
        """Whether a Fetch is in flight (none: every broker was unreachable, or backing off)."""
        return bool(self._in_flight)

    def wait_for_responses(self, timeout_ms: int) -> None:
        """Receive Fetch responses for up to ``timeout_ms`` (less once some records are buffered)."""
        connections = list(self._in_flight)
        if not connections:
            return
        # One broker (the common case) is waited on for the whole time; several in short turns.
        slice_ms = timeout_ms if len(connections) == 1 else min(timeout_ms, 5)
        for connection in connections:
            correlation_id, offsets, session = self._in_flight[connection]
            try:
                responses = connection.poll(slice_ms)
            except NetworkError as exc:
                logger.warning("consumer: %s", exc)
                del self._in_flight[connection]
                session.failed()
                continue
            for response in responses:
                if response.correlation_id == correlation_id:
                    del self._in_flight[connection]
                    if session.handle_response(response.body):
                        self._apply(response.body, offsets)
                    elif response.body.get("error_code") not in _SESSION_ERRORS:
                        raise _error("Fetch", response.body["error_code"])

    def drain(self) -> list[ConsumerRecord]:
        """Up to ``max.poll.records`` buffered records (partition by partition), positions advanced."""
        out: list[ConsumerRecord] = []
        for tp, records in self._buffers.items():
            if not records or tp in self._paused:
                continue
            room = self.max_poll_records - len(out)
            taken = records[:room]
            out.extend(taken)
            del records[:room]
            # Used up: past what the buffer's fetches skipped too (control or compacted records).
            self.positions[tp] = taken[-1].offset + 1 if records else self._buffer_ends[tp]
            if len(out) >= self.max_poll_records:
                break
        return out

    def close(self) -> None:
        # Kafka's consumer closes its sessions with a last epoch -1 Fetch; ours are left to the
        # broker's eviction (a slot is taken from no one until the cache is full).
        self._in_flight.clear()
        self._sessions.clear()
        self._buffers.clear()

    def _apply(self, body: dict, offsets: dict[TopicPartition, int]) -> None:
        if body.get("error_code"):
            raise _error("Fetch", body["error_code"])
        refresh = False
        for topic in body["responses"]:
            for data in topic["partitions"]:
                tp = (topic["topic"], data["partition_index"])
                fetch_offset = offsets.get(tp)
                if fetch_offset is None or self._fetch_offset(tp) != fetch_offset:
                    continue  # sought or revoked since this fetch was sent
                code = data["error_code"]
                if code == kafka_errors.OFFSET_OUT_OF_RANGE:
                    logger.info("consumer: offset %d of %s-%d is out of range: resetting (%s)", fetch_offset, *tp,
                                self.auto_offset_reset)
                    if self.auto_offset_reset == "none":
                        raise OffsetOutOfRangeError(f"offset {fetch_offset} of {tp[0]}-{tp[1]} is out of range "
                                                    f"(log start {data['log_start_offset']}, high watermark "
                                                    f"{data['high_watermark']}) and auto.offset.reset is none",
                                                    fetch_offset, data["log_start_offset"], data["high_watermark"])
                    self.reset_positions([tp])
                    continue
                if code in _REFRESH_ERRORS:
                    refresh = True
                    continue
                if code:
                    raise _error(f"fetching {tp[0]}-{tp[1]}", code)
                self.high_watermarks[tp] = data["high_watermark"]
                self._take(tp, fetch_offset, data)
        if refresh:
            try:
                self._network.refresh_metadata(sorted({topic for topic, _ in self.positions}))
            except NetworkError as exc:
                logger.warning("consumer: no metadata: %s", exc)

    def _take(self, tp: TopicPartition, fetch_offset: int, data: dict) -> None:
        """Buffer the records of one partition's answer that ``poll`` may return."""
        batches = decode_fetch(data["records"]) if data["records"] else []
        if not batches:
            return
        stable = data["last_stable_offset"] if self.isolation_level == READ_COMMITTED else -1
        aborted = _aborted_producers(data.get("aborted_transactions")) if self.isolation_level == READ_COMMITTED \
            else None
        topic, partition = tp
        out: list[ConsumerRecord] = []
        end = fetch_offset
        for batch, records in batches:
            if 0 <= stable <= batch.base_offset:
                break  # not stable yet: fetched again later
            end = max(end, batch.base_offset + batch.last_offset_delta + 1)
            if batch.is_control:
                if aborted is not None and _is_abort_marker(records):
                    _end_aborted(aborted, batch.producer_id, batch.base_offset)
                continue
            if aborted is not None and batch.is_transactional and _is_aborted(aborted, batch):
                continue
            out.extend(ConsumerRecord(topic, partition, r.offset, r.key, r.value, r.headers, r.timestamp_ms)
                       for r in records if r.offset >= fetch_offset)
        if out:
            self._buffers.setdefault(tp, []).extend(out)
            self._buffer_ends[tp] = max(end, out[-1].offset + 1)
        elif end > fetch_offset:  # only compacted-away or control records there: move past them
            if self._buffers.get(tp):
                self._buffer_ends[tp] = end
            else:
                self.positions[tp] = end

    def _fetch_offset(self, tp: TopicPartition) -> int | None:
        """Where the next fetch of ``tp`` starts: after its buffer, else at its position."""
        return self._buffer_ends[tp] if self._buffers.get(tp) else self.positions.get(tp)


def _aborted_producers(aborted: list | None) -> dict[int, list[int]]:
    """Producer id -> first offsets of its aborted transactions in this response, ascending.

    Kafka's reading rule: a producer has one transaction open at a time, so a transactional batch
    of producer P is aborted when one of P's aborted transactions starts at or before the batch's
    last offset and P's ABORT marker after that start has not been read yet. The marker ends that
    transaction (its starts up to the marker are dropped); a COMMIT marker ends a committed one and
    changes nothing here (a later aborted transaction of P may follow in the same response)."""
    out: dict[int, list[int]] = defaultdict(list)
    for entry in aborted or ():
        out[entry["producer_id"]].append(entry["first_offset"])
    for starts in out.values():
        starts.sort()
    return out


def _is_aborted(aborted: dict[int, list[int]], batch) -> bool:
    starts = aborted.get(batch.producer_id)
    return bool(starts) and starts[0] <= batch.base_offset + batch.last_offset_delta


def _is_abort_marker(records) -> bool:
    """Whether a control batch is a transaction's ABORT marker: its record's key is version
    (int16) and type (int16), 0 for ABORT, 1 for COMMIT (other types are KRaft's: ignored)."""
    key = records[0].key if records else None
    return key is not None and len(key) >= 4 and int.from_bytes(key[2:4], "big", signed=True) == 0


def _end_aborted(aborted: dict[int, list[int]], producer_id: int, marker_offset: int) -> None:
    starts = aborted.get(producer_id)
    if starts:
        starts[:] = [start for start in starts if start > marker_offset]


def list_offsets(network: NetworkClient, timestamps: dict[TopicPartition, int], isolation_level: int = READ_UNCOMMITTED
                 ) -> dict[TopicPartition, tuple[int, int]]:
    """``{tp: (offset, timestamp)}`` from each partition's leader: for a timestamp, the first
    offset whose timestamp is at or after it (-1 when none is); ``EARLIEST``/``LATEST`` the log
    start / end offset."""
    by_leader: dict[int, dict[TopicPartition, int]] = defaultdict(dict)
    for tp, timestamp in timestamps.items():
        by_leader[_leader_of(network, tp)][tp] = timestamp
    found: dict[TopicPartition, tuple[int, int]] = {}
    for leader, wanted in by_leader.items():
        topics: dict[str, list] = defaultdict(list)
        for (topic, partition), timestamp in wanted.items():
            topics[topic].append({"partition_index": partition, "timestamp": timestamp})
        body = network.connection(leader).request("ListOffsets", {
            "replica_id": -1, "isolation_level": isolation_level,
            "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]})
        for topic in body["topics"]:
            for partition in topic["partitions"]:
                tp = (topic["name"], partition["partition_index"])
                if partition["error_code"]:
                    if partition["error_code"] in _REFRESH_ERRORS:
                        network.refresh_metadata(sorted({t for t, _ in timestamps}))
                    raise _error(f"ListOffsets of {tp[0]}-{tp[1]}", partition["error_code"])
                found[tp] = (partition["offset"], partition["timestamp"])
    missing = set(timestamps) - set(found)
    if missing:
        raise NetworkError(f"ListOffsets answered nothing for {sorted(missing)}")
    return found


def _leader_of(network: NetworkClient, tp: TopicPartition) -> int:
    try:
        return network.leader_for(*tp)
    except NetworkError:
        network.refresh_metadata(sorted(set(network.metadata.leaders) | {tp[0]}))
        return network.leader_for(*tp)


def high_watermarks(network: NetworkClient, partitions: list[TopicPartition], starts: dict[TopicPartition, int],
                    isolation_level: int = READ_UNCOMMITTED) -> dict[TopicPartition, int]:
    """Each partition's high watermark (the offset a consumer reads up to; with ``READ_COMMITTED``
    the last stable offset, which an open transaction holds back, as Kafka's ``endOffsets`` gives
    a read_committed consumer), from a Fetch at its
    ``starts`` offset that waits (almost) for nothing. Kafka's ListOffsets(latest) gives the same
    number, but not every broker's does (Tansu's memory engine answers the base of a batch), and
    Fetch is what a consumer reads with. A partition a broker leaves out of the answer (Tansu does
    for an empty one when the fetch does not wait) is asked again with a short wait, then with
    ListOffsets."""
    found: dict[TopicPartition, int] = {}
    for wait_ms in (0, 20):
        missing = [tp for tp in partitions if tp not in found]
        if not missing:
            return found
        by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
        for tp in missing:
            by_leader[_leader_of(network, tp)].append(tp)
        for leader, tps in by_leader.items():
            topics: dict[str, list] = defaultdict(list)
            for topic, partition in tps:
                topics[topic].append({"partition": partition, "fetch_offset": starts[(topic, partition)],
                                      "partition_max_bytes": 1024})
            body = network.connection(leader).request("Fetch", {
                "replica_id": -1, "max_wait_ms": wait_ms, "min_bytes": 0, "max_bytes": 1 << 20,
                "isolation_level": isolation_level, "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [],
                "rack_id": "", "topics": [{"topic": name, "partitions": parts} for name, parts in topics.items()]})
            if body.get("error_code"):
                raise _error("Fetch", body["error_code"])
            for topic in body["responses"]:
                for data in topic["partitions"]:
                    tp = (topic["topic"], data["partition_index"])
                    if data["error_code"] and data["error_code"] != kafka_errors.OFFSET_OUT_OF_RANGE:
                        raise _error(f"fetching {tp[0]}-{tp[1]}", data["error_code"])
                    stable = data.get("last_stable_offset", -1)
                    found[tp] = stable if isolation_level == READ_COMMITTED and stable >= 0 else data["high_watermark"]
    missing = [tp for tp in partitions if tp not in found]
    if missing:
        found.update({tp: offset for tp, (offset, _) in
                      list_offsets(network, dict.fromkeys(missing, LATEST), isolation_level).items()})
    return found
