"""``logstore groups``: Kafka's ``kafka-consumer-groups`` tool, one subcommand per line of it.

Parses the options, calls ``logstore.group.admin.GroupAdmin`` and prints tables (or JSON). No logic
lives here. ``list``, ``describe`` and a dry-run ``reset-offsets`` open the store read-only, so they
work beside a process that holds it; ``reset-offsets --execute`` and ``delete`` write to
``__consumer_offsets`` and need the store to themselves. Group settings (``--set
offsets.topic.num.partitions=...`` and the other keys of ``logstore.group.config``) go to the
coordinator, the rest to the store.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Iterable, Sequence

import click

from .options import JSON_ALIAS, chosen_format, echo_json, format_option

if TYPE_CHECKING:
    from logstore.group.admin import GroupAdmin

SNAPSHOT_NOTE = ("Members are those of the group's last record in __consumer_offsets: a consumer that stopped "
                 "without leaving (killed, or a static member) stays listed until its session times out under a "
                 "running coordinator, or `logstore groups remove-members` removes it from a stopped store.")


def open_admin(options, read_only: bool) -> GroupAdmin:
    """The store of the global options, with its group settings split out for the coordinator; or
    with ``--bootstrap-server``, the broker's groups (the same answers, from its coordinator)."""
    if options.bootstrap:
        from logstore.client.admin import BrokerGroupAdmin
        from logstore.client.security import ClientSecurity
        return BrokerGroupAdmin.connect(options.bootstrap, client_id="logstore-cli",
                                        security=ClientSecurity.from_config(options.client_config))
    from logstore.group.admin import GroupAdmin
    return GroupAdmin.open(options.dirs, options.settings, read_only=read_only)


@click.group()
def groups() -> None:
    """List, describe, reset and delete consumer groups (Kafka's kafka-consumer-groups)."""


@groups.command("list")
@format_option('a list of {"group_id", "protocol_type", "state"} (protocol_type "" when the group has none).',
               help_text="a table")
@JSON_ALIAS
@click.pass_obj
def groups_list(options, output_format: str, as_json: bool) -> None:
    """List the groups: group id, protocol type and state (read-only)."""
    with open_admin(options, read_only=True) as admin:
        found = admin.list_groups()
    if chosen_format(output_format, as_json) == "json":
        echo_json([dataclasses.asdict(group) for group in found])
    elif found:
        _echo_table(("GROUP", "PROTOCOL-TYPE", "STATE"),
                    [(group.group_id, group.protocol_type or "-", group.state) for group in found])
    else:
        click.echo("No groups.")


@groups.command("describe")
@click.argument("group")
@format_option('{"group_id", "state", "protocol_type", "protocol_name", "generation_id", "leader_id", "members": '
               '[{"member_id", "group_instance_id", "client_id", "client_host", "partitions" ([topic, partition] '
               'pairs), "assignment_bytes"}], "partitions": '
               '[{"topic", "partition", "committed_offset", "log_end_offset", "lag", "member_id"}]} (null where '
               "unknown; partitions of a member null when its assignment is not the consumer protocol's).",
               help_text="tables")
