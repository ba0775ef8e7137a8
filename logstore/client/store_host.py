"""Sharing a store among the local processes that use it at once: ``StoreHost``, ``hosted_address``
and ``read_group_on_store`` (``logstore read --group`` on a store). The server and the client load
only when a store is hosted or read through its host: ``hosted_address`` is cheap (one small file).

A store's data dirs are locked by the one process that has it open for writing (``.lock``), so two
``logstore read T --group G --follow`` processes on one store could not both join G and commit, and
nothing else could append while one waited. The first reader to open the store hosts it:
``StoreHost`` serves the open store on a Unix domain socket (``KafkaServer`` with a
``PLAINTEXT:///path`` listener, in a new 0700 directory, the socket file 0600: only this user's
processes can connect, so it needs no password) and names the socket in the first data dir's
``HOST_FILE`` (written atomically, 0600, with the host's pid; removed when the host ends). The
reader that hosts holds ``HOSTING_LOCK`` (an ``flock``) from before it opens the store until after
it closed it, so the others know a host is on its way while it opens (recovers) the store, and a
store locked by anything else (an application, ``logstore serve``) is told apart.
``hosted_address`` is how a process that finds the store locked learns where to go instead: the CLI
sends the commands that also speak to a broker (append, topics, groups, offsets, read...) there.

``read_group_on_store``: every reader, the host included, is a member of the group through that
socket with this package's consumer (the code path that reads from any broker), so readers of one
group split the partitions, as kafka-console-consumer's do, commit what they printed, and a rebalance
moves partitions between them. When the host ends (its reader finished or was interrupted), the
others see its host file gone (or its pid dead: a host killed with SIGKILL), stop after committing,
and one of them opens the store and hosts it; the rest connect to it, the group rebalances, and each
partition is read on from its committed offset.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from typing import TYPE_CHECKING, Iterator, Mapping

from ..clock import SYSTEM_CLOCK, Clock
from ..errors import LockedError
from ..fs import OS_FILE_SYSTEM, FileSystem

if TYPE_CHECKING:
    from ..manager.log_manager import LogManager
    from ..records.decoder import Record
    from ..server.server import KafkaServer

logger = logging.getLogger(__name__)

HOST_FILE = "host.json"
"""In a store's first data dir while a process hosts it: ``{"pid": ..., "address": socket path}``."""

HOSTING_LOCK = "host.lock"
"""In a store's first data dir: ``flock``ed by the reader that hosts the store, from before it opens
the store until after it closed it, so the other readers know a host is coming or there."""

LOCKED_WAIT_S = 3.0
"""How long a would-be host waits for a store locked by a process that does not host it (an append
that will soon be done; an application or ``logstore serve``, which will not) before it gives up
with the lock's error."""

TAKEOVER_WAIT_S = 60.0
"""How long a reader waits for the reader holding the hosting lock to begin serving (it is opening
the store, and recovery may take a while) before it gives up."""

HANDOVER_GRACE_S = 3.0
"""How long an ending host goes on serving after it removed its host file, while the readers it
serves notice (each looks every turn of its poll, 0.5 s), commit and leave the group: so they leave
cleanly instead of finding the server gone."""

_RETRY_MS = 100


def _host_file(dirs: list[str]) -> str:
    return os.path.join(dirs[0], HOST_FILE)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, someone else's (a reused pid): the socket check decides
    return True


def read_host_file(dirs: list[str]) -> dict | None:
    """The host file's content (pid and address), or None when there is none (or it is damaged:
    a host writes it atomically, so that is an old leftover, never half of a new one)."""
    try:
        with open(_host_file(dirs), "rb") as file:
            content = json.loads(file.read(4096))
    except (OSError, ValueError):
        return None
    if not (isinstance(content, dict) and isinstance(content.get("pid"), int)
            and isinstance(content.get("address"), str)):
        return None
    return content


def hosted_address(dirs: list[str]) -> str | None:
    """The Unix socket of the process hosting the store at ``dirs`` now, or None (no host, or one
    that died without removing its host file)."""
    content = read_host_file(dirs)
    if content is None or not _pid_alive(content["pid"]) or not os.path.exists(content["address"]):
        return None
    return content["address"]


class StoreHost:
    """Serves an open, writable store to this user's local processes on a Unix socket, and says so
    in the store's ``HOST_FILE``. ``server_config``: the server's and group coordinator's settings
    (``group.initial.rebalance.delay.ms``...). Use it as a context manager."""

    def __init__(self, store: LogManager, server_config: Mapping[str, object] | None = None, *,
                 fs: FileSystem = OS_FILE_SYSTEM, clock: Clock = SYSTEM_CLOCK) -> None:
        if store.read_only:
            raise ValueError("a store host needs a writable store; this one was opened read_only")
        self.store = store
        # Local commands never create a topic by naming it: neither do they through the host.
        self._server_config = {"auto.create.topics.enable": "false", **dict(server_config or {})}
        self._fs = fs
        self._clock = clock
        self._dir: str | None = None
        self.server: KafkaServer | None = None
        self.address: str | None = None

    def start(self) -> "StoreHost":
        from ..server.server import KafkaServer  # the server and its extra load only in a host
        self._dir = tempfile.mkdtemp(prefix="logstore-host-")  # 0700: the socket's directory is private too
        try:
            address = os.path.join(self._dir, "kafka.sock")
            self.server = KafkaServer(self.store, listen=f"PLAINTEXT://{address}", config=self._server_config).start()
            self.address = address
            content = json.dumps({"pid": os.getpid(), "address": address}).encode()
            self._fs.write_file_atomic(_host_file(self.store.log_dirs), content, private=True)
        except BaseException:
            self.close()
            raise
        logger.info("hosting the store for local readers on %s", self.address)
        return self

    def close(self) -> None:
        """Remove the host file (if it still names this host), let the readers still connected
        leave (up to ``HANDOVER_GRACE_S``), stop the server, remove the socket's directory. Safe
        twice."""
        if self.address is not None:
            content = read_host_file(self.store.log_dirs)
            if content is not None and content["address"] == self.address:
                try:
                    self._fs.remove(_host_file(self.store.log_dirs))
                except FileNotFoundError:
                    pass
            self.address = None
            deadline_ms = self._clock.monotonic_ms() + int(HANDOVER_GRACE_S * 1000)
            while self.server is not None and self.server.connection_count and self._clock.monotonic_ms() < deadline_ms:
                self._clock.sleep_ms(_RETRY_MS)
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> "StoreHost":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.close()


