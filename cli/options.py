"""The global options of the command line, as every subcommand receives them (``click``'s ``obj``).
No logic lives here."""

from __future__ import annotations

from dataclasses import dataclass, field

from logstore import LogManager

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
        return LogManager(self.dirs, config=self.settings, read_only=read_only)