@JSON_ALIAS
@click.pass_obj
def groups_describe(options, group: str, output_format: str, as_json: bool) -> None:
    """Describe GROUP (read-only): state, generation and protocol; its members with their client
    id, host and partitions; and per partition it has committed or is assigned, the committed
    offset, the log end offset and the lag."""
    with open_admin(options, read_only=True) as admin:
        described = admin.describe_group(group)
    if chosen_format(output_format, as_json) == "json":
        echo_json(dataclasses.asdict(described))
        return
    protocol = "/".join(part for part in (described.protocol_type, described.protocol_name) if part) or "-"
    count = len(described.members)
    click.echo(f"Group {described.group_id}: state {described.state}, generation {described.generation_id}, "
               f"protocol {protocol}, {count} member{'s' if count != 1 else ''}")
    if described.members:
        click.echo()
        _echo_table(("MEMBER-ID", "INSTANCE-ID", "CLIENT-ID", "HOST", "PARTITIONS"),
                    [(member.member_id, member.group_instance_id or "-", member.client_id, member.client_host,
                      _partitions_text(member.partitions, member.assignment_bytes))
                     for member in described.members])
    if described.partitions:
        click.echo()
        _echo_table(("TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "MEMBER-ID"),
                    [(entry.topic, entry.partition, _or_dash(entry.committed_offset), _or_dash(entry.log_end_offset),
                      _or_dash(entry.lag), entry.member_id or "-") for entry in described.partitions])
    if described.members and not options.bootstrap:  # a broker's coordinator answers live, not from a snapshot
        click.echo()
        click.echo(SNAPSHOT_NOTE)


@groups.command("reset-offsets")
@click.argument("group")
@click.option("--topic", "topics", multiple=True, required=True, metavar="TOPIC[:P,P...]",
              help="A topic to reset, all its partitions or those listed (repeatable).")
@click.option("--to-earliest", is_flag=True, help="To the log start offset.")
@click.option("--to-latest", is_flag=True, help="To the log end offset.")
@click.option("--to-offset", type=click.IntRange(min=0), metavar="N",
              help="To offset N (moved into [log start, log end]).")
@click.option("--to-datetime", metavar="ISO",
              help="To the first record at or after this time (ISO 8601, as read --from-datetime takes it: "
                   "2024-05-01, 2024-05-01T12:00:00.000Z, ...+02:00; no offset: this machine's local time, as "
                   "kafka-consumer-groups reads it); the log end if there is none.")
@click.option("--shift-by", type=int, metavar="N",
              help="By N from the committed offset (negative: back), moved into [log start, log end].")
@click.option("--execute", is_flag=True, help="Commit the new offsets (without it: only print the plan).")
@format_option('{"group", "executed", "offsets": [{"topic", "partition", "current_offset", "new_offset"}]} '
               "(current_offset null where the group has committed none; executed false for a dry run).",
               help_text="the plan as a table, then what was done")
@click.pass_obj
def groups_reset_offsets(options, group: str, topics: tuple[str, ...], to_earliest: bool, to_latest: bool,
                         to_offset: int | None, to_datetime: str | None, shift_by: int | None, execute: bool,
                         output_format: str) -> None:
    """Reset the committed offsets of GROUP: print the plan (topic, partition, current committed,
    new), and with --execute commit it. Refused while the group has members. Without --execute the
    store is opened read-only (works beside a process that holds it)."""
    from logstore.group.admin import parse_datetime_ms, parse_topic_partitions

    chosen = [(mode, value) for mode, value, given in (
        ("to-earliest", None, to_earliest), ("to-latest", None, to_latest),
        ("to-offset", to_offset, to_offset is not None), ("to-datetime", to_datetime, to_datetime is not None),
        ("shift-by", shift_by, shift_by is not None)) if given]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime, "
                               "--shift-by")
    (mode, value), = chosen
    if mode == "to-datetime":
        try:
            value = parse_datetime_ms(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="'--to-datetime'") from None
    wanted: dict[str, list[int] | None] = {}
    for spec in topics:
        topic, partitions = parse_topic_partitions(spec)
        if partitions is None or (topic in wanted and wanted[topic] is None):
            wanted[topic] = None  # the whole topic covers any list
        else:
            wanted[topic] = sorted(set(wanted.get(topic) or ()) | set(partitions))
    with open_admin(options, read_only=not execute) as admin:
        plan = admin.plan_reset(group, wanted, mode, value)
        if output_format == "text":
            _echo_table(("TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"),
                        [(entry.topic, entry.partition, _or_dash(entry.current_offset), entry.new_offset)
                         for entry in plan])
        if execute:
            admin.execute_reset(group, plan)
    if output_format == "json":
        echo_json({"group": group, "executed": execute, "offsets": [
            {"topic": entry.topic, "partition": entry.partition, "current_offset": entry.current_offset,
             "new_offset": entry.new_offset} for entry in plan]})
    elif execute:
        click.echo(f"Committed {len(plan)} offset{'s' if len(plan) != 1 else ''} for group {group}.")
    else:
        click.echo("Dry run: nothing committed (add --execute to commit these offsets).")


@groups.command("delete")
@click.argument("group")
@format_option('{"group", "deleted"} (deleted: true).', help_text="one line")
@click.pass_obj
def groups_delete(options, group: str, output_format: str) -> None:
    """Delete GROUP and its committed offsets (refused while it has members)."""
    with open_admin(options, read_only=False) as admin:
        admin.delete_group(group)
    if output_format == "json":
        echo_json({"group": group, "deleted": True})
    else:
        click.echo(f"Deleted group {group}.")


@groups.command("remove-members")
@click.argument("group")
@click.option("--member", "members", multiple=True, metavar="MEMBER-ID",
              help="A member to remove (repeatable; default: every member).")
@format_option('{"group", "removed": [member ids]}.', help_text="one line")
@click.pass_obj
def groups_remove_members(options, group: str, members: tuple[str, ...], output_format: str) -> None:
    """Remove members of GROUP from a stopped store: consumers that stopped without leaving (killed,
    or static ones) stay members until a running coordinator times their sessions out."""
    with open_admin(options, read_only=False) as admin:
        removed = admin.remove_members(group, members)
    if output_format == "json":
        echo_json({"group": group, "removed": [str(member) for member in removed]})
        return
    click.echo(f"Removed {len(removed)} member{'s' if len(removed) != 1 else ''} from group {group}.")


def _partitions_text(partitions: list[tuple[str, int]] | None, size: int) -> str:
    if partitions is None:
        return f"({size} bytes, not consumer protocol)"
    return ",".join(f"{topic}-{partition}" for topic, partition in partitions) or "-"


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)


def _echo_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    lines = [tuple(headers)] + [tuple(str(cell) for cell in row) for row in rows]
    widths = [max(len(line[column]) for line in lines) for column in range(len(headers))]
    click.echo("\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip()
                         for line in lines))
