"""What a client can make the network layer hold (``logstore.server.network.socket_server``), and
what happens when the process runs short.

- A declared frame size costs nothing until its bytes arrive: receive buffers grow with them.
- Before authentication, a SASL connection's frames are capped at ``sasl.server.max.receive.size``.
- ``queued.max.request.bytes`` bounds the request bytes held over all connections: while it is
  spent sockets are not read, yet a frame can always complete (one larger than the budget too).
- A client that does not read its answers stops being served (its next request waits), and a parked
  ``exclusive`` request (a fetch) holds its connection's next request until it is answered.
- At ``max.connections`` new clients wait in the backlog and are served when a slot frees; out of
  descriptors, accepting backs off instead of spinning.
- A thread of the server that dies calls ``on_fatal``.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time
import tracemalloc

import pytest

from logstore.clock import ManualClock
from logstore.server.network.socket_server import SocketServer

from test_network import Echo, frame, receive_answers


def wait_until(predicate, timeout_s: float = 10.0, message: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, message or "timed out"
        time.sleep(0.01)


def header_only(size: int) -> bytes:
    """A frame's size prefix and request header, the rest of its ``size`` bytes not sent."""
    header = struct.pack(">hhih", 0, 3, 1, 1) + b"t"
    return struct.pack(">i", size) + header


@pytest.fixture
def servers():
    started: list[SocketServer] = []

    def make(dispatch, **options) -> SocketServer:
        server = SocketServer("127.0.0.1", 0, dispatch, **{"io_threads": 2, **options})
        server.start()
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


def test_a_declared_size_costs_nothing_until_its_bytes_arrive(servers):
    # Before: each connection's 100 MB declaration allocated 100 MB at once, unauthenticated.
    server = servers(Echo())
    tracemalloc.start()
    try:
        baseline = tracemalloc.get_traced_memory()[0]
        sockets = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(5)]
        for sock in sockets:
            sock.sendall(header_only(100_000_000) + b"x" * 100_000)
        wait_until(lambda: server.held_bytes >= 5 * 100_000, message="the server did not read the frames")
        grown = tracemalloc.get_traced_memory()[0] - baseline
        assert grown < 5 * 1_000_000, f"{grown} bytes allocated for 500 kB received"
        assert server.held_bytes < 5 * 300_000
    finally:
        tracemalloc.stop()
        for sock in sockets:
            sock.close()
    wait_until(lambda: server.held_bytes == 0, message="closing did not release the buffers")


class Unauthenticated:
    """A session a SASL listener gives a connection before it logs in."""

    authenticated = False
    raw_tokens = False


def test_an_unauthenticated_connection_may_send_only_small_frames(servers):
    server = servers(Echo(), new_session=lambda listener, peer: Unauthenticated(),
                     max_unauthenticated_request_bytes=524288)
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(frame(1, b"y" * 100_000))
        assert receive_answers(sock, 1)[0][0] == 1  # small frames are served
        sock.sendall(header_only(524288 + 1))
        sock.settimeout(10)
        assert sock.recv(100) == b"", "a frame over 512 KiB before authentication was not refused"
    assert server.held_bytes == 0


