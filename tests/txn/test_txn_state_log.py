"""``TransactionStateLog`` over a real store: the topic it creates, durable appends, the replay after a
restart, tombstones, compaction, and partitions that cannot be replayed."""

from __future__ import annotations

import pytest

from logstore.clock import ManualClock
from logstore.manager.log_manager import LogManager
from logstore.records.decoder import Record
from logstore.timer.scheduler import Scheduler
from logstore.txn import formats
from logstore.txn.formats import TRANSACTION_STATE_TOPIC, TransactionLogValue, TransactionState
from logstore.txn.state_log import TransactionLogUnavailableError, TransactionStateLog

DAY_MS = 24 * 3600 * 1000


class Env:
    """A store in ``path`` and a state log over it, reopened by ``restart``."""

    def __init__(self, path, partitions=5) -> None:
        self.path = path
        self.clock = ManualClock(1_700_000_000_000)
        self.partitions = partitions
        self.open()

    def open(self) -> None:
        self.store = LogManager([str(self.path)], clock=self.clock, scheduler=Scheduler(self.clock, threaded=False))
        self.log = TransactionStateLog(self.store, self.clock, num_partitions=self.partitions)

    def restart(self) -> None:
        self.store.close()
        self.open()


@pytest.fixture
def env(tmp_path):
    env = Env(tmp_path)
    yield env
    env.store.close()


def value(pid, epoch=0, state=TransactionState.ONGOING, partitions=(("t", 0),), now=1000):
    return TransactionLogValue(pid, epoch, 60000, state, () if state == TransactionState.EMPTY else partitions,
                               now, now - 10)


def test_the_topic_is_created_on_the_first_write_with_kafkas_settings(tmp_path):
    env = Env(tmp_path, partitions=50)
    try:
        assert env.log.load() == {}
        assert TRANSACTION_STATE_TOPIC not in env.store.topics()  # load alone creates nothing
        env.log.append("a", value(1))
        assert env.store.partitions(TRANSACTION_STATE_TOPIC) == 50
        config = env.store.topic_config(TRANSACTION_STATE_TOPIC)
        assert (config.cleanup_policy, config.compression_type, config.segment_bytes) == (
            "compact", "uncompressed", 104857600)
    finally:
        env.store.close()


def test_an_id_lands_in_kafkas_partition_as_its_key(env):
    env.log.append("my-transactional-id", value(1))
    partition = formats.partition_for("my-transactional-id", 5)
    (record,) = env.store.get_log(TRANSACTION_STATE_TOPIC, partition).iter_records()
    assert record.key == formats.encode_key("my-transactional-id")
    assert formats.decode_value(record.value) == value(1)
    assert record.timestamp_ms == env.clock.time_ms()


def test_append_returns_once_the_record_is_fsynced(env):
    env.log.append("a", value(1))
    env.log.append("a", value(1, state=TransactionState.PREPARE_COMMIT))
    log = env.store.get_log(TRANSACTION_STATE_TOPIC, env.log.partition_for("a"))
    assert log.recovery_point == log.log_end_offset == 2


def test_load_after_a_restart_gives_the_last_value_of_each_id(env):
    ids = [f"txn-{n}" for n in range(20)]
    for n, transactional_id in enumerate(ids):
        env.log.append(transactional_id, value(n, state=TransactionState.EMPTY))
        env.log.append(transactional_id, value(n, partitions=[("t", n % 4), ("u", 1)]))
        env.log.append(transactional_id, value(n, epoch=1, state=TransactionState.COMPLETE_COMMIT, partitions=()))
    assert len({env.log.partition_for(transactional_id) for transactional_id in ids}) > 1
    env.restart()
    loaded = env.log.load()
    assert loaded == {transactional_id: value(n, epoch=1, state=TransactionState.COMPLETE_COMMIT, partitions=())
                      for n, transactional_id in enumerate(ids)}
    assert env.log.unavailable == {}


def test_a_tombstone_removes_an_id(env):
    env.log.append("kept", value(1))
    env.log.append("gone", value(2))
    env.log.append("gone", None)
    env.log.append("back", value(3))
    env.log.append("back", None)
    env.log.append("back", value(4, state=TransactionState.EMPTY))
    env.restart()
    assert env.log.load() == {"kept": value(1), "back": value(4, state=TransactionState.EMPTY)}


