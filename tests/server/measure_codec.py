"""Measure our protocol codec against kio (Aiven's Kafka types generated from the same JSON specs).

Run by hand, not by pytest: ``python tests/server/measure_codec.py`` (needs ``pip install kio``; kio
is not a dependency of logstore, only the peer of this measurement). It prints operations per second
of both codecs on the server's three hot messages:

- decoding a Produce v8 request (header + body; 1 topic, 1 partition, a 16 KiB records blob), and
  the same with 1 MiB of records (ours gives the records as a memoryview of the input, kio copies
  them into bytes);
- encoding a Fetch v11 response (header + body + size prefix; 1 topic, 4 partitions of 1 MiB
  records each). Ours returns the frame as chunks, the records uncopied; "ours, joined" also joins
  them into one bytes, as a server without vectored writes would. kio writes into a BytesIO whose
  buffer is taken without a copy, which is the cheapest way to get a frame out of it;
- encoding a Metadata v8 response (1 broker, 20 topics of 4 partitions).

Before timing, each pair of results is checked equal (same bytes, same decoded values), so both
codecs do the same work. Each figure is the best of 7 runs of about 0.3 s, ours and kio taking turns,
so a neighbour's load on a shared machine lowers both figures rather than skewing the ratio.
"""

from __future__ import annotations

import datetime
import io
import struct
import sys
import time

from logstore.server.protocol.codec import decode_request, decode_request_header, encode_request, encode_response

try:
    from kio.schema.errors import ErrorCode
    from kio.schema.fetch.v11 import response as kio_fetch
    from kio.schema.metadata.v8 import response as kio_metadata
    from kio.schema.produce.v8.request import ProduceRequest as KioProduceRequest
    from kio.schema.request_header.v1.header import RequestHeader as KioRequestHeader
    from kio.schema.response_header.v0.header import ResponseHeader as KioResponseHeader
    from kio.serial import entity_reader, entity_writer
    from kio.static.primitive import i32, i64
except ImportError:  # pragma: no cover - a message, not a crash
    sys.exit("kio is not installed: pip install kio")

RECORDS_16K = bytes(range(256)) * 64
RECORDS_1M = bytes(range(256)) * 4096


def calibrate(function, seconds: float) -> int:
    """How many calls of ``function()`` take about ``seconds``."""
    count = 1
    while True:
        start = time.perf_counter()
        for _ in range(count):
            function()
        elapsed = time.perf_counter() - start
        if elapsed >= seconds / 4:
            return max(1, int(count * seconds / elapsed))
        count *= 2


def best_rates(contenders, seconds: float = 0.3, runs: int = 7) -> list[tuple[str, float]]:
    """Operations per second of each ``(name, function)``, the best of ``runs`` runs of about
    ``seconds``; the contenders take turns run by run, so a change in the machine's load hits all."""
    counts = [calibrate(function, seconds) for _, function in contenders]
    best = [0.0] * len(contenders)
    for _ in range(runs):
        for index, ((_, function), count) in enumerate(zip(contenders, counts)):
            start = time.perf_counter()
            for _ in range(count):
                function()
            best[index] = max(best[index], count / (time.perf_counter() - start))
    return [(name, rate) for (name, _), rate in zip(contenders, best)]


# --- Produce v8 request: decode -----------------------------------------------------------------


def produce_request_frame(records: bytes = RECORDS_16K) -> bytes:
    body = {"transactional_id": None, "acks": -1, "timeout_ms": 30000,
            "topic_data": [{"name": "events", "partition_data": [{"index": 0, "records": records}]}]}
    return encode_request(0, 8, 7, "producer-1", body)[4:]


def ours_decode_produce(frame: bytes):
    view = memoryview(frame)
    header, offset = decode_request_header(view)
    return header, decode_request(header["api_key"], header["api_version"], view, offset)


_kio_header_reader = entity_reader(KioRequestHeader)
_kio_produce_reader = entity_reader(KioProduceRequest)


def kio_decode_produce(frame: bytes):
    view = memoryview(frame)
    header, size = _kio_header_reader(view, 0)
    body, _ = _kio_produce_reader(view, size)
    return header, body


# --- Fetch v11 response: encode -----------------------------------------------------------------

FETCH_BODY = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [
    {"topic": "events", "partitions": [
        {"partition_index": index, "error_code": 0, "high_watermark": 1000, "last_stable_offset": 1000,
         "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1, "records": RECORDS_1M}
        for index in range(4)]}]}

KIO_FETCH = kio_fetch.FetchResponse(
    throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, session_id=i32(0), responses=(
        kio_fetch.FetchableTopicResponse(topic="events", partitions=tuple(
            kio_fetch.PartitionData(partition_index=i32(index), error_code=ErrorCode.none, high_watermark=i64(1000),
                                    last_stable_offset=i64(1000), log_start_offset=i64(0), aborted_transactions=None,
                                    preferred_read_replica=i32(-1), records=RECORDS_1M)
            for index in range(4))),))


