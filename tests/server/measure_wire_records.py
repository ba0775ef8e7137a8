"""Speed of the wire-records conversions (not collected by pytest: run it by hand).

    python tests/server/measure_wire_records.py [--repeats 5] [--records 200000]

Measures, best of ``--repeats`` runs, in records per second:

- ``decode_produce`` of 16 KiB Produce batches (16-byte keys, 100-byte values from a 32-letter
  alphabet, timestamp deltas 0..3), uncompressed and with each codec;
- ``encode_fetch_batch`` of stored 1000-record batches (same records, written by ``Log.append``
  into a temporary store and read back with ``Log.iter_batch_slices``): cold (every batch
  encoded; also with the read from the log, CRC check included, each time) and cached
  (``FetchBatchCache`` hits, as for a second consumer of the same data);
- for scale: our own batch format's ``RecordBatch.decode`` + ``records()`` of the same stored
  batches, and kafka-python's / aiokafka's readers of the fetch batches, when installed.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time

from logstore import LogManager, ManualClock, Record
from logstore.records.decoder import RecordBatch
from logstore.server.wire_records import crc32c as crc_module
from logstore.server.wire_records import FetchBatchCache, decode_produce, encode_fetch_batch, encode_produce_batch
from logstore.server.wire_records.compression import AVAILABLE_CODECS, CODEC_NAMES
from logstore.timer.scheduler import Scheduler

T0 = 1_700_000_000_000
ALPHABET = b"abcdefghijklmnopqrstuvwxyz012345"


def make_records(rng: random.Random, count: int, start: int = 0) -> list[Record]:
    return [Record(b"key-%011d" % (start + i), bytes(rng.choice(ALPHABET) for _ in range(100)), (),
                   T0 + (i % 4)) for i in range(count)]


def best_of(repeats: int, run) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def row(name: str, count: int, seconds: float, extra: str = "") -> None:
    print(f"{name:<34} {count:>9,} {seconds:>8.4f} {count / seconds:>12,.0f} {seconds / count * 1e9:>9,.1f}  {extra}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--records", type=int, default=200_000)
    args = parser.parse_args()
    rng = random.Random(42)
    print(f"python {sys.version.split()[0]}, crc32c: {crc_module.IMPLEMENTATION}, load before: "
          f"{os.getloadavg()[0]:.2f}")
    print(f"{'case':<34} {'records':>9} {'best_s':>8} {'records/s':>12} {'ns each':>9}  batch")

    # --- produce: 16 KiB batches --------------------------------------------------------------------
    per_batch = 16 * 1024 // (100 + 16 + 9)  # ~131 records of ~125 bytes
    batches = args.records // per_batch
    records = make_records(rng, per_batch * batches)
    for codec in sorted(AVAILABLE_CODECS):
        payloads = [encode_produce_batch(records[i * per_batch : (i + 1) * per_batch], compression=codec)
                    for i in range(batches)]
        total = per_batch * batches

        def decode_all(payloads=payloads):
            for payload in payloads:
                decode_produce(payload, max_message_bytes=1 << 20)

        row(f"decode_produce {CODEC_NAMES[codec]}", total, best_of(args.repeats, decode_all),
            f"{per_batch} records, {len(payloads[0]):,} bytes")

    # --- fetch: stored 1000-record batches ------------------------------------------------------------
    with tempfile.TemporaryDirectory() as directory:
        clock = ManualClock(T0)
        with LogManager([directory], config={"log.cleaner.threads": 0}, clock=clock,
                        scheduler=Scheduler(clock, threaded=False)) as store:
            store.create_topic("t", 1)
            log = store.get_log("t", 0)
            count = args.records // 1000 * 1000
            for start in range(0, count, 1000):
                log.append(records[start % len(records) : start % len(records) + 1000]
                           if start % len(records) + 1000 <= len(records) else make_records(rng, 1000, start))
            stored = [batch for batch, _first, _stop in log.iter_batch_slices()]
            total = sum(batch.record_count for batch in stored)

            def encode_all():
                for batch in stored:
                    encode_fetch_batch(batch)

            def read_and_encode_all():
                for batch, _first, _stop in log.iter_batch_slices():
                    encode_fetch_batch(batch)

            sample = encode_fetch_batch(stored[0])
            row("encode_fetch_batch (cold)", total, best_of(args.repeats, encode_all),
                f"{stored[0].record_count} records, {len(sample):,} bytes")
            row("iter_batch_slices + encode (cold)", total, best_of(args.repeats, read_and_encode_all),
                "read from the log each time")
            cache = FetchBatchCache()
            keys = [("t", 0, batch.base_offset, batch.header.crc) for batch in stored]

            def cached_all():
                for key, batch in zip(keys, stored):
                    cache.get_or_encode(key, batch)

            cached_all()
            row("encode_fetch_batch (cached)", total, best_of(args.repeats, cached_all),
                f"hits {cache.hits}, misses {cache.misses}")
            raw = [bytes(batch.buffer) for batch in stored]

            def ours_decode():
                for data in raw:
                    RecordBatch.decode(data).records()

            row("logstore RecordBatch.decode+records", total, best_of(args.repeats, ours_decode), "(for scale)")
            fetched = [encode_fetch_batch(batch) for batch in stored]
            try:
                from aiokafka.record.default_records import DefaultRecordBatch as AioBatch
            except ImportError:
                AioBatch = None
            if AioBatch is not None:
                def aio_read():
                    for data in fetched:
                        batch = AioBatch(data)
                        batch.validate_crc()
                        list(batch)

                row("aiokafka (C) reads fetch batches", total, best_of(args.repeats, aio_read), "(for scale)")
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
