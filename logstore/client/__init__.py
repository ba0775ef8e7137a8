"""A Kafka client of our own (docs/design.md §11): the other side of the protocol the server speaks.

It owns, on the server's codec (``logstore.server.protocol.codec``) and the standard library:

- the network layer: connections to brokers, request framing and correlation, several requests in
  flight per connection with their responses matched in order, request timeouts, and the protocol
  versions negotiated through ApiVersions against whatever the broker offers (``connection``);
- Kafka's default partitioner, so a key lands in the partition Kafka's own producer picks
  (``partitioner``: murmur2);
- the cluster as the client sees it: bootstrap from several addresses, metadata, one connection
  per broker and reconnect backoff (``cluster``);
- the producer's record accumulator: per-partition batches, ``linger.ms``, ``batch.size``, bounded
  ``buffer.memory`` (``accumulator``);
- Produce requests from those batches, and their responses applied back (``produce``);
- the sender loop: requests in flight on one selector, retries, ``delivery.timeout.ms`` (``sender``),
  and the idempotent producer's per-partition sequences (``idempotence``);
- transactions: the transactional producer's state and its requests to the transaction and group
  coordinators (``transactions``);
- ``Producer``: ``send``, its settings (compression among them), ``flush`` and ``close`` (``producer``);
- the client's errors (``errors``);
- ``Consumer``: ``assign``/``subscribe`` (a consumer group: ``group_member``), ``poll`` with fetching
  ahead (``fetcher``), seeks, positions, offset lookups, commits (``consumer``);
- administration of a broker's topics and groups (``admin``), what the command line's
  ``--bootstrap-server`` does with them (``tools``), and ``mirror`` between stores and brokers.

Its benchmark (``logstore perf client``) lives in the benchmark layer, ``logstore.bench.client``.

Layer: above ``server`` (whose codec it uses) and ``group`` (the consumer protocol, the assignors and
the group admin it extends), below ``cli``, beside ``spark``. It may import those two layers, the
foundations and, in ``mirror`` only (a data dir as one end of a copy), ``manager``; the rest is what
a client of any broker needs.
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what the names below are, for type checkers (at run time each loads on first use)
    from .admin import BrokerAdmin, BrokerGroupAdmin
    from .consumer import Consumer, ConsumerRecord
    from .errors import (AbortableTransactionError, BrokerResponseError, FatalTransactionError, NetworkError,
                         NoOffsetForPartitionError, ProducerFencedError, RequestTimedOutError, TransactionError,
                         TransactionStateError)
    from .consumer import GroupMetadata
    from .produce import DeliveryTimeoutError
    from .producer import Producer

# Where each public name lives, loaded on first use (PEP 562): a module of this package that needs
# none of them (``store_host.hosted_address``, ``security``) does not load the codec, the producer
# and the consumer with the package.
_MODULES = {"BrokerAdmin": ".admin", "BrokerGroupAdmin": ".admin", "Consumer": ".consumer", "ConsumerRecord": ".consumer",
            **dict.fromkeys(("AbortableTransactionError", "BrokerResponseError", "FatalTransactionError", "NetworkError",
                             "NoOffsetForPartitionError", "ProducerFencedError", "RequestTimedOutError",
                             "TransactionError", "TransactionStateError"), ".errors"),
            "GroupMetadata": ".consumer",
            "DeliveryTimeoutError": ".produce", "Producer": ".producer"}


def __getattr__(name: str) -> object:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_MODULES))


__all__ = ["AbortableTransactionError", "BrokerAdmin", "BrokerGroupAdmin", "BrokerResponseError", "Consumer",
           "ConsumerRecord", "DeliveryTimeoutError", "FatalTransactionError", "GroupMetadata", "NetworkError",
           "NoOffsetForPartitionError", "Producer", "ProducerFencedError", "RequestTimedOutError", "TransactionError",
           "TransactionStateError"]
