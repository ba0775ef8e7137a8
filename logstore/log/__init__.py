"""One partition on disk: its files, its offsets, reading and writing it, and waiting on it.

Owns, bottom up:

- ``file_records`` (a data file: writes at the logical size, ``pread``, guarded mappings), ``index``
  (``OffsetIndex``, ``TimeIndex``: sparse, mmap-backed), ``segment`` (``LogSegment``: a data file and
  its two indexes);
- ``loader`` (opening a partition directory: the swap/cleaned/deleted passes, recovery from the
  recovery point, a read-only open's valid prefix) and ``checkpoint`` (the offset checkpoint files
  and the clean-shutdown marker, in Kafka's formats);
- ``local_log`` (``LocalLog``: the segment list of one directory and every file operation that
  changes it: roll, truncation, prefix deletion, the crash-safe segment swap);
- ``retention`` (which of the oldest segments retention deletes, and why);
- ``waits`` (reads that wait for data and appends that wait for fsync, through the purgatory; the
  group-commit flusher) and ``dir_watch`` (a read-only view's wait on another process's appends);
- ``log`` (``Log``: offsets, locks, append, read, flush, truncation and retention as one object).

May import: the foundations, ``records`` and ``timer``.
"""

from .log import Log
from .segment import LogSegment

__all__ = ["Log", "LogSegment"]
