"""``logstore users``: the SCRAM users of the store (``logstore.server.security.credentials``): add, delete,
list. Passwords are read from a prompt or from stdin, never from the command line (shell history,
``ps``). The store is opened as a writer to change them, so it takes the store's lock (``list`` reads it
read-only, beside a running server too); with ``--bootstrap-server``
a broker's users are changed through Kafka's admin APIs (AlterUserScramCredentials: the password is
salted and iterated here, never sent). No logic lives here."""

from __future__ import annotations

import os
import sys

import click

from . import broker
from .lazy import DeferredCommand
from .options import echo_json, format_option


def _credentials(options, read_only: bool = False) -> tuple:
    from logstore.server.security.credentials import CredentialStore
    return broker.security_store(options, CredentialStore, read_only)


def _mechanisms() -> list[str]:
    from logstore.server.security.scram import MECHANISMS
    return sorted(MECHANISMS)


def _add_options() -> list[click.Parameter]:
    from logstore.server.security.scram import DEFAULT_ITERATIONS, MAX_ITERATIONS, MIN_ITERATIONS
    return [click.Option(["--mechanism", "mechanisms"], multiple=True, type=click.Choice(_mechanisms()),
                         help="A mechanism to give the user a credential for (repeatable; default: both)."),
            click.Option(["--iterations"], type=click.IntRange(min=MIN_ITERATIONS, max=MAX_ITERATIONS),
                         default=DEFAULT_ITERATIONS, show_default=True,
                         help=f"PBKDF2 iterations ({MIN_ITERATIONS}..{MAX_ITERATIONS}, Kafka's bounds).")]


def _delete_options() -> list[click.Parameter]:
    return [click.Option(["--mechanism"], type=click.Choice(_mechanisms()),
                         help="Only this mechanism's credential (default: all).")]


def _can_prompt_hidden() -> bool:
    """Whether a password prompt can hide what is typed, as ``getpass`` decides: a controlling
    terminal, or stdin a terminal (without either, getpass warns and echoes)."""
    try:
        os.close(os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY))
        return True
    except OSError:
        return sys.stdin.isatty()


@click.group()
def users() -> None:
    """Add, delete and list the users that authenticate with SCRAM (or PLAIN)."""


@users.command("add", cls=DeferredCommand, deferred_params=_add_options)
@click.argument("user")
@click.option("--password-stdin", is_flag=True, help="Read the password from the first line of stdin.")
@format_option('{"user", "mechanisms": [strings], "iterations"}.', help_text="one line")
@click.pass_obj
def users_add(options, user: str, mechanisms: tuple[str, ...], iterations: int, password_stdin: bool,
              output_format: str) -> None:
    """Add USER (or give it a new password). Only a salted, iterated credential is stored."""
    from logstore.client.security import read_password_line
    from logstore.server.security.scram import MECHANISMS

    if password_stdin:
        password = read_password_line(sys.stdin)
    elif not _can_prompt_hidden():
        raise click.UsageError("no terminal to ask for the password (it would be echoed): give it on stdin with "
                               "--password-stdin")
    else:
        password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    if not password:
        raise click.UsageError("the password is empty")
    store, credentials = _credentials(options)
    with store:
        for mechanism in mechanisms or sorted(MECHANISMS):
            credentials.set(user, mechanism, password, iterations)
    if output_format == "json":
        echo_json({"user": user, "mechanisms": list(mechanisms or sorted(MECHANISMS)), "iterations": iterations})
        return
    click.echo(f"Added user {user} ({', '.join(mechanisms or sorted(MECHANISMS))}).")


@users.command("delete", cls=DeferredCommand, deferred_params=_delete_options)
@click.argument("user")
@format_option('{"user", "deleted"} (deleted: how many credentials).', help_text="one line")
@click.pass_obj
def users_delete(options, user: str, mechanism: str | None, output_format: str) -> None:
    """Delete USER's credentials."""
    store, credentials = _credentials(options)
    with store:
        try:
            count = credentials.delete(user, mechanism)
        except KeyError as exc:
            raise click.ClickException(exc.args[0]) from None
    if output_format == "json":
        echo_json({"user": user, "deleted": count})
        return
    click.echo(f"Deleted {count} credential{'s' if count != 1 else ''} of user {user}.")


@users.command("list")
@format_option('a list of {"user", "mechanism", "iterations", "usable"} (usable: false for a credential of more '
               "iterations than a login accepts).", help_text="a tab-separated line per credential")
@click.pass_obj
def users_list(options, output_format: str) -> None:
    """List the users: name, mechanism and iterations (no secrets)."""
    from logstore.server.security.scram import MAX_ITERATIONS

    store, credentials = _credentials(options, read_only=True)
    with store:
        found = credentials.users()
    if output_format == "json":
        from logstore.client.tools import user_documents
        echo_json(user_documents(found, MAX_ITERATIONS))
        return
    if not found:
        click.echo("No users.")
    for user, mechanism, iterations in found:
        # a credential from before the cap: kept, refused at login (credentials.CredentialStore)
        note = (f"\trefused at login (more than {MAX_ITERATIONS} iterations): add the user again"
                if iterations > MAX_ITERATIONS else "")
        click.echo(f"{user}\t{mechanism}\t{iterations}{note}")
