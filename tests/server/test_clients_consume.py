"""Real clients consume from the server with assign() (no group, no commits): from the earliest
offset, from the latest (then only what is produced after), from a timestamp; ListOffsets from
every client; fetch limits smaller than one record (KIP-74: the consumer still makes progress);
read_committed consumers see data at once (no transactions, so the last stable offset is the high
watermark); and records appended through the Python API come out over the wire unchanged.

Records are put in without the client under test (``broker.seed``: the store's own ``append`` on our
server), so a consumer test does not depend on any producer.
"""

import time

import pytest
from conftest import logstore_only, tansu_gets_wrong

from clients import EARLIEST, LATEST, as_wire
from clients.checks import assert_same, now_ms, varied_records
from clients.registry import CONSUMERS, DRIVER_CLASSES
from logstore import Record

pytestmark = pytest.mark.kafka_clients

ALL_CLIENTS = list(DRIVER_CLASSES)
STEP_MS = 1000


def timed_records(base_ms: int, count: int, tag: str) -> list[Record]:
    """``count`` keyed records ``STEP_MS`` apart from ``base_ms``."""
    return [Record(f"{tag}-{i}".encode(), f"value {tag} {i}".encode(), [("i", str(i).encode())], base_ms + i * STEP_MS)
            for i in range(count)]


@pytest.fixture
def seeded(broker, topic):
    """A one-partition topic holding 6 records 1 s apart (one append, so one batch, on our server):
    (topic, base_ms, records)."""
    broker.create_topic(topic)
    base = now_ms() - 60_000
    return topic, base, broker.seed(topic, timed_records(base, 6, "seed"))


@pytest.mark.parametrize("driver", CONSUMERS, indirect=True)
def test_consume_from_earliest(broker, driver, seeded):
    topic, _, records = seeded
    assert driver.consume(broker.bootstrap_servers, topic, 0, start=EARLIEST, count=len(records)) == records


@pytest.mark.parametrize("driver", CONSUMERS, indirect=True)
def test_consume_from_latest_sees_only_newer_records(broker, driver, seeded):
    """A consumer positioned at the end reads what is appended after, and nothing before."""
    topic, base, _ = seeded
    newer = []

    def append_more():
        newer.extend(broker.seed(topic, timed_records(base + 30_000, 3, "newer")))

    read = driver.consume(broker.bootstrap_servers, topic, 0, start=LATEST, count=3, on_positioned=append_more)
    assert [r.offset for r in newer] == [6, 7, 8]
    assert read == newer


TANSU_TIMESTAMPS = "ListOffsets by timestamp answers offset 0 for every timestamp (Tansu 0.6.0, memory engine)"


@tansu_gets_wrong(TANSU_TIMESTAMPS)
@pytest.mark.parametrize("driver", CONSUMERS, indirect=True)
def test_consume_from_timestamp(broker, driver, seeded):
    """Starting at a timestamp between two records starts at the first record at or after it."""
    topic, base, records = seeded
    read = driver.consume(broker.bootstrap_servers, topic, 0, start=("timestamp", base + 2 * STEP_MS + 500), count=3)
    assert read == records[3:]


@pytest.mark.parametrize("driver", ALL_CLIENTS, indirect=True)
def test_list_offsets_earliest(broker, driver, seeded):
    topic, _, _ = seeded
    assert driver.list_offset(broker.bootstrap_servers, topic, 0, EARLIEST) == 0


@tansu_gets_wrong(TANSU_TIMESTAMPS)
@pytest.mark.parametrize("driver", ALL_CLIENTS, indirect=True)
def test_list_offsets_by_timestamp(broker, driver, seeded):
    topic, base, _ = seeded
    bootstrap = broker.bootstrap_servers
    assert driver.list_offset(bootstrap, topic, 0, ("timestamp", base)) == 0  # exactly a record's timestamp
    assert driver.list_offset(bootstrap, topic, 0, ("timestamp", base + 1)) == 1
    assert driver.list_offset(bootstrap, topic, 0, ("timestamp", base + 4 * STEP_MS + 1)) == 5
    assert driver.list_offset(bootstrap, topic, 0, ("timestamp", base + 60 * STEP_MS)) == -1  # after every record


@pytest.mark.parametrize("driver", ALL_CLIENTS, indirect=True)
def test_list_offsets_latest_is_the_high_watermark(broker, driver, seeded):
    topic, _, records = seeded
    assert driver.list_offset(broker.bootstrap_servers, topic, 0, LATEST) == len(records)


