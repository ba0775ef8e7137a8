"""Every benchmark behind ``logstore perf``: each workload with its baseline measured in the same run.

The engine's: ``core`` (append, scan, random reads and open against SQLite), ``report`` (result
rows, targets, tables), ``batch_format`` (the record batch format in memory against Kafka's varint
records and a pure-Python CRC-32C), ``timer`` and ``timer_baselines`` (the timing wheel against heap
timers), ``durable`` (durable appends and opening after a crash), ``recovery`` (one partition's open
after kill -9 against a clean open plus a scan of the tail), ``compact`` (compaction against
SQLite), ``paths``, ``paths_process`` and ``paths_report`` (the paths users take, each against its
baseline, judged against its goal) and ``child`` (a workload run in a fresh interpreter).
The command line's: ``cli_startup`` (each command's start-up against the interpreter's own).
The server's: ``serve`` (``logstore serve`` and Tansu side by side with real clients) and
``serve_security`` (the cost of TLS and SASL), ``groups`` (the group coordinator in-process and over
the wire). The client's: ``client`` (our client against kafka-python and confluent-kafka). Spark's:
``spark`` (what Spark adds on top of the store). Scale: ``scale`` (open time, memory, descriptors,
Metadata and Fetch as partitions and connections grow) and ``fetch_sessions`` (KIP-227 in bytes), both
on ``wire`` (a raw protocol client that counts bytes). Every command's: ``machine`` (the machine and its
load average before and after the run).

Layer: above everything it measures, below ``cli``. May import every layer (the engine, ``tools``,
``group``, ``server``, ``client``, ``spark``); nothing but ``cli`` imports it, and importing
``logstore``, ``logstore.server`` or ``logstore.client`` loads none of it.
"""
