"""The store: topics of partitioned logs over one or more data dirs (Kafka's LogManager).

Owns:

- ``log_manager`` (``LogManager``: the public front: topics, appends routed by key, reads and
  fetches, compaction on demand, the life cycle, wiring each ``Log`` to the store's services);
- ``log_dirs`` (``LogDirs``: the data dirs: locks, parallel loading, the partitions in each dir,
  their checkpoints, offline dirs, clean shutdown, status);
- ``jobs`` (``BackgroundJobs``: retention, flush and checkpoint jobs on the scheduler, and the delayed
  removal of deleted segment files);
- ``topics`` (topic names, partition directory names, the key partitioner and ``topics.json``).

May import: every layer below it (foundations, ``records``, ``timer``, ``log``, ``cleaner``).
"""

from .log_manager import LogManager

__all__ = ["LogManager"]
