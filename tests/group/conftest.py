"""Fixtures for the group layer: a store and a coordinator on a manual clock, with no threads.

``GroupEnv`` drives a ``GroupCoordinator(threaded=False)``: timers run only when the test moves the
clock (``env.advance(ms)``), writes to ``__consumer_offsets`` are synchronous, and every answer lands
in a list the test can read, so the order of events is the test's own.
"""

from __future__ import annotations

import pytest

from logstore.clock import ManualClock
from logstore.group.coordinator import GroupCoordinator
from logstore.group.results import OffsetCommit
from logstore.manager.log_manager import LogManager
from logstore.timer.scheduler import Scheduler

BASE_CONFIG = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 5}


class GroupEnv:
    """A store (topics ``t`` with 4 partitions, ``u`` with 2) and a coordinator over it."""

    def __init__(self, path, config=None, clock=None) -> None:
        self.path = path
        self.clock = clock or ManualClock()
        self.config = {**BASE_CONFIG, **(config or {})}
        self.store = None
        self.coordinator = None
        self.open()

    def open(self) -> None:
        self.store = LogManager([str(self.path)], clock=self.clock, scheduler=Scheduler(self.clock, threaded=False))
        for name, count in (("t", 4), ("u", 2)):
            if name not in self.store.topics():
                self.store.create_topic(name, partitions=count)
        self.coordinator = GroupCoordinator(self.store, config=self.config, clock=self.clock, threaded=False)
        self.coordinator.startup()

    def restart(self) -> None:
        """A clean restart: the coordinator and the store closed, reopened, and replayed."""
        self.close()
        self.open()

    def close(self) -> None:
        self.coordinator.shutdown()
        self.store.close()

    def advance(self, delta_ms: int) -> None:
        self.clock.advance(delta_ms)
        self.coordinator.advance_clock()

    # --- requests, answers collected in lists ---------------------------------------------------

    def join(self, group="g", member_id="", *, protocols=(("range", b"meta"),), session=10000, rebalance=30000,
             instance=None, v4=False, protocol_type="consumer", client_id="client"):
        box = []
        self.coordinator.join_group(group, member_id, protocol_type=protocol_type, protocols=list(protocols),
                                    session_timeout_ms=session, rebalance_timeout_ms=rebalance,
                                    group_instance_id=instance, client_id=client_id, client_host="/127.0.0.1",
                                    require_known_member_id=v4, callback=box.append)
        return box

    def sync(self, group, generation, member_id, assignments=None, instance=None):
        box = []
        self.coordinator.sync_group(group, generation, member_id, assignments=assignments or {},
                                    group_instance_id=instance, callback=box.append)
        return box

    def heartbeat(self, group, generation, member_id, instance=None):
        return self.coordinator.heartbeat(group, generation, member_id, instance)

    def commit(self, group, offsets, generation=-1, member_id="", instance=None, retention_ms=-1):
        box = []
        self.coordinator.commit_offsets(group, generation, member_id,
                                        {key: value if isinstance(value, OffsetCommit) else OffsetCommit(value)
                                         for key, value in offsets.items()},
                                        group_instance_id=instance, retention_ms=retention_ms, callback=box.append)
        assert len(box) == 1, "a synchronous coordinator answers a commit at once"
        return box[0]

    def fetch(self, group, partitions=None):
        return self.coordinator.fetch_offsets(group, partitions)

    def state(self, group="g"):
        return self.coordinator.describe_group(group).state

    def form(self, group="g", count=2, **kwargs):
        """``count`` members joined and synced into one Stable generation: their member ids."""
        boxes = [self.join(group, **kwargs) for _ in range(count)]
        self.advance(0)
        results = [box[-1] for box in boxes]
        assert all(result.error_code == 0 for result in results), results
        leader = results[0].leader_id
        ids = [result.member_id for result in results]
        generation = results[0].generation_id
        syncs = [self.sync(group, generation, member_id,
                           {m: m.encode() for m in ids} if member_id == leader else None) for member_id in ids]
        assert all(box and box[-1].error_code == 0 for box in syncs), syncs
        assert self.state(group) == "Stable"
        return ids


@pytest.fixture
def env(tmp_path):
    environment = GroupEnv(tmp_path / "store")
    yield environment
    environment.close()


@pytest.fixture
def make_env(tmp_path):
    """``make_env(config)``: a ``GroupEnv`` with extra settings (closed after the test)."""
    made = []

    def make(config=None):
        environment = GroupEnv(tmp_path / f"store-{len(made)}", config)
        made.append(environment)
        return environment

    yield make
    for environment in made:
        environment.close()
