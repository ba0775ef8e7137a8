"""The stores the file fuzzer damages, and the model of what a correct reader gets from them.

``build_clean_template`` makes, once per run, a small deterministic store closed cleanly over two data
dirs: ``plain`` (2 partitions, many small segments, ``delete_records`` applied to partition 0 so its
log start offset lies inside a segment), ``compacted`` (cleaned once, so the cleaner checkpoint is
written, then appended to again), ``__consumer_offsets`` (offsets committed in-process through the
group coordinator) and the server's ``producer-state.journal``. ``build_unclean_template`` makes a
store whose writer (a forked child) flushed and checkpointed part of its appends, appended more
without a flush and died with ``os._exit``: recovery has work to do there.

A ``StoreModel`` holds, per partition, the exact records a correct reader returns (offset, key,
value, headers, timestamp), the log start and end offsets and the recovery point; for the groups,
the committed offsets; for the journal, the producer state its replay must give. The model is read
back from the engine on the pristine template and checked against what was written, so a harness
error shows up before any mutation does.
"""

from __future__ import annotations

import os
import random
import shutil
from dataclasses import dataclass, field

from logstore import LogManager, Record
from logstore.clock import ManualClock
from logstore.timer.scheduler import Scheduler

PLAIN = "plain"
COMPACTED = "compacted"
OFFSETS_TOPIC = "__consumer_offsets"
GROUP = "fuzz-group"
T0_MS = 1_700_000_000_000  # record timestamps: fixed, so the template is the same every run
GROUP_CONFIG = {"offsets.topic.num.partitions": 2, "group.initial.rebalance.delay.ms": 0}
SMALL_SEGMENTS = {"segment.bytes": 2048, "segment.index.bytes": 4096, "index.interval.bytes": 128,
                  "retention.ms": -1, "retention.bytes": -1}
COMPACTED_CONFIG = {**SMALL_SEGMENTS, "cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01,
                    "segment.bytes": 1024}
KEYS = [f"key-{number}".encode() for number in range(12)]

RecordTuple = tuple  # (offset, key, value, headers, timestamp_ms)


def as_tuple(record: Record) -> RecordTuple:
    return (record.offset, record.key, record.value, tuple(tuple(header) for header in record.headers),
            record.timestamp_ms)


@dataclass
class PartitionModel:
    """What a correct reader gets from one partition."""

    topic: str
    partition: int
    records: dict[int, RecordTuple]
    log_start_offset: int
    log_end_offset: int
    recovery_point: int
    compacted: bool = False  # a compaction may drop superseded records (never the last of a key)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def latest_per_key(self) -> set[int]:
        """Offsets a compaction must keep: the last record of each key (and keyless records)."""
        last: dict[bytes | None, int] = {}
        keep = set()
        for offset, record in sorted(self.records.items()):
            if record[1] is None:
                keep.add(offset)
            else:
                last[record[1]] = offset
        return keep | set(last.values())


@dataclass
class StoreModel:
    """A template store (its data dirs) and what a correct reader finds in it."""

    dirs: list[str]
    partitions: dict[tuple[str, int], PartitionModel]
    clean: bool
    committed: dict[tuple[str, int], int] = field(default_factory=dict)  # the group's committed offsets
    journal: tuple | None = None  # (reserved_until, entries) the producer-state replay gives

    def relocated(self, dirs: list[str]) -> StoreModel:
        return StoreModel(dirs, self.partitions, self.clean, self.committed, self.journal)


def _record(rng: random.Random, offset: int, key: bytes | None, partition: int, tombstones: bool = True) -> Record:
    value = None if tombstones and rng.random() < 0.05 else bytes(rng.randrange(256) for _ in range(rng.randint(0, 40)))
    headers = [("h", str(offset).encode())] if rng.random() < 0.3 else []
    return Record(key=key, value=value, headers=headers, timestamp_ms=T0_MS + 10 * offset + partition)


