"""The ACL matrix: real clients, each with its own SASL settings, against one secured server
(SASL_PLAINTEXT, SCRAM-SHA-256; kcat with PLAIN, see ``sasl``), each principal allowed exactly what
its case needs:

- a reader that cannot write: it consumes its topic (records equal to the store's), its produce is
  refused (TOPIC_AUTHORIZATION_FAILED, or CLUSTER_AUTHORIZATION_FAILED at InitProducerId for an
  idempotent producer: it has no IdempotentWrite) and the log end offset does not move;
- a group member that cannot reset offsets: READ on its group (its commit works), no DELETE
  (OffsetDelete and DeleteGroups refused with GROUP_AUTHORIZATION_FAILED), no right on another group
  (a commit there refused); the committed offsets, read back by the super user's admin client, are
  the member's own commits;
- prefixed ACLs: WRITE on topics prefixed ``team-a.`` lets a producer write ``team-a.*`` and not
  ``team-b.x``;
- deny beats allow: READ on every topic (``*``) and a DENY of READ on ``payroll`` for the same
  principal: payroll refused, another topic read;
- a principal with no ACL sees no topic in Metadata, cannot create one, cannot auto-create one by
  producing;
- the super user may do everything (create, produce, read any topic, delete a topic);
- growing a topic (CreatePartitions) needs ALTER on it: a principal with ALTER on ``growable`` grows
  it, the writer (WRITE, DESCRIBE, CREATE on its prefix) cannot grow its own topic
  (TOPIC_AUTHORIZATION_FAILED) and the count stays;
- ``allow.everyone.if.no.acl.found=true`` (a second server): a topic no ACL names is open to anyone,
  a topic an ACL names is not (except to whom it allows);
- and at the end (``test_store_changed_only_by_authorized_requests``): every topic's log end offset,
  the topic list and the committed offsets are exactly what the authorized requests made.

Every client call is bounded (short produce timeouts: a refusal is answered at once, the timeouts
only bound a client that would hang). Refusals are compared by Kafka's error names whatever shape a
client reports them in (``refusal``): kafka-python wraps an InitProducerId error in a plain
KafkaError ("[Error 31] ClusterAuthorizationFailedError"), librdkafka's texts say "Broker: Topic
authorization failed", and the drivers' ERROR_NAMES has no 29/30/31.
"""

from __future__ import annotations

import re
import time

import pytest
from conftest import GROUP_SETTINGS

from clients import ClientError, ClientTimeout, as_wire
from clients.checks import now_ms
from clients.registry import DRIVER_CLASSES  # imports every client: a missing one fails collection
from logstore import LogManager, Record

pytestmark = pytest.mark.kafka_clients

TOPIC_DENIED = "TOPIC_AUTHORIZATION_FAILED"
GROUP_DENIED = "GROUP_AUTHORIZATION_FAILED"
CLUSTER_DENIED = "CLUSTER_AUTHORIZATION_FAILED"
DENIALS = {29: TOPIC_DENIED, 30: GROUP_DENIED, 31: CLUSTER_DENIED}
_LIBRDKAFKA_TEXTS = {"Topic authorization failed": TOPIC_DENIED, "Group authorization failed": GROUP_DENIED,
                     "Cluster authorization failed": CLUSTER_DENIED}

USERS = ("admin", "reader", "member", "writer", "snoop", "nobody", "grower")
# kafkajs left out: its driver takes no extra config, so no SASL settings (and it needs node)
PRODUCE_CLIENTS = [name for name in DRIVER_CLASSES if name != "kafkajs"]
ADMIN_CLIENTS = ["kafka-python", "confluent-kafka"]
# A refusal comes back at once; these only bound a client that would wait (for metadata, a retry).
FAST = {"kafka-python": {"max_block_ms": 4000, "request_timeout_ms": 4000},
        "aiokafka": {"request_timeout_ms": 4000},
        "confluent-kafka": {"message.timeout.ms": 4000, "socket.timeout.ms": 4000},
        "kcat": {"message.timeout.ms": 4000, "socket.timeout.ms": 4000}}


