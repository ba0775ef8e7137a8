"""Time-driven infrastructure: the hierarchical timing wheel and what is built on it (Kafka's
server-common timer and purgatory; docs/design.md §5).

Owns, bottom up:

- ``timing_wheel``: ``TimerTask``, its entry, the bucket list and one ``TimingWheel`` level (the data
  structures and the placement arithmetic, no threads);
- ``system_timer``: ``SystemTimer`` (the wheel made thread-safe, its delay queue of buckets and the
  executor thread);
- ``scheduler``: ``Scheduler``, named one-shot and periodic jobs (the store's retention, flush and
  checkpoint jobs run here);
- ``purgatory``: ``DelayedOperation`` and ``DelayedOperationPurgatory`` (requests that complete when
  a condition holds or expire).

May import: ``clock`` and ``errors`` only. It never imports storage code, so a later layer (the
Kafka-protocol server, the group coordinator) can use it for anything that waits.
"""

from .purgatory import DelayedOperation, DelayedOperationPurgatory
from .scheduler import ScheduledTask, Scheduler
from .system_timer import SystemTimer
from .timing_wheel import TimerTask

__all__ = ["DelayedOperation", "DelayedOperationPurgatory", "ScheduledTask", "Scheduler", "SystemTimer", "TimerTask"]
