"""Benchmarks behind ``logstore perf``: every workload with its baseline measured in the same run.

Owns ``core`` (append, scan, random reads and open against SQLite), ``report`` (result rows, targets,
tables), ``batch_format`` (the record batch format in memory against Kafka's varint records and a
pure-Python CRC-32C), ``timer`` and ``timer_baselines`` (the timing wheel against heap timers),
``durable`` (durable appends and opening after a crash), ``recovery`` (one partition's open after
kill -9 against a clean open plus a scan of the tail), ``compact`` (compaction against SQLite),
``paths``, ``paths_process`` and ``paths_report`` (issue 15's table: the paths users take, each against
its baseline, PASS/FAIL against the issue's goals) and ``child`` (running a workload in a fresh
interpreter, for the modules that measure in child processes).
The Spark benchmarks live with the Spark layer (``logstore.spark.perf``) and use this package.

May import: the engine (foundations up to ``manager``). Never ``tools``; nothing in the engine imports
this package (``import logstore`` does not load it).
"""
