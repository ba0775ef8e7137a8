"""One partition on disk: its files, its offsets, reading and writing it, and waiting on it.

Owns, bottom up:

- ``file_records`` (``FileRecords``, a data file: writes at the logical size, ``pread``, guarded
  mappings), ``index_file`` (``IndexFile``, the mapped file under an index) and ``index``
  (``OffsetIndex``, ``TimeIndex``: sparse, checked lookups);
- ``time_lookup`` (finding an offset by timestamp in a segment, and a segment's largest timestamp,
  each time index entry confirmed by its batch; it sees the segment through a protocol);
- ``segment`` (``LogSegment``: a data file and its two indexes; appends, reads of records and of
  cached batch heads, recovery and truncation of its files);
- ``damage`` (telling a crash's torn tail from damage, the ``LogDamage`` record, the repair plan and
  its cut), ``loader`` (opening a partition directory: the swap/cleaned/deleted passes, recovery from
  the recovery point, a read-only open's valid prefix) and ``checkpoint`` (the offset checkpoint
  files and the clean-shutdown marker, in Kafka's formats);
- ``local_log`` (``LocalLog``: the segment list of one directory and every file operation that
  changes it: roll, truncation, prefix deletion, the crash-safe segment swap);
- ``retention`` (which of the oldest segments retention deletes, and why);
- ``dir_watch`` (a read-only view's wait on another process's appends), ``waits`` (reads that wait
  for data and appends that wait for fsync, through the purgatory; the group-commit flusher; it sees
  a log through a protocol) and ``append_combiner`` (``AppendCombiner``: one-record appends handed to
  the thread holding the log's lock; it is given the calls it makes);
- ``producer_state`` (``ProducerStateTable``: the producers of a partition, their epochs and open
  transactions, Kafka's append checks, the first unstable offset), ``txn_index`` (the aborted
  transactions and the search for those of a range) and ``txn_filter`` (``AbortedFilter``: which
  batches of a read_committed read are aborted data);
- ``log`` (``Log``: offsets, locks, append, lock-free reads, flush, truncation, retention and repair
  as one object, holding a ``LocalLog``, an ``AppendCombiner``, the ``LogWaits`` and the
  ``ProducerStateTable``; transaction markers, the last stable offset, reads at both isolation levels).

May import: the foundations, ``records`` and ``timer``.
"""

from .log import Log
from .segment import LogSegment

__all__ = ["Log", "LogSegment"]
