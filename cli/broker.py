"""The command line against a broker (``logstore --bootstrap-server HOST:PORT``): opens the client
layer's admin, producer and reader (``logstore.client.admin``, ``logstore.client.tools``) and prints
what they return in the store commands' formats. No logic lives here."""

from __future__ import annotations

import contextlib
import sys
from itertools import groupby, islice
from typing import TYPE_CHECKING, Callable, Sequence

import click

from .lazy import DeferredCommand
from .options import echo_json, format_option
from .records_io import InputRecord, RecordStyle, check_against_topic, print_records

if TYPE_CHECKING:
    from logstore.client.admin import BrokerAdmin


def admin(options) -> BrokerAdmin:
    """The topics of the broker of ``--bootstrap-server``."""
    from logstore.client.admin import BrokerAdmin
    from logstore.client.security import ClientSecurity
    return BrokerAdmin(options.bootstrap, client_id="logstore-cli",
                       security=ClientSecurity.from_config(options.client_config))


def security_store(options, local, read_only: bool = False) -> tuple:
    """(what to close, the users or ACLs): ``local(first data dir)`` with the store opened as a
    writer (its lock), or read-only to list them (beside a running server: its files are replaced
    whole, so a reader needs no lock); or with ``--bootstrap-server`` the broker's through its admin
    APIs."""
    if options.bootstrap:
        from logstore.client.security_admin import BrokerSecurityAdmin
        broker_admin = admin(options)
        return broker_admin, BrokerSecurityAdmin(broker_admin)
    store = options.open(read_only=read_only)
    return store, local(options.dirs[0])


def append(options, topic: str, entries: Sequence[InputRecord], batch_size: int, acks: str, timeout_ms: int,
           on_appended: Callable[[int, object], None]) -> None:
    """``logstore append`` to a broker: the input checked against the topic's partition count
    first, then sent in chunks, ``on_appended(partition, info)`` per partition of each chunk once
    acknowledged (it prints)."""
    from logstore.client.tools import append_chunks

    with admin(options) as topics:
        check_against_topic(entries, topic, topics.partitions(topic), lambda records: None)
    chunks = ((target, [entry.record for entry in chunk])
              for target, group in groupby(entries, key=lambda entry: entry.partition)
              for chunk in iter(lambda group=group: list(islice(group, batch_size)), []))
    for appended in append_chunks(options.bootstrap, topic, chunks, acks=acks, timeout_ms=timeout_ms,
                                  client_config=options.client_config):
        for partition, info in sorted(appended.items()):
            on_appended(partition, info)


def read(options, topic: str, style: RecordStyle, settings: dict[str, str], **how) -> None:
    """``logstore read`` from a broker: each chunk printed as it comes; Ctrl-C ends a ``--follow``
    (the reader is closed here, so that a commit it could not make is reported, not lost).
    ``settings`` (``isolation.level`` from ``--isolation``) override ``--command-config``'s."""
    from logstore.client.tools import read_chunks

    try:
        with contextlib.closing(read_chunks(options.bootstrap, topic,
                                            client_config={**options.client_config, **settings},
                                            **how)) as chunks:
            for partition, records in chunks:
                print_records(topic, partition, records, style)
    except KeyboardInterrupt:
        pass  # the way to end --follow: not an error


def _mirror_group_option() -> list[click.Parameter]:
    from logstore.client.mirror import DEFAULT_GROUP
    return [click.Option(["--group"], default=DEFAULT_GROUP, show_default=True,
                         help="The destination's consumer group that records how far the copy went.")]


@click.command(cls=DeferredCommand, deferred_params=_mirror_group_option)
@click.option("--from", "source", required=True, metavar="DIR|HOST:PORT",
              help="Where to copy from: a data dir, or a broker's HOST:PORT.")
@click.option("--to", "destination", required=True, metavar="DIR|HOST:PORT",
              help="Where to copy to: a data dir (created if missing), or a broker's HOST:PORT.")
@click.option("--exactly-once", is_flag=True,
              help="Into a broker: copy in transactions, each chunk's records and the group's offset committed "
                   "together, so a crash and a restart never duplicate nor lose a record for read_committed "
                   "readers (the broker needs transactions; refused with a data dir as --to).")
@click.argument("topics", nargs=-1)
@format_option('{"topics": [{"topic", "records"}], "records"} (records: copied by this run, per topic and in '
               "all). Progress goes to stderr.", help_text="a summary line per topic")
@click.pass_obj
def mirror(options, source: str, destination: str, group: str, exactly_once: bool, topics: tuple[str, ...],
           output_format: str) -> None:
    """Copy TOPICS (default: all but internal ones) with their partition counts, config overrides,
    keys, values, headers and timestamps. Run it again after an interruption: it resumes where it
    stopped, and copies each record once. Prints a summary line per topic. A broker is reached with
    --command-config's settings (both ends, when both are brokers)."""
    from logstore.client.mirror import check_end, check_exactly_once, open_end
    from logstore.client.mirror import mirror as run_mirror

    for where, hint, writable in ((source, "'--from'", False), (destination, "'--to'", True)):
        try:
            check_end(where, writable=writable)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint=hint) from None
    if exactly_once:
        try:
            check_exactly_once(destination)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
    source_end = open_end(source, writable=False, client_config=options.client_config)
    try:
        destination_end = open_end(destination, writable=True, client_config=options.client_config)
        with contextlib.ExitStack() as progress_bar:
            bar = None

            def progress(done: int, total: int) -> None:
                # Shown on a terminal only, and from the first chunk on: an error before the copy
                # starts is then the one line printed.
                nonlocal bar
                if bar is None and sys.stderr.isatty():
                    bar = progress_bar.enter_context(click.progressbar(length=max(total, 1), label="mirroring",
                                                                       file=sys.stderr, show_pos=True))
                if bar is not None:
                    bar.length = max(total, 1)
                    bar.update(done - bar.pos)

            try:
                copied = run_mirror(source_end, destination_end, list(topics) or None, group=group,
                                    progress=progress, exactly_once=exactly_once)
            except BaseException:
                destination_end.discard()  # a store it created and copied nothing to goes too
                raise
        destination_end.close()
    finally:
        source_end.close()
    if output_format == "json":
        echo_json({"topics": [{"topic": topic, "records": count} for topic, count in copied.items()],
                   "records": sum(copied.values())})
        return
    for topic, count in copied.items():
        click.echo(f"{topic}: copied {count} record{'s' if count != 1 else ''}")
