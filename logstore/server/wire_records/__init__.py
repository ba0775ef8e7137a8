"""Records on the wire: Kafka's RecordBatch v2 converted to and from logstore's records and batches.

This package is what the request handlers and the client import: it gathers the public API of its
modules, ``batch`` (the v2 header layout, ``WireBatch``, the errors, the varint tables), ``decode``
and ``runs`` (a produce request's batches decoded and validated; the column-at-a-time fast path),
``encode`` (a stored batch as a fetch answer; a producer's batch), ``compression`` (gzip, snappy,
lz4, zstd, bounded), ``crc32c`` and ``fetch_cache``:

- ``decode_produce(data, *, max_message_bytes, transactional=False)`` -> ``[(WireBatch, [Record])]``:
  a Produce request's batches, validated as Kafka validates a client's (``decode``; transactional
  batches only in a request with a transactional id, control batches never);
  ``decode_produce_columns`` gives each batch's records as ``RecordColumns`` (what the produce
  handler appends);
- ``encode_fetch_batch(batch, *, partition_leader_epoch=0)`` -> bytes: one stored ``RecordBatch`` as
  one uncompressed v2 batch for a Fetch response, with its producer fields and Kafka's
  transactional and control bits (``encode``);
- ``FetchBatchCache``: encoded fetch batches by a caller's key, so several consumers of the same
  data pay the conversion once;
- ``encode_produce_batch(records, ...)`` and ``decode_fetch(data)``: the client's side, for tests,
  the fuzzer and our own client;
- ``WireBatch`` and the errors (``WireRecordError`` and its subclasses, each with Kafka's
  ``error_code``) from ``batch``.

How the pieces fit, and what they cost, is in the modules' docstrings; the layout of a v2 batch is
in ``batch``.

May import: the engine's ``records`` and ``clock``, the standard library, and (through
``compression`` and ``crc32c``) the server extra's ``cramjam`` and ``google_crc32c``; no other room
of the server (``protocol`` included: these are bytes inside a message, not messages).
"""

from __future__ import annotations

from .batch import (CREATE_TIME, LOG_APPEND_TIME, CorruptMessageError, InvalidRecordError, InvalidTimestampError,
                    MessageTooLargeError, UnsupportedCompressionError, WireBatch, WireRecordError)
from .compression import AVAILABLE_CODECS, DEFAULT_MAX_DECOMPRESSED_BYTES
from .decode import decode_fetch, decode_produce, decode_produce_columns
from .encode import encode_fetch_batch, encode_produce_batch, encode_records
from .fetch_cache import FetchBatchCache

__all__ = [
    "AVAILABLE_CODECS", "CREATE_TIME", "DEFAULT_MAX_DECOMPRESSED_BYTES", "LOG_APPEND_TIME", "CorruptMessageError",
    "FetchBatchCache", "InvalidRecordError", "InvalidTimestampError", "MessageTooLargeError",
    "UnsupportedCompressionError", "WireBatch", "WireRecordError", "decode_fetch", "decode_produce",
    "decode_produce_columns", "encode_fetch_batch", "encode_produce_batch", "encode_records",
]
