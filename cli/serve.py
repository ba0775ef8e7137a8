"""``logstore serve``: the store served over Kafka's wire protocol (``logstore.server.KafkaServer``).

Parses the options, starts the server, prints the one line scripts wait for (the bound address),
and stops the server cleanly on SIGTERM or SIGINT. No logic lives here.
"""

from __future__ import annotations

import logging
import signal
import threading

import click


@click.command()
@click.option("--listen", default="127.0.0.1:9092", show_default=True, metavar="HOST:PORT",
              help="Address to listen on; port 0 picks a free port. Binding anything but loopback exposes "
                   "every topic to whoever can reach it (there is no authentication).")
@click.option("--advertised-listener", metavar="HOST:PORT",
              help="Address clients are told to connect to (Kafka's advertised.listeners). Default: the bound one.")
@click.pass_obj
def serve(options, listen: str, advertised_listener: str | None) -> None:
    """Serve the store to Kafka clients (kafka-python, confluent-kafka, aiokafka, kcat, kafkajs, ...)
    over Kafka's own protocol, until SIGTERM or SIGINT. Server settings (--set) use Kafka's broker
    names: auto.create.topics.enable, num.partitions, socket.request.max.bytes, max.connections,
    connections.max.idle.ms, num.io.threads, node.id; the consumer groups' group.min.session.timeout.ms,
    group.max.session.timeout.ms, group.initial.rebalance.delay.ms, group.max.size,
    offsets.retention.minutes, offsets.retention.check.interval.ms, offsets.topic.num.partitions,
    offsets.topic.segment.bytes, offset.metadata.max.bytes, offsets.commit.timeout.ms; the rest go to
    the store."""
    from logstore.server import INSTALL_HINT, missing_extra
    if missing_extra():
        raise click.ClickException(f"logstore serve needs the server extra: {INSTALL_HINT}")
    from logstore.server.server import KafkaServer, use_one_malloc_arena

    use_one_malloc_arena()  # this process is the server's: keep its RSS down

    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = threading.Event()

    def request_stop(signum, _frame) -> None:
        stop.set()

    previous = {signum: signal.signal(signum, request_stop) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        server = KafkaServer(options.dirs, listen=listen, advertised_listener=advertised_listener,
                             config=options.settings)
        with server:
            host, port = server.bound_address
            click.echo(f"logstore serve: listening on {host}:{port} (node {server.node_id}, "
                       f"cluster {server.cluster_id})")
            click.get_text_stream("stdout").flush()
            while not stop.wait(1.0):
                pass
            click.echo("logstore serve: stopping", err=True)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