def ours_encode(api_key: int, version: int, body: dict):
    return encode_response(api_key, version, 7, body)


def ours_encode_joined(api_key: int, version: int, body: dict) -> bytes:
    return b"".join(encode_response(api_key, version, 7, body))


_kio_response_header_writer = entity_writer(KioResponseHeader)


def kio_encode(writer, entity) -> memoryview:
    out = io.BytesIO()
    out.write(b"\x00\x00\x00\x00")
    _kio_response_header_writer(out, KioResponseHeader(correlation_id=i32(7)))
    writer(out, entity)
    frame = out.getbuffer()
    struct.pack_into(">i", frame, 0, len(frame) - 4)
    return frame


# --- Metadata v8 response: encode ---------------------------------------------------------------

METADATA_BODY = {"throttle_time_ms": 0, "brokers": [{"node_id": 1, "host": "127.0.0.1", "port": 9092, "rack": None}],
                 "cluster_id": "logstore-cluster-00001", "controller_id": 1, "topics": [
                     {"error_code": 0, "name": f"topic-{topic}", "is_internal": False, "partitions": [
                         {"error_code": 0, "partition_index": index, "leader_id": 1, "leader_epoch": 0,
                          "replica_nodes": [1], "isr_nodes": [1], "offline_replicas": []} for index in range(4)],
                      "topic_authorized_operations": -2147483648} for topic in range(20)],
                 "cluster_authorized_operations": -2147483648}

KIO_METADATA = kio_metadata.MetadataResponse(
    throttle_time=datetime.timedelta(0),
    brokers=(kio_metadata.MetadataResponseBroker(node_id=i32(1), host="127.0.0.1", port=i32(9092), rack=None),),
    cluster_id="logstore-cluster-00001", controller_id=i32(1), topics=tuple(
        kio_metadata.MetadataResponseTopic(error_code=ErrorCode.none, name=f"topic-{topic}", is_internal=False,
                                           partitions=tuple(kio_metadata.MetadataResponsePartition(
                                               error_code=ErrorCode.none, partition_index=i32(index), leader_id=i32(1),
                                               leader_epoch=i32(0), replica_nodes=(i32(1),), isr_nodes=(i32(1),),
                                               offline_replicas=()) for index in range(4)),
                                           topic_authorized_operations=i32(-2147483648))
        for topic in range(20)),
    cluster_authorized_operations=i32(-2147483648))


def main() -> None:
    frame, big_frame = produce_request_frame(), produce_request_frame(RECORDS_1M)
    ours_header, ours_body = ours_decode_produce(frame)
    kio_header, kio_body = kio_decode_produce(frame)
    assert (kio_header.correlation_id, kio_header.client_id) == (ours_header["correlation_id"], ours_header["client_id"])
    assert kio_body.topic_data[0].partition_data[0].records == ours_body["topic_data"][0]["partition_data"][0]["records"]
    fetch_writer, metadata_writer = entity_writer(kio_fetch.FetchResponse), entity_writer(kio_metadata.MetadataResponse)
    assert bytes(kio_encode(fetch_writer, KIO_FETCH)) == ours_encode_joined(1, 11, FETCH_BODY)
    assert bytes(kio_encode(metadata_writer, KIO_METADATA)) == ours_encode_joined(3, 8, METADATA_BODY)

    cases = [
        ("decode Produce v8 request (16 KiB records)", [
            ("ours", lambda: ours_decode_produce(frame)),
            ("kio", lambda: kio_decode_produce(frame))]),
        ("decode Produce v8 request (1 MiB records; not asked for, shows the cost of copying them)", [
            ("ours", lambda: ours_decode_produce(big_frame)),
            ("kio", lambda: kio_decode_produce(big_frame))]),
        ("encode Fetch v11 response (4 x 1 MiB records)", [
            ("ours (chunks)", lambda: ours_encode(1, 11, FETCH_BODY)),
            ("ours, joined", lambda: ours_encode_joined(1, 11, FETCH_BODY)),
            ("kio", lambda: kio_encode(fetch_writer, KIO_FETCH))]),
        ("encode Metadata v8 response (20 topics x 4 partitions)", [
            ("ours", lambda: ours_encode(3, 8, METADATA_BODY)),
            ("kio", lambda: kio_encode(metadata_writer, KIO_METADATA))]),
    ]
    print(f"python {sys.version.split()[0]}; same results checked; best of 7 interleaved runs")
    for title, contenders in cases:
        rates = best_rates(contenders)
        kio_rate = rates[-1][1]
        print(title)
        for name, rate in rates:
            print(f"  {name:<14} {rate:>12,.0f} ops/s  ({rate / kio_rate:.2f}x kio)")


if __name__ == "__main__":
    main()
