"""The ``logstore`` command (click): parses arguments, calls the public API and the library modules
``logstore.tools`` (``check``, ``dump``, ``demo``), and formats output. No logic lives here.

Data dirs come from ``--dir`` (repeatable), else ``$LOGSTORE_DIRS`` (colon-separated), else
``./logstore-data``; store-wide settings from ``--set KEY=VALUE`` with Kafka's broker names. Commands
that only read open the store read-only, so they work while another process writes to it.

Errors: every expected failure (``LogStoreError``, and ``ValueError``/``TypeError``/``OSError`` from
bad arguments, input or files) becomes one line on stderr (``Error: ...``) and exit code 1, in one
place: ``LogstoreGroup.invoke``. Usage errors (bad or missing options and arguments, unknown
commands) are one line too, with exit code 2, there and in ``LogstoreGroup.make_context``.

The global options (``--dir``, ``--set``, ``--bootstrap-server``, ``--command-config``, ``-v``) may
also come after the subcommand, as Kafka's tools take ``--bootstrap-server``: ``LogstoreGroup``
moves them before it unless that subcommand has an option of the same name (``perf``'s ``--dir``).
``logstore check`` exits 1 when it finds damage.

Logging (``configure_logging``, at the start of every command but ``serve``, which logs as a server
with timestamps): without ``-v`` what the libraries log at WARNING and above is one line each on
stderr, ``logstore: warning: MESSAGE`` (``OneLineWarnings``: no traceback, a repeat once), and Python
warnings are not shown; with ``-v``, INFO and above with logger names, tracebacks and warnings.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import json
import logging
import os
import shlex
import signal
import sys
from itertools import groupby, islice
from typing import Iterable, Iterator

import click

# What every command needs, and nothing more: each command imports what it uses (the engine, the
# client, the server, a benchmark) inside its function, and the subcommands of other modules load
# when asked for (cli/lazy.py), so `logstore --version` and `logstore --help` load none of them.
from logstore import __version__
from logstore.errors import LogStoreError

from .lazy import DeferredCommand
from .options import (COMMAND_CONFIG_ENV, JSON_ALIAS, StoreOptions, chosen_format, echo_json, format_option,
                      one_topic)
from .records_io import (ENCODINGS, INPUT_FORMATS, OUTPUT_FORMATS, InputRecord, RecordDefaults, RecordStyle,
                         argument_bytes, check_against_topic, key_separator_of, parse_header_options, parse_input,
                         print_records)

logger = logging.getLogger(__name__)

DEFAULT_DIR = "logstore-data"
DIRS_ENV = "LOGSTORE_DIRS"
BOOTSTRAP_ENV = "LOGSTORE_BOOTSTRAP_SERVER"
READ_CHUNK_BYTES = 1 << 20
READ_CHUNK_RECORDS = 1000
OUTPUT_CHUNK_LINES = 1000
FOLLOW_WAIT_MS = 1000
THROUGH_HOST = {"append", "topics", "groups", "offsets", "delete-records", "api-versions"}
"""The commands that go through the process hosting a store (``read --group`` readers share it so)
while there is one: they all speak to a broker too, and the store's lock is the host's."""


# click 8.2+ shows a group's help for a missing subcommand by raising this UsageError: keep it as is.
_HELP_ERRORS = getattr(click.exceptions, "NoArgsIsHelpError", ())


LAZY_COMMANDS = {"groups": ".groups:groups", "mirror": ".broker:mirror", "perf": ".perf:perf", "serve": ".serve:serve",
                 "users": ".users:users", "acls": ".acls:acls", "offsets": ".offsets:offsets",
                 "delete-records": ".offsets:delete_records_command", "api-versions": ".offsets:api_versions"}
"""The subcommands defined in other modules of the command line, each imported when first asked for."""


class LogstoreGroup(click.Group):
    """The root group. Its ``invoke`` runs every subcommand, so it is the one place where expected
    errors become a one-line ``click.ClickException`` (no traceback), and where click's usage errors
    (usage line, hint, then the error) become one line; ``make_context`` parses the root's own
    options outside ``invoke``, so it does the same. ``parse_args`` first moves the root's options
    found after the subcommand in front of it. The subcommands of ``LAZY_COMMANDS`` are imported on
    their first ``get_command``; ``list_commands`` names them without importing them (the completion
    of a subcommand's name loads none)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(LAZY_COMMANDS))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in LAZY_COMMANDS:
            module, attribute = LAZY_COMMANDS[cmd_name].split(":")
            command = getattr(importlib.import_module(module, __package__), attribute)
            self.add_command(command, cmd_name)
        return command

    def make_context(self, info_name, args, parent=None, **extra) -> click.Context:
        with _one_line_usage_errors():
            return super().make_context(info_name, args, parent=parent, **extra)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, _hoist_global_options(self, ctx, list(args)))

    def invoke(self, ctx: click.Context):
        try:
            with _one_line_usage_errors():
                return super().invoke(ctx)
        except OSError as exc:
            if exc.errno == errno.EPIPE:  # click quiets a closed pipe (``logstore read | head``)
                raise
            raise click.ClickException(_one_line(exc)) from exc
        except (LogStoreError, ValueError, TypeError, ImportError) as exc:  # ImportError: a missing extra
            raise click.ClickException(_one_line(exc)) from exc


@contextlib.contextmanager
def _one_line_usage_errors() -> Iterator[None]:
    """Re-raise a click usage error as one that click shows as one line, ``Error: ...`` (still exit
    code 2), pointing to the help of the command it came from. A help page click raises as an error
    (a group without its subcommand) passes unchanged."""
    try:
        yield
    except _HELP_ERRORS:
        raise
    except click.UsageError as exc:
        text = " ".join(exc.format_message().split())
        ctx = exc.ctx
        if ctx is not None and ctx.command.get_help_option(ctx) is not None:
            text += f" (see '{ctx.command_path} {min(ctx.command.get_help_option_names(ctx), key=len)}')"
        raise click.UsageError(text) from exc  # no ctx: click prints neither the usage line nor the hint


def _options_by_name(command: click.Command, ctx: click.Context) -> dict[str, click.Option]:
    return {name: param for param in command.get_params(ctx) if isinstance(param, click.Option)
            for name in (*param.opts, *param.secondary_opts)}


def _takes_value(option: click.Option) -> bool:
    return not (option.is_flag or option.count)


