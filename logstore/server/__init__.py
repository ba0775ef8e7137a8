"""The Kafka-protocol server (optional extra ``kafka-logstore[server]``): ``logstore serve``.

It puts Kafka's request path in front of a store, so every Kafka client and tool can produce to it
and consume from it. It is one more user of the engine's public API, like the CLI. Its rooms, bottom
up (a room imports only the rooms below it; ``tests/test_layering.py`` pins the order):

- ``protocol``: Kafka's message layouts (field tables per API and version), the codec generated
  from them, the request and response headers, and Kafka's error codes;
- ``wire_records``: records on the wire: Kafka's RecordBatch v2 (varint records, CRC-32C,
  compression) converted to and from the store's own batches;
- ``network``: the network core: sockets, connections, framing, request contexts, answers in
  request order, the selector thread and the handler threads;
- ``security``: listeners and TLS, SASL (PLAIN, SCRAM) and sessions, credentials, ACLs and the
  per-API authorization rules;
- ``server_config``: the broker's settings with Kafka's names (what the rooms above read);
- ``handlers``: every API mapped onto the store, one module per family (produce, fetch, admin,
  groups, security admin), the dispatcher and what handlers share;
- ``metrics``: the metrics in Prometheus' text format and the ``/healthz`` and ``/readyz`` probes,
  on an HTTP listener of their own (``logstore serve --metrics-listen``);
- ``server``: ``KafkaServer``, which assembles the rooms over a store it owns or borrows.

``extra`` says whether the extra's libraries are installed, without loading any of the above.
This package may import every layer below it (the engine, tools, ``group``); never ``client``,
``spark``, ``bench`` or ``cli``.
"""

from .extra import EXTRA_MODULES, INSTALL_HINT, missing_extra


def __getattr__(name: str):
    # KafkaServer is loaded on first use, so `missing_extra()` works without importing the codec.
    if name == "KafkaServer":
        from .server import KafkaServer
        return KafkaServer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["EXTRA_MODULES", "INSTALL_HINT", "KafkaServer", "missing_extra"]
