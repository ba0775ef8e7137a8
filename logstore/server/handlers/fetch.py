"""Fetch, ListOffsets and OffsetForLeaderEpoch: the store's batches served as Kafka RecordBatch v2,
with the long poll in the fetch purgatory, offsets looked up by time (and ListOffsets v7's max
timestamp, v8's earliest local and v9's latest tiered offsets, KIP-734 and KIP-1005), and the end offset of the
(constant) leader epoch a consumer validates its position with.

A fetch reads each partition in request order from ``Log.iter_batch_slices`` and converts whole
stored batches (``wire_records.encode_fetch_batch``, through the ``FetchBatchCache``, so several
consumers of the same data pay the conversion once), the ones compaction emptied included: Kafka
sends them too, so a consumer moves past their offsets instead of waiting at them forever. Limits
follow KIP-74: a batch that would take the response past ``max_bytes`` (never more than the broker's
``fetch.max.bytes``, whatever the client asks) or its partition past ``partition_max_bytes`` ends
that partition,
except the first batch of the first partition with data, which is sent whole whatever its size so
a consumer always makes progress. Batches are never cut.

When fewer than ``min_bytes`` were found and ``max_wait_ms`` > 0 the request waits in the store's
fetch purgatory (``DelayedFetchResponse``): any append to one of its partitions re-checks it, and it
answers with a fresh read once ``min_bytes`` are there or the wait is over. Only its own connection
waits with it (the network layer mutes that connection alone, until the fetch is answered: a parked
fetch is ``exclusive``, so pipelined fetches cannot come due together).

Transactions: the high watermark is the log end offset (one replica); every answer carries the
partition's last stable offset (the first offset of its oldest open transaction, else the high
watermark). A read_committed fetch (isolation level 1) reads up to the last stable offset only and
lists the aborted transactions whose data may lie in what it sends (``aborted_transactions``, [] when
none; null for read_uncommitted), so the client drops their records; transaction markers are sent as
the control batches they are (clients skip them and move past their offsets). A read_committed
fetch parked at the last stable offset wakes when it moves (the marker's append), not when the open
transaction grows. ListOffsets with read_committed answers LATEST with the last stable offset, and a
time lookup landing at or past it with no offset (-1), as Kafka does.

Fetch sessions (KIP-227) are the ``FetchSessionCache``'s (``fetch_sessions``): it says which
partitions a fetch reads (an incremental fetch: all of its session's) and finishes the answer (the
session id; an incremental answer keeps only the partitions that changed). With ACLs enforced, the
topics of an incremental fetch's session are checked for READ on every fetch, as the ones a request
names are (a partition of a topic no longer readable answers TOPIC_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import logging

from ...errors import LogStoreError, OffsetOutOfRangeError, StoreClosedError, UnknownTopicOrPartitionError
from ...log.waits import DelayedFetch, FetchPosition
from ..network.request_context import RequestContext
from ..protocol import errors
from .fetch_sessions import FetchSessionCache
from .kafka_apis import LEADER_EPOCH, Broker

logger = logging.getLogger(__name__)

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3  # KIP-734
EARLIEST_LOCAL_TIMESTAMP = -4  # KIP-1005
LATEST_TIERED_TIMESTAMP = -5  # KIP-1005
READ_COMMITTED = 1  # Fetch and ListOffsets isolation_level (0: read_uncommitted)
_SPECIAL_TIMESTAMP_VERSIONS = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL_TIMESTAMP: 8, LATEST_TIERED_TIMESTAMP: 9}
"""The first ListOffsets version that knows each special timestamp; any other negative one is refused."""
_UNBOUNDED_TIMESTAMPS = (LATEST_TIMESTAMP, EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP)
"""ListOffsets lookups a read_committed answer does not bound by the last stable offset (LATEST is it)."""


class DelayedFetchResponse(DelayedFetch):
    """A fetch parked until ``min_bytes`` arrive or ``delay_ms`` passes; ``answer()`` reads again."""

    def __init__(self, delay_ms: int, positions, min_bytes: int, answer) -> None:
        super().__init__(delay_ms, positions, min_bytes)
        self.answer = answer

    def on_complete(self) -> None:
        super().on_complete()
        self.answer()


class FetchHandler:
    """The Fetch (4-11) and ListOffsets (1-5) APIs."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        config = broker.config
        self.sessions = FetchSessionCache(config.max_incremental_fetch_session_cache_slots,
                                          config.min_incremental_fetch_session_eviction_ms,
                                          config.max_incremental_fetch_session_partitions, broker.clock)
        self.authorization = None  # security.authorization.RequestAuthorization when ACLs are enforced

    # --- Fetch -----------------------------------------------------------------------------------

    def fetch(self, context: RequestContext, request: dict) -> None:
        wanted = [(topic["topic"], partition["partition"], partition["fetch_offset"],
                   partition.get("partition_max_bytes", 1 << 20))
                  for topic in request.get("topics") or [] for partition in topic.get("partitions") or []]
        forgotten = [(topic["topic"], partition) for topic in request.get("forgotten_topics_data") or ()
                     for partition in topic.get("partitions") or ()]
        session = context.session
        fetch_session = self.sessions.new_context(session.principal if session is not None else None,
                                                  request.get("session_id", 0), request.get("session_epoch", -1),
                                                  wanted, forgotten)
        if fetch_session.error:
            context.respond({"throttle_time_ms": 0, "error_code": fetch_session.error, "session_id": 0,
                             "responses": []})
            return
        wanted = fetch_session.wanted
        refused: list[dict] = []
        if fetch_session.kind == "incremental" and self.authorization is not None and session is not None:
            wanted, refused = self._authorized(context, session, wanted)
        max_bytes = request.get("max_bytes", 0x7FFFFFFF)
        if max_bytes <= 0:
            max_bytes = 0x7FFFFFFF
        # fetch.max.bytes caps every answer, whatever the client asks (a client asking 2**31-1), as
        # Kafka does: a client's 100-byte request must not make the server build a partition-sized one.
        max_bytes = min(max_bytes, self.broker.config.fetch_max_bytes)
        min_bytes = request.get("min_bytes", 1)
        max_wait_ms = request.get("max_wait_ms", 0)
        committed = request.get("isolation_level", 0) == READ_COMMITTED
        readable = wanted
        wanted, quiet = fetch_session.split_quiet(self.broker.store, committed, readable)
        body, found_bytes, positions = self._read(wanted, max_bytes, committed)
        positions += quiet
        if max_wait_ms <= 0 or found_bytes >= min_bytes or not positions or found_bytes < 0 or refused:
            body["responses"] += refused
            self._count_out(body)
            context.respond(fetch_session.finish(body))
            return
        store = self.broker.store

        def answer() -> None:
            if context.connection.closed:  # the client left (or the server is stopping): nobody to answer
                context.no_response()
                return
            try:
                # what was quiet may be what woke this fetch: split the session's partitions again
                body = self._read(fetch_session.split_quiet(store, committed, readable)[0] if quiet else wanted,
                                  max_bytes, committed)[0]
                self._count_out(body)
                context.respond(fetch_session.finish(body))
            except Exception:
                logger.exception("answering a parked fetch failed")
                context.close("answering a parked fetch failed")

        # Parked: the connection's next request waits for this answer (as in Kafka), so a client
        # cannot have many fetches of fetch.max.bytes each come due at once.
        context.exclusive = True
        operation = DelayedFetchResponse(max_wait_ms, positions, max(min_bytes, 1), answer)
        store.waits.fetch.try_complete_else_watch(operation, [position.log.key for position in positions])

    def _authorized(self, context: RequestContext, session, wanted: list) -> tuple[list, list]:
        """An incremental fetch's partitions split by READ on their topics (asked through the
        authorization's Fetch rule, as a request naming them would be): (the readable ones, the
        answers of the others)."""
        topics = list(dict.fromkeys(topic for topic, *_ in wanted))
        verdict = self.authorization.check(context.api_key, context.api_version,
                                           {"topics": [{"topic": topic, "partitions": []} for topic in topics]},
                                           session.principal, session.host)
        if verdict.request is None:
            return wanted, []
        allowed = {topic["topic"] for topic in verdict.request["topics"]}
        refused: dict[str, list] = {}
        for topic, partition, *_ in wanted:
            if topic not in allowed:
                refused.setdefault(topic, []).append(
                    {"partition_index": partition, "error_code": errors.TOPIC_AUTHORIZATION_FAILED,
                     "high_watermark": -1, "last_stable_offset": -1, "log_start_offset": -1,
                     "aborted_transactions": None, "preferred_read_replica": -1, "records": b""})
        return ([entry for entry in wanted if entry[0] in allowed],
                [{"topic": topic, "partitions": partitions} for topic, partitions in refused.items()])

    def _count_out(self, body: dict) -> None:
        """Count the record bytes of an answer about to be sent, per topic (a read that is answered
        later is read again then: only what is sent counts)."""
        count = self.broker.topic_metrics.fetched
        for entry in body["responses"]:
            count(entry["topic"], sum(len(chunk) for partition in entry["partitions"]
                                      if isinstance(partition["records"], list) for chunk in partition["records"]))

    def offset_for_leader_epoch(self, context: RequestContext, request: dict) -> None:
        """With a constant leader epoch, every epoch asked about ends at the log end offset."""
        store = self.broker.store
        topics = []
        for topic in request.get("topics") or []:
            partitions = []
            for partition in topic.get("partitions") or []:
                index = partition["partition"]
                try:
                    end_offset = store.get_log(topic["topic"], index).log_end_offset
                    error = errors.NONE
                except LogStoreError as exc:
                    end_offset, error = -1, errors.error_code_for(exc)
                partitions.append({"error_code": error, "partition": index,
                                   "leader_epoch": LEADER_EPOCH if error == errors.NONE else -1,
                                   "end_offset": end_offset})
            topics.append({"topic": topic["topic"], "partitions": partitions})
        context.respond({"throttle_time_ms": 0, "topics": topics})

    def _read(self, wanted, max_bytes: int, committed: bool = False) -> tuple[dict, int, list]:
        """(response body, bytes found or -1 when an error must be answered at once, wait positions);
        ``committed``: read_committed (up to the last stable offset, with the aborted transactions)."""
        store = self.broker.store
        cache = self.broker.fetch_cache
        topics: list[dict] = []
        by_topic: dict[str, dict] = {}
        total = 0
        answer_now = False
        positions: list[FetchPosition] = []
        for topic, partition, fetch_offset, partition_max_bytes in wanted:
            entry = by_topic.get(topic)
            if entry is None or topics[-1] is not entry:
                entry = {"topic": topic, "partitions": []}
                by_topic[topic] = entry
                topics.append(entry)
            result = {"partition_index": partition, "error_code": errors.NONE, "high_watermark": -1,
                      "last_stable_offset": -1, "log_start_offset": -1, "aborted_transactions": None,
                      "preferred_read_replica": -1, "records": b""}
            entry["partitions"].append(result)
            try:
                log = store.get_log(topic, partition)
                end_offset = log.log_end_offset
                # read after the end: an append in between cannot put the stable offset past it
                stable_offset = min(log.last_stable_offset, end_offset)
                result["high_watermark"] = end_offset
                result["last_stable_offset"] = stable_offset
                result["log_start_offset"] = log.log_start_offset
                chunks: list = []
                partition_bytes = 0
                if fetch_offset < log.log_start_offset or fetch_offset > end_offset:
                    raise OffsetOutOfRangeError(f"offset {fetch_offset} is out of range", fetch_offset,
                                                log.log_start_offset, end_offset)
                read_to = stable_offset if committed else end_offset
                last_sent = None
                if fetch_offset < read_to:
                    # markers and batches compaction emptied come too (include_empty)
                    for batch, _first, _stop in log.iter_batch_slices(fetch_offset, read_to, include_empty=True):
                        header = batch.header
                        data = cache.get_or_encode((topic, partition, header.base_offset, header.crc), batch)
                        size = len(data)
                        if total + size > max_bytes or partition_bytes + size > partition_max_bytes:
                            if total == 0 and not chunks:
                                chunks.append(data)  # KIP-74: the first batch goes whole, however large
                                partition_bytes += size
                                total += size
                                last_sent = header
                            break
                        chunks.append(data)
                        partition_bytes += size
                        total += size
                        last_sent = header
                result["records"] = chunks
                if committed:
                    # the aborted transactions whose data may lie in what is sent (none when nothing is)
                    result["aborted_transactions"] = [] if last_sent is None else [
                        {"producer_id": aborted.producer_id, "first_offset": aborted.first_offset}
                        for aborted in log.aborted_transactions(fetch_offset, last_sent.next_offset)]
                positions.append(FetchPosition.at(log, fetch_offset, partition_bytes, committed))
            except LogStoreError as exc:
                result["error_code"] = errors.error_code_for(exc)
                result["records"] = b""
                answer_now = True
                if not isinstance(exc, (OffsetOutOfRangeError, StoreClosedError, UnknownTopicOrPartitionError)):
                    logger.warning("fetch from %s-%d at %d failed: %s", topic, partition, fetch_offset, exc)
        body = {"throttle_time_ms": 0, "error_code": errors.NONE, "session_id": 0, "responses": topics}
        return body, (-1 if answer_now else total), positions

    # --- ListOffsets -----------------------------------------------------------------------------

    def list_offsets(self, context: RequestContext, request: dict) -> None:
        store = self.broker.store
        committed = request.get("isolation_level", 0) == READ_COMMITTED
        topics = []
        for topic in request.get("topics") or []:
            name = topic["name"]
            partitions = []
            for partition in topic.get("partitions") or []:
                index = partition["partition_index"]
                timestamp = partition["timestamp"]
                result = {"partition_index": index, "error_code": errors.NONE, "timestamp": -1, "offset": -1,
                          "leader_epoch": LEADER_EPOCH}
                try:
                    log = store.get_log(name, index)
                    if timestamp == LATEST_TIMESTAMP:
                        result["offset"] = log.last_stable_offset if committed else log.log_end_offset
                    elif timestamp == EARLIEST_TIMESTAMP:
                        result["offset"] = log.log_start_offset
                    elif timestamp < 0 and context.api_version < _SPECIAL_TIMESTAMP_VERSIONS.get(timestamp, 1 << 15):
                        result["error_code"] = errors.UNSUPPORTED_VERSION  # as Kafka: a version that lacks it
                    elif timestamp == MAX_TIMESTAMP:
                        found = log.max_timestamp_offset()
                        if found is not None:
                            result["timestamp"], result["offset"] = found
                    elif timestamp == EARLIEST_LOCAL_TIMESTAMP:
                        result["offset"] = log.log_start_offset  # no tiered storage: every segment is local
                    elif timestamp == LATEST_TIERED_TIMESTAMP:
                        result["leader_epoch"] = -1  # nothing is tiered: Kafka's (-1, -1) answer
                    else:
                        offset = log.offset_for_timestamp(timestamp)
                        if offset is not None:
                            found = log.read(offset, max_records=1)
                            result["offset"] = offset
                            result["timestamp"] = found[0].timestamp_ms if found else -1
                    bounded = committed and timestamp not in _UNBOUNDED_TIMESTAMPS
                    if bounded and result["offset"] >= log.last_stable_offset:
                        # Kafka's bound for a lookup by time: no offset a read_committed reader cannot read yet
                        result["offset"] = result["timestamp"] = -1
                        result["leader_epoch"] = -1
                except LogStoreError as exc:
                    result["error_code"] = errors.error_code_for(exc)
                    result["leader_epoch"] = -1
                partitions.append(result)
            topics.append({"name": name, "partitions": partitions})
        context.respond({"throttle_time_ms": 0, "topics": topics})