def _hoist_global_options(root: click.Group, ctx: click.Context, args: list[str]) -> list[str]:
    """``args`` with the root's options given after the subcommand moved in front of it (Kafka's
    tools take ``--bootstrap-server`` after the command). The subcommand path is walked as click
    will parse it, so an option's value is never taken for an option, and an option the command
    itself has (``perf --dir``) stays where it is. Anything click would refuse is left as it is,
    for click to refuse."""
    root_options = _options_by_name(root, ctx)
    index = 0
    while index < len(args) and args[index].startswith("-") and args[index] != "--":
        option = root_options.get(args[index].split("=", 1)[0])
        if option is None:
            return args  # --help, --version, an unknown option: click answers
        index += 2 if _takes_value(option) and "=" not in args[index] else 1
    start = index
    if start >= len(args) or args[start] == "--":
        return args
    moved: list[str] = []
    rest: list[str] = []
    command: click.Command = root
    while index < len(args):
        token = args[index]
        if token == "--":
            rest.extend(args[index:])
            break
        if not token.startswith("-") or token == "-":
            if isinstance(command, click.Group):
                sub = command.get_command(ctx, token)
                if sub is None:
                    return args
                command = sub
            rest.append(token)
            index += 1
            continue
        name, has_value = token.split("=", 1)[0], "=" in token
        own = _options_by_name(command, ctx).get(name)
        option = own or root_options.get(name)
        width = 1 + (option.nargs if option is not None and _takes_value(option) and not has_value else 0)
        (rest if own is not None or option is None else moved).extend(args[index:index + width])
        index += width
    return args[:start] + moved + rest


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        text = f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    else:
        text = str(exc) or type(exc).__name__
    return " ".join(text.split())


@click.group(cls=LogstoreGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--dir", "dirs", multiple=True, metavar="PATH",
              help=f"A data dir of the store (repeatable). Default: ${DIRS_ENV} (colon-separated), "
                   f"else ./{DEFAULT_DIR}.")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE",
              help="A store-wide setting with Kafka's broker name, e.g. log.segment.bytes=1048576 (repeatable).")
@click.option("--bootstrap-server", "bootstrap", metavar="HOST:PORT[,HOST:PORT...]", envvar=BOOTSTRAP_ENV,
              help=f"Talk to this Kafka-compatible broker (logstore serve, Kafka, Tansu...) instead of opening "
                   f"data dirs: for topics, append, read and groups. Default: ${BOOTSTRAP_ENV}.")
@click.option("--command-config", metavar="FILE", envvar=COMMAND_CONFIG_ENV,
              help="A properties file of client settings for --bootstrap-server (Kafka tools' option): "
                   "security.protocol, sasl.mechanism, sasl.jaas.config (Kafka's Plain or Scram login module) or "
                   "sasl.username and sasl.password, ssl.truststore.location (PEM) or ssl.ca.location... Java "
                   f"properties syntax, a regular file of at most 1 MiB. Default: ${COMMAND_CONFIG_ENV}.")
@click.option("-v", "--verbose", is_flag=True,
              help="Log what the engine and the client do (recovery, repairs, reconnects) to stderr, with tracebacks "
                   "and Python warnings. Without it only warnings and errors are logged, one line each (logstore: "
                   "warning: MESSAGE; a repeat once).")
@click.version_option(__version__, prog_name="kafka-logstore")
@click.pass_context
def main(ctx: click.Context, dirs: tuple[str, ...], settings: tuple[str, ...], bootstrap: str | None,
         command_config: str | None, verbose: bool) -> None:
    """logstore: a Kafka-style log storage engine. Topics of partitioned, segmented, append-only
    logs on local disk.

    Start with `logstore demo`, or: topics create NAME; append TOPIC VALUE; read TOPIC."""
    if ctx.invoked_subcommand != "serve":  # a server logs as servers do: its own setup, with timestamps
        configure_logging(verbose)
    from logstore.config import parse_assignments

    given = bool(dirs)
    if not dirs:
        dirs = tuple(path for path in os.environ.get(DIRS_ENV, "").split(":") if path) or (DEFAULT_DIR,)
    if bootstrap and given:
        raise click.UsageError("give --dir or --bootstrap-server, not both")
    if bootstrap:
        from logstore.client.cluster import parse_bootstrap_servers  # the client is what it is for
        try:
            parse_bootstrap_servers(bootstrap)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="'--bootstrap-server'") from None
    client_config = {}
    if command_config:
        from logstore.client.security import read_client_properties
        try:
            client_config = read_client_properties(command_config)
        except (ValueError, OSError) as exc:  # not a small regular file, or a bad key or value in it
            raise click.BadParameter(_one_line(exc), param_hint="'--command-config'") from exc
    if not bootstrap and ctx.invoked_subcommand in THROUGH_HOST:
        from logstore.client.store_host import hosted_address  # no server or client loaded for this
        bootstrap = hosted_address(list(dirs))  # the store's lock is held by its host: go through it
    ctx.obj = StoreOptions(list(dirs), parse_assignments(list(settings)), given, bootstrap or None, client_config)


# --- logging -------------------------------------------------------------------------------------


LOG_PREFIX = "logstore"
MAX_REMEMBERED_WARNINGS = 1000
"""How many distinct warning lines ``OneLineWarnings`` remembers to say each once (then it starts over)."""


