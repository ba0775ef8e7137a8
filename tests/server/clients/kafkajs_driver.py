"""kafkajs 2.2.4 (Node) behind the drivers' interface (see ``clients/__init__.py``): each call runs
``node kafkajs_driver.js`` with one JSON command on stdin and reads one JSON answer from stdout, with a
time limit.

kafkajs has no assign(): its consumer always joins a group, which our server does not have yet, so
this driver produces and administers only, and tests verify what it produced with the other
clients and the store (``can_consume = False``). Its producer has only gzip without codec plugins;
its admin client has no IncrementalAlterConfigs (kafkajs 2.2.4's alterConfigs sends AlterConfigs).
Headers are a JavaScript object, so a header name repeated after another name cannot be sent.

``find_node`` and ``find_kafkajs`` find node and kafkajs (in ``js/node_modules``, made by ``npm ci``
there, or in the node_modules dir LOGSTORE_TEST_NODE_MODULES names, which the scripts are given too)
and skip the test, naming what is missing and how to install it, where one is not there (a failure
under LOGSTORE_REQUIRE_TOOLS, as CI sets: ``external_tools``).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess

import external_tools

from . import ClientError, ClientTimeout, Driver

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "kafkajs_driver.js")
PACKAGE_DIR = os.path.join(HERE, "js")  # package.json + package-lock.json; node_modules by `npm ci`


def find_node() -> str:
    """The node executable; skips the test where it is missing."""
    return external_tools.require("node")


def find_kafkajs() -> str:
    """kafkajs's package.json; skips the test where ``npm ci`` was not run in ``clients/js`` (or node
    is missing)."""
    return external_tools.require("kafkajs")


def node_env() -> dict:
    """The environment the kafkajs scripts run in: they load kafkajs from LOGSTORE_TEST_NODE_MODULES."""
    return dict(os.environ, LOGSTORE_TEST_NODE_MODULES=str(external_tools.node_modules()))


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


class KafkajsDriver(Driver):
    name = "kafkajs"
    codecs = ("none", "gzip")  # snappy, lz4 and zstd throw KafkaJSNotImplemented without plugins
    can_consume = False
    incremental_alter = False
    # kafkajs 2.2.4 sizes every header with Buffer.byteLength(value) before its null check
    # (src/protocol/recordBatch/record/v0/index.js sizeOfHeaders), so a null header value throws.
    null_header_values = False

    def __init__(self):
        self.node = find_node()
        self.env = node_env()
        with open(find_kafkajs()) as f:
            self.version = json.load(f)["version"]

    def _call(self, op: str, bootstrap: str, timeout_s: float, **fields):
        command = {"op": op, "brokers": [bootstrap], **fields}
        try:
            done = subprocess.run([self.node, SCRIPT], input=json.dumps(command).encode(), capture_output=True,
                                  timeout=timeout_s, env=self.env)
        except subprocess.TimeoutExpired as exc:
            raise ClientTimeout(f"kafkajs {op} took more than {timeout_s}s; stderr: {exc.stderr!r}") from exc
        lines = done.stdout.decode().strip().splitlines()
        if done.returncode != 0 or not lines:
            raise ClientError("KAFKAJS_DRIVER_FAILED", f"exit {done.returncode}: {done.stderr.decode(errors='replace')}")
        answer = json.loads(lines[-1])
        if "error" in answer:
            error = answer["error"]
            code = error.get("code")
            if isinstance(code, int):
                raise ClientError.from_code(code, error.get("type") or "UNKNOWN", error.get("message", ""))
            raise ClientError(error.get("type") or "UNKNOWN", error.get("message", ""))
        return answer["ok"]

    def produce(self, bootstrap, topic, records, *, acks=-1, compression="none", partition=None, timeout_s=30.0,
                config=None):
        extra = dict(config or {})  # kafkajs's own "ssl" and "sasl" settings only
        if set(extra) - {"ssl", "sasl"}:
            raise ValueError(f"the kafkajs driver takes only its ssl and sasl settings, got {sorted(extra)}")
        payload = [{"key": _b64(r.key), "value": _b64(r.value),
                    "headers": [[name, _b64(value)] for name, value in (r.headers or ())],
                    "timestamp": r.timestamp_ms} for r in records]
        results = self._call("produce", bootstrap, timeout_s, topic=topic, acks=acks, compression=compression,
                             partition=partition, records=payload, **extra)
        return [(p, o) for p, o in results]

    def list_offset(self, bootstrap, topic, partition, spec, *, timeout_s=15.0):
        wire_spec = spec if spec in ("earliest", "latest") else {"timestamp": spec[1]}
        return self._call("list_offset", bootstrap, timeout_s, topic=topic, partition=partition, spec=wire_spec)

    def create_topic(self, bootstrap, topic, *, partitions=1, replication_factor=1, config=None, validate_only=False,
                     timeout_s=15.0):
        self._call("create_topic", bootstrap, timeout_s, topic=topic, partitions=partitions,
                   replication_factor=replication_factor, config=dict(config or {}), validate_only=validate_only)

    def create_partitions(self, bootstrap, topic, total, *, assignments=None, validate_only=False, timeout_s=15.0):
        self._call("create_partitions", bootstrap, timeout_s, topic=topic, count=total, assignments=assignments,
                   validate_only=validate_only)

    def describe_configs(self, bootstrap, topic, *, timeout_s=15.0):
        return self._call("describe_configs", bootstrap, timeout_s, topic=topic)

    def delete_topic(self, bootstrap, topic, *, timeout_s=15.0):
        self._call("delete_topic", bootstrap, timeout_s, topic=topic)

    def delete_records(self, bootstrap, topic, partition, before_offset, *, timeout_s=15.0):
        return self._call("delete_records", bootstrap, timeout_s, topic=topic, partition=partition,
                          offset=before_offset)

    def list_topics(self, bootstrap, *, timeout_s=15.0):
        return set(self._call("list_topics", bootstrap, timeout_s))