def password(user: str) -> str:
    return f"{user}-pw"


def sasl(client: str, user: str) -> dict:
    """``client``'s own settings to log in as ``user``: SCRAM-SHA-256, but PLAIN for kcat (Debian's
    librdkafka 2.0.2 sends a SCRAM client-final nonce of client nonce + server nonce, the client
    nonce twice, librdkafka#4895, which a strict RFC 5802 server refuses; PLAIN checks the same
    stored SCRAM credential, and this module is about authorization, not the mechanism)."""
    if client in ("kafka-python", "aiokafka"):
        return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-256",
                "sasl_plain_username": user, "sasl_plain_password": password(user)}
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN" if client == "kcat" else "SCRAM-SHA-256",
            "sasl.username": user, "sasl.password": password(user)}


def error_name(exc: BaseException) -> str:
    """Kafka's name of the error ``exc`` reports, whatever the client's shape of it."""
    if isinstance(exc, ClientError) and exc.error in DENIALS.values():
        return exc.error
    kafka_error = exc.args[0] if getattr(exc, "args", None) else None  # confluent-kafka's KafkaException
    for candidate in (exc, kafka_error):
        if callable(getattr(candidate, "name", None)) and callable(getattr(candidate, "code", None)):
            return DENIALS.get(candidate.code(), candidate.name())
    name = getattr(type(exc), "message", None)  # kafka-python's and aiokafka's error classes
    if isinstance(name, str) and name in DENIALS.values():
        return name
    text = str(exc)
    code = re.search(r"\[Error (\d+)\]", text)
    if code and int(code.group(1)) in DENIALS:
        return DENIALS[int(code.group(1))]
    for phrase, denial in _LIBRDKAFKA_TEXTS.items():
        if phrase in text:
            return denial
    return getattr(exc, "error", None) or f"{type(exc).__name__}: {text[:300]}"


