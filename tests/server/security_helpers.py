"""Shared helpers of the security tests (test_security_clients, test_security_wire): a server with
every listener and users, each client's own security settings, a bounded "refused?" probe per
client, and a raw-socket client over TLS. No tests here.

Every server binds 127.0.0.1 and is stopped by the context manager that made it; every client call
is bounded in time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import ssl
import struct
import subprocess
import time

from logstore.server import KafkaServer
from logstore.server.protocol.codec import decode_response, encode_request
from logstore.server.security.credentials import CredentialStore
from wire_client import WireClient

USER, PASSWORD = "alice", "alice-secret"
LISTENERS = ["SASL_SSL://127.0.0.1:0", "SSL://127.0.0.1:0", "SASL_PLAINTEXT://127.0.0.1:0", "PLAINTEXT://127.0.0.1:0"]
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
SASL_FAILED_TEXT = "Authentication failed during authentication due to invalid credentials"
"""What the server tells a client whose SASL authentication failed (Kafka's own wording), which
every client shows in its error."""

API_VERSIONS, METADATA, PRODUCE, FETCH, LIST_GROUPS = 18, 3, 0, 1, 16
SASL_HANDSHAKE, SASL_AUTHENTICATE, DESCRIBE_CONFIGS = 17, 36, 32


def add_users(data_dir, users: dict[str, str] | None = None) -> None:
    """SCRAM-SHA-256 and -512 credentials for each user (before the server starts: a running server
    owns the store of credentials)."""
    store = CredentialStore(str(data_dir))
    for user, password in (users or {USER: PASSWORD}).items():
        for mechanism in SCRAM_MECHANISMS:
            store.set(user, mechanism, password)


def tls_config(material, client_auth: str = "requested", **extra) -> dict:
    """The server's TLS settings (Kafka's names) for ``material`` (tls_material.TlsMaterial)."""
    return {"ssl.keystore.location": str(material.server_cert), "ssl.key.location": str(material.server_key),
            "ssl.truststore.location": str(material.ca_cert), "ssl.client.auth": client_auth, **extra}


@contextlib.contextmanager
def secured_server(data_dir, material, *, listen=LISTENERS, client_auth: str = "requested", users=None,
                   config: dict | None = None, clock=None):
    """A server owning a store in ``data_dir`` with ``listen`` listeners, the users' credentials and
    ACLs off (authentication and TLS are tested here, not authorization)."""
    os.makedirs(data_dir, exist_ok=True)
    add_users(data_dir, users)
    settings = {**tls_config(material, client_auth), "authorizer.enable": "false",
                "offsets.topic.num.partitions": 1, **(config or {})}
    with KafkaServer(str(data_dir), listen=listen, config=settings, clock=clock) as server:
        yield server


# --- each client's own security settings ------------------------------------------------------

def client_settings(client: str, protocol: str, *, ca=None, cert=None, key=None, mechanism=None,
                    user=None, password=None) -> dict:
    """The security settings of ``client`` (a driver name) in its own names: ``protocol`` is
    Kafka's security protocol; ``ca`` the CA file to trust the server with (None: the client's
    default trust, which does not know the test CA), ``cert``/``key`` a client certificate,
    ``mechanism``/``user``/``password`` SASL."""
    ca, cert, key = (None if path is None else str(path) for path in (ca, cert, key))
    sasl = protocol.startswith("SASL")
    tls = protocol.endswith("SSL")
    if client == "kafka-python":
        settings = {"security_protocol": protocol}
        if tls:
            settings.update({name: value for name, value in (("ssl_cafile", ca), ("ssl_certfile", cert),
                                                              ("ssl_keyfile", key)) if value is not None})
        if sasl:
            settings.update(sasl_mechanism=mechanism, sasl_plain_username=user, sasl_plain_password=password)
        return settings
    if client == "aiokafka":
        from aiokafka.helpers import create_ssl_context
        settings = {"security_protocol": protocol}
        if tls:
            settings["ssl_context"] = create_ssl_context(cafile=ca, certfile=cert, keyfile=key)
        if sasl:
            settings.update(sasl_mechanism=mechanism, sasl_plain_username=user, sasl_plain_password=password)
        return settings
    if client == "kafkajs":  # its Kafka({ssl, sasl}): the driver reads the PEM files
        settings = {}
        if tls:
            settings["ssl"] = {"ca": ca, "cert": cert, "key": key}
        if sasl:
            settings["sasl"] = {"mechanism": mechanism.lower(), "username": user, "password": password}
        return settings
    if client in ("confluent-kafka", "kcat"):  # librdkafka's names
        settings = {"security.protocol": protocol.lower()}
        if tls:
            settings.update({name: value for name, value in (("ssl.ca.location", ca), ("ssl.certificate.location", cert),
                                                              ("ssl.key.location", key)) if value is not None})
        if sasl:
            settings.update({"sasl.mechanisms": mechanism, "sasl.username": user, "sasl.password": password})
        return settings
    raise ValueError(f"no security settings for client {client!r}")


# --- is a client refused? -------------------------------------------------------------------------

class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@contextlib.contextmanager
def _captured(logger_name: str):
    """The lines ``logger_name`` logs meanwhile (its level lowered to WARNING at most)."""
    logger = logging.getLogger(logger_name)
    handler, level = _Lines(), logger.level
    logger.addHandler(handler)
    if logger.level == logging.NOTSET or logger.level > logging.WARNING:
        logger.setLevel(logging.WARNING)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


class Connected(AssertionError):
    """The client got through where it should have been refused."""


def refusal(client: str, bootstrap: str, topic: str, settings: dict, timeout_s: float = 1.5) -> str:
    """Have ``client`` (with its own ``settings``) try to produce one record to ``topic``, bounded
    by ``timeout_s``; return what the client reported (its error and what it logged), or raise
    ``Connected`` when it delivered the record."""
    if client == "kafka-python":
        import kafka.errors
        from kafka import KafkaProducer
        with _captured("kafka") as lines:
            try:
                # bootstrap_timeout_ms bounds the eager bootstrap in __init__ (kafka-python retries a
                # refused bootstrap until then)
                producer = KafkaProducer(bootstrap_servers=bootstrap, bootstrap_timeout_ms=int(timeout_s * 1000),
                                         max_block_ms=int(timeout_s * 1000), request_timeout_ms=int(timeout_s * 1000),
                                         **settings)
            except kafka.errors.KafkaError as exc:
                return "\n".join([f"{type(exc).__name__}: {exc}", *lines])
            try:
                producer.send(topic, b"refused?").get(timeout=timeout_s)
            except kafka.errors.KafkaError as exc:
                return "\n".join([f"{type(exc).__name__}: {exc}", *lines])
            finally:
                producer.close(timeout=2)
        raise Connected(f"kafka-python produced to {topic}")
    if client == "confluent-kafka":
        from confluent_kafka import Producer
        errors: list = []
        producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": int(timeout_s * 1000),
                             "error_cb": errors.append, "log_level": 0, **settings})
        delivered: list = []
        producer.produce(topic, b"refused?", on_delivery=lambda err, msg: delivered.append(err))
        deadline = _deadline(timeout_s)
        while not delivered and not errors and _remaining(deadline) > 0:
            producer.poll(min(0.05, _remaining(deadline)))
        producer.purge()
        producer.flush(1)
        producer.close()
        if delivered and delivered[0] is None:
            raise Connected(f"confluent-kafka produced to {topic}")
        return "\n".join(f"{error.name()}: {error.str()}" for error in [*errors, *filter(None, delivered)])
    if client == "aiokafka":
        import aiokafka.errors
        from aiokafka import AIOKafkaProducer

        async def attempt():
            producer = AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout_s * 1000),
                                        **settings)
            try:
                await producer.start()
                await producer.send_and_wait(topic, b"refused?")
            finally:
                await producer.stop()

        with _captured("aiokafka") as lines:
            try:
                asyncio.run(asyncio.wait_for(attempt(), timeout_s + 2))
            except (aiokafka.errors.KafkaError, asyncio.TimeoutError) as exc:
                return "\n".join([f"{type(exc).__name__}: {exc}", *lines])
        raise Connected(f"aiokafka produced to {topic}")
    if client == "kcat":
        from clients.kcat_driver import find_kcat
        args = [find_kcat(), "-b", bootstrap, "-P", "-t", topic, "-p", "0", "-m", str(max(1, int(timeout_s))),
                "-X", f"message.timeout.ms={int(timeout_s * 1000)}"]
        for name, value in settings.items():
            args += ["-X", f"{name}={value}"]
        done = subprocess.run(args, input=b"refused?\n", capture_output=True, timeout=timeout_s + 10)
        if done.returncode == 0:
            raise Connected(f"kcat produced to {topic}: {done.stderr.decode(errors='replace')}")
        return done.stderr.decode(errors="replace")
    raise ValueError(f"unknown client {client!r}")


def _deadline(seconds: float) -> float:
    return time.monotonic() + seconds


def _remaining(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


# --- raw sockets ------------------------------------------------------------------------------------

class SecureWireClient(WireClient):
    """``WireClient`` over TLS (``context``: a client ``ssl.SSLContext``), or plain without one;
    ``source`` binds the client's end to another loopback address (the server then sees another
    host). Keeps every byte it received in ``received``."""

    def __init__(self, address: str, context: ssl.SSLContext | None = None, *, timeout_s: float = 10.0,
                 source: str | None = None, client_id: str = "security-test") -> None:
        host, port = address.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)), timeout=timeout_s,
                                        source_address=(source, 0) if source else None)
        if context is not None:
            sock = context.wrap_socket(sock, server_hostname=host)
        self.sock = sock
        self.client_id = client_id
        self.correlation_id = 0
        self.received = bytearray()

    def _exactly(self, size: int) -> bytes:
        data = super()._exactly(size)
        self.received += data
        return data

    def send_token(self, token: bytes) -> None:
        """A bare SASL token (after SaslHandshake v0): size-prefixed, no request header."""
        self.sock.sendall(struct.pack(">i", len(token)) + token)

    def receive_token(self) -> bytes:
        return self.receive_frame()

    def request_bytes(self, api_key: int, version: int, body: dict) -> bytes:
        self.correlation_id += 1
        return encode_request(api_key, version, self.correlation_id, self.client_id, body)

    def read_all(self, timeout_s: float = 3.0) -> tuple[bytes, bool]:
        """Everything the server sends until it closes the connection or ``timeout_s`` passes:
        (the bytes, whether it closed)."""
        self.sock.settimeout(timeout_s)
        deadline = time.monotonic() + timeout_s
        data = bytearray()
        try:
            while time.monotonic() < deadline:
                self.sock.settimeout(max(0.01, deadline - time.monotonic()))
                chunk = self.sock.recv(65536)
                if not chunk:
                    self.received += data
                    return bytes(data), True
                data += chunk
        except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
            self.received += data
            return bytes(data), True
        except socket.timeout:
            pass
        self.received += data
        return bytes(data), False


def decode(api_key: int, version: int, frame: bytes) -> dict:
    return decode_response(api_key, version, memoryview(frame))[1]
