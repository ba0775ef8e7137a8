"""Damaging one file of a template store, and judging what the engine makes of it.

``mutate`` applies one damage to one file: a single-byte flip (a random byte, or one inside a batch
header of a ``.log``), a truncation to a random length, a zero-filled range, random bytes appended,
or the file removed. ``judge_mutation`` then opens the damaged copy four ways and classifies the
outcome of each partition:

- ``read-only``: ``LogManager(dirs, read_only=True)``, every partition read end to end, a sample of
  random-access reads (``read(offset)``, point reads) and of time lookups (``offset_for_timestamp``);
- ``check``: ``verify_store`` on that read-only open (plus, for some mutations, ``logstore check``);
- ``writable``: a writable open, the same reads, ``compact`` of the compacted topic, the group
  coordinator's replay of ``__consumer_offsets``, the producer-state journal's replay, then close;
- ``after writable``: a read-only open and ``verify_store`` of what the writable open left.

Outcomes (worst first): ``wrong`` (a record that differs from the model, an offset the model does not
have, records below the model's log start offset, a read that skips records, a time lookup that
answers another offset, a producer state that differs), ``silent loss`` (fewer records, a lower log
end offset or a higher log start offset, with nothing reported; for ``check``: damage that a read saw
while check says OK), ``raw error`` (an exception outside ``LogStoreError``), ``reported`` (an error
of the ``LogStoreError`` hierarchy, the open's ``store.problems`` or check's errors naming the damage),
``torn tail`` (an unclean store's last segment cut above its recovery point: a power loss may do
that; or, after the writable open, the end of an unclean log from at or above its recovery point,
cut by that open, which reported the cut in ``store.problems``: recovery of a power loss, which a
cut file cannot be told from) and ``right``.
"""

from __future__ import annotations

import logging
import os
import random
from dataclasses import dataclass, field

from fuzz_store import COMPACTED, GROUP, GROUP_CONFIG, OFFSETS_TOPIC, PLAIN, StoreModel, as_tuple, journal_entries

from logstore import LogManager
from logstore.clock import ManualClock
from logstore.errors import LogStoreError, UnknownTopicOrPartitionError
from logstore.timer.scheduler import Scheduler
from logstore.tools.check import verify_store
from logstore.tools.dump import scan_log_file

RIGHT, TORN, REPORTED, RAW, LOSS, WRONG = "right", "torn tail", "reported", "raw error", "silent loss", "wrong"
SEVERITY = {RIGHT: 0, TORN: 1, REPORTED: 2, RAW: 3, LOSS: 4, WRONG: 5}
OUTCOMES = [RIGHT, TORN, REPORTED, WRONG, LOSS, RAW]
MODES = ["read-only", "writable", "after writable", "check"]
KINDS = ["flip", "truncate", "zero", "tail", "remove"]
FAILURES = (WRONG, LOSS, RAW)
JOURNAL = ("producer-state", 0)  # the key of the journal's verdict (writable mode only)


def file_type(relative_path: str, clean: bool) -> str:
    """The kind of file at ``relative_path`` (inside a data dir copy): what the figure counts by."""
    name = os.path.basename(relative_path)
    parent = os.path.basename(os.path.dirname(relative_path))
    if name.endswith(".log"):
        kind = "group segment" if parent.startswith(OFFSETS_TOPIC) else "segment"
    elif name.endswith(".timeindex"):
        kind = "time index"
    elif name.endswith(".index"):
        kind = "offset index"
    else:
        kind = name
    return kind if clean else f"unclean {kind}"


@dataclass
class Mutation:
    path: str  # relative to the store root (e.g. d0/plain-0/00000000000000000047.log)
    kind: str
    position: int = 0
    length: int = 0
    data: bytes = b""
    detail: str = ""

    def describe(self) -> str:
        return f"{self.kind} {self.path} {self.detail}".strip()


