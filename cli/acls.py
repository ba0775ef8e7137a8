"""``logstore acls``: the ACLs of the store (``logstore.server.security.acl_store``, Kafka's model in
``logstore.server.security.acls``): add, remove, list, in the spirit of ``kafka-acls.sh``. Options become
bindings and filters in ``acls.bindings_for``/``acls.filters_for``; bad input is one line and exit
code 2 with nothing written. The store is opened as a writer, so it takes the store's lock; with
``--bootstrap-server`` the broker's ACLs are changed through Kafka's admin APIs instead (a running
server). No logic lives here."""

from __future__ import annotations

import click

from . import broker
from .options import echo_json, format_option

_ADD_PATTERNS = ("literal", "prefixed")
_FILTER_PATTERNS = ("any", "match", *_ADD_PATTERNS)


def _pattern_type(name: str) -> int:
    """``--resource-pattern-type``'s value as Kafka's pattern type."""
    from logstore.server.security.acls import PATTERN_ANY, PATTERN_LITERAL, PATTERN_MATCH, PATTERN_PREFIXED
    return {"literal": PATTERN_LITERAL, "prefixed": PATTERN_PREFIXED, "any": PATTERN_ANY,
            "match": PATTERN_MATCH}[name.lower()]


def _acl_store(options, read_only: bool = False) -> tuple:
    from logstore.server.security.acl_store import AclStore
    return broker.security_store(options, AclStore, read_only)


def _print(bindings) -> None:
    for binding in bindings:
        click.echo("\t".join(binding.row()))


def _acls_json(**lists) -> None:
    from logstore.client.tools import acl_documents
    echo_json({name: acl_documents(bindings) for name, bindings in lists.items()})


_ACL_JSON = ('{"resource_type", "pattern_type", "resource_name", "principal", "host", "operation", "permission"} '
             "objects, every value a string in Kafka's words (Topic, Literal, Read, Allow...)")


def _options(patterns: tuple[str, ...], default: str, for_filter: bool):
    """The options every subcommand takes (``for_filter``: omitted means any)."""
    omitted = "any" if for_filter else "*"
    decorators = [
        click.option("--allow-principal", "allow_principals", multiple=True, metavar="TYPE:NAME",
                     help="A principal to allow, e.g. User:alice or User:* (repeatable)."),
        click.option("--deny-principal", "deny_principals", multiple=True, metavar="TYPE:NAME",
                     help="A principal to deny (repeatable)."),
        click.option("--allow-host", "allow_hosts", multiple=True, metavar="IP",
                     help=f"A host the allowed principals connect from (repeatable; default {omitted})."),
        click.option("--deny-host", "deny_hosts", multiple=True, metavar="IP",
                     help=f"A host the denied principals connect from (repeatable; default {omitted})."),
        click.option("--operation", "operations", multiple=True, metavar="NAME",
                     help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                          "AlterConfigs, IdempotentWrite or All (repeatable, any case)."),
        click.option("--topic", "topics", multiple=True, help="A topic (repeatable)."),
        click.option("--group", "groups", multiple=True, help="A consumer group (repeatable)."),
        click.option("--cluster", is_flag=True, help="The cluster."),
        click.option("--transactional-id", "transactional_ids", multiple=True, help="A transactional id (repeatable)."),
        click.option("--resource-pattern-type", "pattern", type=click.Choice(list(patterns), case_sensitive=False),
                     default=default, show_default=True, help="How the resource names match."),
        click.option("--producer", is_flag=True, help="A producer's ACLs: Write, Describe, Create on the topics."),
        click.option("--idempotent", is_flag=True, help="With --producer: IdempotentWrite on the cluster too."),
        click.option("--consumer", is_flag=True,
                     help="A consumer's ACLs: Read, Describe on the topics, Read on the groups (needs --group)."),
    ]
    if for_filter:
        decorators.append(click.option("--principal", "principals", multiple=True, metavar="TYPE:NAME",
                                       help="A principal, allowed or denied (repeatable)."))

    def apply(function):
        for decorator in reversed(decorators):
            function = decorator(function)
        return function
    return apply


def _filters(pattern: str, given: dict):
    try:
        from logstore.server.security.acls import filters_for
        return filters_for(pattern_type=_pattern_type(pattern), **given)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


@click.group()
def acls() -> None:
    """Add, remove and list the ACLs the server authorizes requests with (Kafka's model)."""


@acls.command("add")
@_options(_ADD_PATTERNS, "literal", for_filter=False)
@format_option('{"added": [ACL], "present": [ACL]} (present: those there already), each ACL ' + _ACL_JSON + ".",
               help_text="a tab-separated line per ACL added, then a count")
@click.pass_obj
def acls_add(options, pattern: str, output_format: str, **given) -> None:
    """Allow or deny principals operations on topics, groups, the cluster or transactional ids."""
    try:
        from logstore.server.security.acls import bindings_for
        bindings = bindings_for(pattern_type=_pattern_type(pattern), **given)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    store, acl_store = _acl_store(options)
    with store:
        added = acl_store.add(bindings)
    if output_format == "json":
        _acls_json(added=added, present=[binding for binding in bindings if binding not in added])
        return
    _print(added)
    present = len(bindings) - len(added)
    click.echo(f"Added {len(added)} ACL{'s' if len(added) != 1 else ''}"
               + (f" ({present} already present)." if present else "."))


@acls.command("remove")
@_options(_FILTER_PATTERNS, "any", for_filter=True)
@click.option("--force", is_flag=True, help="Remove every ACL when no option narrows the filter.")
@format_option('{"removed": [ACL]}, each ACL ' + _ACL_JSON + ".",
               help_text="a tab-separated line per ACL removed, then a count")
@click.pass_obj
def acls_remove(options, pattern: str, force: bool, output_format: str, **given) -> None:
    """Remove the ACLs that the options match (an omitted option matches anything)."""
    if not force and not any(given.values()) and pattern == "any":
        raise click.UsageError("this removes every ACL: narrow it with options, or give --force")
    filters = _filters(pattern, given)
    store, acl_store = _acl_store(options)
    with store:
        removed = acl_store.remove(filters)
    if output_format == "json":
        _acls_json(removed=removed)
        return
    _print(removed)
    click.echo(f"Removed {len(removed)} ACL{'s' if len(removed) != 1 else ''}.")


@acls.command("list")
@_options(_FILTER_PATTERNS, "any", for_filter=True)
@format_option('{"acls": [ACL]}, each ACL ' + _ACL_JSON + ".",
               help_text="a tab-separated line per ACL: resource type, pattern, name, principal, host, operation, "
                         "permission")
@click.pass_obj
def acls_list(options, pattern: str, output_format: str, **given) -> None:
    """List the ACLs the options match (all by default): resource type, pattern, name, principal,
    host, operation, permission."""
    filters = _filters(pattern, given)
    store, acl_store = _acl_store(options, read_only=True)
    with store:
        found = [binding for binding in acl_store.bindings() if any(f.matches(binding) for f in filters)]
    if output_format == "json":
        _acls_json(acls=found)
        return
    if not found:
        click.echo("No ACLs.")
    _print(found)
