"""The JSON documents of the store's maintenance commands (``logstore status``, ``retention``,
``compact``, ``check``, ``repair``), built from what the engine returns: what ``--format json``
prints, one document per command, with one schema whatever the store holds.

Owns the field names and types of those documents: counts, offsets, sizes and timestamps are ints,
names and paths strings, and a value that is not known is ``null`` (never a missing field or a
placeholder string). The command line only prints them.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from ..cleaner.stats import CleanerStats
from ..log.damage import RepairPlan
from ..log.retention import RetentionResult
from ..manager.log_dirs import DirStatus
from .check import VerifyReport


def _log_name(name: str) -> tuple[str, int | None]:
    """``(topic, partition)`` of a log named ``topic-partition``; the partition None if the name has none."""
    topic, _, number = name.rpartition("-")
    return (topic, int(number)) if topic and number.isdigit() else (name, None)


def status_document(dirs: Iterable[DirStatus], problems: Iterable[str]) -> dict:
    """``logstore status``: ``{"dirs": [{"path", "online", "offline_reason", "partitions",
    "size_bytes", "clean_shutdown", "logs": [{"topic", "partition", "recovery_point",
    "log_end_offset", "damaged"}]}], "problems": [str]}``; ``damaged`` is null for a sound log."""
    return {"dirs": [{"path": entry.path, "online": entry.online, "offline_reason": entry.offline_reason,
                      "partitions": entry.partitions, "size_bytes": entry.size_bytes,
                      "clean_shutdown": entry.clean_shutdown,
                      "logs": [{"topic": name, "partition": number,
                                "recovery_point": entry.recovery_points.get((name, number)),
                                "log_end_offset": end, "damaged": entry.damaged.get((name, number))}
                               for (name, number), end in sorted(entry.log_end_offsets.items())]}
                     for entry in dirs],
            "problems": list(problems)}


def retention_document(results: Iterable[RetentionResult], dry_run: bool) -> dict:
    """``logstore retention``: ``{"dry_run", "segments", "size_bytes", "partitions": [{"topic",
    "partition", "log_start_offset", "deleted": [{"base_offset", "next_offset", "size_bytes",
    "largest_timestamp_ms", "reason"}]}]}`` (``segments``, ``size_bytes``: deleted, or with
    ``dry_run`` that would be)."""
    partitions = []
    for result in results:
        topic, partition = _log_name(result.log)
        partitions.append({"topic": topic, "partition": partition, "log_start_offset": result.log_start_offset,
                           "deleted": [{"base_offset": d.base_offset, "next_offset": d.next_offset,
                                        "size_bytes": d.size_bytes, "largest_timestamp_ms": d.largest_timestamp_ms,
                                        "reason": d.reason} for d in result.deleted]})
    return {"dry_run": dry_run, "segments": sum(len(p["deleted"]) for p in partitions),
            "size_bytes": sum(d["size_bytes"] for p in partitions for d in p["deleted"]), "partitions": partitions}


def compaction_document(results: Mapping[tuple[str, int], CleanerStats | None], engine: str) -> dict:
    """``logstore compact``: ``{"engine", "compacted", "partitions": [{"topic", "partition",
    "compacted", "size_bytes_before", "size_bytes_after", "records_kept", "records_dropped",
    "tombstones_removed", "passes", "duration_ms", "end_offset"}]}``; a partition with nothing to
    compact has ``compacted`` false and the other counts null."""
    partitions = []
    for (topic, partition), stats in results.items():
        partitions.append({
            "topic": topic, "partition": partition, "compacted": stats is not None,
            "size_bytes_before": None if stats is None else stats.size_bytes_before,
            "size_bytes_after": None if stats is None else stats.size_bytes_after,
            "records_kept": None if stats is None else stats.records_kept,
            "records_dropped": None if stats is None else stats.records_dropped,
            "tombstones_removed": None if stats is None else stats.tombstones_removed,
            "passes": None if stats is None else stats.passes,
            "duration_ms": None if stats is None else stats.duration_ms,
            "end_offset": None if stats is None else stats.end_offset})
    return {"engine": engine, "compacted": sum(p["compacted"] for p in partitions), "partitions": partitions}


def check_document(report: VerifyReport) -> dict:
    """``logstore check``: ``{"ok", "partitions", "segments", "batches", "records", "bytes_checked",
    "errors", "warnings", "problems": [{"severity", "path", "message"}]}`` (``errors``,
    ``warnings``: counts; ``path`` "" for the store as a whole)."""
    return {"ok": report.ok, "partitions": report.partitions, "segments": report.segments,
            "batches": report.batches, "records": report.records, "bytes_checked": report.bytes_checked,
            "errors": len(report.errors), "warnings": len(report.warnings),
            "problems": [{"severity": p.severity, "path": p.path, "message": p.message} for p in report.problems]}


def repair_document(plans: Iterable[RepairPlan], done: bool) -> dict:
    """``logstore repair``: ``{"done", "partitions": [{"topic", "partition", "damaged", "reason",
    "cut_offset", "removed_first_offset", "removed_end_offset", "removed_records", "removed_bytes",
    "removed_files", "log_start_offset"}]}``; ``done`` false for a dry run (what would be cut), and
    for a partition without damage ``damaged`` is false, ``reason`` and ``cut_offset`` null."""
    partitions = []
    for plan in plans:
        topic, partition = _log_name(plan.name)
        partitions.append({"topic": topic, "partition": partition, "damaged": plan.changes,
                           "reason": (plan.reason or plan.dead_reason or None) if plan.changes else None,
                           "cut_offset": plan.cut_offset if plan.changes else None,
                           "removed_first_offset": plan.removed_offsets[0], "removed_end_offset": plan.removed_offsets[1],
                           "removed_records": plan.removed_records, "removed_bytes": plan.removed_bytes,
                           "removed_files": list(plan.removed_files), "log_start_offset": plan.log_start_offset})
    return {"done": done, "partitions": partitions}