def plan_mutation(root: str, relative_path: str, kind: str, rng: random.Random) -> Mutation:
    """Choose where and how ``kind`` damages the file (deterministic for ``rng``)."""
    path = os.path.join(root, relative_path)
    size = os.path.getsize(path)
    if kind == "flip":
        position = rng.randrange(size)
        if relative_path.endswith(".log") and rng.random() < 0.5:  # half the flips hit a batch header
            starts = [entry.position for entry in scan_log_file(path) if entry.header is not None]
            if starts:
                position = min(size - 1, rng.choice(starts) + rng.randrange(64))
        mask = rng.randrange(1, 256)
        return Mutation(relative_path, kind, position, 1, bytes([mask]), f"at {position} xor 0x{mask:02x}")
    if kind == "truncate":
        length = rng.randrange(size)
        return Mutation(relative_path, kind, length, detail=f"to {length} of {size} bytes")
    if kind == "zero":
        position = rng.randrange(size)
        length = rng.randint(1, min(size - position, rng.choice([4, 16, 64, 512])))
        return Mutation(relative_path, kind, position, length, detail=f"{length} bytes at {position} of {size}")
    if kind == "tail":
        data = bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
        if rng.random() < 0.3:
            data = bytes(len(data))  # a zero tail (preallocated, never written)
        return Mutation(relative_path, kind, size, len(data), data, f"{len(data)} bytes after {size}")
    if kind == "remove":
        return Mutation(relative_path, kind)
    raise ValueError(kind)


def mutate(root: str, mutation: Mutation) -> None:
    """Apply ``mutation`` to the copy under ``root``."""
    path = os.path.join(root, mutation.path)
    if mutation.kind == "none":  # the harness's self-test: the pristine copy
        return
    if mutation.kind == "remove":
        os.remove(path)
        return
    with open(path, "r+b") as handle:
        if mutation.kind == "flip":
            handle.seek(mutation.position)
            byte = handle.read(1)[0]
            handle.seek(mutation.position)
            handle.write(bytes([byte ^ mutation.data[0]]))
        elif mutation.kind == "truncate":
            handle.truncate(mutation.position)
        elif mutation.kind == "zero":
            handle.seek(mutation.position)
            handle.write(bytes(mutation.length))
        elif mutation.kind == "tail":
            handle.seek(0, os.SEEK_END)
            handle.write(mutation.data)


# --- observing one partition -----------------------------------------------------------------------


@dataclass
class Verdict:
    outcome: str = RIGHT
    detail: str = ""
    power_loss_cut: bool = False  # reported, and only for a cut a power loss could make: check may be silent

    def worse(self, outcome: str, detail: str) -> None:
        if SEVERITY[outcome] > SEVERITY[self.outcome]:
            self.outcome, self.detail = outcome, detail


@dataclass
class PartitionView:
    """What one open showed of a partition."""

    wrong: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    raised: list[str] = field(default_factory=list)  # LogStoreError messages
    raw: list[str] = field(default_factory=list)  # other exceptions
    lost_offsets: set[int] = field(default_factory=set)
    kept_offsets: set[int] = field(default_factory=set)  # the offsets the scan read


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:160]}"


def observe_partition(store: LogManager, model, rng: random.Random, subset: bool) -> PartitionView:
    """Read one partition every way a user does and compare with ``model`` (``subset``: a
    compaction may have dropped superseded records)."""
    view = PartitionView()
    try:
        log = store.get_log(model.topic, model.partition)
    except UnknownTopicOrPartitionError as exc:
        view.missing.append(f"partition unknown ({_error_text(exc)})")
        view.lost_offsets.update(model.records)
        return view
    except LogStoreError as exc:
        view.raised.append(_error_text(exc))
        return view
    except Exception as exc:  # noqa: BLE001 - the harness classifies every exception
        view.raw.append(_error_text(exc))
        return view
    expected = model.latest_per_key if subset else set(model.records)
    got: dict[int, tuple] = {}
    try:
        log_start, log_end = log.log_start_offset, log.log_end_offset
        previous = -1
        for record in log.iter_records():
            record = as_tuple(record)
            if record[0] <= previous:
                view.wrong.append(f"scan: offset {record[0]} after {previous}")
            previous = record[0]
            got[record[0]] = record
    except LogStoreError as exc:
        view.raised.append(f"scan: {_error_text(exc)}")
    except Exception as exc:  # noqa: BLE001
        view.raw.append(f"scan: {_error_text(exc)}")
        return view
    for offset, record in sorted(got.items()):
        if offset not in model.records:
            where = "below the model's log start offset" if offset < model.log_start_offset else "a phantom"
            view.wrong.append(f"offset {offset} returned: {where}")
            break
        if record != model.records[offset]:
            view.wrong.append(f"offset {offset} differs from what was written")
            break
    # Offsets the model does not have, with no record read there: wrong unless a read reported damage.
    beyond = view.raised if view.raised else view.wrong
    if log_end > model.log_end_offset:
        beyond.append(f"log end offset {log_end} > {model.log_end_offset}")
    if log_start < model.log_start_offset and not view.wrong:
        beyond.append(f"log start offset {log_start} < {model.log_start_offset}")
    view.kept_offsets = set(got)
    lost = expected - set(got)
    if lost:
        view.lost_offsets |= lost
        view.missing.append(f"{len(lost)} records missing (offsets {min(lost)}..{max(lost)})")
    if log_end < model.log_end_offset:
        view.missing.append(f"log end offset {log_end} < {model.log_end_offset}")
        view.lost_offsets.add(log_end)
    if log_start > model.log_start_offset:
        view.missing.append(f"log start offset {log_start} > {model.log_start_offset}")
    if view.raised or view.raw:
        return view
    _random_reads(log, got, None if subset else model.records, rng, view)
    _time_lookups(log, got, rng, view)
    return view


