"""The global options of the command line, as every subcommand receives them (``click``'s ``obj``),
``one_topic`` (a topic given as ``NAME`` or ``--topic NAME``), and the one spelling of machine-readable
output: ``format_option`` (``--format text|json``, ``jsonl`` where rows stream), ``JSON_ALIAS`` (the
hidden, deprecated ``--json`` of the commands that had it) and ``echo_json``. No logic lives here."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import click

if TYPE_CHECKING:
    from logstore.manager.log_manager import LogManager

COMMAND_CONFIG_ENV = "LOGSTORE_COMMAND_CONFIG"


@dataclass
class StoreOptions:
    """Where the store is and its store-wide settings; or the broker to talk to instead, and the
    client settings for it (``--command-config``: security.protocol, sasl.*, ssl.*)."""

    dirs: list[str]
    settings: dict[str, str] = field(default_factory=dict)
    dirs_given: bool = False
    bootstrap: str | None = None  # --bootstrap-server: talk to that broker instead of opening dirs
    client_config: dict[str, str] = field(default_factory=dict, repr=False)  # may hold a password

    def open(self, read_only: bool) -> LogManager:
        """The store of ``--dir``; a ``--set`` the store does not take (an unknown key, a bad value)
        is a usage error."""
        from logstore.config import LogConfig, ManagerConfig  # only for the commands that open the store
        from logstore.errors import InvalidConfigError
        from logstore.manager.log_manager import LogManager
        try:
            LogConfig.from_broker_properties(self.settings)
            ManagerConfig.from_broker_properties(self.settings)
        except InvalidConfigError as exc:
            raise click.BadParameter(str(exc), param_hint="'--set'") from None
        return LogManager(self.dirs, config=self.settings, read_only=read_only)


def one_topic(name: str | None, topic_option: str | None, required: bool = True) -> str | None:
    """The topic of ``NAME`` or ``--topic NAME`` (Kafka's tools take the option): one of them, or
    both the same."""
    if name is not None and topic_option is not None and name != topic_option:
        raise click.UsageError(f"two topics given: {name!r} and --topic {topic_option!r}")
    chosen = name if name is not None else topic_option
    if chosen is None and required:
        raise click.UsageError("Missing argument 'NAME' (or give --topic NAME)")
    return chosen


def format_option(help_json: str, choices: tuple[str, ...] = ("text", "json"), default: str = "text",
                  help_text: str = "the human layout") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--format`` (parameter ``output_format``): ``text`` (``help_text``), ``json`` (one JSON
    document on stdout, ``help_json`` says its shape), and ``jsonl`` where it is among ``choices``."""
    return click.option("--format", "output_format", type=click.Choice(choices), default=default, show_default=True,
                        help=f"text: {help_text}; json: one JSON document, {help_json}")


JSON_ALIAS = click.option("--json", "as_json", is_flag=True, hidden=True,
                          help="Deprecated spelling of --format json (kept for scripts).")
"""The ``--json`` flag of the commands that had one before ``--format``: hidden (help and docs show
one spelling), still honoured; ``chosen_format`` merges it."""


def chosen_format(output_format: str, as_json: bool) -> str:
    """``--format``'s value, or ``json`` when the deprecated ``--json`` was given."""
    return "json" if as_json else output_format


def echo_json(document: object) -> None:
    """One JSON document on stdout (indented: read by people too)."""
    click.echo(json.dumps(document, indent=2))
