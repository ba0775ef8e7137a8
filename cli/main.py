"""Entry point of the ``logstore`` command (placeholder until the CLI lands)."""

import click


@click.group()
def main() -> None:
    """logstore: a Kafka-style log storage engine."""
