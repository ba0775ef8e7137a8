"""MkDocs hooks of the documentation site (``hooks:`` in mkdocs.yml): the parts of the reference pages
that are generated from the code when the site is built, so that they cannot drift from it.

- ``on_config``: the command line's root group imports the subcommands that live in other modules
  only when first asked for (``cli.main.LAZY_COMMANDS``), and mkdocs-click documents a group's
  already loaded commands only; every subcommand is asked for once here, so docs/reference/cli.md
  documents all of them, each with its options (a ``DeferredCommand`` builds its deferred options
  when mkdocs-click asks for its parameters); a command's epilog, which mkdocs-click leaves out,
  joins its help there (``topics create``'s list of topic configs).
- ``on_page_markdown``: the ``<!-- settings: NAME -->`` marks of docs/reference/settings.md become
  the tables of the code's settings (``settings_markdown``): the store's (``logstore.config``), the
  server's (``logstore.server.server_config``), the group coordinator's (``logstore.group.config``),
  the transaction coordinator's (``logstore.txn.config``) and the client's (``logstore.client``), each key with its default, unit, whether it changes at
  run time and what it does. A setting without a description fails the build.

Run by MkDocs, not by the tests' import path; it imports the installed ``logstore`` (``pip install
-e '.[docs]'`` for a checkout).
"""

from __future__ import annotations

import re
from typing import Any, Callable

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1

MARK = re.compile(r"^<!-- settings: ([\w-]+) -->$", re.MULTILINE)

TOPIC_ALTER = "yes, per topic"
FIXED = "no: read at start"
CLIENT = "no: given when the client is made"


def on_config(config: Any) -> Any:
    import click

    from logstore.cli.main import main

    def load(command: click.Command, context: click.Context) -> None:
        epilog = command.epilog() if callable(command.epilog) else command.epilog
        if epilog:  # mkdocs-click shows the help without its epilog: here, in this process only
            command.help = f"{command.help or ''}\n\n{epilog}"
            command.epilog = None
        if isinstance(command, click.Group):
            for name in command.list_commands(context):
                subcommand = command.get_command(context, name)
                if subcommand is None:
                    raise RuntimeError(f"{context.command_path} {name}: listed by the command line but not found")
                load(subcommand, click.Context(subcommand, info_name=name, parent=context))

    load(main, click.Context(main, info_name="logstore"))
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return MARK.sub(lambda match: settings_markdown(match.group(1)), markdown)


def unit(key: str) -> str:
    """The unit of a setting, from Kafka's naming (``.ms``, ``.bytes``, ``.minutes``...)."""
    if key.endswith(".ms"):
        return "ms"
    if key.endswith("replication.factor"):
        return "replicas"
    for suffix, name in ((".minutes", "minutes"), (".hours", "hours"), (".bytes.per.second", "bytes/s"),
                         (".ratio", "fraction"), (".factor", "fraction"), (".threads", "threads"),
                         (".threads.per.data.dir", "threads"),
                         (".messages", "records"), (".records", "records")):
        if key.endswith(suffix):
            return name
    if key.endswith((".bytes", "buffer.size", "receive.size", "batch.size", "buffer.memory")):
        return "bytes"
    if key.endswith(("num.partitions", "partition.size.limit")):
        return "partitions"
    if key in ("group.max.size",):
        return "members"
    if key.endswith(("max.connections", "per.host", "max.queued", "per.connection", "retries")):
        return "count"
    return ""


def shown(value: Any) -> str:
    """A default as the page shows it."""
    if value is None:
        return "(none)"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, (tuple, list)):
        joiner = "," if all(str(item).isupper() or str(item).islower() for item in value) else ";"
        return f"`{joiner.join(map(str, value))}`" if value else "(none)"
    if value == float("inf"):
        return "unlimited"
    if value == LONG_MAX:
        return f"`{LONG_MAX}` (no limit)"
    if value == INT_MAX:
        return f"`{INT_MAX}` (no limit)"
    return f"`{value}`"