def refusal(call, *args, **kwargs) -> str:
    """Run ``call``; it must fail: Kafka's name of its error."""
    try:
        result = call(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - every client's own exception types
        return error_name(exc)
    raise AssertionError(f"{getattr(call, '__name__', call)} was not refused: {result!r}")


def records(n: int, tag: str, client: str = "") -> list[Record]:
    stamp = None if client == "kcat" else now_ms()  # kcat cannot set timestamps
    return [Record(f"{tag}-{i}".encode(), f"value {i} of {tag}".encode(), [], stamp) for i in range(n)]


class Secured:
    """The module's server, its store and the ledger of what the authorized requests changed:
    ``ends`` (topic -> log end offset of partition 0), ``commits`` (group -> {(topic, partition):
    offset}) and ``deleted`` topics, which the last test compares with the store."""

    def __init__(self, server, store):
        self.server = server
        self.store = store
        self.bootstrap = server.bootstrap_servers
        self.ends: dict[str, int] = {}
        self.commits: dict[str, dict[tuple[str, int], int]] = {}
        self.deleted: set[str] = set()

    def create(self, topic: str, count: int = 0) -> None:
        self.store.create_topic(topic, partitions=1)
        if count:
            self.store.append(topic, records(count, topic), partition=0)
        self.ends[topic] = count

    def end(self, topic: str) -> int:
        return self.store.get_log(topic, 0).log_end_offset

    def stored(self, topic: str) -> list:
        out, position = [], 0
        for _ in range(1000):
            batch = self.store.read(topic, 0, offset=position, max_bytes=1 << 20)
            if not batch:
                return out
            out += [as_wire(r) for r in batch]
            position = batch[-1].offset + 1
        raise AssertionError("store.read never reached the end")


def _acls():
    from logstore.server.security.acls import PATTERN_PREFIXED, bindings_for
    return [
        *bindings_for(allow_principals=["User:reader"], topics=["orders"], groups=["readers"], consumer=True),
        *bindings_for(allow_principals=["User:member"], topics=["ledger"], groups=["ledger-"], consumer=True,
                      pattern_type=PATTERN_PREFIXED),
        *bindings_for(allow_principals=["User:writer"], topics=["team-a."], producer=True, idempotent=True,
                      pattern_type=PATTERN_PREFIXED),
        *bindings_for(allow_principals=["User:snoop"], topics=["*"], groups=["snoop"], operations=["Read"]),
        *bindings_for(deny_principals=["User:snoop"], topics=["payroll"], operations=["Read"]),
        *bindings_for(allow_principals=["User:grower"], topics=["growable"], operations=["Alter", "Describe"]),
    ]


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    from logstore.server import KafkaServer
    from logstore.server.security.acl_store import AclStore
    from logstore.server.security.credentials import CredentialStore

    data = str(tmp_path_factory.mktemp("acl-matrix"))
    credentials = CredentialStore(data)  # before the server starts: the running server owns the files
    for user in USERS:
        credentials.set(user, "SCRAM-SHA-256", password(user))
    AclStore(data).add(_acls())
    with LogManager([data]) as store, \
            KafkaServer(store, listen=["SASL_PLAINTEXT://127.0.0.1:0"],
                        config={"super.users": "User:admin", "num.partitions": 1, **GROUP_SETTINGS}) as server:
        assert server.enforces_acls and server.authorizer is not None
        world = Secured(server, store)
        world.create("orders", 3)
        world.create("ledger", 4)
        world.create("payroll", 2)
        world.create("public", 2)
        world.create("team-b.x")
        world.create("doomed", 1)
        world.create("growable")
        for client in PRODUCE_CLIENTS:
            world.create(f"team-a.{client}")
        yield world


def _admin_kafka_python(bootstrap, user):
    from kafka import KafkaAdminClient
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=8000, **sasl("kafka-python", user))


def _admin_confluent(bootstrap, user):
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": bootstrap, **sasl("confluent-kafka", user)})