class OneLineWarnings(logging.Handler):
    """What a library module logs at WARNING and above, as a user of the command line sees it:
    ``logstore: warning: <message>`` on one line of stderr (the current ``sys.stderr``), never a
    traceback (the exception's own text is added to the line when the message does not carry it),
    and each distinct line once per run (a client retrying against a broker that went away repeats
    the same warning at every heartbeat or poll: the first says it)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self._said: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
            if record.exc_info and record.exc_info[1] is not None:
                cause = _one_line(record.exc_info[1])
                if cause not in text:
                    text = f"{text}: {cause}"
            line = f"{LOG_PREFIX}: {record.levelname.lower()}: {' '.join(text.split())}"
            if line in self._said:
                return
            if len(self._said) >= MAX_REMEMBERED_WARNINGS:
                self._said.clear()
            self._said.add(line)
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - stderr closed or broken: nowhere left to say anything
            pass


def configure_logging(verbose: bool) -> None:
    """Where log records and Python warnings go for one command. With ``-v``: every record at INFO
    and above, with its logger's name and any traceback, and Python warnings through logging too.
    Without: records at WARNING and above through ``OneLineWarnings`` (one line each, no traceback,
    instead of Python's last-resort handler, which prints the bare message and a traceback), and
    Python warnings (``warnings.warn``) not shown at all."""
    import warnings

    root = logging.getLogger()
    for handler in [handler for handler in root.handlers if isinstance(handler, OneLineWarnings)]:
        root.removeHandler(handler)  # a command run before in this process (tests, CliRunner)
    if verbose:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        logging.captureWarnings(True)
        return
    if not root.handlers:  # else the embedding program (a test's capture) has chosen already
        root.addHandler(OneLineWarnings())
    warnings.simplefilter("ignore")


# --- topics --------------------------------------------------------------------------------------


@main.group()
def topics() -> None:
    """Create, list, describe, alter and delete topics."""


def _config_help() -> str:
    """The epilog of topics create and alter (built only to show their help)."""
    from logstore.config import describe_keys
    return "Topic configs (Kafka's names), for --config KEY=VALUE:\n\n" + "\n\n".join(
        f"  {key} (default {default}): {doc}" for key, default, doc in describe_keys())


_TOPIC_OPTION = click.option("--topic", "topic_option", metavar="NAME",
                             help="The same as NAME (kafka-topics' option).")
_IF_EXISTS = click.option("--if-exists", is_flag=True,
                          help="Do nothing (exit 0) when the topic does not exist (kafka-topics' option).")


@contextlib.contextmanager
def _usage_errors_of_arguments() -> Iterator[None]:
    """A topic name or a ``--config`` the store refuses as malformed is a usage error (exit code 2)."""
    from logstore.errors import InvalidConfigError, InvalidTopicError
    try:
        yield
    except InvalidTopicError as exc:
        raise click.BadParameter(str(exc), param_hint="'NAME'") from None
    except InvalidConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="'--config'") from None


def _topic_exists(options: StoreOptions, name: str) -> bool:
    if options.bootstrap:
        from . import broker
        with broker.admin(options) as admin:
            return name in admin.topics()
    with options.open(read_only=True) as store:
        return name in store.topics()


@topics.command("create", cls=DeferredCommand, epilog=_config_help)
@click.argument("name", required=False)
@_TOPIC_OPTION
@click.option("--partitions", default=1, show_default=True, type=click.IntRange(min=1), help="Number of partitions.")
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE", help="A topic config override (repeatable).")
@click.option("--if-not-exists", is_flag=True, help="Do nothing (exit 0) when the topic exists already.")
@click.option("--replication-factor", type=int, metavar="1",
              help="Accepted as 1 only (kafka-topics' option): logstore keeps one copy of each partition.")
@format_option('{"topic", "partitions", "created"}: created false (partitions null) when it existed '
               "already and --if-not-exists was given.", help_text="one line saying what was done")
@click.pass_obj
def topics_create(options: StoreOptions, name: str | None, topic_option: str | None, partitions: int,
                  configs: tuple[str, ...], if_not_exists: bool, replication_factor: int | None,
                  output_format: str) -> None:
    """Create topic NAME (or --topic NAME)."""
    from logstore.client.errors import BrokerResponseError
    from logstore.config import parse_assignments
    from logstore.errors import TopicExistsError

    from . import broker
    name = one_topic(name, topic_option)
    if replication_factor is not None and replication_factor != 1:
        raise click.BadParameter(f"{replication_factor}: logstore keeps one copy of each partition (it does not "
                                 "replicate), so only 1 can be honoured: give 1 or leave it out",
                                 param_hint="'--replication-factor'")
    overrides = parse_assignments(list(configs))
    try:
        if options.bootstrap:
            with broker.admin(options) as admin:
                admin.create_topic(name, partitions, overrides)
        else:
            with options.open(read_only=False) as store, _usage_errors_of_arguments():
                store.create_topic(name, partitions=partitions, config=overrides)
    except (TopicExistsError, BrokerResponseError) as exc:
        if not if_not_exists or getattr(exc, "error_name", "TOPIC_ALREADY_EXISTS") != "TOPIC_ALREADY_EXISTS":
            raise
        if output_format == "json":
            echo_json({"topic": name, "partitions": None, "created": False})
        else:
            click.echo(f"Topic {name} exists already: nothing created.")
        return
    if output_format == "json":
        echo_json({"topic": name, "partitions": partitions, "created": True})
    else:
        click.echo(f"Created topic {name} with {partitions} partition{'s' if partitions != 1 else ''}.")


_EXCLUDE_INTERNAL = click.option("--exclude-internal", is_flag=True,
                                 help="Leave out internal topics (__consumer_offsets, __transaction_state), "
                                      "which are included by default (kafka-topics' option).")


@topics.command("list")
@_EXCLUDE_INTERNAL
@format_option("a list of topic names (strings), sorted.", help_text="one name per line")
@click.pass_obj
def topics_list(options: StoreOptions, exclude_internal: bool, output_format: str) -> None:
    """List the topics, one per line (internal ones too, unless --exclude-internal)."""
    from logstore.tools.topics import listed_topics

    if options.bootstrap:
        from . import broker
        with broker.admin(options) as admin:
            names = admin.topics()
    else:
        with options.open(read_only=True) as store:
            names = store.topics()
    if output_format == "json":
        echo_json(listed_topics(names, exclude_internal))
        return
    _echo_lines(listed_topics(names, exclude_internal))


@topics.command("describe")
@click.argument("name", required=False)
@_TOPIC_OPTION
@_IF_EXISTS
@_EXCLUDE_INTERNAL
@format_option('{"topic", "partition_count", "config", "overrides", "partitions"} (without NAME: a list of '
               "them, one per topic). config and overrides map Kafka's config names to their values as strings "
               '(as DescribeConfigs gives them); each partition is {"partition", "leader", "log_start_offset", '
               '"log_end_offset", "dir", "log_dir", "size_bytes", "segments", "recovery_point", "missing", '
               '"damaged"}, null where unknown: leader over a broker only, dir to recovery_point on a store only; '
               "missing is true and damaged a description for a partition that cannot be read. The same fields "
               "and types on a store and over a broker.", default="json",
               help_text="kafka-topics --describe's layout (per topic a line with its overrides, then one per "
                         "partition; on a store Leader, Replicas and Isr are -)")
@click.pass_obj
def topics_describe(options: StoreOptions, name: str | None, topic_option: str | None, if_exists: bool,
                    exclude_internal: bool, output_format: str) -> None:
    """Describe topic NAME, or without NAME every topic (kafka-topics --describe without --topic;
    internal ones too, unless --exclude-internal), as JSON: its effective config (with
    logstore.key.placement, how its keys map to partitions), its overrides, and per partition its
    directory, log start and end offsets, size (sum of its .log files) and segment count. Against
    a broker: the effective config, the overrides, and per partition its leader and offsets."""
    name = one_topic(name, topic_option, required=False)
    if name is not None and if_exists and not _topic_exists(options, name):
        return
    if options.bootstrap:
        from . import broker
        with broker.admin(options) as admin:
            described = admin.describe_topics(exclude_internal) if name is None else admin.describe_topic(name)
    else:
        from logstore.tools.topics import describe_topic, describe_topics
        with options.open(read_only=True) as store:
            described = describe_topics(store, exclude_internal) if name is None else describe_topic(store, name)
    if output_format == "json":
        echo_json(described)
        return
    for description in described if name is None else [described]:
        _echo_description(description, on_broker=bool(options.bootstrap))


def _echo_description(description: dict, on_broker: bool) -> None:
    """One topic in kafka-topics --describe's layout."""
    name = description["topic"]
    configs = ",".join(f"{key}={value}" for key, value in sorted(description["overrides"].items()))
    lines = [f"Topic: {name}\tPartitionCount: {description['partition_count']}\tReplicationFactor: 1\t"
             f"Configs: {configs}"]
    for partition in description["partitions"]:
        if on_broker:  # a broker's: the leader is the one replica
            leader = "none" if partition["leader"] is None or partition["leader"] < 0 else partition["leader"]
            replicas = "" if leader == "none" else leader
        else:
            leader = replicas = "-"
        problem = "\tMissing: true" if partition.get("missing") else (
            f"\tDamaged: {partition['damaged']}" if partition.get("damaged") is not None else "")
        lines.append(f"\tTopic: {name}\tPartition: {partition['partition']}\tLeader: {leader}\t"
                     f"Replicas: {replicas}\tIsr: {replicas}{problem}")
    _echo_lines(lines)


@topics.command("alter", cls=DeferredCommand, epilog=_config_help)
@click.argument("name", required=False)
@_TOPIC_OPTION
@_IF_EXISTS
@click.option("--partitions", type=click.IntRange(min=1), default=None,
              help="Grow the topic to this many partitions (more than it has: partitions are only ever added; "
                   "the existing ones keep their records, keys map by the new count from then on).")
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE", help="Set a config override (repeatable).")
@click.option("--delete-config", "deletions", multiple=True, metavar="KEY",
              help="Remove an override, restoring the default (repeatable).")
@format_option('{"topic", "partitions", "overrides"}: the partition count and the config overrides (strings) '
               "afterwards.", default="json", help_text="one line with the partition count and the overrides")
@click.pass_obj
def topics_alter(options: StoreOptions, name: str | None, topic_option: str | None, if_exists: bool,
                 partitions: int | None, configs: tuple[str, ...], deletions: tuple[str, ...],
                 output_format: str) -> None:
    """Grow topic NAME (--partitions) and/or change its config overrides; prints the partition count and
    the overrides afterwards (JSON by default)."""
    from logstore.config import parse_assignments

    name = one_topic(name, topic_option)
    if if_exists and not _topic_exists(options, name):
        return
    if not configs and not deletions and partitions is None:
        raise click.UsageError("nothing to change: give --partitions N, --config KEY=VALUE or --delete-config KEY")
    changes: dict[str, str | None] = dict(parse_assignments(list(configs)))
    both = sorted(set(changes) & set(deletions))
    if both:
        raise click.UsageError(f"{both[0]} is both set and deleted")
    changes.update(dict.fromkeys(deletions))
    if options.bootstrap:
        from . import broker
        with broker.admin(options) as admin:
            if partitions is not None:
                admin.create_partitions(name, partitions)
            if changes:
                admin.alter_topic_config(name, changes)
            count, overrides = admin.partitions(name), admin.topic_configs(name)[1]
    else:
        with options.open(read_only=False) as store:
            if partitions is not None:
                store.create_partitions(name, partitions)
            if changes:
                with _usage_errors_of_arguments():
                    store.alter_topic_config(name, changes)
            count, overrides = store.partitions(name), store.topic_overrides(name)
    overrides = {key: None if value is None else str(value) for key, value in sorted(overrides.items())}
    if output_format == "json":
        click.echo(json.dumps({"topic": name, "partitions": count, "overrides": overrides}))
    else:
        click.echo(f"Topic {name}: {count} partition{'s' if count != 1 else ''}, overrides: "
                   + (",".join(f"{key}={value}" for key, value in overrides.items()) or "none"))


@topics.command("delete")
@click.argument("name", required=False)
@_TOPIC_OPTION
@_IF_EXISTS
@click.option("--allow-internal", is_flag=True,
              help="Delete an internal topic too (__consumer_offsets: every group's committed offsets are lost). "
                   "A local store (--dir) only: a broker never deletes one.")
@format_option('{"topic", "deleted"}: deleted false when --if-exists found no such topic.',
               help_text="one line saying what was done")
@click.pass_obj
def topics_delete(options: StoreOptions, name: str | None, topic_option: str | None, if_exists: bool,
                  allow_internal: bool, output_format: str) -> None:
    """Delete topic NAME and all its data. An internal topic (__consumer_offsets, __transaction_state)
    is refused unless --allow-internal is given."""
    name = one_topic(name, topic_option)
    if if_exists and not _topic_exists(options, name):
        if output_format == "json":
            echo_json({"topic": name, "deleted": False})
        return
    if options.bootstrap:
        if allow_internal:
            raise click.UsageError("--allow-internal applies to a local store (--dir): a broker refuses to delete "
                                   "an internal topic")
        from . import broker
        with broker.admin(options) as admin:
            admin.delete_topic(name)
    else:
        from logstore.manager.topics import is_internal_topic
        if is_internal_topic(name) and not allow_internal:
            raise click.ClickException(f"topic {name!r} is internal (the broker's own state: deleting "
                                       "__consumer_offsets loses every group's committed offsets); give "
                                       "--allow-internal to delete it anyway")
        with options.open(read_only=False) as store:
            store.delete_topic(name, allow_internal=allow_internal)
    if output_format == "json":
        echo_json({"topic": name, "deleted": True})
    else:
        click.echo(f"Deleted topic {name}.")


# --- append and read -----------------------------------------------------------------------------


def _append_timeout_option() -> list[click.Parameter]:
    from logstore.log.waits import MAX_TIMEOUT_MS
    return [click.Option(["--timeout-ms"], type=click.IntRange(0, MAX_TIMEOUT_MS), default=30000, show_default=True,
                         help="With --acks all: how long to wait for the fsync before failing (the records stay "
                              "appended).")]


@main.command(cls=DeferredCommand, deferred_params=_append_timeout_option)
@click.argument("topic")
@click.argument("value", required=False)
@click.option("--partition", "-p", type=click.IntRange(min=0), help="Append to this partition (default: by key).")
@click.option("--key", "-k", help="The key of every record.")
@click.option("--header", "headers", multiple=True, metavar="NAME=VALUE", help="A header of every record (repeatable).")
@click.option("--timestamp", "timestamp_ms", type=click.IntRange(0, 2**63 - 1), metavar="MS",
              help="Record timestamp in ms since the epoch (default: now).")
@click.option("--tombstone", is_flag=True, help="Append one record with a null value (deletes its key when compacted).")
@click.option("--input-format", type=click.Choice(INPUT_FORMATS), default="text", show_default=True,
              help="How stdin is read: one value per line, or one JSON object per line.")
@click.option("--key-separator", "-K", metavar="SEP",
              help="Text lines are KEY<SEP>VALUE, cut at the first SEP (kcat's -K); a line without SEP is an error.")
@click.option("--property", "properties", multiple=True, metavar="NAME=VALUE",
              help="Kafka's console producer properties: parse.key=true (lines are KEY<TAB>VALUE) and "
                   "key.separator=SEP (repeatable).")
@click.option("--encoding", type=click.Choice(ENCODINGS), default="utf8", show_default=True,
              help="How keys, values and header values are given.")
@click.option("--batch-size", type=click.IntRange(1, 1_000_000), default=1000, show_default=True,
              help="Records per append call.")
@click.option("--acks", type=click.Choice(["1", "all"]), default="1", show_default=True,
              help="1: return once written to the OS (survives a crash of the process); all: once fsynced "
                   "(survives a power loss).")
@format_option('a list of the jsonl objects, printed once everything is appended.',
               choices=("jsonl", "json", "text"), default="jsonl",
               help_text='a line per append, "TOPIC-PARTITION: offsets FIRST..LAST (N records)"; jsonl: a JSON '
                         'object per append, {"topic", "partition", "first_offset", "last_offset", "record_count"}')
@click.pass_obj
def append(options: StoreOptions, topic: str, value: str | None, partition: int | None, key: str | None,
           headers: tuple[str, ...], timestamp_ms: int | None, tombstone: bool, input_format: str,
           key_separator: str | None, properties: tuple[str, ...], encoding: str, batch_size: int, acks: str,
           output_format: str, timeout_ms: int) -> None:
    """Append VALUE to TOPIC, or, without VALUE, one record per line of stdin (see
    --input-format; jsonl fields: key, value, headers, timestamp, partition). All input is parsed
    and checked before anything is appended. Prints one JSON line per append (--format):
    {"topic", "partition", "first_offset", "last_offset", "record_count"}. With --acks all each
    line is printed only once the records are fsynced."""
    from logstore.records.decoder import Record

    defaults = RecordDefaults(None if key is None else argument_bytes(key, encoding, "'--key'"),
                              parse_header_options(headers, encoding), timestamp_ms, partition)
    separator = key_separator_of(key_separator, properties)
    if separator is not None and (value is not None or tombstone or input_format != "text" or key is not None):
        raise click.UsageError("a key separator applies to text lines of stdin: not with VALUE, --tombstone, "
                               "--input-format jsonl or --key")
    if value is not None or tombstone:
        if value is not None and tombstone:
            raise click.UsageError("give VALUE or --tombstone, not both")
        if input_format != "text":
            raise click.UsageError("--input-format applies to stdin; it cannot be used with VALUE or --tombstone")
        record_value = None if tombstone else argument_bytes(value, encoding, "'VALUE'")
        entries = [InputRecord(0, partition, Record(defaults.key, record_value, defaults.headers, timestamp_ms))]
    else:
        if sys.stdin.isatty():
            click.echo(f"Reading records from stdin ({input_format}, one per line); end with Ctrl-D.", err=True)
        entries = parse_input(sys.stdin.buffer, input_format, encoding, defaults, separator)
    output = AppendedOutput(topic, output_format)
    if options.bootstrap:
        from . import broker
        broker.append(options, topic, entries, batch_size, acks, timeout_ms, output.add)
    else:
        _append_to_store(options, topic, entries, batch_size, acks, timeout_ms, output)
    output.finish()
    if not entries:
        click.echo("No records given: nothing appended.", err=True)


def _append_to_store(options: StoreOptions, topic: str, entries: list[InputRecord], batch_size: int, acks: str,
                     timeout_ms: int, output: AppendedOutput) -> None:
    with options.open(read_only=False) as store:
        check_against_topic(entries, topic, store.partitions(topic),
                            lambda records: store.validate_append(topic, records))
        # Consecutive records with the same explicit partition (or none) go in one call, in order.
        for target, group in groupby(entries, key=lambda entry: entry.partition):
            while chunk := [entry.record for entry in islice(group, batch_size)]:
                appended = store.append(topic, chunk, partition=target, acks=1 if acks == "1" else "all",
                                        timeout_ms=timeout_ms)
                for appended_partition, info in sorted(appended.items()):
                    output.add(appended_partition, info)


class AppendedOutput:
    """What ``append`` prints for each append acknowledged, in its ``--format``: a line (text) or
    a JSON object (jsonl) at once, or (json) one list when ``finish`` is called."""

    def __init__(self, topic: str, output_format: str) -> None:
        self.topic = topic
        self.output_format = output_format
        self.rows: list[dict] = []

    def add(self, partition: int, info) -> None:
        row = {"topic": self.topic, "partition": partition, "first_offset": info.first_offset,
               "last_offset": info.last_offset, "record_count": info.record_count}
        if self.output_format == "jsonl":
            click.echo(json.dumps(row))
        elif self.output_format == "text":
            click.echo(f"{self.topic}-{partition}: offsets {info.first_offset}..{info.last_offset} "
                       f"({info.record_count} record{'s' if info.record_count != 1 else ''})")
        else:
            self.rows.append(row)

    def finish(self) -> None:
        if self.output_format == "json":
            echo_json(self.rows)


class StartOffset(click.ParamType):
    """``read --offset``: an offset (``N``), ``end`` (or ``latest``: only records appended from
    now), ``-N`` (the last N offsets of each partition) or ``beginning`` (``earliest``), as kcat's
    ``-o`` and Kafka's console consumer take them. Converts to ``("at", N)``, ``("from_end", N)`` or
    ``("beginning", 0)``."""

    name = "N|end|-N|beginning"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        text = str(value).strip().lower()
        if text in ("end", "latest"):
            return ("from_end", 0)
        if text in ("beginning", "earliest"):
            return ("beginning", 0)
        try:
            number = int(text)
        except ValueError:
            self.fail(f"{value!r} is not an offset, end, -N or beginning", param, ctx)
        return ("from_end", -number) if number < 0 else ("at", number)


class IsoDateTime(click.ParamType):
    """An ISO 8601 date or date and time (``logstore.clock.parse_iso_ms``: without an offset, the
    machine's local time), converted to ms since the epoch; anything else is a usage error naming
    the value."""

    name = "ISO"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        from logstore.clock import parse_iso_ms
        try:
            return parse_iso_ms(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


TIMESTAMP_STYLES = ("ms", "iso")
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")  # logstore.tools.reading's, without importing it


@main.command()
@click.argument("topic")
@click.option("--partition", "-p", type=click.IntRange(min=0), help="Read only this partition (default: all).")
@click.option("--offset", type=StartOffset(),
              help="Where to start: an offset N (needs --partition), end (only records appended from now on; "
                   "with --follow), -N (the last N offsets of each partition), or beginning.")
@click.option("--from-beginning", is_flag=True, help="Start at the log start offset (the default).")
@click.option("--from-timestamp", "from_timestamp_ms", type=click.IntRange(min=0), metavar="MS",
              help="Start at the first record whose timestamp is >= MS (ms since the epoch).")
@click.option("--from-datetime", "from_datetime_ms", type=IsoDateTime(),
              help="Start each partition at its first record whose timestamp is at or after this time (its log "
                   "end if none is), as --from-timestamp does: an ISO 8601 date (2026-11-29: its midnight) or "
                   "date and time (2026-11-29T13:05, 2026-11-29T13:05:01.123Z, 2026-11-29T14:05:01+01:00). Without "
                   "Z or an offset it is this machine's local time, as kafka-consumer-groups reads --to-datetime "
                   "(TZ= sets the zone).")
@click.option("--max-records", type=click.IntRange(min=1), help="Stop after this many records in all.")
@click.option("--follow", "-f", is_flag=True,
              help="Keep printing new records as they are appended (by any process) until interrupted (Ctrl-C).")
@click.option("--format", "output_format", type=click.Choice(OUTPUT_FORMATS), default="jsonl", show_default=True,
              help="jsonl: one JSON object per record (topic, partition, offset, timestamp, key, value, headers); "
                   "value: the value only, one per line (with --timestamps, after its timestamp and a tab).")
@click.option("--encoding", type=click.Choice(ENCODINGS), default="utf8", show_default=True,
              help="How keys, values and header values are printed. utf8 refuses bytes that are not UTF-8 "
                   "in jsonl output (use base64 for binary data); value output prints the bytes as stored.")
@click.option("--timestamps", type=click.Choice(TIMESTAMP_STYLES), default=None,
              help="How record timestamps are printed: ms (ms since the epoch, jsonl's default) or iso (ISO 8601 "
                   "in UTC with milliseconds, 2026-11-29T13:05:01.123Z; jsonl's timestamp becomes that string). "
                   "With --format value, a timestamp column (then a tab) comes before each value only when this "
                   "is given.")
@click.option("--group", "-g", metavar="GROUP",
              help="Read as consumer group GROUP: start at its committed offsets (the log start where it has "
                   "none), then commit the offsets after the records printed. Without --partition, as a member "
                   "of the group: readers of one group split the partitions, as kafka-console-consumer's do (on "
                   "a store, the first reader serves it to the others on a private Unix socket, and while it "
                   "does, append, topics, groups and offsets commands go through it too). With --partition, "
                   "without joining: on a store it needs the store to itself, and is refused while the group "
                   "has members.")
@click.option("--isolation", type=click.Choice(ISOLATION_LEVELS), default=None,
              help="read_uncommitted (the default, as Kafka consumers'): every record up to the end, aborted "
                   "transactions' records included; read_committed: only up to the first offset of a transaction "
                   "still open, without aborted transactions' records. Kafka's isolation.level (with "
                   "--bootstrap-server it overrides --command-config's). Transaction markers are never printed.")
@click.pass_obj
def read(options: StoreOptions, topic: str, partition: int | None, offset: tuple[str, int] | None,
         from_beginning: bool, from_timestamp_ms: int | None, from_datetime_ms: int | None,
         max_records: int | None, follow: bool, output_format: str, encoding: str, timestamps: str | None,
         group: str | None, isolation: str) -> None:
    """Print the records of TOPIC (read-only: works while another process writes). With --follow,
    then wait for new records and print them as they arrive, like tail -f (no polling: the store's
    files are watched). With --group, continue where the group's last read stopped."""
    if sum((offset is not None, from_beginning, from_timestamp_ms is not None, from_datetime_ms is not None)) > 1:
        raise click.UsageError("give at most one of --offset, --from-beginning, --from-timestamp, --from-datetime")
    if from_datetime_ms is not None:
        from_timestamp_ms = from_datetime_ms
    style = RecordStyle(output_format, encoding, timestamps)
    client_config = {} if isolation is None else {"isolation.level": isolation}
    isolation = isolation or "read_uncommitted"
    from_end = offset[1] if offset is not None and offset[0] == "from_end" else None
    if offset is not None and offset[0] == "beginning":
        offset, from_beginning = None, True
    if offset is not None and offset[0] == "at" and partition is None:
        raise click.UsageError("--offset needs --partition for an offset N (end and -N apply to every partition)")
    offset = offset[1] if offset is not None and offset[0] == "at" else None
    remaining = max_records if max_records is not None else sys.maxsize
    if group is not None:
        if offset is not None or from_end is not None or from_beginning or from_timestamp_ms is not None:
            raise click.UsageError("--group starts at the group's committed offsets: it takes no --offset, "
                                   "--from-beginning, --from-timestamp or --from-datetime")
        if follow and not options.bootstrap and partition is not None:
            # It commits without joining, so it holds the store's lock, and while it did nothing
            # else could append: a follower would wait for records that cannot come.
            raise click.UsageError("--group with --partition reads without joining the group and holds the "
                                   "store's lock: it cannot --follow (without --partition the group's readers "
                                   "share the store and can)")
    if follow and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # Started with SIGINT ignored (a shell's `&` job): Ctrl-C or `kill -INT` must still end it
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if options.bootstrap:
        from . import broker
        return broker.read(options, topic, style, client_config, partition=partition, offset=offset,
                           from_timestamp_ms=from_timestamp_ms, from_end=from_end, follow=follow, group=group,
                           max_records=max_records)
    if group is not None and partition is None and _can_host(follow):
        from logstore.client.store_host import read_group_on_store  # loads the server: only when used
        try:
            with contextlib.closing(read_group_on_store(options.dirs, options.settings, topic, group, follow=follow,
                                                        max_records=max_records,
                                                        client_config=client_config)) as chunks:
                for number, records in chunks:
                    print_records(topic, number, records, style)
        except KeyboardInterrupt:
            pass  # the way to end --follow: not an error
        return
    if group is not None:
        _read_as_group(options, topic, partition, group, remaining, style, isolation)
        return
    with options.open(read_only=True) as store:
        partitions = [partition] if partition is not None else range(store.partitions(topic))
        starts = []
        for log in [store.get_log(topic, number) for number in partitions]:
            if offset is not None:
                start = offset
            elif from_end is not None:  # -N counts back from the end this reader sees
                end = log.last_stable_offset if isolation == "read_committed" else log.log_end_offset
                start = max(log.log_start_offset, end - from_end)
            elif from_timestamp_ms is not None:
                found = log.offset_for_timestamp(from_timestamp_ms)
                start = log.log_end_offset if found is None else found
            else:
                start = log.log_start_offset
            starts.append((log, start))
        positions = {}
        for log, start in starts:
            positions[(topic, log.partition)] = start
            remaining = _print_from(topic, log, positions, remaining, style, isolation)
        try:
            from logstore.tools.reading import follow_chunks
            while follow and remaining > 0:
                moved = follow_chunks(store, positions, chunk_bytes=READ_CHUNK_BYTES, wait_ms=FOLLOW_WAIT_MS,
                                      isolation=isolation)
                for (_, number), (records, next_offset) in sorted(moved.items()):
                    if len(records) > remaining:
                        records, next_offset = records[:remaining], records[remaining].offset
                    if records:
                        print_records(topic, number, records, style)
                        remaining -= len(records)
                    positions[(topic, number)] = next_offset
        except KeyboardInterrupt:
            pass  # the way to end --follow: not an error


def _can_host(follow: bool) -> bool:
    """Whether this process can serve the store to the group's other readers (the server extra);
    without it a reader reads alone without joining, and cannot follow."""
    from logstore.server.extra import INSTALL_HINT, missing_extra
    if not missing_extra():
        return True
    if follow:
        raise click.ClickException(f"read --group --follow on a store serves it to the group's other readers, "
                                   f"which needs the server extra: {INSTALL_HINT}")
    return False


def _read_as_group(options: StoreOptions, topic: str, partition: int | None, group: str, remaining: int,
                   style: RecordStyle, isolation: str) -> None:
    from .groups import open_admin
    with open_admin(options, read_only=False) as admin:
        starts = admin.start_positions(group, topic, None if partition is None else [partition])
        positions = {(topic, start.partition): start.offset for start in starts}
        try:
            for start in starts:
                remaining = _print_from(topic, admin.store.get_log(topic, start.partition), positions, remaining,
                                        style, isolation)
        finally:
            # What reached stdout is committed, even when a later record could not be printed.
            admin.commit(group, {(topic, start.partition): positions[(topic, start.partition)]
                                 for start in starts if positions[(topic, start.partition)] != start.offset})


def _print_from(topic: str, log, positions: dict[tuple[str, int], int], remaining: int, style: RecordStyle,
                isolation: str) -> int:
    """Print ``log``'s records from ``positions[(topic, partition)]`` on, at most ``remaining``,
    moving the position past each chunk once printed; returns what remains of ``remaining``."""
    from logstore.tools.reading import read_chunks
    key = (topic, log.partition)
    for records, next_offset in read_chunks(log, positions[key], remaining, chunk_bytes=READ_CHUNK_BYTES,
                                            chunk_records=READ_CHUNK_RECORDS, isolation=isolation):
        if records:
            print_records(topic, log.partition, records, style)
        positions[key] = next_offset
        remaining -= len(records)
    return remaining


# --- maintenance -------------------------------------------------------------------------------


@main.command()
@click.argument("topic", required=False)
@click.option("--dry-run", is_flag=True, help="Only print what would be deleted (read-only: works while the store is in use).")
@format_option('{"dry_run", "segments", "size_bytes", "partitions": [{"topic", "partition", "log_start_offset", '
               '"deleted": [{"base_offset", "next_offset", "size_bytes", "largest_timestamp_ms", "reason"}]}]} '
               "(segments and size_bytes: the totals deleted, or with --dry-run that would be).",
               help_text="a line per segment deleted, then a summary line")
@click.pass_obj
def retention(options: StoreOptions, topic: str | None, dry_run: bool, output_format: str) -> None:
    """Apply retention now to TOPIC (default: every topic): delete the oldest segments past
    retention.bytes or retention.ms, or below the log start offset, and print each one deleted
    (or, with --dry-run, that would be)."""
    from logstore.log.retention import describe as describe_retention

    with options.open(read_only=dry_run) as store:
        results = store.cleanup_logs(topic, dry_run=dry_run)
        if output_format == "json":
            from logstore.tools.reports import retention_document
            echo_json(retention_document(results, dry_run))
            return
        _echo_lines(line for result in results for line in describe_retention(result))
        segments = sum(len(result.deleted) for result in results)
        size_bytes = sum(result.deleted_bytes for result in results)
        verb = "Would delete" if dry_run else "Deleted"
        click.echo(f"{verb} {segments} segment{'s' if segments != 1 else ''} ({size_bytes} bytes) "
                   f"in {len(results)} partition{'s' if len(results) != 1 else ''}.")


@main.command()
@click.argument("topic", required=False)
@click.option("--partition", "-p", type=click.IntRange(min=0), help="Compact only this partition (needs TOPIC).")
@click.option("--engine", type=click.Choice(["local", "spark"]), default="local", show_default=True,
              help="local: the store's cleaner. spark: Spark maps the keys (no dedupe-buffer limit, so one pass), "
                   "then the same cleaner recopies and swaps (needs pip install 'kafka-logstore[spark]' and Java).")
@click.option("--master", default=None, metavar="URL", help="Spark master for --engine spark (default local[*]).")
@format_option('{"engine", "compacted", "partitions": [{"topic", "partition", "compacted", "size_bytes_before", '
               '"size_bytes_after", "records_kept", "records_dropped", "tombstones_removed", "passes", '
               '"duration_ms", "end_offset"}]} (compacted: how many partitions were; the counts are null for a '
               "partition with nothing to compact). Progress goes to stderr.",
               help_text="a summary line per partition, then a total line")
@click.pass_obj
def compact(options: StoreOptions, topic: str | None, partition: int | None, engine: str, master: str | None,
            output_format: str) -> None:
    """Compact TOPIC (default: every compacted topic) to completion now: keep the latest record per
    key below each active segment, drop tombstones past delete.retention.ms, then apply retention.
    Honours every topic config except the dirty ratio. Takes the store's lock: stop the writer first.
    Prints one summary line per partition."""
    from logstore.cleaner.stats import describe as describe_compaction

    if master is not None and engine != "spark":
        raise click.UsageError("--master is for --engine spark")
    stderr = sys.stderr
    if engine == "spark":
        from logstore.spark import require_spark

        require_spark()
        from logstore.spark.compact import compact_on_spark, spark_session

        def say(text: str) -> None:
            if stderr.isatty():
                click.echo(f"{text}...", err=True)

        say("starting Spark")
        with spark_session(master) as spark:
            results = compact_on_spark(spark, options.dirs, topic, partition, config=options.settings, say=say)
    else:
        with options.open(read_only=False) as store:
            total_bytes = store.compaction_estimate_bytes(topic, partition)
            if stderr.isatty() and total_bytes:
                with click.progressbar(length=total_bytes, label="compacting", file=stderr) as bar:
                    results = store.compact(topic, partition, progress=lambda key, size: bar.update(size))
            else:
                results = store.compact(topic, partition)
    if output_format == "json":
        from logstore.tools.reports import compaction_document
        echo_json(compaction_document(results, engine))
        return
    for (name, number), stats in results.items():
        click.echo(describe_compaction(stats, f"{name}-{number}"))
    compacted = sum(stats is not None for stats in results.values())
    click.echo(f"Compacted {compacted} of {len(results)} partition{'s' if len(results) != 1 else ''}"
               f"{' on Spark' if engine == 'spark' else ''}.")


@main.command()
@format_option('{"dirs": [{"path", "online", "offline_reason", "partitions", "size_bytes", "clean_shutdown", '
               '"logs": [{"topic", "partition", "recovery_point", "log_end_offset", "damaged"}]}], "problems": '
               "[strings]} (damaged: null, or what is wrong).", help_text="a line per data dir and per partition")
@JSON_ALIAS
@click.pass_obj
def status(options: StoreOptions, output_format: str, as_json: bool) -> None:
    """Show each data dir (read-only): online or offline, partitions, bytes, whether the last
    shutdown was clean, and per partition the recovery point and log end offset."""
    with options.open(read_only=True) as store:
        dirs = store.status()
        problems = list(store.problems)
    if chosen_format(output_format, as_json) == "json":
        from logstore.tools.reports import status_document
        echo_json(status_document(dirs, problems))
        return
    for entry in dirs:
        state = "online" if entry.online else f"OFFLINE ({entry.offline_reason})"
        shutdown = "clean" if entry.clean_shutdown else "unclean or in use"
        click.echo(f"{entry.path}: {state}, {entry.partitions} partitions, {entry.size_bytes} bytes, "
                   f"last shutdown {shutdown}")
        _echo_lines(f"  {name}-{number}: recovery point {entry.recovery_points.get((name, number), '-')}, "
                    f"log end offset {end}" + (f", DAMAGED: {entry.damaged[(name, number)]}"
                                               if (name, number) in entry.damaged else "")
                    for (name, number), end in sorted(entry.log_end_offsets.items()))
    _echo_lines(f"problem: {problem}" for problem in problems)


# --- files ---------------------------------------------------------------------------------------


@main.command()
@format_option('{"ok", "partitions", "segments", "batches", "records", "bytes_checked", "errors", "warnings", '
               '"problems": [{"severity", "path", "message"}]} (errors, warnings: counts; the exit code is the '
               "same). Progress goes to stderr.", help_text="a line per problem, then OK or DAMAGED and a summary")
@click.pass_context
def check(ctx: click.Context, output_format: str) -> None:
    """Verify every segment of every partition: batch CRCs, offsets, index entries, checkpoints,
    stray files, missing partitions (read-only). Exit code 0 when clean or with warnings only (e.g.
    files of an interrupted operation, which the next writable open completes), 1 when an error is
    found."""
    from logstore.tools.check import log_size_bytes, verify_store

    with ctx.obj.open(read_only=True) as store:
        if sys.stderr.isatty():
            with click.progressbar(length=log_size_bytes(store.logs()), label="Checking", file=sys.stderr) as bar:
                report = verify_store(store, on_progress=bar.update)
        else:
            report = verify_store(store)
    if output_format == "json":
        from logstore.tools.reports import check_document
        echo_json(check_document(report))
    else:
        _echo_lines(str(problem) for problem in report.problems)
        click.echo(("OK: " if report.ok else "DAMAGED: ") + report.summary())
    ctx.exit(0 if report.ok else 1)


@main.command()
@click.argument("topic")
@click.option("--partition", "-p", type=click.IntRange(min=0),
              help="Repair only this partition (default: every partition of TOPIC).")
@click.option("--yes", is_flag=True, help="Cut the damage. Without it, only print what would be cut.")
@format_option('{"done", "partitions": [{"topic", "partition", "damaged", "reason", "cut_offset", '
               '"removed_first_offset", "removed_end_offset", "removed_records", "removed_bytes", "removed_files", '
               '"log_start_offset"}]} (done: false without --yes, what would be cut; reason and cut_offset null '
               "where nothing is damaged).", help_text="a line per partition")
@click.pass_obj
def repair(options: StoreOptions, topic: str, partition: int | None, yes: bool, output_format: str) -> None:
    """Verify every segment of TOPIC (or one partition) and cut each log at its first damage, as
    recovery cuts a torn tail: a damaged partition (see `logstore check`, `logstore status`) is
    readable and writable again afterwards. Prints per partition the bytes, records and offsets
    removed. Without --yes nothing changes. Takes the store's lock: stop the writer first."""
    with options.open(read_only=False) as store:
        plans = store.repair(topic, partition, dry_run=not yes)
    if output_format == "json":
        from logstore.tools.reports import repair_document
        echo_json(repair_document(plans, done=yes))
        return
    _echo_lines(plan.describe(done=yes) for plan in plans)
    if not yes and any(plan.changes for plan in plans):
        click.echo("Nothing was changed: run again with --yes to cut.")


@main.command()
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.option("--records", is_flag=True, help="Also print every record of a .log file.")
@format_option('{"path", "kind", "base_offset", "size_bytes"} and, for a .log, "batches" (each {"position", '
               '"status", "base_offset", "last_offset", "count", "base_timestamp_ms", "max_timestamp_ms", '
               '"size_bytes", "compression", "timestamp_type", "crc", "error", "producer" (null or {"producer_id", '
               '"producer_epoch", "base_sequence", "transactional"}), "marker" (null or {"type": COMMIT or ABORT, '
               '"coordinator_epoch"})}, with --records a "records" list of '
               '{"offset", "timestamp_ms", "key", "value", "headers"}, bytes as base64) and "tail" (null, or the torn '
               'or unreadable end); for an index, "entries" and "trailing_bytes"; for a producer snapshot, '
               '"batches_follow", "entries" ({"producer_id", "epoch", "coordinator_epoch", "last_offset", '
               '"last_timestamp_ms", "txn_first_offset"}) and "error"; for a .txnindex, "entries" ({"producer_id", '
               '"first_offset", "last_offset", "last_stable_offset"}) and "error"; for a checkpoint, "version", '
               '"entries" ({"topic", "partition", "offset"}), "damaged_copies" and "error".',
               help_text="kafka-dump-log-like lines")
@click.option("--timestamps", type=click.Choice(TIMESTAMP_STYLES), default="ms", show_default=True,
              help="How timestamps are printed: ms (base_timestamp_ms: N, ms since the epoch) or iso "
                   "(base_timestamp: 2026-11-29T13:05:01.123Z, ISO 8601 in UTC with milliseconds).")
def dump(path: str, records: bool, output_format: str, timestamps: str) -> None:
    """Print the content of one file: a segment's .log (batches: position, offsets, count,
    timestamps, size, CRC, a transactional producer's id/epoch and sequence, transaction markers),
    .index or .timeindex (entries), .txnindex (aborted transactions), .snapshot (producer state), or an
    offset checkpoint file."""
    if output_format == "json":
        from logstore.tools.dump import dump_document
        echo_json(dump_document(path, records=records))
        return
    from logstore.tools.dump import dump_file

    _echo_lines(dump_file(path, records=records, timestamps=timestamps))


@main.command()
@click.pass_obj
def demo(options: StoreOptions) -> None:
    """A guided run on the store: create a topic, append keyed records, read them back, look up an
    offset by timestamp, show the files and check them. Safe to run again."""
    from logstore.tools.demo import run_demo

    command = "logstore" + "".join(f" --dir {shlex.quote(path)}" for path in options.dirs if options.dirs_given)
    run_demo(options.dirs, click.echo, config=options.settings, command=command)


def _echo_lines(lines: Iterable[str]) -> None:
    iterator: Iterator[str] = iter(lines)
    while chunk := list(islice(iterator, OUTPUT_CHUNK_LINES)):
        click.echo("\n".join(chunk))
