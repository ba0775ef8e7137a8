"""Spark finds Python data sources in top-level ``pyspark_*`` modules exposing ``DefaultSource``: this
one makes ``spark.read.format("logstore")`` (and SQL ``USING logstore``) work with no registration."""

from logstore.spark.source import LogStoreDataSource as DefaultSource

__all__ = ["DefaultSource"]
