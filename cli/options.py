"""The global options of the command line, as every subcommand receives them (``click``'s ``obj``),
and ``one_topic`` (a topic given as ``NAME`` or ``--topic NAME``). No logic lives here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

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
