"""A minimal blocking Kafka-protocol client for the server's own tests: one socket, requests encoded
with the server's codec, responses decoded with it. Real clients are tested elsewhere
(test_clients_*); this one lets a test send exactly the request it means, pipelined or malformed."""

from __future__ import annotations

import socket
import struct
import time

from logstore.bench.wire import recv_exactly
from logstore.server.protocol.codec import decode_response, encode_request
from logstore.server.wire_records import decode_fetch, encode_produce_batch


class WireClient:
    """``call(api_key, version, body)`` sends a request and returns the decoded response body."""

    def __init__(self, address: str, timeout_s: float = 10.0, client_id: str = "wire-test") -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.client_id = client_id
        self.correlation_id = 0

    def send(self, api_key: int, version: int, body: dict) -> int:
        self.correlation_id += 1
        self.sock.sendall(encode_request(api_key, version, self.correlation_id, self.client_id, body))
        return self.correlation_id

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def receive_frame(self) -> bytes:
        size = struct.unpack(">i", self._exactly(4))[0]
        return self._exactly(size)

    def receive(self, api_key: int, version: int) -> tuple[int, dict]:
        return decode_response(api_key, version, memoryview(self.receive_frame()))

    def call(self, api_key: int, version: int, body: dict) -> dict:
        correlation_id = self.send(api_key, version, body)
        got, response = self.receive(api_key, version)
        assert got == correlation_id, (got, correlation_id)
        return response

    def _exactly(self, size: int) -> bytes:
        return recv_exactly(self.sock, size)

    def is_closed_by_server(self, timeout_s: float = 5.0) -> bool:
        """True once the server closed this connection (EOF or reset) within ``timeout_s``."""
        self.sock.settimeout(timeout_s)
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                if not self.sock.recv(65536):
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False
        return False

    def close(self) -> None:
        self.sock.close()

    # --- conveniences --------------------------------------------------------------------------

    def produce(self, topic: str, partition: int, records, *, acks: int = 1, version: int = 8,
                timeout_ms: int = 10000, **batch_options) -> dict:
        """Produce one batch; returns the partition's response (or {} for acks=0)."""
        body = {"transactional_id": None, "acks": acks, "timeout_ms": timeout_ms, "topic_data": [
            {"name": topic, "partition_data": [{"index": partition,
                                                "records": encode_produce_batch(records, **batch_options)}]}]}
        if acks == 0:
            self.send(0, version, body)
            return {}
        response = self.call(0, version, body)
        return response["responses"][0]["partition_responses"][0]

    def fetch(self, topic: str, partition: int, offset: int, *, max_wait_ms: int = 0, min_bytes: int = 1,
              max_bytes: int = 50 << 20, partition_max_bytes: int = 1 << 20, version: int = 11) -> tuple[dict, list]:
        """Fetch one partition: (partition response, records as decoded by a consumer)."""
        response = self.call(1, version, {
            "replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes, "max_bytes": max_bytes,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{"partition": partition, "current_leader_epoch": -1,
                                                          "fetch_offset": offset, "log_start_offset": -1,
                                                          "partition_max_bytes": partition_max_bytes}]}],
            "forgotten_topics_data": [], "rack_id": ""})
        result = response["responses"][0]["partitions"][0]
        records = [record for _batch, batch_records in decode_fetch(bytes(result["records"] or b""))
                   for record in batch_records]
        return result, records
