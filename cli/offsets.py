"""``logstore offsets``, ``logstore delete-records`` and ``logstore api-versions``: Kafka's
``kafka-get-offsets``, ``kafka-delete-records`` and ``kafka-broker-api-versions`` (with their
option names), over a store (``logstore.tools.offsets``) or a broker (``logstore.client.tools``).
No logic lives here: parsing options, calling those, printing what they return."""

from __future__ import annotations

import json

import click

from .options import StoreOptions, one_topic

OUTPUT_FORMATS = ("text", "json", "jsonl")


def _partition_list(text: str | None) -> list[int] | None:
    """Kafka's ``--partitions 0,2,5-7``."""
    from logstore.manager.log_manager import MAX_PARTITIONS
    if text is None:
        return None
    numbers: list[int] = []
    bad = click.BadParameter(f"{text!r}: expected partitions like 0,2,5-7", param_hint="'--partitions'")
    for part in text.split(","):
        low, sep, high = part.strip().partition("-")
        try:
            first = int(low)
            last = int(high) if sep else first
        except ValueError:
            raise bad from None
        if first < 0 or last < first or last >= MAX_PARTITIONS:  # a topic has fewer: no list of billions
            raise bad
        numbers.extend(range(first, last + 1))
    return sorted(set(numbers))


@click.command("offsets")
@click.argument("topic", required=False)
@click.option("--topic", "topic_option", metavar="TOPIC",
              help="The same as TOPIC (kafka-get-offsets' option). Either is a topic name or, as in kafka-get-offsets, "
                   "a regular expression matching whole names ('orders-.*'); a topic of exactly that name wins.")
@click.option("--time", "time_text", default="latest", show_default=True,
              metavar="earliest|latest|max-timestamp|MS|ISO",
              help="Which offset: the log start (earliest, -2), the log end (latest, -1), the first record with the "
                   "largest timestamp (max-timestamp, -3: KIP-734), or the first record whose timestamp is at or "
                   "after a time, in ms since the epoch or ISO 8601 (2026-11-29, 2026-11-29T13:05:01.123Z, "
                   "...+01:00; without an offset: this machine's local time, as read --from-datetime).")
@click.option("--partitions", "partitions_text", metavar="0,2,5-7", help="Only these partitions (default: all).")
@click.option("--partition", "-p", "partition", type=click.IntRange(min=0), help="Only this partition.")
@click.option("--exclude-internal-topics", is_flag=True,
              help="Leave out internal topics (of every topic, or of those a regular expression matches).")
@click.option("--format", "output_format", type=click.Choice(OUTPUT_FORMATS), default="text", show_default=True,
              help="text: topic:partition:offset per line (kafka-get-offsets' layout; a partition with no record "
                   "at or after --time is left out, as Kafka leaves it out); json: a list of "
                   '{"topic", "partition", "offset"} objects, one per partition, offset null for those; jsonl: '
                   "the same objects, one per line.")