def _random_reads(log, got: dict[int, tuple], model_records: dict[int, tuple] | None, rng: random.Random,
                  view: PartitionView) -> None:
    """``read(offset)`` from segment boundaries and random offsets must return the records that follow
    there, as the scan found them or as the model has them (a lying index entry makes a read skip
    records or start elsewhere; a scan that lost records is counted as a loss, not here)."""
    offsets = sorted(got)
    model_offsets = sorted(model_records) if model_records is not None else offsets
    if not offsets:
        return
    low, high = log.log_start_offset, log.log_end_offset
    starts = {segment.base_offset for segment in log.segments} | {low, high - 1}
    starts |= {rng.randrange(low, high) for _ in range(8)}
    for start in sorted(offset for offset in starts if low <= offset < high):
        following = [offset for offset in offsets if offset >= start][:3]
        modelled = [model_records[offset] for offset in model_offsets if offset >= start][:3] \
            if model_records is not None else []
        for max_records in (3, 1):
            try:
                records = [as_tuple(record) for record in log.read(start, max_records=max_records)]
            except LogStoreError as exc:
                view.raised.append(f"read({start}): {_error_text(exc)}")
                return
            except Exception as exc:  # noqa: BLE001
                view.raw.append(f"read({start}): {_error_text(exc)}")
                return
            want = [got[offset] for offset in following[:max_records]]
            if records and records == modelled[:len(records)]:
                continue
            if (not records and want) or records != want[:len(records)]:
                first = records[0][0] if records else None
                view.wrong.append(f"read({start}, max_records={max_records}) returned offset {first}, "
                                  f"expected {following[0] if following else None}")
                return


def _time_lookups(log, got: dict[int, tuple], rng: random.Random, view: PartitionView) -> None:
    """``offset_for_timestamp(t)`` must answer the first offset read whose timestamp is >= t."""
    records = sorted(got.values())
    if not records:
        return
    targets = {records[0][4] - 5, records[-1][4], records[-1][4] + 1}
    targets |= {rng.choice(records)[4] + rng.choice((-1, 0)) for _ in range(5)}
    for target in sorted(targets):
        want = next((record[0] for record in records if record[4] >= target), None)
        try:
            answer = log.offset_for_timestamp(target)
        except LogStoreError as exc:
            view.raised.append(f"offset_for_timestamp({target}): {_error_text(exc)}")
            return
        except Exception as exc:  # noqa: BLE001
            view.raw.append(f"offset_for_timestamp({target}): {_error_text(exc)}")
            return
        if answer != want:
            view.wrong.append(f"offset_for_timestamp({target}) = {answer}, expected {want}")
            return


def names_damage(texts, model, mutation: Mutation) -> bool:
    """Whether any of ``texts`` (problems, errors) names the partition or the damaged file."""
    file_name = os.path.basename(mutation.path)
    in_partition = os.path.dirname(mutation.path).count(os.sep) >= 1
    for text in texts:
        if model.name in text or (not in_partition and file_name in text):
            return True
    return False