def _append_plain(store: LogManager, rng: random.Random, topic: str, partition: int, count: int,
                  written: dict) -> None:
    log = store.get_log(topic, partition)
    while count > 0:
        size = min(count, rng.choice([1, 1, 2, 3, 5, 8, 13, 20]))
        start = log.log_end_offset
        keys = KEYS if topic == COMPACTED else KEYS + [None]  # compacted: keyed, no tombstones
        records = [_record(rng, start + slot, rng.choice(keys), partition, topic != COMPACTED)
                   for slot in range(size)]
        store.append(topic, records, partition=partition)
        for slot, record in enumerate(records):
            written[(topic, partition)][start + slot] = record
        count -= size


def _read_model(store: LogManager, key: tuple[str, int], recovery_point: int | None = None,
                compacted: bool = False) -> PartitionModel:
    log = store.get_log(*key)
    records = {record.offset: as_tuple(record) for record in log.iter_records()}
    return PartitionModel(key[0], key[1], records, log.log_start_offset, log.log_end_offset,
                          log.log_end_offset if recovery_point is None else recovery_point, compacted)


def _check_written(model: PartitionModel, written: dict[int, Record]) -> None:
    """The template's read-back must be what was written (a subset for a compacted log)."""
    for offset, record in model.records.items():
        assert as_tuple(written[offset]._replace(offset=offset))[1:] == record[1:], (model.name, offset)
    expected = {offset for offset in written if offset >= model.log_start_offset}
    if model.compacted:
        assert model.latest_per_key >= {offset for offset in expected if written[offset].key is None}
    else:
        assert set(model.records) == expected, model.name


def build_clean_template(root: str, seed: int = 14) -> StoreModel:
    """The cleanly closed template store under ``root`` (see the module docstring)."""
    from logstore.group.coordinator import GroupCoordinator
    from logstore.group.results import OffsetCommit
    from logstore.server.handlers.producer_state import ProducerStateManager

    rng = random.Random(seed)
    dirs = [os.path.join(root, "d0"), os.path.join(root, "d1")]
    clock = ManualClock(T0_MS + 10**7)
    written: dict[tuple[str, int], dict[int, Record]] = {(PLAIN, 0): {}, (PLAIN, 1): {}, (COMPACTED, 0): {}}
    store = LogManager(dirs, clock=clock, scheduler=Scheduler(clock, threaded=False))
    store.create_topic(PLAIN, partitions=2, config=SMALL_SEGMENTS)
    store.create_topic(COMPACTED, partitions=1, config=COMPACTED_CONFIG)
    _append_plain(store, rng, PLAIN, 0, 160, written)
    _append_plain(store, rng, PLAIN, 1, 120, written)
    _append_plain(store, rng, COMPACTED, 0, 150, written)
    store.get_log(COMPACTED, 0).roll()
    store.compact(COMPACTED)  # writes the cleaner checkpoint
    _append_plain(store, rng, COMPACTED, 0, 30, written)
    plain0 = store.get_log(PLAIN, 0)
    second = plain0.segments[1]
    store.get_log(PLAIN, 0).delete_records(second.base_offset + 3)  # inside a segment, above the first's base
    assert plain0.log_start_offset > plain0.segments[0].base_offset

    # The server's producer-state journal is made at its first start, before __consumer_offsets.
    journal = ProducerStateManager(dirs[0])
    journal.load(lambda topic, partition: store.get_log(topic, partition).log_end_offset)

    # The group's committed offsets, through the coordinator (in-process, no threads).
    coordinator = GroupCoordinator(store, config=GROUP_CONFIG, clock=clock, threaded=False)
    coordinator.startup()
    committed = {}
    for round_number in range(3):
        offsets = {(PLAIN, partition): 10 * round_number + partition + 1 for partition in (0, 1)}
        box = []
        coordinator.commit_offsets(GROUP, -1, "", {key: OffsetCommit(value) for key, value in offsets.items()},
                                   callback=box.append)
        assert box and all(error == 0 for error in box[0].values()), box
        committed.update(offsets)
    coordinator.shutdown()

    # The journal: a few idempotent batches of plain-1, as the server journals them.
    producer_id = journal.new_producer_id()
    log1 = store.get_log(PLAIN, 1)
    for sequence in range(0, 12, 3):
        start = log1.log_end_offset
        records = [_record(rng, start + slot, None, 1) for slot in range(3)]
        journal.will_append(PLAIN, 1, producer_id, 0, sequence, sequence + 2, start, start + 2)
        store.append(PLAIN, records, partition=1)
        for slot, record in enumerate(records):
            written[(PLAIN, 1)][start + slot] = record
    journal.close()
    reserved = journal._reserved_until
    entries = journal_entries(journal)

    models = {}
    for key in [(PLAIN, 0), (PLAIN, 1), (COMPACTED, 0)] + [(OFFSETS_TOPIC, p) for p in range(2)]:
        models[key] = _read_model(store, key, compacted=key[0] != PLAIN)
        if key in written:
            _check_written(models[key], written[key])
    store.close()
    assert os.path.exists(os.path.join(dirs[0], "cleaner-offset-checkpoint")) or \
        os.path.exists(os.path.join(dirs[1], "cleaner-offset-checkpoint"))
    return StoreModel(dirs, models, True, committed, (reserved, entries))


