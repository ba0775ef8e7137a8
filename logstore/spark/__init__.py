"""logstore on Spark (the optional extra ``pip install 'kafka-logstore[spark]'``: pyspark and pyarrow).

* ``format("logstore")``: a PySpark Python Data Source with Spark's Kafka-source schema and options,
  for batch and Structured Streaming reads and writes (``logstore.spark.source``). The top-level
  module ``pyspark_logstore`` registers it by itself; ``register(spark)`` is the explicit route,
  needed where Spark's scan cannot find that module (an editable install). logstore's own jobs
  (``compact``, and ``logstore perf spark`` in ``logstore.bench.spark``) call it, so they run there too.
* ``logstore.spark.compact``: compaction as a Spark job (``logstore compact --engine spark``).

May import: the engine (foundations up to ``manager``). Nothing in the engine imports this package,
and importing it does not import pyspark: only ``register`` and the modules ``source``, ``writer``
and ``compact`` do. Its benchmark (``logstore perf spark``) lives in the benchmark layer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for the annotation only: importing this package does not import pyspark
    from pyspark.sql import SparkSession

MISSING_EXTRA = ("logstore's Spark layer needs pyspark and pyarrow: pip install 'kafka-logstore[spark]' "
                 "(pyarrow is not pulled in by pyspark itself)")


def require_spark() -> None:
    """Raise a friendly ImportError when pyspark or pyarrow is missing."""
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        raise ImportError(f"{MISSING_EXTRA} ({exc})") from exc


def register(spark: SparkSession) -> None:
    """Register the ``logstore`` data source with ``spark`` (a SparkSession) explicitly."""
    require_spark()
    from .source import LogStoreDataSource

    spark.dataSource.register(LogStoreDataSource)