def read_group_on_store(dirs: list[str], settings: Mapping[str, object], topic: str, group: str, *,
                        follow: bool, max_records: int | None, client_config: dict | None = None,
                        clock: Clock = SYSTEM_CLOCK) -> Iterator[tuple[int, list[Record]]]:
    """``(partition, records)`` chunks of ``topic`` read as a member of ``group`` on the store at
    ``dirs`` (``settings``: the store's, the server's and the coordinator's, by Kafka name), hosting
    the store when it is free and reading through its host when another process hosts it; a host
    that ends is taken over (see the module docstring). Without ``follow`` it ends once the
    partitions it holds are read to the end they had when assigned. A chunk is committed when the
    caller comes back for the next one. ``client_config``: the reader's consumer settings
    (``isolation.level``)."""
    from ..server.server_config import ServerConfig  # lazily: the CLI asks hosted_address on every command
    from .admin import BrokerAdmin
    from .errors import NetworkError
    from .tools import read_chunks
    _checked, store_config = ServerConfig.split(settings)  # a bad server value fails before the store opens
    server_settings = {key: value for key, value in settings.items() if key not in store_config}
    remaining = max_records
    waiting_since: float | None = None

    def wait(bound_s: float, why: str) -> None:
        """Sleep a little before trying again; past ``bound_s`` of waiting, raise ``LockedError``."""
        nonlocal waiting_since
        now = clock.monotonic_ms() / 1000
        waiting_since = now if waiting_since is None else waiting_since
        if now - waiting_since >= bound_s:
            raise LockedError(why)
        clock.sleep_ms(_RETRY_MS)

    while remaining is None or remaining > 0:
        address = hosted_address(dirs)
        hosting = None if address is not None else _try_hosting_lock(dirs)
        if hosting is not None:  # no other reader hosts the store or is about to: this one will
            try:
                try:
                    from ..manager.log_manager import LogManager  # the engine: only once this reader hosts
                    store = LogManager(dirs, config=store_config)
                except LockedError as exc:
                    # Held by a process that does not host it (an application, `logstore serve`, an
                    # append that will soon be done): wait a little for it, then say who holds it.
                    wait(LOCKED_WAIT_S, str(exc))
                    continue
                waiting_since = None
                with store:
                    store.partitions(topic)  # an unknown topic fails here, naming it, before any hosting
                    with StoreHost(store, server_settings, clock=clock) as host:
                        for partition, records in read_chunks(host.address, topic, group=group, follow=follow,
                                                              max_records=remaining, client_config=client_config):
                            if remaining is not None:
                                remaining -= len(records)
                            yield partition, records
                return
            finally:
                OS_FILE_SYSTEM.unlock(hosting)  # after the host file is removed and the store closed
        if address is None:
            # Another reader is opening the store to host it (recovery may take a while), or the
            # host just ended and its successor is on its way.
            holder = (read_host_file(dirs) or {}).get("pid")
            wait(TAKEOVER_WAIT_S, f"data dir {dirs[0]} is being opened by another reader of the store"
                                  f"{f' (process {holder})' if holder else ''}, which has not begun to serve it "
                                  f"in {TAKEOVER_WAIT_S:.0f} s")
            continue
        waiting_since = None
        host_pid = (read_host_file(dirs) or {}).get("pid")

        def host_ended(address=address, host_pid=host_pid) -> bool:
            content = read_host_file(dirs)
            return (content is None or content["address"] != address or content["pid"] != host_pid
                    or not _pid_alive(host_pid))

        try:
            with BrokerAdmin(address, client_id="logstore-cli") as admin:
                admin.partitions(topic)  # an unknown topic fails here, naming it, as on a store
            for partition, records in read_chunks(address, topic, group=group, follow=follow,
                                                  max_records=remaining, stop_when=host_ended,
                                                  client_config=client_config):
                if remaining is not None:
                    remaining -= len(records)
                yield partition, records
        except NetworkError:
            if not host_ended():
                raise
            logger.info("the store's host ended while reading; going on with the next one")
            continue
        if not host_ended():
            return
        # The host ended: go on with the next one, or become it.


def _try_hosting_lock(dirs: list[str]) -> int | None:
    """The descriptor holding the store's hosting lock (``HOSTING_LOCK``, an ``flock``), or None
    when another process holds it: a reader that hosts the store, or is opening it to. The kernel
    drops it with its holder, so a host killed with SIGKILL is succeeded."""
    os.makedirs(dirs[0], exist_ok=True)  # a new store: the writer would create it anyway
    return OS_FILE_SYSTEM.try_lock(os.path.join(dirs[0], HOSTING_LOCK))


__all__ = ["HOST_FILE", "HOSTING_LOCK", "StoreHost", "hosted_address", "read_group_on_store", "read_host_file"]