def journal_entries(journal) -> dict:
    """The producer state of a ``ProducerStateManager``, as comparable values."""
    return {key: (entry.epoch, tuple((batch.first_sequence, batch.last_sequence, batch.first_offset,
                                      batch.last_offset) for batch in entry.batches))
            for key, entry in journal._entries.items()}


def _unclean_child(dirs: list[str], seed: int) -> None:
    rng = random.Random(seed)
    written = {(PLAIN, 0): {}}
    store = LogManager(dirs, clock=ManualClock(T0_MS + 10**7))
    store.create_topic(PLAIN, partitions=1, config=SMALL_SEGMENTS)
    _append_plain(store, rng, PLAIN, 0, 120, written)
    store.flush()
    store.checkpoint()  # the recovery point on disk: 120
    _append_plain(store, rng, PLAIN, 0, 80, written)  # in the page cache only, several segments
    os._exit(0)  # a process crash: no close, no clean marker


def build_unclean_template(root: str, seed: int = 15) -> StoreModel:
    """A store whose writer died after appending past its last flush (see the module docstring)."""
    dirs = [os.path.join(root, "u0")]
    pid = os.fork()
    if pid == 0:
        try:
            _unclean_child(dirs, seed)
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the unclean template's writer failed"
    # The model: what the writer wrote, regenerated with the same seed (the child's rng), read-only.
    rng = random.Random(seed)
    written = {(PLAIN, 0): {}}

    class _Sink:  # replays _append_plain's choices without a store
        def __init__(self):
            self.log_end_offset = 0

        def get_log(self, topic, partition):
            return self

        def append(self, topic, records, partition):
            self.log_end_offset += len(records)

    sink = _Sink()
    _append_plain(sink, rng, PLAIN, 0, 120, written)
    _append_plain(sink, rng, PLAIN, 0, 80, written)
    view = LogManager(dirs, read_only=True)
    try:
        model = _read_model(view, (PLAIN, 0), recovery_point=120)
    finally:
        view.close()
    _check_written(model, written[(PLAIN, 0)])
    assert model.log_end_offset == 200 and not os.path.exists(os.path.join(dirs[0], ".kafka_cleanshutdown"))
    return StoreModel(dirs, {(PLAIN, 0): model}, False)


def copy_store(model: StoreModel, target_root: str) -> StoreModel:
    """A fresh copy of the template's data dirs under ``target_root``."""
    if os.path.exists(target_root):
        shutil.rmtree(target_root)
    dirs = []
    for path in model.dirs:
        target = os.path.join(target_root, os.path.basename(path))
        shutil.copytree(path, target)
        dirs.append(target)
    return model.relocated(dirs)