# Fetch limits of 1 KiB, per client: far below one 20 KiB record.
SMALL_FETCH = {
    "kafka-python": {"max_partition_fetch_bytes": 1024, "fetch_max_bytes": 1024},
    # librdkafka refuses fetch.max.bytes below message.max.bytes (whose minimum is 1000)
    "confluent-kafka": {"max.partition.fetch.bytes": 1024, "fetch.max.bytes": 1024, "message.max.bytes": 1000},
    "aiokafka": {"max_partition_fetch_bytes": 1024, "fetch_max_bytes": 1024},
    "kcat": {"max.partition.fetch.bytes": 1024, "fetch.max.bytes": 1024, "message.max.bytes": 1000},
}


@pytest.mark.parametrize("driver", CONSUMERS, indirect=True)
def test_fetch_limits_smaller_than_one_record_still_make_progress(broker, driver, topic):
    """KIP-74: when the first batch is larger than max_bytes / partition_max_bytes, the fetch returns
    it whole anyway, so a consumer with small limits reads everything instead of stalling."""
    broker.create_topic(topic)
    base = now_ms() - 60_000
    big = [Record(f"big-{i}".encode(), bytes([i]) * 20_000 + bytes(range(256)), (), base + i) for i in range(8)]
    stored = broker.seed(topic, big)
    read = driver.consume(broker.bootstrap_servers, topic, 0, count=len(big), timeout_s=20,
                          config=SMALL_FETCH[driver.name])
    assert read == stored


# read_committed, per client (librdkafka's default: confluent-kafka and kcat run it unset as well).
READ_COMMITTED = [
    ("kafka-python", {"isolation_level": "read_committed"}),
    ("confluent-kafka", None),  # librdkafka's default is read_committed
    ("confluent-kafka", {"isolation.level": "read_committed"}),
    ("aiokafka", {"isolation_level": "read_committed"}),
    ("kcat", None),
    ("kcat", {"isolation.level": "read_committed"}),
]


@pytest.mark.parametrize("driver,config", READ_COMMITTED, indirect=["driver"],
                         ids=[f"{name}-{'explicit' if config else 'default'}" for name, config in READ_COMMITTED])
def test_read_committed_consumer_sees_records_at_once(broker, driver, config, seeded):
    """Without transactions every record is committed: the last stable offset equals the high
    watermark, so read_committed consumers read stored records and new ones as soon as they land."""
    topic, base, records = seeded
    assert driver.consume(broker.bootstrap_servers, topic, 0, count=len(records), config=config) == records
    newer, appended_at = [], []

    def append_more():
        appended_at.append(time.monotonic())
        newer.extend(broker.seed(topic, timed_records(base + 30_000, 2, "newer")))

    read = driver.consume(broker.bootstrap_servers, topic, 0, start=LATEST, count=2, on_positioned=append_more,
                          config=config, timeout_s=20)
    waited = time.monotonic() - appended_at[0]
    assert read == newer
    # A fetch waits at most 500 ms (fetch.wait.max.ms) for new data; 5 s is far beyond that, and far
    # below "only after some later event", which is what a lagging last stable offset looks like.
    assert waited < 5, f"read_committed consumer needed {waited:.1f}s to see new records"


@logstore_only("records appended with store.append")
@pytest.mark.parametrize("driver", CONSUMERS, indirect=True)
def test_records_appended_through_the_python_api_are_consumed_equal(broker, driver, topic):
    """What the Python API appended (several appends, so several batches; partition 1 of 2) comes
    out over the wire exactly as ``store.read`` returns it: null keys and values, empty bytes, null
    header values, repeated header names, timestamps."""
    broker.create_topic(topic, partitions=2)
    every = type("Every", (), {"sets_timestamps": True, "null_header_values": True, "null_key_and_value": True})
    records = varied_records(every)
    broker.store.append(topic, records[:3], partition=1)
    broker.store.append(topic, records[3:], partition=1)
    stored = broker.stored(topic, 1)
    assert_same(stored, [as_wire(record, i) for i, record in enumerate(records)], what="the store itself")
    assert driver.consume(broker.bootstrap_servers, topic, 1, count=len(records)) == stored
    assert broker.stored(topic, 0) == []