@click.pass_obj
def offsets(options: StoreOptions, topic: str | None, topic_option: str | None, time_text: str,
            partitions_text: str | None, partition: int | None, exclude_internal_topics: bool,
            output_format: str) -> None:
    """Print the offset --time names in each partition of TOPIC (a name or a regular expression;
    default: every topic), like Kafka's kafka-get-offsets (kcat -Q): the log end offset by
    default, the log start with --time earliest, the first record with the largest timestamp with
    --time max-timestamp, or the first offset whose record's timestamp is >= --time."""
    from logstore.tools.offsets import parse_time, partition_offsets

    name = one_topic(topic, topic_option, required=False)
    try:
        timestamp = parse_time(time_text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--time'") from None
    if partition is not None and partitions_text is not None:
        raise click.UsageError("give --partition or --partitions, not both")
    chosen = [partition] if partition is not None else _partition_list(partitions_text)
    if options.bootstrap:
        from logstore.client.tools import partition_offsets as broker_partition_offsets

        from . import broker
        with broker.admin(options) as admin:
            rows = broker_partition_offsets(admin, name, timestamp, chosen, exclude_internal_topics)
    else:
        with options.open(read_only=True) as store:
            rows = partition_offsets(store, name, timestamp, chosen, exclude_internal_topics)
    if output_format != "text":
        _echo_json([{"topic": row.topic, "partition": row.partition, "offset": row.offset} for row in rows],
                   output_format)
        return
    for row in rows:
        if row.offset is not None:
            click.echo(f"{row.topic}:{row.partition}:{row.offset}")


@click.command("delete-records")
@click.argument("topic", required=False)
@click.option("--topic", "topic_option", metavar="TOPIC", help="The same as TOPIC.")
@click.option("--partition", "-p", "partitions", multiple=True, type=click.IntRange(min=0),
              help="A partition to delete from (repeatable).")
@click.option("--before", type=click.IntRange(min=-1), metavar="OFFSET",
              help="Delete the records below this offset (-1: all of them, up to the log end).")
@click.option("--offset-json-file", type=click.File("rb"), metavar="FILE",
              help='kafka-delete-records\' file instead: {"partitions": [{"topic": T, "partition": P, '
                   '"offset": O}], "version": 1}.')
@click.option("--format", "output_format", type=click.Choice(OUTPUT_FORMATS), default="text", show_default=True,
              help="text: kafka-delete-records' layout, a line per partition; json: a list of "
                   '{"topic", "partition", "low_watermark"} objects, one per partition; jsonl: the same objects, '
                   "one per line.")
@click.pass_obj
def delete_records_command(options: StoreOptions, topic: str | None, topic_option: str | None,
                           partitions: tuple[int, ...], before: int | None, offset_json_file, output_format: str) -> None:
    """Delete the records of TOPIC's --partition below --before, like Kafka's kafka-delete-records:
    the log start offset moves up to it (readers can no longer read below it) and segments wholly
    below it are deleted. Prints each partition's new log start offset (low watermark). On a
    store it takes the store's lock: stop the writer first, or delete through the broker."""
    from logstore.tools.offsets import MAX_OFFSET_JSON_BYTES, delete_records, parse_offset_json

    name = one_topic(topic, topic_option, required=False)
    if offset_json_file is not None:
        if name is not None or partitions or before is not None:
            raise click.UsageError("--offset-json-file names the partitions and offsets: give no TOPIC, "
                                   "--partition or --before with it")
        wanted = parse_offset_json(offset_json_file.read(MAX_OFFSET_JSON_BYTES + 1))
    else:
        if name is None or not partitions or before is None:
            raise click.UsageError("give TOPIC, --partition P and --before OFFSET (or --offset-json-file FILE)")
        wanted = {(name, p): before for p in partitions}
    if options.bootstrap:
        from logstore.client.tools import delete_records as broker_delete_records

        from . import broker
        with broker.admin(options) as admin:
            low_watermarks = broker_delete_records(admin, wanted)
    else:
        with options.open(read_only=False) as store:
            low_watermarks = delete_records(store, wanted)
    if output_format != "text":
        _echo_json([{"topic": name, "partition": p, "low_watermark": low}
                    for (name, p), low in sorted(low_watermarks.items())], output_format)
        return
    for (name, p), low in sorted(low_watermarks.items()):
        click.echo(f"partition: {name}-{p}\tlow_watermark: {low}")


@click.command("api-versions")
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="text: kafka-broker-api-versions' layout; json: one object per broker.")
@click.pass_obj
def api_versions(options: StoreOptions, output_format: str) -> None:
    """Print each broker's API versions, like Kafka's kafka-broker-api-versions: per API its
    version range on the broker, and the version this client speaks with it ("usable"), or why
    none ("unusable"), or UNSUPPORTED when the broker does not offer it. Needs --bootstrap-server."""
    if not options.bootstrap:
        raise click.UsageError("api-versions asks a broker: give --bootstrap-server HOST:PORT "
                               "(before or after the subcommand)")
    from logstore.client.tools import api_versions as broker_api_versions

    from . import broker
    with broker.admin(options) as admin:
        brokers = broker_api_versions(admin)
    if output_format == "json":
        click.echo(json.dumps([{"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack, "apis": [
            {"api_key": row.api_key, "name": row.name, "broker": list(row.broker) if row.broker else None,
             "client": list(row.client) if row.client else None, "usable": row.usable} for row in b.apis]}
            for b in brokers], indent=2))
        return
    for b in brokers:
        click.echo(f"{b.host}:{b.port} (id: {b.node_id} rack: {b.rack if b.rack is not None else 'null'}) -> (")
        for row in b.apis:
            click.echo(f"\t{row.name}({row.api_key}): {_describe_row(row)},")
        click.echo(")")


def _echo_json(rows: list[dict], output_format: str) -> None:
    """``json``: one list; ``jsonl``: one object per line."""
    if output_format == "json":
        click.echo(json.dumps(rows))
    else:
        for row in rows:
            click.echo(json.dumps(row))


def _describe_row(row) -> str:
    if row.broker is None:
        return "UNSUPPORTED"
    low, high = row.broker
    if row.usable is not None:
        return f"{low} to {high} [usable: {row.usable}]"
    if row.client is None:
        return f"{low} to {high} [unusable: unknown to this client]"
    return f"{low} to {high} [unusable: node too {'old' if high < row.client[0] else 'new'}]"
