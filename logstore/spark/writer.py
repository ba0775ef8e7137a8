"""The ``logstore`` data source's writers (batch and streaming): Spark's Kafka-sink columns in,
records staged by each task, appended by the driver's commit (the protocol is ``sink``'s).

Columns: ``value`` (required; binary or string), and optionally ``key`` (binary or string),
``headers`` (``array<struct<key string, value binary>>``), ``topic`` (string; required unless the
``topic`` option is set, which wins), ``partition`` (int; else the core's key hash, and round-robin
for rows without a key) and ``timestamp`` (timestamp; else the append time). Any other column is an
error, so a misspelt column is not silently dropped. Options: ``topic``, ``includeHeaders`` (default
true when a ``headers`` column is given), and for streaming ``sinkId`` (default: derived from the
query's checkpoint location), the identity under which committed batch ids are remembered. A batch
write inside ``foreachBatch`` passes ``sinkId`` and ``batchId`` to be exactly once too.

Only ``mode("append")`` exists: topics are append-only (``overwrite`` is refused at planning).
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Iterator

import pyarrow as pa

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructType, TimestampType

from .options import SourceOptionError, lower_keys, parse_bool, parse_path
from .sink import StagedFile, TargetPlan, abort_staged, commit_staged, stage_records

WRITER_OPTIONS = ("path", "topic", "includeHeaders", "sinkId", "batchId", "checkpointLocation")


class StagedMessage(WriterCommitMessage):
    """A write task's staged file, sent to the driver's commit."""

    def __init__(self, staged: StagedFile) -> None:
        self.staged = staged


def _check_columns(schema: StructType) -> None:
    """The input must have Kafka-sink columns of usable types (checked before any task runs)."""
    allowed = {"key": (BinaryType, StringType), "value": (BinaryType, StringType), "topic": (StringType,),
               "partition": (IntegerType,), "timestamp": (TimestampType,), "headers": None}
    names = [field.name for field in schema.fields]
    if "value" not in names:
        raise SourceOptionError(f"writing to logstore needs a 'value' column (got columns {names})")
    for field in schema.fields:
        if field.name not in allowed:
            raise SourceOptionError(f"column {field.name!r} is not a logstore sink column (use key, value, headers, "
                                    "topic, partition, timestamp; drop or rename the others)")
        types = allowed[field.name]
        if types is not None and not isinstance(field.dataType, types):
            raise SourceOptionError(f"column {field.name!r} must be {' or '.join(t.typeName() for t in types)}, "
                                    f"got {field.dataType.simpleString()}")
    headers = next((field for field in schema.fields if field.name == "headers"), None)
    if headers is not None and headers.dataType.simpleString() != "array<struct<key:string,value:binary>>":
        raise SourceOptionError("column 'headers' must be array<struct<key:string,value:binary>>, got "
                                f"{headers.dataType.simpleString()}")


def _plan(options, schema: StructType, overwrite: bool) -> TargetPlan:
    if overwrite:
        raise SourceOptionError('logstore topics are append-only: use mode("append") (overwrite is not supported)')
    given = lower_keys(options)
    unknown = sorted(set(given) - {name.lower() for name in WRITER_OPTIONS})
    if unknown:
        raise SourceOptionError(f"unknown option {unknown[0]!r} for the logstore sink (known: "
                                f"{', '.join(WRITER_OPTIONS)})")
    _check_columns(schema)
    names = set(schema.names)
    if "topic" not in names and not given.get("topic"):
        raise SourceOptionError("writing to logstore needs a 'topic' column or the option topic")
    include_headers = parse_bool(given, "includeheaders", "headers" in names)
    return TargetPlan.for_store(parse_path(given.get("path")), given.get("topic") or None,
                                include_headers=include_headers)


def _rows(batches, plan: TargetPlan) -> Iterator[tuple]:
    """Arrow batches of the input to ``sink`` rows ``(topic, partition, key, value, headers, ts_ms)``,
    a column at a time (``to_pylist`` is C)."""
    for batch in batches:
        count = batch.num_rows
        names = batch.schema.names

        def column(name):
            return batch.column(name).to_pylist() if name in names else [None] * count

        headers = column("headers") if plan.include_headers else [None] * count
        if "headers" in names and plan.include_headers:
            headers = [None if pairs is None else [(pair["key"], pair["value"]) for pair in pairs] for pairs in headers]
        if "timestamp" in names:  # microseconds since the epoch, whatever the session time zone
            micros = batch.column("timestamp").cast(pa.int64()).to_pylist()
            timestamps = [None if us is None else us // 1000 for us in micros]
        else:
            timestamps = [None] * count
        yield from zip(column("topic"), column("partition"), column("key"), column("value"), headers, timestamps)


def _task_id() -> int:
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.partitionId() if context is not None else 0


class LogStoreWriter(DataSourceArrowWriter):
    """A batch write: all or nothing per job (see ``sink``). With the options ``sinkId`` and
    ``batchId`` (inside ``foreachBatch``) it is also exactly once per (sinkId, batchId): a batch id
    already committed for the sink appends nothing."""

    def __init__(self, options, schema: StructType, overwrite: bool) -> None:
        self.plan = _plan(options, schema, overwrite)
        given = lower_keys(options)
        self.sink_id = given.get("sinkid") or None
        self.batch_id = None
        if "batchid" in given:
            text = str(given["batchid"]).strip()
            if not text.isdigit():
                raise SourceOptionError(f"option batchId must be an integer >= 0, got {given['batchid']!r}")
            self.batch_id = int(text)
        if (self.sink_id is None) != (self.batch_id is None):
            raise SourceOptionError("options sinkId and batchId go together (an idempotent write inside foreachBatch)")

    def write(self, iterator) -> StagedMessage:
        return StagedMessage(stage_records(self.plan, _task_id(), _rows(iterator, self.plan)))

    def commit(self, messages) -> None:
        commit_staged(self.plan, [None if message is None else message.staged for message in messages],
                      sink_id=self.sink_id, batch_id=self.batch_id)

    def abort(self, messages) -> None:
        abort_staged(self.plan, [message.staged for message in messages if message is not None])


class LogStoreStreamWriter(DataSourceStreamArrowWriter):
    """A streaming sink: each micro-batch is one all-or-nothing commit, exactly once per batch id for
    the sink (a restarted query re-running a committed batch appends nothing)."""

    def __init__(self, options, schema: StructType, overwrite: bool) -> None:
        given = lower_keys(options)
        self.sink_id = given.get("sinkid") or _sink_id_from(given)
        # Spark builds this writer anew for the tasks and for each commit, so the staging job is
        # named after the sink (one micro-batch at a time), not by a fresh id per instance.
        self.plan = dataclasses.replace(_plan(options, schema, overwrite),
                                        job_id=hashlib.sha256(self.sink_id.encode()).hexdigest()[:32])

    def write(self, iterator) -> StagedMessage:
        return StagedMessage(stage_records(self.plan, _task_id(), _rows(iterator, self.plan)))

    def commit(self, messages, batchId: int) -> None:  # noqa: N803 - Spark's name
        commit_staged(self.plan, [None if message is None else message.staged for message in messages],
                      sink_id=self.sink_id, batch_id=batchId)

    def abort(self, messages, batchId: int) -> None:  # noqa: N803
        abort_staged(self.plan, [message.staged for message in messages if message is not None])


def _sink_id_from(given: dict) -> str:
    location = given.get("checkpointlocation")
    if not location:
        raise SourceOptionError("a streaming write to logstore needs a checkpoint location (option checkpointLocation) "
                                "or the option sinkId: it is how committed batches are recognised after a restart")
    return "checkpoint-" + hashlib.sha256(location.encode()).hexdigest()[:32]