def committed(world: Secured, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets as the super user's admin client reads them (OffsetFetch)."""
    admin = _admin_kafka_python(world.bootstrap, "admin")
    try:
        found = admin.list_group_offsets({group: None})
    finally:
        admin.close()
    return {(tp.topic, tp.partition): meta.offset for tp, meta in found.get(group, {}).items()}


# --- a reader that cannot write ---------------------------------------------------------------------

READER_PRODUCE = [("kafka-python", True, CLUSTER_DENIED), ("kafka-python", False, TOPIC_DENIED),
                  ("confluent-kafka", True, CLUSTER_DENIED), ("confluent-kafka", False, TOPIC_DENIED),
                  ("aiokafka", False, TOPIC_DENIED), ("kcat", False, TOPIC_DENIED)]
_IDEMPOTENCE = {"kafka-python": "enable_idempotence", "aiokafka": "enable_idempotence",
                "confluent-kafka": "enable.idempotence", "kcat": "enable.idempotence"}


def _consumer_settings(client: str, user: str, group: str) -> dict:
    settings = sasl(client, user)
    if client == "confluent-kafka":
        settings["group.id"] = group  # librdkafka asks for its group's coordinator even with assign()
    return settings


@pytest.mark.parametrize("client", PRODUCE_CLIENTS)
def test_reader_consumes_its_topic(secured, driver_factory, client):
    """The reader's consumer reads ``orders`` whole: the store's records, equal."""
    got = driver_factory(client).consume(secured.bootstrap, "orders", 0, count=3, timeout_s=15,
                                         config=_consumer_settings(client, "reader", "readers"))
    assert got == secured.stored("orders")


def _fatal_confluent_produce(bootstrap: str, topic: str, config: dict) -> str:
    """An idempotent confluent-kafka producer refused its producer id: librdkafka raises a fatal error
    (reported to ``error_cb``; the delivery reports then say _FATAL), which the driver's delivery
    callback does not survive (``msg.offset()`` raises SystemError). Kafka's name of the fatal error."""
    from confluent_kafka import KafkaException, Producer
    fatal = []
    producer = Producer({"bootstrap.servers": bootstrap, **config,
                         "error_cb": lambda err: fatal.append(err) if err.fatal() else None})
    producer.produce(topic, b"value", key=b"key", partition=0)
    try:
        producer.flush(8)
    except KafkaException as exc:  # flush raises the fatal error too (librdkafka 2.16)
        fatal.append(exc.args[0])
    assert fatal, "no fatal error reported"
    return DENIALS.get(fatal[0].code(), fatal[0].name())


@pytest.mark.parametrize("client,idempotent,expected", READER_PRODUCE)
def test_reader_cannot_write(secured, driver_factory, client, idempotent, expected):
    """The reader's produce is refused: per topic (29) by a plain producer, at InitProducerId (31,
    no IdempotentWrite on the cluster) by an idempotent one; nothing reaches the log."""
    before = secured.end("orders")
    config = {**sasl(client, "reader"), **FAST[client], _IDEMPOTENCE[client]: idempotent}
    if client == "confluent-kafka" and idempotent:
        got = _fatal_confluent_produce(secured.bootstrap, "orders", config)
    else:
        got = refusal(driver_factory(client).produce, secured.bootstrap, "orders", records(2, "reader", client),
                      partition=0, timeout_s=12, config=config)
    assert got == expected
    assert secured.end("orders") == before == secured.ends["orders"]


# --- a group member that cannot reset offsets -------------------------------------------------------

def _commit_kafka_python(bootstrap, user, group, topic, offset):
    import kafka.errors
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                             request_timeout_ms=8000, **sasl("kafka-python", user))
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        try:
            consumer.commit({tp: OffsetAndMetadata(offset, "", -1)})
        except kafka.errors.KafkaError as exc:
            raise ClientError(error_name(exc), str(exc)) from exc
    finally:
        consumer.close(autocommit=False)


def _commit_confluent(bootstrap, user, group, topic, offset):
    """An asynchronous commit, then polls until its callback or a refusal event (bounded): a group
    whose coordinator may not be looked up (FindCoordinator refused) fails a synchronous commit only
    once librdkafka gave up waiting for a coordinator (session.timeout.ms, 45 s by default), while
    the refusal comes at once as a consumer error event."""
    from confluent_kafka import Consumer, TopicPartition
    done = []
    # session.timeout.ms: how long close() waits for a commit still waiting for a coordinator (this
    # consumer never joins its group, so the server's session bounds do not apply)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "socket.timeout.ms": 8000, "session.timeout.ms": 1500, "heartbeat.interval.ms": 500,
                         "on_commit": lambda err, tps: done.append((err, tps)),
                         **sasl("confluent-kafka", user)})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=True)
        deadline = time.monotonic() + 10
        while not done and time.monotonic() < deadline:
            event = consumer.poll(0.2)
            if event is not None and event.error() is not None and event.error().code() in DENIALS:
                raise ClientError(DENIALS[event.error().code()], event.error().str())
        if not done:
            raise ClientTimeout(f"confluent-kafka commit to {group}: no answer in 10 s")
        err, tps = done[0]
        for error in [err, *(tp.error for tp in tps or ())]:
            if error is not None:
                raise ClientError(error_name(error), str(error))
    finally:
        consumer.close()


COMMIT = {"kafka-python": _commit_kafka_python, "confluent-kafka": _commit_confluent}


