"""``logstore serve``: the store served over Kafka's wire protocol (``logstore.server.KafkaServer``).

Parses the options, starts the server, prints the one line scripts wait for (the bound address),
and stops the server cleanly on SIGTERM or SIGINT. Settings come from a config file (``--config``),
then the environment (``LOGSTORE_<KEY>``), then the command line (``--set``, then the options), each
overriding the one before (``logstore.server.server_config``). No logic lives here.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading

import click


@click.command()
@click.option("--config", "config_file", metavar="FILE",
              help="A properties file of settings with Kafka's names, as server.properties: listeners, "
                   "advertised.listeners, log.dirs, log.retention.ms, ssl.keystore.location... (Java properties "
                   "syntax; a regular file of at most 1 MiB). The environment's LOGSTORE_<KEY> variables (key "
                   "upper-cased, dots as underscores: LOGSTORE_LOG_RETENTION_MS) override it, and the command line "
                   "(--set, then the options below) overrides both. Every key: --print-config.")
@click.option("--print-config", is_flag=True,
              help="Print every setting serve reads (key, default, whether it changes at run time, its environment "
                   "variable) as Markdown tables, and exit.")
@click.option("--listen", multiple=True, metavar="[PROTOCOL://]HOST:PORT",
              help="A listener (repeatable): PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL, then the address; port 0 "
                   "picks a free port. Default: PLAINTEXT://127.0.0.1:9092. A PLAINTEXT listener beyond loopback "
                   "needs --allow-plaintext-remote.")
@click.option("--advertised-listener", multiple=True, metavar="[PROTOCOL://]HOST:PORT",
              help="The address clients are told to connect to for the listener of that protocol (Kafka's "
                   "advertised.listeners; repeatable). Default: the bound one.")
@click.option("--allow-plaintext-remote", is_flag=True,
              help="Allow a PLAINTEXT listener on an address other than loopback (no TLS, no authentication).")
@click.option("--ssl-cert", type=click.Path(exists=True, dir_okay=False), metavar="PEM",
              help="The TLS listeners' certificate chain (ssl.keystore.location), with the key unless --ssl-key.")
@click.option("--ssl-key", type=click.Path(exists=True, dir_okay=False), metavar="PEM",
              help="The certificate's private key, when it is a file of its own. Its password, if any: "
                   "$LOGSTORE_SSL_KEY_PASSWORD (never on the command line).")
@click.option("--ssl-ca", type=click.Path(exists=True, dir_okay=False), metavar="PEM",
              help="CAs that client certificates must chain to (ssl.truststore.location).")
@click.option("--ssl-client-auth", type=click.Choice(["none", "requested", "required"]),
              help="Ask TLS clients for a certificate (Kafka's ssl.client.auth; default none). The principal of an "
                   "SSL client is its certificate's subject, User:CN=...,OU=...")
@click.option("--super-user", "super_users", multiple=True, metavar="PRINCIPAL",
              help="A principal allowed everything, e.g. User:admin (super.users; repeatable).")
@click.option("--metrics-listen", metavar="[HOST:]PORT",
              help="Serve Prometheus metrics (/metrics) and the probes (/healthz, /readyz) over HTTP on this "
                   "address; a bare PORT binds 127.0.0.1. Default: off.")
@click.pass_obj
def serve(options, config_file: str | None, print_config: bool, listen: tuple[str, ...], advertised_listener: tuple[str, ...], allow_plaintext_remote: bool,
          ssl_cert: str | None, ssl_key: str | None, ssl_ca: str | None, ssl_client_auth: str | None,
          super_users: tuple[str, ...], metrics_listen: str | None) -> None:
    """Serve the store to Kafka clients (kafka-python, confluent-kafka, aiokafka, kcat, kafkajs, ...)
    over Kafka's own protocol, until SIGTERM or SIGINT. Server settings (--set) use Kafka's broker
    names: auto.create.topics.enable, num.partitions, socket.request.max.bytes, max.connections,
    connections.max.idle.ms, queued.max.request.bytes, sasl.server.max.receive.size,
    queued.max.response.bytes, fetch.max.bytes, num.io.threads, node.id, producer.id.expiration.ms; the consumer groups' group.min.session.timeout.ms,
    group.max.session.timeout.ms, group.initial.rebalance.delay.ms, group.max.size,
    offsets.retention.minutes, offsets.retention.check.interval.ms, offsets.topic.num.partitions,
    offsets.topic.segment.bytes, offset.metadata.max.bytes; security: sasl.enabled.mechanisms,
    connection.failed.authentication.delay.ms, authorizer.enable, super.users,
    allow.everyone.if.no.acl.found, ssl.*; the rest go to the store. Users: `logstore users`; ACLs:
    `logstore acls` (README "Securing the server"). A config file, or LOGSTORE_<KEY> variables, may
    give every one of them, and the options' own keys (README "Configuring the server")."""
    if print_config:
        from logstore.server.server_config import config_reference_markdown
        click.echo(config_reference_markdown())
        return
    from logstore.server import INSTALL_HINT, missing_extra
    if missing_extra():
        raise click.ClickException(f"logstore serve needs the server extra: {INSTALL_HINT}")
    from logstore.server.network.descriptors import raise_descriptor_limit
    from logstore.server.server import KafkaServer, use_one_malloc_arena

    chosen = _settings(options, config_file, {
        "listeners": list(listen) or None, "advertised.listeners": list(advertised_listener) or None,
        "log.dirs": list(options.dirs) if options.dirs_given else None,
        "allow.plaintext.remote": allow_plaintext_remote or None, "ssl.keystore.location": ssl_cert,
        "ssl.key.location": ssl_key, "ssl.truststore.location": ssl_ca, "ssl.client.auth": ssl_client_auth,
        "super.users": ";".join(super_users) or None})
    use_one_malloc_arena()  # this process is the server's: keep its RSS down
    raise_descriptor_limit()  # and its descriptors: the soft limit up to the hard one

    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = threading.Event()

    def request_stop(signum, _frame) -> None:
        stop.set()

    previous = {signum: signal.signal(signum, request_stop) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        server = KafkaServer(list(chosen.dirs), listen=list(chosen.listeners),
                             advertised_listener=None if chosen.advertised_listeners is None
                             else list(chosen.advertised_listeners), config=chosen.config,
                             metrics_listen=metrics_listen)
        server.fail_stop_on_thread_death()
        with server:
            for index, (listener, port) in enumerate(zip(server.listeners, server.bound_ports)):
                where = (f"{listener.host}:{port}" if listener.protocol == "PLAINTEXT"
                         else f"{listener.protocol}://{listener.host}:{port}")
                click.echo(f"logstore serve: listening on {where}"
                           + (f" (node {server.node_id}, cluster {server.cluster_id})" if index == 0 else ""))
            click.echo(f"logstore serve: {server.descriptors}")
            if server.metrics_address is not None:
                click.echo(f"logstore serve: metrics on http://{server.metrics_address}/metrics")
            sys.stdout.flush()
            while not stop.wait(0.2) and server.failure is None:
                pass
            if server.failure is None:
                click.echo("logstore serve: stopping", err=True)
        if server.failure is not None:
            raise click.ClickException(f"stopped: a thread of the server died ({type(server.failure).__name__}: "
                                       f"{server.failure})")
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _settings(options, config_file: str | None, explicit: dict):
    """The ``ServeSettings`` of the config file, the environment, ``--set`` and the explicit options
    (None: not given), each checked before anything starts: a bad file, key or value is a one-line
    usage error naming where it came from (exit 2). Warnings (a ``LOGSTORE_`` variable that names no
    setting) go to stderr."""
    from logstore.errors import InvalidConfigError
    from logstore.properties import NotARegularFileError
    from logstore.server.server_config import (ServeSettings, check_setting, environment_settings,
                                               read_server_properties)
    from_file = {}
    if config_file is not None:
        try:
            from_file = read_server_properties(config_file)
        except (InvalidConfigError, NotARegularFileError) as exc:
            raise click.BadParameter(str(exc), param_hint="'--config'") from exc
        except (OSError, ValueError) as exc:
            raise click.BadParameter(f"{config_file}: {exc.strerror or exc}" if isinstance(exc, OSError)
                                     else str(exc), param_hint="'--config'") from exc
    try:
        from_environment, warnings = environment_settings(os.environ)
    except InvalidConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    for warning in warnings:
        click.echo(f"logstore serve: warning: {warning}", err=True)
    for key, value in options.settings.items():
        try:
            check_setting(key, value)
        except InvalidConfigError as exc:
            raise click.BadParameter(str(exc), param_hint="'--set'") from exc
    given = {key: value for key, value in explicit.items() if value is not None}
    try:
        return ServeSettings.merge([from_file, from_environment, options.settings, given])
    except InvalidConfigError as exc:
        raise click.UsageError(str(exc)) from exc