def classify(view: PartitionView | None, reported: bool, model, mutation: Mutation, template: StoreModel,
             torn_allowed: bool, cut_reported: bool = False) -> Verdict:
    """The verdict on one partition in one open. ``torn_allowed``: the mutation is a power loss's
    shape (``torn_tail_allowed``). ``cut_reported``: the writable open that cut this partition said
    so in ``store.problems`` ("cut a torn tail", "dropped ... later segments"): in an unclean store,
    a loss of a suffix of the log at or above the recovery point is then the documented recovery of
    a power loss (which cannot be told from a cut file), not a silent loss."""
    verdict = Verdict()
    if view is None:
        return verdict
    power_loss_cut = _suffix_above_recovery_point(view, model) and (torn_allowed or cut_reported)
    if view.wrong:
        verdict.worse(WRONG, view.wrong[0])
    elif view.raw:
        verdict.worse(RAW, view.raw[0])
    elif view.missing:
        if view.raised or reported:
            verdict.worse(REPORTED, view.missing[0])
            verdict.power_loss_cut = power_loss_cut
        elif torn_allowed and min(view.lost_offsets) >= model.recovery_point:
            verdict.worse(TORN, view.missing[0])
        elif cut_reported and power_loss_cut:
            verdict.worse(TORN, f"{view.missing[0]} (cut by the writable open, which reported it)")
        else:
            verdict.worse(LOSS, view.missing[0])
    elif view.raised:
        verdict.worse(REPORTED, view.raised[0])
    return verdict


def _suffix_above_recovery_point(view: PartitionView, model) -> bool:
    """Whether the records lost are the end of the log, all at or above the recovery point: no hole
    (no record read above a lost one)."""
    if not view.lost_offsets:
        return False
    first_lost = min(view.lost_offsets)
    return first_lost >= model.recovery_point and max(view.kept_offsets, default=-1) < first_lost


def cut_reported_by(texts: list[str], model, template: StoreModel, mutation: Mutation) -> bool:
    """Whether an open's ``store.problems`` report a recovery cut of ``model``'s partition (an unclean
    store's damaged segment only)."""
    if template.clean or not mutation.path.endswith(".log"):
        return False
    return any(model.name in text and ("cut a torn tail" in text or "later segments" in text) for text in texts)


def torn_tail_allowed(template: StoreModel, mutation: Mutation) -> bool:
    """An unclean store's last segment may lose its unflushed tail (a power loss): a cut, zeros or
    garbage up to the end of the file, or the whole file when it lies above the recovery point (its
    directory entry was never made durable); never damage followed by valid data. ``classify`` also
    requires every lost offset to be at or above the recovery point."""
    if template.clean or not mutation.path.endswith(".log"):
        return False
    folder = os.path.join(os.path.dirname(template.dirs[0]), os.path.dirname(mutation.path))
    names = [name for name in os.listdir(folder) if name.endswith(".log")]
    name = os.path.basename(mutation.path)
    if mutation.kind == "remove":
        return all(other < name for other in names)
    if name != max(names):
        return False
    size = os.path.getsize(os.path.join(folder, name))
    to_the_end = mutation.kind == "zero" and mutation.position + mutation.length >= size
    return mutation.kind in ("truncate", "tail") or to_the_end


# --- the four opens ----------------------------------------------------------------------------------


@dataclass
class MutationResult:
    mutation: Mutation
    file_type: str
    verdicts: dict[str, Verdict]  # mode -> the worst partition verdict
    cli_checked: bool = False
    index: int = -1  # the mutation's number in its run (LOGSTORE_FUZZ_ONLY replays it)


def _open(dirs, read_only: bool):
    if read_only:
        return LogManager(dirs, read_only=True)
    clock = ManualClock(10**13)
    return LogManager(dirs, clock=clock, scheduler=Scheduler(clock, threaded=False))


def _session(dirs, read_only: bool, template: StoreModel, mutation: Mutation, rng: random.Random,
             subset_compacted: bool, extra) -> tuple[dict, dict, list[str], object]:
    """Open, observe every partition (and run ``extra(store, views)``), close. Returns (views,
    reported-by-partition, store-level errors, check report)."""
    views: dict = {}
    texts: list[str] = []
    report = None
    try:
        store = _open(dirs, read_only)
    except LogStoreError as exc:  # the open refused: reported (a check run this way reports it too)
        return {key: PartitionView(raised=[f"open: {_error_text(exc)}"]) for key in template.partitions}, {}, [], exc
    except Exception as exc:  # noqa: BLE001
        failure = RuntimeError(f"open raised {_error_text(exc)}")
        return {key: PartitionView(raw=[f"open: {_error_text(exc)}"]) for key in template.partitions}, {}, [], failure
    try:
        for key, model in template.partitions.items():
            views[key] = observe_partition(store, model, rng, subset_compacted and model.compacted)
        texts = list(store.problems)
        if extra is not None:
            report = extra(store, views)
    finally:
        try:
            store.close()
        except LogStoreError as exc:
            texts.append(f"close: {_error_text(exc)}")
        except Exception as exc:  # noqa: BLE001
            for view in views.values():
                view.raw.append(f"close: {_error_text(exc)}")
    reported = {key: names_damage(texts, model, mutation) for key, model in template.partitions.items()}
    return views, reported, texts, report


