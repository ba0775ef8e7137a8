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
- ``KafkaServer``, which owns or borrows a ``LogManager`` and serves it.

It is one more user of the engine's public API, like the CLI: it may import every layer below it
(the engine, tools, bench), never spark or cli.
"""
