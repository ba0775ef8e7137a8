"""The Kafka-protocol server (optional extra ``logstore[server]``): ``logstore serve``.

It puts Kafka's request path in front of a store, so every Kafka client and tool can produce to it
and consume from it (DESIGN.md §9). It owns:

- the protocol codec: primitive types, the request and response headers, and a schema-driven codec
  of every message type it speaks (field tables per version, encoders and decoders generated from
  them): ``codec``, ``messages``;
- records on the wire: Kafka's RecordBatch v2 (CRC-32C, varint records, compression) converted to
  and from the store's own batches: ``wire_records``, ``compression``, ``crc32c``;
- the network layer (frames in, frames out, responses in request order per connection), the
  request handlers (one per API), the produce and fetch purgatories, and idempotent producers' state;
- security: listeners with Kafka's protocol names and TLS (``listeners``), who a client is and SASL
  PLAIN/SCRAM (``sasl``, ``scram``, ``credentials``), ACLs with Kafka's model enforced on every API
  (``acls``, ``acl_store``, ``authorization``, ``authorization_groups``) and their admin APIs
  (``security_admin``);
- ``KafkaServer``, which owns or borrows a ``LogManager`` and serves it.

It is one more user of the engine's public API, like the CLI: it may import every layer below it
(the engine, tools, bench), never spark or cli.
"""

import importlib.util

EXTRA_MODULES = ("google_crc32c", "cramjam")
INSTALL_HINT = "pip install 'logstore[server]'"


def missing_extra() -> list[str]:
    """The server extra's modules that are not installed (the server refuses to start without them:
    a pure-Python CRC-32C is a thousand times slower, and without cramjam snappy, lz4 and zstd
    batches could not be read)."""
    return [name for name in EXTRA_MODULES if importlib.util.find_spec(name) is None]


def __getattr__(name: str):
    # KafkaServer is loaded on first use, so `missing_extra()` works without importing the codec.
    if name == "KafkaServer":
        from .server import KafkaServer
        return KafkaServer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["EXTRA_MODULES", "INSTALL_HINT", "KafkaServer", "missing_extra"]