def test_compaction_keeps_the_replay_the_same(env):
    for round_ in range(30):
        for n in range(10):
            env.log.append(f"txn-{n}", value(n, epoch=round_, partitions=[("t", round_ % 3)]))
    for n in range(0, 10, 3):
        env.log.append(f"txn-{n}", None)
    before = env.log.load()
    assert len(before) == 6
    records_before = _records(env)
    for partition in range(env.partitions):
        env.store.get_log(TRANSACTION_STATE_TOPIC, partition).roll()
    env.store.compact(TRANSACTION_STATE_TOPIC)
    assert _records(env) < records_before / 10
    assert env.log.load() == before
    # Later, past delete.retention.ms, the tombstones go too (on the next cleaning of dirty data);
    # the replay is still the same.
    env.clock.advance(2 * DAY_MS)
    for transactional_id, state in before.items():
        env.log.append(transactional_id, state)
    for partition in range(env.partitions):
        env.store.get_log(TRANSACTION_STATE_TOPIC, partition).roll()
    env.store.compact(TRANSACTION_STATE_TOPIC)
    assert _records(env) == 6
    env.restart()
    assert env.log.load() == before


def _records(env) -> int:
    return sum(1 for partition in range(env.partitions)
               for _ in env.store.get_log(TRANSACTION_STATE_TOPIC, partition).iter_records())


def _raw_append(env, transactional_id, key, data):
    env.store.get_log(TRANSACTION_STATE_TOPIC, env.log.partition_for(transactional_id)).append(
        [Record(key=key, value=data)])


def _ids_in_other_partitions(env, transactional_id, count=3):
    taken = env.log.partition_for(transactional_id)
    return [f"other-{n}" for n in range(100) if env.log.partition_for(f"other-{n}") != taken][:count]


def test_a_partition_holding_an_undecodable_record_is_unavailable(env):
    others = _ids_in_other_partitions(env, "bad")
    for transactional_id in others:
        env.log.append(transactional_id, value(9))
    env.log.append("bad", value(1, state=TransactionState.PREPARE_COMMIT))
    env.log.append("bad", value(1, state=TransactionState.COMPLETE_COMMIT, partitions=()))
    # A later record of the id that does not decode: skipping it could let an older state win.
    _raw_append(env, "bad", formats.encode_key("bad"), b"\x00\x00garbage")
    env.restart()
    loaded = env.log.load()
    assert loaded == {transactional_id: value(9) for transactional_id in others}
    partition = env.log.partition_for("bad")
    assert list(env.log.unavailable) == [partition]
    assert "offset 2" in env.log.unavailable[partition] and "cannot be loaded" in env.log.unavailable[partition]
    assert any(f"{TRANSACTION_STATE_TOPIC}-{partition}" in problem for problem in env.store.problems)
    assert not env.log.is_available("bad") and env.log.is_available(others[0])
    with pytest.raises(TransactionLogUnavailableError) as info:
        env.log.append("bad", value(2))
    assert info.value.partition == partition
    env.log.append(others[0], value(10))  # the other partitions take writes


def test_records_with_an_unknown_key_version_are_skipped(env):
    env.log.append("a", value(1))
    _raw_append(env, "a", b"\x00\x05future-key", b"anything")
    env.restart()
    assert env.log.load() == {"a": value(1)}
    assert env.log.unavailable == {}


def test_an_existing_topic_keeps_its_partition_count(env):
    env.log.append("my-transactional-id", value(1))
    env.store.close()
    env.store = LogManager([str(env.path)], clock=env.clock, scheduler=Scheduler(env.clock, threaded=False))
    env.log = TransactionStateLog(env.store, env.clock)  # configured: 50
    assert env.log.num_partitions == 5
    assert env.log.partition_for("my-transactional-id") == formats.partition_for("my-transactional-id", 5)
    assert env.log.load() == {"my-transactional-id": value(1)}


def test_bad_settings_are_refused(env):
    with pytest.raises(ValueError, match="num_partitions"):
        TransactionStateLog(env.store, env.clock, num_partitions=0)
    with pytest.raises(TypeError, match="segment_bytes"):
        TransactionStateLog(env.store, env.clock, segment_bytes="big")