def table(rows: list[tuple[str, Any, str, str]]) -> str:
    """Rows of (key, default, at run time, meaning) as a Markdown table."""
    lines = ["| Setting | Default | Unit | Changes at run time | Meaning |", "| --- | --- | --- | --- | --- |"]
    for key, default, runtime, doc in rows:
        if not doc or not doc.strip():
            raise ValueError(f"setting {key!r} has no description in its table")
        lines.append(f"| `{key}` | {shown(default)} | {unit(key)} | {runtime} | {doc.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def _topic() -> str:
    from logstore.config import describe_keys
    return table([(key, default, TOPIC_ALTER, doc) for key, default, doc in describe_keys()])


def _store_defaults() -> str:
    from logstore.config import describe_broker_keys
    return table([(key, default, f"no: read at start; per topic: `{topic}`", doc)
                  for key, default, doc, topic in describe_broker_keys()])


def _store_jobs() -> str:
    from logstore.config import describe_manager_keys
    return table([(key, default, FIXED, doc) for key, default, doc in describe_manager_keys()])


def _server() -> str:
    from logstore.server.server_config import SERVER_KEYS
    rows = [(key, default, FIXED, doc) for key, (_field, default, _parse, doc) in SERVER_KEYS.items()]
    return table(rows + [("broker.id", None, FIXED, "Kafka's older name for node.id")])


def _tls() -> str:
    from logstore.server.server_config import TLS_KEY_DOCS
    return table([(key, default, FIXED, doc) for key, (default, doc) in TLS_KEY_DOCS.items()])


def _serve() -> str:
    from logstore.server.server_config import SERVE_KEYS
    return table([(key, default, FIXED, doc) for key, (default, _parse, doc) in SERVE_KEYS.items()])


def _group() -> str:
    from logstore.group.config import describe_group_keys
    return table([(key, default, FIXED, doc) for key, default, doc in describe_group_keys()])


def _txn() -> str:
    from logstore.txn.config import describe_txn_keys
    return table([(key, default, FIXED, doc) for key, default, doc in describe_txn_keys()])


def _client(module: str) -> Callable[[], str]:
    def render() -> str:
        import importlib

        from logstore.client.security import SECURITY_DEFAULTS
        from logstore.client.security import SETTING_DOCS as SECURITY_DOCS
        client = importlib.import_module(f"logstore.client.{module}")
        own = {key: value for key, value in client.DEFAULTS.items() if key not in SECURITY_DEFAULTS}
        missing = sorted(set(own) ^ set(client.SETTING_DOCS)) + sorted(set(SECURITY_DEFAULTS) ^ set(SECURITY_DOCS))
        if missing:
            raise ValueError(f"logstore.client.{module}: settings and their descriptions differ: {missing}")
        return table([(key, default, CLIENT, client.SETTING_DOCS[key]) for key, default in own.items()])
    return render


def _client_security() -> str:
    from logstore.client.security import SECURITY_DEFAULTS, SETTING_DOCS
    return table([(key, default, CLIENT, SETTING_DOCS[key]) for key, default in SECURITY_DEFAULTS.items()])


SECTIONS: dict[str, Callable[[], str]] = {
    "topic": _topic, "store-defaults": _store_defaults, "store-jobs": _store_jobs, "server": _server,
    "tls": _tls, "serve": _serve, "group": _group, "txn": _txn, "producer": _client("producer"),
    "consumer": _client("consumer"), "client-security": _client_security,
}
"""The tables a ``<!-- settings: NAME -->`` mark stands for."""


def settings_markdown(name: str) -> str:
    """The table of settings ``name`` (a key of ``SECTIONS``)."""
    if name not in SECTIONS:
        raise ValueError(f"<!-- settings: {name} -->: no such table (one of {', '.join(SECTIONS)})")
    return SECTIONS[name]()