def _delete_kafka_python(bootstrap, user, group, topic):
    """OffsetDelete then DeleteGroups as ``user``: the errors' names, in that order."""
    import kafka.errors
    from kafka import TopicPartition
    admin = _admin_kafka_python(bootstrap, user)
    try:
        offset_delete = refusal(admin.delete_group_offsets, group, [TopicPartition(topic, 0)])
        outcome = admin.delete_groups([group])  # {group: "OK" or the name of an error class}
        error_class = getattr(kafka.errors, outcome[group], None)
        return [offset_delete, getattr(error_class, "message", outcome[group])]
    finally:
        admin.close()


def _delete_confluent(bootstrap, user, group, topic):
    """DeleteGroups as ``user`` (confluent-kafka's AdminClient has no OffsetDelete): its error's name."""
    admin = _admin_confluent(bootstrap, user)
    future = admin.delete_consumer_groups([group], request_timeout=8)[group]
    return [refusal(future.result, timeout=10)]


DELETE = {"kafka-python": _delete_kafka_python, "confluent-kafka": _delete_confluent}


@pytest.mark.parametrize("client", ADMIN_CLIENTS)
def test_member_commits_but_cannot_reset_offsets(secured, client):
    """READ on its group: the member's commit works. No DELETE on it: OffsetDelete and DeleteGroups
    refused (30). No right on another group: a commit there refused (30). The super user then reads
    the committed offsets: the member's commit, nothing in the other group."""
    group, other = f"ledger-{client}", f"audit-{client}"
    COMMIT[client](secured.bootstrap, "member", group, "ledger", 2)
    secured.commits[group] = {("ledger", 0): 2}
    assert DELETE[client](secured.bootstrap, "member", group, "ledger") == \
        [GROUP_DENIED] * (2 if client == "kafka-python" else 1)
    assert refusal(COMMIT[client], secured.bootstrap, "member", other, "ledger", 3) == GROUP_DENIED
    secured.commits[other] = {}
    assert committed(secured, group) == {("ledger", 0): 2}
    assert committed(secured, other) == {}


# --- prefixed ACLs ------------------------------------------------------------------------------------

@pytest.mark.parametrize("client", PRODUCE_CLIENTS)
def test_prefixed_write(secured, driver_factory, client):
    """WRITE on topics prefixed ``team-a.`` (and IdempotentWrite: kafka-python is idempotent by
    default): ``team-a.<client>`` takes the records, ``team-b.x`` refuses them (29) and stays empty."""
    driver = driver_factory(client)
    config = {**sasl(client, "writer"), **FAST[client]}
    topic = f"team-a.{client}"
    sent = records(3, "writer", client)
    produced = driver.produce(secured.bootstrap, topic, sent, partition=0, timeout_s=15, config=config)
    assert [offset for _, offset in produced] == [0, 1, 2]
    secured.ends[topic] = 3
    assert [(r.key, r.value) for r in secured.stored(topic)] == [(r.key, r.value) for r in sent]
    assert refusal(driver.produce, secured.bootstrap, "team-b.x", records(1, "writer", client), partition=0,
                   timeout_s=12, config=config) == TOPIC_DENIED
    assert secured.end("team-b.x") == 0


# --- deny beats allow ---------------------------------------------------------------------------------

@pytest.mark.parametrize("client", PRODUCE_CLIENTS)
def test_deny_beats_allow(secured, driver_factory, client):
    """READ allowed on every topic (``*``), READ denied on ``payroll``, one principal: ``public`` is
    read, ``payroll`` refused (29)."""
    driver = driver_factory(client)
    config = _consumer_settings(client, "snoop", "snoop")
    assert driver.consume(secured.bootstrap, "public", 0, count=2, timeout_s=15, config=config) == \
        secured.stored("public")
    assert refusal(driver.consume, secured.bootstrap, "payroll", 0, count=2, timeout_s=6, config=config) == \
        TOPIC_DENIED


# --- no ACL at all ------------------------------------------------------------------------------------

