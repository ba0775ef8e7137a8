"""``logstore perf``: benchmarks (placeholder until the perf commands land)."""

import click


@click.group()
def perf() -> None:
    """Benchmarks, optionally side by side with SQLite (--compare sqlite)."""