def _check_extra(store, views):
    try:
        return verify_store(store)
    except LogStoreError as exc:
        return exc
    except Exception as exc:  # noqa: BLE001
        return RuntimeError(f"check raised {_error_text(exc)}")


def _check_texts(report) -> list[str]:
    if report is None:
        return []
    if isinstance(report, BaseException):
        return [str(report)]
    return [f"{problem.path}: {problem.message}" for problem in report.errors]


def _writable_extra(template: StoreModel, mutation: Mutation, rng: random.Random):
    def extra(store, views):
        if (COMPACTED, 0) in template.partitions:
            model = template.partitions[(COMPACTED, 0)]
            try:
                store.compact(COMPACTED)
            except LogStoreError as exc:
                views[(COMPACTED, 0)].raised.append(f"compact: {_error_text(exc)}")
            except Exception as exc:  # noqa: BLE001
                views[(COMPACTED, 0)].raw.append(f"compact: {_error_text(exc)}")
            else:
                again = observe_partition(store, model, rng, True)
                for name in ("wrong", "missing", "raised", "raw"):
                    getattr(views[(COMPACTED, 0)], name).extend(getattr(again, name))
                views[(COMPACTED, 0)].lost_offsets |= again.lost_offsets
        if template.committed:
            _replay_groups(store, template, views)
        if template.journal is not None and (PLAIN, 1) in template.partitions:
            _replay_journal(store, template, views)
    return extra


def _replay_groups(store, template: StoreModel, views) -> None:
    from logstore.group.coordinator import GroupCoordinator

    group_views = [views[key] for key in template.partitions if key[0] == OFFSETS_TOPIC]
    try:
        coordinator = GroupCoordinator(store, config=GROUP_CONFIG, clock=ManualClock(10**13), threaded=False)
        coordinator.startup()
        try:
            error, offsets = coordinator.fetch_offsets(GROUP, list(template.committed))
        finally:
            coordinator.shutdown()
    except LogStoreError as exc:
        group_views[0].raised.append(f"group replay: {_error_text(exc)}")
        return
    except Exception as exc:  # noqa: BLE001
        group_views[0].raw.append(f"group replay: {_error_text(exc)}")
        return
    problems = coordinator.storage.problems
    got = {key: (value.offset if value is not None else None) for key, value in offsets.items()}
    if error or got != template.committed:
        missing = {key for key, value in got.items() if value is None}
        text = f"committed offsets {got}, expected {template.committed} (error {error})"
        if problems:
            group_views[0].raised.append(f"{text}; replay problems: {problems[0]}")
        elif missing and all(got[key] in (None, template.committed[key]) for key in got):
            group_views[0].missing.append(text)
            group_views[0].lost_offsets.add(10**9)
        else:
            group_views[0].wrong.append(text)


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _replay_journal(store, template: StoreModel, views) -> None:
    """The server's start-up replay of ``producer-state.journal`` must give the model's state."""
    from logstore.server.handlers.producer_state import ProducerStateManager

    view = views[JOURNAL] = PartitionView()  # the server's file: judged apart from the store's partitions
    capture = _Capture()
    logger = logging.getLogger("logstore")
    logger.addHandler(capture)
    try:
        journal = ProducerStateManager(store.log_dirs[0])

        def log_end_offset(topic, partition):
            try:
                return store.get_log(topic, partition).log_end_offset
            except LogStoreError:
                return None
        journal.load(log_end_offset)
        journal.close()
    except Exception as exc:  # noqa: BLE001 - the server's open: anything but a LogStoreError is raw
        (view.raised if isinstance(exc, LogStoreError) else view.raw).append(f"journal: {_error_text(exc)}")
        return
    finally:
        logger.removeHandler(capture)
    reserved, modelled = template.journal
    # The replay keeps only batches below their log's end: if the log itself lost records (judged
    # with that partition), dropping their batches is right.
    end = log_end_offset(PLAIN, 1)
    entries = {}
    for key, (epoch, batches) in modelled.items():
        kept = tuple(batch for batch in batches if end is not None and batch[3] < end)
        if kept:
            entries[key] = (epoch, kept)
    got = journal_entries(journal)
    if journal._reserved_until < reserved:
        view.wrong.append(f"journal: producer ids reserved until {journal._reserved_until} < {reserved} "
                          "(an id would be handed out twice)")
    elif got != entries:
        text = f"journal: producer state {got} != {entries}"
        lost = all(key in entries and entries[key][0] == value[0] and
                   set(value[1]) <= set(entries[key][1]) for key, value in got.items())
        if capture.messages:
            view.raised.append(f"{text}; warned: {capture.messages[0]}")
        elif lost:
            view.missing.append(text)
            view.lost_offsets.add(10**9)
        else:
            view.wrong.append(text)


