"""A raw Kafka-protocol client for the benchmarks that count bytes on the wire (``scale``,
``fetch_sessions``): one socket, requests framed and responses decoded by the server's own codec,
so a benchmark sends exactly the fields it names (a KIP-227 session, a protocol version) and knows
the size of every frame."""

from __future__ import annotations

import socket
import struct


class RawClient:
    """One socket speaking Kafka's protocol through the server's codec, one request at a time;
    ``call`` answers the decoded response and the bytes each way (frames with their size prefix)."""

    def __init__(self, address: str, client_id: str = "logstore-perf") -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = client_id
        self._correlation = 0

    def call(self, api_key: int, version: int, body: dict) -> tuple[dict, int, int]:
        """The decoded response, the request's bytes and the response's bytes. Raises
        ``ConnectionError`` when the server closes the connection, ``RuntimeError`` when the answer
        is not to this request."""
        from ..server.protocol.codec import decode_response, encode_request
        self._correlation += 1
        frame = encode_request(api_key, version, self._correlation, self.client_id, body)
        self.sock.sendall(frame)
        size = struct.unpack(">i", self._read(4))[0]
        got, decoded = decode_response(api_key, version, memoryview(self._read(size)))
        if got != self._correlation:
            raise RuntimeError(f"response {got} to request {self._correlation}")
        return decoded, len(frame), size + 4

    def _read(self, count: int) -> bytes:
        return recv_exactly(self.sock, count)

    def close(self) -> None:
        self.sock.close()


def recv_exactly(sock: socket.socket, count: int) -> bytes:
    """``count`` bytes from ``sock``; ``ConnectionError`` when the peer closes first."""
    chunks, left = [], count
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("the server closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
