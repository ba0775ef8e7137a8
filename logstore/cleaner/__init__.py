"""Compaction: the latest record per key (Kafka's LogCleaner; docs/design.md §8).

Owns:

- ``offset_map`` (``OffsetMap``: key -> latest offset, bounded by the dedupe buffer);
- ``multipass`` (a dirty section whose keys do not fit the map: hash-partitioned spill, one map pass
  per partition, survivor bitmaps, so the log is still recopied once);
- ``cleaner`` (``Cleaner``: one round over one log: map the dirty section, recopy segment groups into
  ``.cleaned`` files, swap them in through the log);
- ``transactions`` (``TxnRecopy``: what a round does with transactional batches: aborted data
  dropped, markers kept while their data is, then given a delete horizon and dropped, producers'
  last batches kept, the cleaned segments' aborted-transaction entries);
- ``cleaner_manager`` (``LogCleanerManager``: which log is dirtiest, its cleanable range, the
  ``cleaner-offset-checkpoint`` files, the per-log states that keep cleaning apart from truncation,
  retention and deletion);
- ``log_cleaner`` (``LogCleaner``: the cleaner threads, compaction to completion, ``PrebuiltMap`` for
  maps built by another engine) and ``stats`` (per-round and total statistics, the I/O throttle).

May import: the foundations, ``records``, ``timer`` and ``log``. The store (``manager``) starts it.
"""

from .log_cleaner import LogCleaner

__all__ = ["LogCleaner"]