def judge_mutation(template: StoreModel, copy: StoreModel, mutation: Mutation, rng: random.Random,
                   cli_check: bool = False) -> MutationResult:
    """Open the damaged ``copy`` four ways; the worst partition verdict per mode."""
    torn = torn_tail_allowed(copy, mutation)
    verdicts: dict[str, Verdict] = {mode: Verdict() for mode in MODES}
    ro_views, ro_reported, _, check_report = _session(copy.dirs, True, template, mutation, rng, False, _check_extra)
    cli_result = _cli_check(copy.dirs) if cli_check else None
    rw_views, rw_reported, rw_texts, _ = _session(copy.dirs, False, template, mutation, rng, False,
                                                  _writable_extra(template, mutation, rng))
    after_views, after_reported, _, after_report = _session(copy.dirs, True, template, mutation, rng, True,
                                                            _check_extra)
    check_errors = _check_texts(check_report)
    after_errors = _check_texts(after_report)
    for key, model in template.partitions.items():
        ro = classify(ro_views.get(key), ro_reported.get(key, False), model, mutation, template, torn)
        cut = cut_reported_by(rw_texts, model, copy, mutation)
        rw = classify(rw_views.get(key), rw_reported.get(key, False), model, mutation, template, torn, cut)
        after_named = after_reported.get(key, False) or names_damage(after_errors, model, mutation)
        after = classify(after_views.get(key), after_named, model, mutation, template, torn, cut)
        if after.outcome == LOSS and rw.outcome == TORN:
            after = Verdict(TORN, after.detail)  # the same unflushed tail, cut by recovery
        for mode, verdict in (("read-only", ro), ("writable", rw), ("after writable", after)):
            verdicts[mode].worse(verdict.outcome, f"{model.name}: {verdict.detail}")
        # The writable open's reported cut of a power loss's shape is recovery, not damage that check
        # (which sees the store before it) must name; what the read-only open saw, check must see.
        damaged = [verdict for verdict in (ro, rw) if verdict.outcome in (WRONG, LOSS, RAW, REPORTED)
                   and not (verdict is rw and verdict.power_loss_cut)]
        if damaged:
            if isinstance(check_report, BaseException) and not isinstance(check_report, LogStoreError):
                verdicts["check"].worse(RAW, f"{model.name}: {check_report}")
            elif check_errors:
                verdicts["check"].worse(REPORTED, f"{model.name}: {check_errors[0]}")
            else:
                verdicts["check"].worse(LOSS, f"{model.name}: check says OK; a read saw {damaged[0].outcome}: "
                                              f"{damaged[0].detail}")
    journal_view = rw_views.get(JOURNAL)
    if journal_view is not None:  # `logstore check` does not read the server's journal: no check verdict
        journal = classify(journal_view, False, template.partitions[(PLAIN, 1)], mutation, template, False)
        verdicts["writable"].worse(journal.outcome, f"producer-state.journal: {journal.detail}")
    if cli_result is not None:
        exit_code, output = cli_result
        ok = check_report is not None and not isinstance(check_report, BaseException) and check_report.ok
        if "Traceback" in output or exit_code not in (0, 1) or (exit_code == 0) != ok:
            verdicts["check"].worse(RAW, f"logstore check exited {exit_code} (verify_store ok={ok}): "
                                         f"{output.strip().splitlines()[-1:] }")
    return MutationResult(mutation, file_type(mutation.path, template.clean), verdicts, cli_check)


def _cli_check(dirs) -> tuple[int, str]:
    from click.testing import CliRunner

    from logstore.cli.main import main

    args = [item for path in dirs for item in ("--dir", path)] + ["check"]
    result = CliRunner().invoke(main, args)
    output = result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        output += "\nTraceback: " + _error_text(result.exception)
    return result.exit_code, output
