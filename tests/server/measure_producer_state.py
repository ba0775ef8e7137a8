"""Measure idempotent produce with many producers held in the server's producer state.

Run by hand, not by pytest: ``python -P tests/server/measure_producer_state.py [--producers N]
[--records R]`` (needs kafka-python). It makes a store with one topic, writes a producer-state
journal holding N producers (version 1 lines, which every version of the server reads), starts
``KafkaServer`` on 127.0.0.1 in this process and sends R records one at a time with kafka-python's
idempotent producer (each ``send(...).get()``: one batch per record), then prints the records per
second and the journal's size before and after. With ``PYTHONPATH`` pointing at another checkout
(and ``-P``), the same script measures that version.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import zlib


def _line(text: str) -> str:
    return f"{text} {zlib.crc32(text.encode('utf-8')):08x}\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--producers", type=int, default=150_000, help="producers held in the state")
    parser.add_argument("--records", type=int, default=200, help="records sent, one batch each")
    args = parser.parse_args()

    import kafka
    import logstore
    from logstore import LogManager, Record
    from logstore.server.server import KafkaServer

    root = tempfile.mkdtemp(prefix="measure-producer-state-")
    data = os.path.join(root, "data")
    with LogManager([data]) as store:
        store.create_topic("held", partitions=1)
        store.create_topic("measured", partitions=1)
        store.append("held", [Record(None, b"x", (), 1_700_000_000_000)])
    reservation = _line(f"P {args.producers + 1000}")
    lines = [_line("V 1"), reservation]
    lines += [_line(f"B held 0 {producer_id} 0 0 0 0 0") for producer_id in range(args.producers)]
    lines.append(reservation)
    journal = os.path.join(data, "producer-state.journal")
    with open(journal, "w", encoding="utf-8") as file:
        file.write("".join(lines))
    before = os.path.getsize(journal)

    with KafkaServer([data], listen="127.0.0.1:0", config={"offsets.topic.num.partitions": 1}) as server:
        producer = kafka.KafkaProducer(bootstrap_servers=server.bootstrap_servers, enable_idempotence=True,
                                       acks="all", linger_ms=0, request_timeout_ms=60000)
        producer.send("measured", b"warm-up").get(timeout=120)
        started = time.perf_counter()
        for number in range(args.records):
            producer.send("measured", b"record %d" % number).get(timeout=120)
        elapsed = time.perf_counter() - started
        producer.close(timeout=10)
        after = os.path.getsize(journal)
    print(f"logstore from {os.path.dirname(logstore.__file__)}")
    print(f"{args.producers} producers held: {args.records} idempotent records in {elapsed:.2f} s = "
          f"{args.records / elapsed:.1f} records/s; journal {before / 1e6:.1f} MB before, {after / 1e6:.1f} MB "
          "while serving")
    import shutil
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
