"""How many connections the process's descriptor limit leaves once the store has its own
(``DescriptorBudget``), and raising the soft limit to the hard one for a process that is the server's.

Every connection costs a descriptor, and so does every file the store holds open; when a flood of
connections takes the last ones, the store's next checkpoint or segment roll fails with EMFILE.
So, unless ``max.connections`` is set, the server accepts at most what the limit leaves after the
store's needs, its own sockets and a headroom for the store to grow (new partitions, a roll, the
cleaner's files, a recovery), and says so at start-up. Beyond ``max.connections`` new clients wait
in the listen backlog (``SocketServer`` stops watching its listeners), as with Kafka.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

try:
    import resource
except ImportError:  # not on Windows: the limit is unknown there
    resource = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

NETWORK_DESCRIPTORS = 8
"""The server's own descriptors besides its listeners: the selector, its wake-up socket pair, a few
spare for a connection being accepted and closed and the files the server writes (producer state,
credentials, ACLs)."""
MIN_CONNECTIONS = 8
"""The fewest connections a derived max.connections allows (a limit that leaves fewer is warned about)."""


def descriptor_limit() -> int | None:
    """The soft RLIMIT_NOFILE of this process (None where unknown or unlimited)."""
    if resource is None:
        return None
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


def raise_descriptor_limit(ceiling: int = 1 << 20) -> int | None:
    """Raise the soft RLIMIT_NOFILE to the hard one (at most ``ceiling``), as a process that is the
    server's may (``logstore serve`` does; Kafka's docs ask operators for 100,000 and more). The
    default soft limit of many systems, 1024, is a few hundred partitions and connections. Returns
    the soft limit now in force (None where unknown)."""
    if resource is None:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = ceiling if hard == resource.RLIM_INFINITY else min(hard, ceiling)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:  # a sandbox may forbid it: the soft limit stays
            logger.info("could not raise the descriptor limit from %d to %d: %s", soft, target, exc)
    return None if soft == resource.RLIM_INFINITY else soft


@dataclass(frozen=True)
class DescriptorBudget:
    """The descriptor limit, what the store and the server need of it, and the connections left."""

    limit: int | None
    store_needs: int
    server_needs: int
    headroom: int
    max_connections: int
    configured: bool  # max.connections was set (not derived)
    warning: str | None = None

    @classmethod
    def of(cls, store_needs: int, listeners: int, configured: int | None,
           limit: int | None = None) -> "DescriptorBudget":
        """The budget for a store needing ``store_needs`` descriptors now, behind ``listeners``
        listening sockets; ``configured`` is max.connections when set. ``limit`` defaults to this
        process's soft RLIMIT_NOFILE."""
        limit = descriptor_limit() if limit is None else limit
        server_needs = listeners + NETWORK_DESCRIPTORS
        # The store's estimate has room for its rolls, checkpoints and cleaner; this is for what it
        # grows by while serving (topics and partitions created, about 3 descriptors each).
        headroom = 32 + store_needs // 8
        warning = None
        if limit is None:
            left = 2**31 - 1
        else:
            left = limit - store_needs - server_needs - headroom
        if configured is not None:
            if limit is not None and configured > left:
                warning = (f"max.connections {configured} is more than the descriptor limit {limit} leaves for "
                           f"connections ({max(left, 0)}): a flood of connections can starve the store of "
                           "descriptors (raise ulimit -n)")
            return cls(limit, store_needs, server_needs, headroom, configured, True, warning)
        if left < MIN_CONNECTIONS:
            warning = (f"the descriptor limit {limit} leaves {max(left, 0)} connections after the store's "
                       f"{store_needs} descriptors; accepting {MIN_CONNECTIONS} (raise ulimit -n)")
            left = MIN_CONNECTIONS
        return cls(limit, store_needs, server_needs, headroom, left, False, warning)

    def __str__(self) -> str:
        limit = "no descriptor limit" if self.limit is None else f"descriptor limit {self.limit}"
        how = "set" if self.configured else "derived"
        return (f"{limit}: the store needs {self.store_needs}, the server {self.server_needs}, headroom "
                f"{self.headroom}; max.connections {self.max_connections} ({how})")


__all__ = ["DescriptorBudget", "descriptor_limit", "raise_descriptor_limit"]
