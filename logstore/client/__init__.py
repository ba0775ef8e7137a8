"""A Kafka client of our own (DESIGN.md §11): the other side of the protocol the server speaks.

It owns, on the server's codec (``logstore.server.codec``) and the standard library:

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
- ``Producer``: ``send``, the sender thread, retries, idempotence, ``flush`` and ``close`` (``producer``);
- the client's errors (``errors``).

The producer's compression, the group consumer and the CLI's
``--bootstrap-server`` and ``mirror`` are issue 16's later steps and will live here too.

Layer: above ``server`` (whose codec it uses), below ``spark`` and ``cli``; it never imports the
storage engine's write paths, only what a client of any broker needs.
"""