def test_no_acl_sees_nothing_kafka_python(secured, driver_factory):
    """kafka-python as a principal no ACL names: Metadata lists no topic, CreateTopics refused (29),
    a produce to a new name does not create it."""
    admin = _admin_kafka_python(secured.bootstrap, "nobody")
    try:
        assert admin.list_topics() == []
        got = refusal(admin.create_topics, {"nobody-made": {"num_partitions": 1, "replication_factor": 1}})
    finally:
        admin.close()
    assert got == TOPIC_DENIED
    config = {**sasl("kafka-python", "nobody"), "max_block_ms": 2000, "request_timeout_ms": 2000,
              "enable_idempotence": False}
    with pytest.raises(Exception):
        driver_factory("kafka-python").produce(secured.bootstrap, "nobody-auto", records(1, "nobody"),
                                               timeout_s=6, config=config)
    assert not {"nobody-made", "nobody-auto"} & set(secured.store.topics())


def test_no_acl_sees_nothing_confluent(secured, driver_factory):
    """confluent-kafka as a principal no ACL names: the same."""
    from confluent_kafka.admin import NewTopic
    admin = _admin_confluent(secured.bootstrap, "nobody")
    assert admin.list_topics(timeout=10).topics == {}
    future = admin.create_topics([NewTopic("nobody-made-2", 1, 1)], request_timeout=8)["nobody-made-2"]
    assert refusal(future.result, timeout=10) == TOPIC_DENIED
    config = {**sasl("confluent-kafka", "nobody"), "message.timeout.ms": 2500, "socket.timeout.ms": 2500}
    with pytest.raises((ClientError, ClientTimeout)):
        driver_factory("confluent-kafka").produce(secured.bootstrap, "nobody-auto-2", records(1, "nobody"),
                                                  timeout_s=6, config=config)
    assert not {"nobody-made-2", "nobody-auto-2"} & set(secured.store.topics())


# --- the super user ------------------------------------------------------------------------------------

def test_super_user_may_do_everything(secured, driver_factory):
    """The super user (no ACL names it) creates a topic, produces idempotently to it and to
    ``team-b.x``, reads ``payroll``, lists every topic and deletes ``doomed``."""
    kp = driver_factory("kafka-python")
    config = sasl("kafka-python", "admin")
    admin = _admin_kafka_python(secured.bootstrap, "admin")
    try:
        admin.create_topics({"admin-made": {"num_partitions": 1, "replication_factor": 1}})
        secured.ends["admin-made"] = 0
        assert kp.produce(secured.bootstrap, "admin-made", records(2, "admin"), partition=0, timeout_s=15,
                          config=config) == [(0, 0), (0, 1)]
        secured.ends["admin-made"] = 2
        assert kp.produce(secured.bootstrap, "team-b.x", records(1, "admin"), partition=0, timeout_s=15,
                          config=config) == [(0, 0)]
        secured.ends["team-b.x"] = 1
        assert kp.consume(secured.bootstrap, "payroll", 0, count=2, timeout_s=15, config=config) == \
            secured.stored("payroll")
        assert set(secured.store.topics()) <= set(admin.list_topics())
        admin.delete_topics(["doomed"])
        secured.deleted.add("doomed")
    finally:
        admin.close()
    assert "doomed" not in secured.store.topics()


@pytest.mark.parametrize("client", ADMIN_CLIENTS)
def test_growing_a_topic_needs_alter_on_it(secured, client):
    if client == "kafka-python":
        def grow(user, topic, count):
            admin = _admin_kafka_python(secured.bootstrap, user)
            try:
                admin.create_partitions({topic: count})
            finally:
                admin.close()
    else:
        def grow(user, topic, count):
            from confluent_kafka.admin import NewPartitions
            admin = _admin_confluent(secured.bootstrap, user)
            admin.create_partitions([NewPartitions(topic, count)], request_timeout=8)[topic].result(10)
    writer_topic = "team-a.kafka-python"
    before = secured.store.partitions(writer_topic)
    assert refusal(grow, "writer", writer_topic, before + 1) == TOPIC_DENIED
    assert refusal(grow, "nobody", "growable", 9) == TOPIC_DENIED
    assert secured.store.partitions(writer_topic) == before
    count = secured.store.partitions("growable")
    grow("grower", "growable", count + 1)
    assert secured.store.partitions("growable") == count + 1


