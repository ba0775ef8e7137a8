"""Kafka's ``BrokerTopicMetrics`` per topic: bytes and records produced, bytes fetched.

The produce handler counts once per partition batch appended, the fetch handler once per partition
answered: a dictionary lookup and a few additions under a lock per batch, nothing per record. The
counts only grow while the topic lives (Prometheus counters); ``retain`` drops the topics that are
gone, so deleted topics do not pile up.

Imports nothing of the server.
"""

from __future__ import annotations

import threading
from typing import Collection


class TopicCounts:
    """One topic's counts."""

    __slots__ = ("bytes_in", "messages_in", "bytes_out")

    def __init__(self, bytes_in: int = 0, messages_in: int = 0, bytes_out: int = 0) -> None:
        self.bytes_in = bytes_in
        self.messages_in = messages_in
        self.bytes_out = bytes_out


class BrokerTopicMetrics:
    """Bytes in, records in and bytes out per topic, added to by the handler threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the handler threads count concurrently: += is not atomic
        self._topics: dict[str, TopicCounts] = {}

    def _counts(self, topic: str) -> TopicCounts:
        counts = self._topics.get(topic)
        if counts is None:
            counts = self._topics[topic] = TopicCounts()
        return counts

    def produced(self, topic: str, size_bytes: int, records: int) -> None:
        """A batch of ``records`` records, ``size_bytes`` on the wire, appended to ``topic``
        (Kafka's BytesInPerSec and MessagesInPerSec)."""
        with self._lock:
            counts = self._counts(topic)
            counts.bytes_in += size_bytes
            counts.messages_in += records

    def fetched(self, topic: str, size_bytes: int) -> None:
        """``size_bytes`` of ``topic``'s record batches sent in a fetch answer (Kafka's BytesOutPerSec)."""
        if size_bytes:
            with self._lock:
                self._counts(topic).bytes_out += size_bytes

    def snapshot(self) -> dict[str, TopicCounts]:
        with self._lock:
            return {topic: TopicCounts(counts.bytes_in, counts.messages_in, counts.bytes_out)
                    for topic, counts in self._topics.items()}

    def retain(self, topics: Collection[str]) -> None:
        """Forget the topics not in ``topics`` (deleted ones), as Kafka removes a deleted topic's metrics."""
        with self._lock:
            for topic in [topic for topic in self._topics if topic not in topics]:
                del self._topics[topic]


__all__ = ["BrokerTopicMetrics", "TopicCounts"]
