"""A flipped byte in an ``.index`` or ``.timeindex`` file never makes a read return wrong records.

An index is an accelerator: every entry a read uses is checked against the batch it points at
(the batch at that position starts at that offset; the batch ending at a time entry's offset has
that max timestamp). With the data intact, every read therefore returns exactly the records that
were appended, whatever byte of an index is damaged: a writable log rebuilds the lying index from
its data (and ``check`` passes afterwards), a read-only view scans without it.

For every byte of an offset index and of a time index (two values xor-ed in), in a read-only and
a writable open: point and range reads at offsets spread over the log, ``iter_records`` from them,
``fetch``, ``iter_columns`` and ``fetch_columns``, ``offset_for_timestamp``, and ``logstore read --offset N``.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
from click.testing import CliRunner

from logstore import LogManager, Record
from logstore.cli.main import main
from logstore.tools.check import verify_store

RECORDS = 156
PER_BATCH = 3
CONFIG = {"segment.bytes": 1800, "index.interval.bytes": 220}
BASE_TIMESTAMP_MS = 1_700_000_000_000


def model_record(offset: int) -> Record:
    return Record(b"k%d" % (offset % 17), b"value-%05d-" % offset + b"x" * (offset % 23),
                  (("h", b"%d" % offset),), BASE_TIMESTAMP_MS + offset * 10, offset)


MODEL = [model_record(offset) for offset in range(RECORDS)]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    path = tmp_path_factory.mktemp("pristine") / "data"
    with LogManager([str(path)]) as store:
        store.create_topic("t", 1, CONFIG)
        for start in range(0, RECORDS, PER_BATCH):
            store.append("t", [record._replace(offset=None) for record in MODEL[start : start + PER_BATCH]])
        segments = store.get_log("t", 0).segments
        assert len(segments) >= 4
        bases = [segment.base_offset for segment in segments]
    partition_dir = path / "t-0"
    # One segment in the middle and the last: each index has several entries.
    chosen = [bases[len(bases) // 2], bases[-1]]
    for base, entries in zip(chosen, (4, 2)):
        assert os.path.getsize(partition_dir / f"{base:020d}.index") >= entries * 8
        assert os.path.getsize(partition_dir / f"{base:020d}.timeindex") >= entries * 12
    return path, bases, chosen


def offsets_to_read(bases: list[int], chosen: list[int]) -> list[int]:
    """Offsets all over the segments whose indexes are damaged, and around them."""
    offsets = {0, RECORDS - 1}
    for base in chosen:
        following = ([b for b in bases if b > base] + [RECORDS])[0]
        offsets.update(range(base - 2, following + 1, 3))
    return sorted(offset for offset in offsets if 0 <= offset < RECORDS)


def as_tuples(records) -> list[tuple]:
    return [tuple(record) for record in records]


def wrong_reads(store: LogManager, bases: list[int], chosen: list[int]) -> list[str]:
    """Every read whose answer differs from the model, described."""
    wrong = []
    log = store.get_log("t", 0)
    offsets = offsets_to_read(bases, chosen)
    for offset in offsets:
        for max_records in (1, 4):
            got = as_tuples(log.read(offset, max_records=max_records))
            want = as_tuples(MODEL[offset : offset + len(got)]) if got else None
            if not got or got != want:
                wrong.append(f"read({offset}, max_records={max_records}) -> {[r[-1] for r in got]}")
        got = as_tuples(log.read(offset, max_bytes=300))
        if not got or got != as_tuples(MODEL[offset : offset + len(got)]):
            wrong.append(f"read({offset}, max_bytes=300) -> {[r[-1] for r in got]}")
    for offset in offsets[::4]:
        got = [record.offset for record in log.iter_records(offset)]
        if got != list(range(offset, RECORDS)):
            wrong.append(f"iter_records({offset}) -> {len(got)} records from {got[:1]}")
        fetched = store.fetch({("t", 0): offset}, max_bytes=200)[("t", 0)]
        if not fetched or as_tuples(fetched) != as_tuples(MODEL[offset : offset + len(fetched)]):
            wrong.append(f"fetch({offset}) -> {[r.offset for r in fetched]}")
        got = [record.offset for batch in log.iter_columns(offset) for record in batch.records()]
        if got != list(range(offset, RECORDS)):
            wrong.append(f"iter_columns({offset}) -> {len(got)} records from {got[:1]}")
        columns = store.fetch_columns({("t", 0): offset}, max_bytes=200)[("t", 0)].batches
        fetched = [record for batch in columns for record in batch.records()]
        if not fetched or as_tuples(fetched) != as_tuples(MODEL[offset : offset + len(fetched)]):
            wrong.append(f"fetch_columns({offset}) -> {[r.offset for r in fetched]}")
    for offset in offsets[::2]:
        found = log.offset_for_timestamp(MODEL[offset].timestamp_ms - 3)
        if found != offset:
            wrong.append(f"offset_for_timestamp(of {offset}) -> {found}")
    return wrong


def cli_wrong_reads(path, bases: list[int]) -> list[str]:
    wrong = []
    for offset in sorted({bases[1] + 1, bases[len(bases) // 2] + 4, RECORDS - 5}):
        result = CliRunner().invoke(main, ["--dir", str(path), "read", "t", "--partition", "0", "--offset",
                                           str(offset), "--max-records", "3"])
        lines = result.stdout.splitlines()
        got = [json.loads(line)["offset"] for line in lines]
        if result.exit_code != 0 or got != [offset, offset + 1, offset + 2]:
            wrong.append(f"logstore read --offset {offset} -> exit {result.exit_code}, offsets {got}")
    return wrong


def flip_cases(chosen: list[int]):
    for base in chosen:
        for suffix in (".index", ".timeindex"):
            yield f"{base:020d}{suffix}"


def _damage(path, name: str, position: int, mask: int) -> None:
    with open(path / "t-0" / name, "r+b") as file:
        file.seek(position)
        byte = file.read(1)[0]
        file.seek(position)
        file.write(bytes([byte ^ mask]))


@pytest.mark.parametrize("read_only", [True, False], ids=["read-only", "writable"])
def test_every_flipped_index_byte_gives_the_right_records(pristine, tmp_path, read_only):
    source, bases, chosen = pristine
    cases = wrong_total = 0
    failures = []
    for name in flip_cases(chosen):
        size = os.path.getsize(source / "t-0" / name)
        for position in range(size):
            for mask in (0xFF, 0x10) if position % 2 else (0xFF, 0x01):
                path = tmp_path / "data"
                shutil.rmtree(path, ignore_errors=True)
                shutil.copytree(source, path)
                _damage(path, name, position, mask)
                cases += 1
                repaired = False
                try:
                    with LogManager([str(path)], read_only=read_only) as store:
                        wrong = wrong_reads(store, bases, chosen)
                        repaired = bool(store.get_log("t", 0).load_problems)
                except Exception as exc:  # intact data: an error is as wrong as a wrong record
                    wrong = [f"raised {exc!r}"]
                if read_only and mask == 0xFF:
                    wrong += cli_wrong_reads(path, bases)
                if not read_only and repaired and not wrong:
                    # The writable log rebuilt the lying index from its data: the files are right again.
                    with LogManager([str(path)], read_only=True) as store:
                        report = verify_store(store)
                    if not report.ok:
                        wrong.append(f"check after the repair: {[problem.message for problem in report.errors]}")
                if wrong:
                    wrong_total += 1
                    failures.append(f"{name} byte {position} ^ {mask:#x}: {wrong[:3]}")
    print(f"{cases} index byte flips ({'read-only' if read_only else 'writable'} opens): "
          f"{wrong_total} gave wrong reads")
    assert not failures, f"{len(failures)} of {cases} flips gave wrong reads:\n" + "\n".join(failures[:20])


@pytest.mark.parametrize("read_only", [True, False], ids=["read-only", "writable"])
def test_a_cut_or_missing_time_index_does_not_hide_timestamps(pristine, tmp_path, read_only):
    """A time index cut short or removed (a clean store, so no recovery rebuilds it) understates its
    segment's largest timestamp if trusted: a lookup then skips the segment holding the answer. The
    maximum is confirmed by the batch headers after the last entry, so every lookup stays right."""
    source, bases, chosen = pristine
    failures = []
    for base in bases[:-1]:
        name = f"{base:020d}.timeindex"
        size = os.path.getsize(source / "t-0" / name)
        for cut in (None, 0, 12, 13, size - 12, size - 1):
            path = tmp_path / "data"
            shutil.rmtree(path, ignore_errors=True)
            shutil.copytree(source, path)
            if cut is None:
                os.remove(path / "t-0" / name)
            else:
                os.truncate(path / "t-0" / name, cut)
            with LogManager([str(path)], read_only=read_only) as store:
                log = store.get_log("t", 0)
                wrong = [offset for offset in range(0, RECORDS, 2)
                         if log.offset_for_timestamp(MODEL[offset].timestamp_ms - 3) != offset]
            if wrong:
                failures.append(f"{name} {'removed' if cut is None else f'cut to {cut} bytes'}: "
                                f"offset_for_timestamp wrong for offsets {wrong[:5]}")
    assert not failures, "\n".join(failures)
