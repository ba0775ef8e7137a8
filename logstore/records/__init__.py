"""The record batch format: pure code, bytes in and values out (no files, clocks, threads or locks).

Owns:

- ``decoder``: ``Record``, ``BatchHeader`` and ``RecordBatch`` (the 55-byte header, the column-wise
  body, CRC checks, records built column-wise) and the constants of the format;
- ``header_columns``: the bytes of record headers in a batch of magic 2 (columns: encoded, checked
  and decoded in bulk), and the magic-1 header decoder;
- ``encoder``: records to batch bytes (``encode_batch``, ``encode_batch_parts``), offsets assigned by
  rewriting the base offset (``assign_base_offset``), a batch's prefix (``encode_batch_prefix``);
- ``batching``: one append's records to the batches a log accepts (validation against the topic's
  config, compression, timestamp type, the split at ``max.message.bytes``), ``RecordColumns`` (records
  given as columns), ``PreparedAppend`` and ``AppendInfo``;
- ``columns``: ``ColumnBatch`` (the records of a batch in range as columns over its bytes, and
  ``to_arrow`` when pyarrow is installed) and ``ColumnTaker`` (the read budget over batches);
- ``fetch``: the read budget (``max_bytes`` charged per record, Kafka's min-one rule) and the cache of
  verified batch heads that point reads use.

docs/FORMAT.md specifies the bytes. May import: the foundations (``errors``, ``config``) only.
"""

from .batching import AppendInfo
from .columns import ColumnBatch
from .decoder import BatchHeader, Record, RecordBatch, read_header
from .encoder import assign_base_offset, encode_batch

__all__ = ["AppendInfo", "BatchHeader", "ColumnBatch", "Record", "RecordBatch", "assign_base_offset", "encode_batch",
           "read_header"]
