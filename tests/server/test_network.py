"""How the network layer reads frames (``logstore.server.network.socket_server``), with a dispatch of its own.

- Frames of every size, small ones cut out of the read buffer and large ones received into their own
  buffer, arrive whole and in order however the bytes are chunked on the way.
- Backpressure: while a request's handler runs, the connection is read only until the next frame is
  complete, so a client that pipelines faster than it is served waits in TCP flow control, not in
  the server's memory.
- A client that closes in the middle of a large frame is closed; a bad frame size behind a busy
  request closes the connection only after that request is answered.
"""

from __future__ import annotations

import random
import socket
import struct
import threading
import time
import zlib

import pytest

from logstore.server.network.socket_server import LARGE_FRAME_BYTES, SocketServer


def frame(correlation_id: int, body: bytes) -> bytes:
    """A Produce v3 request frame (header v1, client id "t") around ``body``."""
    header = struct.pack(">hhih", 0, 3, correlation_id, 1) + b"t"
    return struct.pack(">i", len(header) + len(body)) + header + body


class Echo:
    """A dispatch that answers each request with its correlation id, its frame's size and CRC-32;
    ``gate`` (cleared) holds the handlers back."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.seen: list[int] = []

    def __call__(self, context) -> None:
        self.gate.wait(30)
        data = bytes(context.frame)
        self.seen.append(context.correlation_id)
        context.respond_frame(struct.pack(">iiiI", 12, context.correlation_id, len(data), zlib.crc32(data)))


@pytest.fixture
def echo():
    dispatch = Echo()
    server = SocketServer("127.0.0.1", 0, dispatch, io_threads=2)
    server.start()
    yield server, dispatch
    dispatch.gate.set()
    server.stop()


def receive_answers(sock: socket.socket, count: int) -> list[tuple[int, int, int]]:
    sock.settimeout(30)
    buffer = b""
    while len(buffer) < 16 * count:
        chunk = sock.recv(1 << 16)
        assert chunk, "the server closed the connection"
        buffer += chunk
    return [struct.unpack_from(">iii", buffer, 16 * index + 4) for index in range(count)]


def test_frames_of_every_size_arrive_whole_and_in_order_however_chunked(echo):
    server, _dispatch = echo
    rng = random.Random(7)
    sizes = [0, 1, 100, LARGE_FRAME_BYTES - 20, LARGE_FRAME_BYTES - 11, LARGE_FRAME_BYTES, 3 << 20, 5, 200_000, 17]
    frames = [frame(index, rng.randbytes(size)) for index, size in enumerate(sizes)]
    stream = b"".join(frames)
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        position = 0
        while position < len(stream):  # cut anywhere: inside size prefixes, headers, bodies
            step = rng.choice([1, 3, 7, 4096, 70_000, 1 << 20])
            sock.sendall(stream[position : position + step])
            position += step
            if rng.random() < 0.2:
                time.sleep(0.002)
        answers = receive_answers(sock, len(frames))
    assert answers == [(index, len(data) - 4, struct.unpack(">i", struct.pack(">I", zlib.crc32(data[4:])))[0])
                       for index, data in enumerate(frames)]


def test_frame_contents_are_exact(echo):
    server, _dispatch = echo
    payload = bytes(range(256)) * 1000  # a large frame, received into its own buffer
    data = frame(1, payload) + frame(2, b"small")
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(data)
        sock.settimeout(30)
        buffer = b""
        while len(buffer) < 32:
            buffer += sock.recv(64)
    for index, (correlation_id, whole) in enumerate(((1, frame(1, payload)), (2, frame(2, b"small")))):
        assert struct.unpack_from(">iiiI", buffer, 16 * index) == (12, correlation_id, len(whole) - 4,
                                                                    zlib.crc32(whole[4:]))


def test_a_busy_connection_is_read_one_frame_ahead_only(echo):
    server, dispatch = echo
    dispatch.gate.clear()  # the first request's handler blocks: the connection is busy
    count, size = 64, 1 << 20
    body = b"x" * size
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.setblocking(False)
    sent = 0
    stream = b"".join(frame(index, body) for index in range(count))
    deadline = time.monotonic() + 3
    while sent < len(stream) and time.monotonic() < deadline:
        try:
            sent += sock.send(stream[sent : sent + (1 << 20)])
        except BlockingIOError:
            time.sleep(0.01)
    # TCP flow control stopped the client well before it sent everything...
    assert sent < len(stream) // 2, sent
    [connection] = server._connections.values()
    held = len(connection.inbound) + len(connection.large or b"") + len(connection.ready or b"")
    # ...and the server holds at most the frame being handled's successor, one read's worth besides
    assert held <= size + 2 * (1 << 16), held
    dispatch.gate.set()
    sock.setblocking(True)
    sock.sendall(stream[sent:])
    answers = receive_answers(sock, count)
    assert [correlation_id for correlation_id, _size, _crc in answers] == list(range(count))
    assert dispatch.seen == list(range(count))
    sock.close()


def wait_closed(sock: socket.socket) -> bool:
    sock.settimeout(10)
    try:
        return sock.recv(1 << 16) == b""
    except ConnectionResetError:
        return True


def test_a_client_closing_inside_a_large_frame_is_closed(echo, caplog):
    server, _dispatch = echo
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        whole = frame(1, b"y" * (3 * LARGE_FRAME_BYTES))
        sock.sendall(whole[: len(whole) // 2])
        time.sleep(0.1)
        sock.shutdown(socket.SHUT_WR)
        assert wait_closed(sock)
    deadline = time.monotonic() + 5
    while server.connection_count and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.connection_count == 0
    assert "in the middle of a frame" in caplog.text


def test_a_bad_frame_size_behind_a_busy_request_closes_after_its_answer(echo):
    server, dispatch = echo
    dispatch.gate.clear()
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(frame(5, b"first") + struct.pack(">i", -7))
        time.sleep(0.2)
        assert server.connection_count == 1  # the bad size waits for its turn
        dispatch.gate.set()
        assert receive_answers(sock, 1)[0][0] == 5
        assert wait_closed(sock)
