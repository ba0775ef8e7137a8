"""The PySpark Python Data Source ``logstore``: the thin adapter between Spark and the store.

This is the only module (with ``compact``) that imports ``pyspark.sql.datasource``; the logic it calls
is Spark-free and tested without a JVM: ``options`` (parsing), ``planning`` (ranges, rate limits,
data loss), ``arrow`` (batch columns to Arrow) and ``sink`` (staging and committing writes).

Reading: ``spark.read.format("logstore").option("subscribe", "events").load("/path/to/store")``
(also ``readStream``, and SQL ``CREATE TEMPORARY VIEW v USING logstore OPTIONS (path '...',
subscribe 'events')``). The schema is Spark's Kafka source's. Writing:
``df.write.format("logstore").mode("append").option("topic", "out").save(path)`` (and
``writeStream``), with Kafka-sink columns.

Spark runs each step in a separate Python process and pickles what crosses between them, so the
objects here hold only parsed options and plain dataclasses; stores are opened inside the method
that uses them.
"""

from __future__ import annotations

from typing import Any, Iterator

from pyspark.sql.datasource import (DataSource, DataSourceReader, DataSourceStreamReader, DataSourceStreamWriter,
                                    DataSourceWriter, InputPartition)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from ..errors import LogStoreError
from ..manager.log_manager import LogManager
from .options import (SourceOptionError, SourceOptions, lower_keys, offsets_from_json, offsets_to_json,
                      parse_bool, parse_source_options)
from .planning import OffsetRange, StreamPlanner, checked_range, plan_batch

Offsets = dict[str, dict[str, int]]
"""A stream offset as Spark checkpoints it: Kafka's ``{"topic": {"partition": offset}}`` JSON."""


def read_range(options: SourceOptions, offset_range: OffsetRange | None) -> Iterator[Any]:
    """A read task: the records of ``offset_range`` as Arrow record batches (or tuples with
    ``arrow=false``), from a read-only view of that one partition opened now."""
    if offset_range is None:  # Spark's stand-in task when a plan has no ranges
        return
    from .arrow import arrow_batches, tuple_rows  # pyarrow is imported in the executor only

    key = (offset_range.topic, offset_range.partition)
    manager = LogManager(list(options.data_dirs), read_only=True, load_only={key})
    try:
        log = manager.get_log(*key)
        # The log may have changed since planning (retention, a truncation): check again.
        start, end = checked_range(key, offset_range.start, offset_range.end, log.log_start_offset,
                                   log.log_end_offset, options.fail_on_data_loss)
        if start >= end:
            return
        # Markers are never rows; read_committed also leaves aborted transactions' records out
        # (the range ends at or below the last stable offset the plan saw).
        columns = log.iter_columns(start, end, isolation=options.isolation)
        if options.arrow:
            yield from arrow_batches(columns, key[0], key[1], options.include_headers)
        else:
            yield from tuple_rows(columns, key[0], key[1], options.include_headers)
    finally:
        manager.close()


def _check_schema(schema: StructType, options: SourceOptions) -> None:
    """A user schema (``.schema(...)``) must be the source's own: its rows have one shape."""
    from pyspark.sql.pandas.types import from_arrow_schema  # pyarrow only, no pandas, no JVM

    from .arrow import arrow_schema, spark_schema_ddl

    if schema.simpleString() != from_arrow_schema(arrow_schema(options.include_headers)).simpleString():
        raise SourceOptionError(f"the logstore source has a fixed schema ({spark_schema_ddl(options.include_headers)}); "
                                f"a user schema {schema.simpleString()} cannot be used")


class LogStoreDataSource(DataSource):
    """``format("logstore")``: Spark's Kafka source and sink over a logstore store."""

    @classmethod
    def name(cls) -> str:
        return "logstore"

    def schema(self) -> str:
        from .arrow import spark_schema_ddl

        return spark_schema_ddl(parse_bool(lower_keys(self.options), "includeheaders", False))

    def reader(self, schema: StructType) -> DataSourceReader:
        options = parse_source_options(self.options, streaming=False)
        _check_schema(schema, options)
        return LogStoreBatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = parse_source_options(self.options, streaming=True)
        _check_schema(schema, options)
        return LogStoreStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .writer import LogStoreWriter

        return LogStoreWriter(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .writer import LogStoreStreamWriter

        return LogStoreStreamWriter(self.options, schema, overwrite)


class LogStoreBatchReader(DataSourceReader):
    """A batch read: one task per topic-partition offset range (split by ``minPartitions``)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        try:
            return [InputPartition(offset_range) for offset_range in plan_batch(self.options)]
        except LogStoreError as exc:
            raise SourceOptionError(f"cannot plan the read of {','.join(self.options.data_dirs)}: {exc}") from exc

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_range(self.options, partition.value)


class LogStoreStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A streaming read with Kafka's offsets, ``maxOffsetsPerTrigger`` and ``Trigger.AvailableNow``."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.planner = StreamPlanner(options)

    def initialOffset(self) -> Offsets:
        return offsets_to_json(self.planner.initial_offset())

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        max_records = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return offsets_to_json(self.planner.latest_offset(offsets_from_json(start), max_records))

    def reportLatestOffset(self) -> Offsets:
        return offsets_to_json({key: end for key, (_, end) in self.planner.latest_available().items()})

    def prepareForTriggerAvailableNow(self) -> None:
        self.planner.prepare_available_now()

    def partitions(self, start: Offsets, end: Offsets) -> list[InputPartition]:
        ranges = self.planner.partitions(offsets_from_json(start), offsets_from_json(end))
        return [InputPartition(offset_range) for offset_range in ranges]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_range(self.options, partition.value)

    def commit(self, end: Offsets) -> None:
        """Nothing to do: the store keeps no consumer positions (the checkpoint holds them)."""