# --- allow.everyone.if.no.acl.found -------------------------------------------------------------------

@pytest.fixture(scope="module")
def open_server(tmp_path_factory):
    from logstore.server import KafkaServer
    from logstore.server.security.acl_store import AclStore
    from logstore.server.security.acls import bindings_for
    from logstore.server.security.credentials import CredentialStore

    data = str(tmp_path_factory.mktemp("acl-open"))
    credentials = CredentialStore(data)
    for user in ("reader", "nobody"):
        credentials.set(user, "SCRAM-SHA-256", password(user))
    AclStore(data).add(bindings_for(allow_principals=["User:reader"], topics=["guarded"], operations=["Read"]))
    with LogManager([data]) as store, \
            KafkaServer(store, listen=["SASL_PLAINTEXT://127.0.0.1:0"],
                        config={"allow.everyone.if.no.acl.found": "true", "num.partitions": 1,
                                **GROUP_SETTINGS}) as server:
        world = Secured(server, store)
        world.create("open", 2)
        world.create("guarded", 2)
        yield world


@pytest.mark.parametrize("client", ADMIN_CLIENTS)
def test_allow_everyone_if_no_acl_found(open_server, driver_factory, client):
    """A topic no ACL names is anyone's (nobody produces to and reads ``open``); ``guarded``, which an
    ACL names, is refused to nobody (29) and read by the reader it allows."""
    driver = driver_factory(client)
    world = open_server
    nobody = {**_consumer_settings(client, "nobody", f"open-{client}"), **FAST[client]}
    produced = driver.produce(world.bootstrap, "open", records(1, f"nobody-{client}"), partition=0, timeout_s=15,
                              config=nobody)
    world.ends["open"] += 1
    assert produced == [(0, world.ends["open"] - 1)]
    assert driver.consume(world.bootstrap, "open", 0, count=world.ends["open"], timeout_s=15,
                          config=_consumer_settings(client, "nobody", f"open-{client}")) == world.stored("open")
    try:  # not even described to nobody: kafka-python raises 29, librdkafka waits for a leader it never gets
        got = driver.consume(world.bootstrap, "guarded", 0, count=2, timeout_s=3,
                             config=_consumer_settings(client, "nobody", f"open-{client}"))
    except Exception as exc:  # noqa: BLE001 - kafka-python's poll raises its own error classes
        assert error_name(exc) == TOPIC_DENIED, exc
    else:
        assert got == [], "guarded's records reached a principal no ACL allows"
    assert refusal(driver.produce, world.bootstrap, "guarded", records(1, "nobody"), partition=0, timeout_s=12,
                   config=nobody) == TOPIC_DENIED
    assert driver.consume(world.bootstrap, "guarded", 0, count=2, timeout_s=15,
                          config=_consumer_settings(client, "reader", f"open-{client}")) == world.stored("guarded")
    assert {topic: world.end(topic) for topic in world.store.topics() if not topic.startswith("__")} == world.ends


# --- the store after the matrix -----------------------------------------------------------------------

def test_store_changed_only_by_authorized_requests(secured):
    """After the matrix (runs last): the topics are the ones made, less the one deleted; every log end
    offset is what the authorized produces made it; the committed offsets are the member's commits."""
    expected_topics = set(secured.ends) - secured.deleted
    topics = {topic for topic in secured.store.topics() if not topic.startswith("__")}
    assert topics == expected_topics
    assert {topic: secured.end(topic) for topic in topics} == {topic: secured.ends[topic] for topic in topics}
    for group, offsets in secured.commits.items():
        assert committed(secured, group) == offsets, group