def test_queued_max_request_bytes_stops_reading_until_a_handler_frees_it(servers):
    echo = Echo()
    echo.gate.clear()  # handlers hold their frames
    budget = 1 << 20
    server = servers(echo, queued_max_request_bytes=budget, io_threads=1)
    large_limit = budget - (budget // 8)  # large frames leave an eighth for small requests
    a, b, c = (socket.create_connection(("127.0.0.1", server.port)) for _ in range(3))
    try:
        a.sendall(frame(1, b"a" * 900_000))  # handled (held) at once
        wait_until(lambda: server.held_bytes >= 900_000)
        b_frame = frame(2, b"b" * 400_000)
        threading.Thread(target=b.sendall, args=(b_frame,), daemon=True).start()
        wait_until(lambda: any(connection.starved for connection in server._connections.values()),
                   message="b was read past the budget for large frames")
        assert server.held_bytes < large_limit + 2 * (1 << 16)
        # a small request is still read (the budget keeps a share for them) while b waits
        c.sendall(frame(3, b"c" * 10))
        wait_until(lambda: sum(connection.requests for connection in server._connections.values()) == 2,
                   message="the small request was not read")
        echo.gate.set()
        answers = {receive_answers(sock, 1)[0][0] for sock in (a, b, c)}
        assert answers == {1, 2, 3}
    finally:
        for sock in (a, b, c):
            sock.close()
    wait_until(lambda: server.held_bytes == 0)


def test_a_frame_larger_than_the_budget_completes_when_only_partial_frames_hold_it(servers):
    budget = 1 << 20
    # A manual clock: how fast the senders are (a loaded host) is not what this test is about; the
    # rules that time them are (the next test).
    server = servers(Echo(), queued_max_request_bytes=budget, clock=ManualClock())
    frames = [frame(index, os.urandom(1_500_000)) for index in range(3)]
    sockets = [socket.create_connection(("127.0.0.1", server.port)) for _ in frames]
    try:
        for sock, data in zip(sockets, frames):
            sock.sendall(data[:600_000])  # three half frames: more than the budget, none complete
        wait_until(lambda: server.held_bytes >= budget)
        senders = [threading.Thread(target=sock.sendall, args=(data[600_000:],), daemon=True)
                   for sock, data in zip(sockets, frames)]
        for sender in senders:
            sender.start()
        for index, sock in enumerate(sockets):
            assert receive_answers(sock, 1)[0][0] == index
    finally:
        for sock in sockets:
            sock.close()
    # never more than the budget, one frame let through, and one read's growth
    assert server.held_bytes_peak <= budget + 1_500_000 + 2 * (1 << 16)


def test_the_holders_wait_while_the_frame_let_through_comes_at_its_rate(servers):
    """While the budget is spent by half frames, the one let through past it may take longer than
    the stall rule's half second, as long as it brings 64 KiB a second: the others, which the server
    stopped reading, are not closed meanwhile (before: they were, 500 ms after the budget was spent,
    though nothing was stuck). Time is the server's manual clock: the test decides how slow the
    client is."""
    budget = 1 << 20
    clock = ManualClock()
    server = servers(Echo(), queued_max_request_bytes=budget, clock=clock)
    frames = [frame(index, os.urandom(1_500_000)) for index in range(3)]
    sockets = [socket.create_connection(("127.0.0.1", server.port)) for _ in frames]
    try:
        for sock, data in zip(sockets, frames):
            sock.sendall(data[:600_000])
        # Wait for the choice itself: the budget is past only once the chosen client sends more, and the
        # server may choose one whose 600 KB it had read already (seen in a CI emulation: held stayed
        # at 7/8 of the budget, and a wait for the whole budget ran out).
        wait_until(lambda: server._privileged is not None, message="no frame was let through")  # noqa: SLF001
        let_through = server._privileged  # noqa: SLF001 - which client the server lets through
        index = next(i for i, sock in enumerate(sockets) if let_through.peer == "%s:%d" % sock.getsockname())
        sock, data = sockets[index], frames[index]
        sent = 600_000
        # 100 KB per 300 ms of the server's clock (the frame takes 2.7 s): each window of its rule
        # (500 ms, judged at the first turn past it) holds a whole step's 100 KB, whatever the turns.
        while sent < len(data):
            clock.advance(300)
            chunk = data[sent:sent + 100_000]
            before = let_through.received
            sock.sendall(chunk)
            sent += len(chunk)
            wait_until(lambda: let_through.received >= before + len(chunk) or let_through.closed,
                       message="the frame let through was not read")
            assert server.evicted == 0, "a connection was closed while the frame let through came at its rate"
        assert receive_answers(sock, 1)[0][0] == index
        senders = [threading.Thread(target=other.sendall, args=(frames[i][600_000:],), daemon=True)
                   for i, other in enumerate(sockets) if i != index]
        for sender in senders:
            sender.start()
        for i, other in enumerate(sockets):
            if i != index:
                assert receive_answers(other, 1)[0][0] == i
        assert server.evicted == 0
    finally:
        for sock in sockets:
            sock.close()


class BigAnswers:
    """Answers every request with ``size`` bytes."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.handled = 0

    def __call__(self, context) -> None:
        self.handled += 1
        payload = struct.pack(">ii", self.size - 4, context.correlation_id) + bytes(self.size - 8)
        context.respond_frame(payload)


def test_a_client_that_does_not_read_its_answers_is_not_served_more(servers):
    # Before: every pipelined request was answered into memory (8 unread fetches: 2.4 GB).
    answers = BigAnswers(4 << 20)
    server = servers(answers, max_unsent_response_bytes=1 << 20)
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
        for correlation_id in range(20):
            sock.sendall(frame(correlation_id, b"r"))
        wait_until(lambda: answers.handled >= 1)
        time.sleep(0.5)
        assert answers.handled <= 2, f"{answers.handled} requests answered for a client that reads none"
        sock.settimeout(30)
        seen = []
        for _ in range(20):  # it reads: every answer comes, in order
            head = b""
            while len(head) < 8:
                head += sock.recv(8 - len(head))
            size, correlation_id = struct.unpack(">ii", head)
            left = size - 4
            while left:
                left -= len(sock.recv(min(left, 1 << 20)))
            seen.append(correlation_id)
        assert seen == list(range(20))


class Parking:
    """Parks each request, ``exclusive`` or not, and answers it when ``release`` is set."""

    def __init__(self, exclusive: bool) -> None:
        self.exclusive = exclusive
        self.parked = []
        self.lock = threading.Lock()

    def __call__(self, context) -> None:
        context.exclusive = self.exclusive
        with self.lock:
            self.parked.append(context)

    def answer_all(self) -> None:
        with self.lock:
            parked, self.parked = self.parked, []
        for context in parked:
            context.respond_frame(struct.pack(">iiiI", 12, context.correlation_id, 0, 0))


@pytest.mark.parametrize("exclusive", [False, True])
def test_an_exclusive_parked_request_holds_its_connection(servers, exclusive):
    parking = Parking(exclusive)
    server = servers(parking)
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        for correlation_id in range(3):
            sock.sendall(frame(correlation_id, b""))
        wait_until(lambda: len(parking.parked) >= 1)
        time.sleep(0.3)
        # pipelined requests go on behind a parked one (a produce waiting for its fsync), but not
        # behind an exclusive one (a fetch)
        assert len(parking.parked) == (1 if exclusive else 3)
        answered = []
        while len(answered) < 3:
            wait_until(lambda: parking.parked)
            count = len(parking.parked)
            parking.answer_all()
            answered += [correlation_id for correlation_id, _s, _c in receive_answers(sock, count)]
        assert answered == [0, 1, 2]


def test_at_max_connections_new_clients_wait_and_are_served_when_one_closes(servers, caplog):
    # Before: each client over the limit was accepted, logged and closed (a flood: a log line each).
    server = servers(Echo(), max_connections=3)
    caplog.set_level(logging.WARNING, logger="logstore.server.network.socket_server")
    first = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(3)]
    wait_until(lambda: server.connection_count == 3)
    waiting = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(20)]  # in the backlog
    try:
        for sock in waiting:
            sock.sendall(frame(7, b"w"))
        time.sleep(0.3)
        assert server.connection_count == 3
        first[0].close()
        waiting[0].settimeout(10)
        assert receive_answers(waiting[0], 1)[0][0] == 7  # served once a slot freed
        pauses = [record for record in caplog.records if "not accepting" in record.getMessage()]
        assert len(pauses) == 1, [record.getMessage() for record in pauses]
    finally:
        for sock in first + waiting:
            sock.close()


_SHORT_OF_DESCRIPTORS = textwrap.dedent("""
    import logging, resource, socket, struct, sys, time
    from logstore.server.network.socket_server import SocketServer
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    resource.setrlimit(resource.RLIMIT_NOFILE, (48, 48))
    def echo(context):
        context.respond_frame(struct.pack(">iiiI", 12, context.correlation_id, 0, 0))
    server = SocketServer("127.0.0.1", 0, echo, io_threads=1, max_connections=100000)
    server.start()
    print(server.port, flush=True)
    sys.stdin.read()  # until the test closes it
    print(server.accept_pauses, flush=True)
    server.stop()
""")


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads CPU time from /proc")
def test_out_of_descriptors_accepting_backs_off_instead_of_spinning():
    # Before: accept() failed with EMFILE at once, again and again: a core spun and each failure
    # was a log line.
    process = subprocess.Popen([sys.executable, "-c", _SHORT_OF_DESCRIPTORS], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    clients = []
    try:
        port = int(process.stdout.readline())
        for _ in range(80):  # more than the 48 descriptors the server may have
            clients.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        cpu_before, wall_before = cpu_seconds(process.pid), time.monotonic()
        time.sleep(2.0)
        cpu = cpu_seconds(process.pid) - cpu_before
        wall = time.monotonic() - wall_before
        assert cpu < 0.25 * wall, f"the server used {cpu:.2f} s of CPU in {wall:.2f} s while short of descriptors"
        for sock in clients:
            sock.close()
        clients = []
        # the flood left: a new client is served
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                    sock.sendall(frame(5, b"z"))
                    assert receive_answers(sock, 1)[0][0] == 5
                break
            except (ConnectionError, AssertionError):
                assert time.monotonic() < deadline
                time.sleep(0.1)
        out, err = process.communicate("", timeout=20)
        assert int(out.split()[-1]) >= 1  # it did pause
        assert err.count("not accepting connections") <= 2, err[-2000:]
    finally:
        for sock in clients:
            sock.close()
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_dying_network_thread_calls_on_fatal(servers):
    died = threading.Event()
    failures = []

    def on_fatal(exc) -> None:
        failures.append(exc)
        died.set()

    server = servers(Echo(), on_fatal=on_fatal)

    def broken() -> None:
        raise MemoryError("planted")

    server._finish_completions = broken  # the next loop turn fails
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(frame(1, b"x"))
        assert died.wait(10), "on_fatal was not called"
    assert isinstance(failures[0], MemoryError) and server.failure is failures[0]
