"""The security admin APIs through real clients' admin APIs (kafka-python's ``KafkaAdminClient``,
confluent-kafka's ``AdminClient``), logged in with SCRAM as the server's super user:

- CreateAcls, DescribeAcls (exactly the binding), DeleteAcls by a filter (the deleted binding
  returned), DescribeAcls again (gone); each change is still there after a restart (acls.json);
- AlterUserScramCredentials adds a SCRAM-SHA-512 user with 4096 iterations, who then logs in with
  the same client; DescribeUserScramCredentials shows the mechanism and the iterations (the answer
  has no field for a secret, and the password is nowhere in it); deleting the credential locks the
  user out; Kafka's refusals: too few iterations (UNACCEPTABLE_CREDENTIAL), deleting a credential
  that does not exist and describing an unknown user (RESOURCE_NOT_FOUND);
- a user without ALTER on the cluster: CreateAcls and AlterUserScramCredentials refused with
  CLUSTER_AUTHORIZATION_FAILED, nothing changed;
- with ``authorizer.enable=false`` the ACL APIs answer SECURITY_DISABLED.

Each client sits behind a small adapter (``KafkaPythonAdmin``, ``ConfluentAdmin``) that gives ACLs
as tuples of Kafka's codes and errors as Kafka's names, so one test body serves both clients.
"""

from __future__ import annotations

import contextlib
import os
import stat

import pytest
from conftest import GROUP_SETTINGS

from logstore.server.security.acl_store import ACLS_FILE

from clients.registry import DRIVER_CLASSES  # imports every client: a missing one fails collection

pytestmark = pytest.mark.kafka_clients

CLIENTS = [name for name in ("kafka-python", "confluent-kafka") if name in DRIVER_CLASSES]
ERRORS = {29: "TOPIC_AUTHORIZATION_FAILED", 31: "CLUSTER_AUTHORIZATION_FAILED", 54: "SECURITY_DISABLED",
          91: "RESOURCE_NOT_FOUND", 93: "UNACCEPTABLE_CREDENTIAL"}
# Kafka's codes: resource type topic, pattern literal/any, operation read/any, permission allow/any
TOPIC, LITERAL, PATTERN_ANY, READ, OP_ANY, ALLOW, PERMISSION_ANY = 2, 3, 1, 3, 1, 3, 1
USERS = {"admin": "admin-pw", "mallory": "mallory-pw"}


class AdminError(Exception):
    """A refusal, by Kafka's error name."""

    def __init__(self, name: str, detail: str = ""):
        super().__init__(f"{name}: {detail}" if detail else name)
        self.name = name


def _name_of(error) -> str:
    """Kafka's name of a client's error (a class, an instance, a message, a librdkafka error)."""
    if isinstance(error, type):  # a kafka-python error class (NoError included)
        return ERRORS.get(getattr(error, "errno", None), getattr(error, "message", error.__name__))
    if callable(getattr(error, "code", None)) and callable(getattr(error, "name", None)):  # librdkafka
        return ERRORS.get(error.code(), error.name())
    if getattr(error, "args", None) and callable(getattr(error.args[0], "code", None)):  # KafkaException
        return _name_of(error.args[0])
    errno = getattr(error, "errno", None)  # kafka-python's error classes and instances
    if errno in ERRORS:
        return ERRORS[errno]
    message = getattr(error, "message", None)
    if isinstance(message, str) and message.isupper():
        return message
    text = str(error)
    for code, name in ERRORS.items():
        if name in text or f"[Error {code}]" in text:
            return name
    return text


class KafkaPythonAdmin:
    def __init__(self, bootstrap: str, user: str, password: str, mechanism: str = "SCRAM-SHA-256"):
        from kafka import KafkaAdminClient
        # bootstrap bounded: a refused login makes kafka-python retry its bootstrap (30 s by default)
        self.client = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=8000, bootstrap_timeout_ms=3000,
                                       reconnect_backoff_max_ms=500,
                                       security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
                                       sasl_plain_username=user, sasl_plain_password=password)

    def close(self):
        self.client.close()

    @staticmethod
    def _row(acl) -> tuple:
        pattern = acl.resource_pattern
        return (int(pattern.resource_type), pattern.resource_name, int(pattern.pattern_type), acl.principal, acl.host,
                int(acl.operation), int(acl.permission_type))

    def create_acl(self, row: tuple) -> None:
        from kafka.admin import (ACL, ACLOperation, ACLPermissionType, ACLResourcePatternType, ResourcePattern,
                                 ResourceType)
        kind, name, pattern, principal, host, operation, permission = row
        acl = ACL(principal, host, ACLOperation(operation), ACLPermissionType(permission),
                  ResourcePattern(ResourceType(kind), name, ACLResourcePatternType(pattern)))
        try:
            result = self.client.create_acls([acl])
        except Exception as exc:  # noqa: BLE001 - the client's own error types
            raise AdminError(_name_of(exc), str(exc)) from exc
        if result["failed"]:  # kafka-python lists the error classes of the failed creations
            error, = result["failed"]
            raise AdminError(_name_of(error), str(error))
        assert [self._row(found) for found in result["succeeded"]] == [row]

    def _filter(self, topic: str):
        from kafka.admin import (ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                                 ResourcePatternFilter, ResourceType)
        return ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                         ResourcePatternFilter(ResourceType.TOPIC, topic, ACLResourcePatternType.ANY))

    def describe_acls(self, topic: str) -> list[tuple]:
        try:
            found, error = self.client.describe_acls(self._filter(topic))
        except Exception as exc:  # noqa: BLE001
            raise AdminError(_name_of(exc), str(exc)) from exc
        if getattr(error, "errno", 0):
            raise AdminError(_name_of(error))
        return sorted(self._row(acl) for acl in found)

    def delete_acls(self, topic: str) -> list[tuple]:
        try:
            (_filter, found, error), = self.client.delete_acls([self._filter(topic)])
        except Exception as exc:  # noqa: BLE001
            raise AdminError(_name_of(exc), str(exc)) from exc
        if getattr(error, "errno", 0):
            raise AdminError(_name_of(error))
        return sorted(self._row(acl) for acl, _error in found) if found and isinstance(found[0], tuple) \
            else sorted(self._row(acl) for acl in found)

    # kafka-python's alter_/describe_user_scram_credentials give only the broker's error *message* per
    # user, not its code: the same requests (kafka-python's own classes, salted by its own
    # UserScramCredentialUpsertion) go through its connection manager so the codes can be compared.
    async def _send(self, request):
        return await self.client._manager.send(request)

    def _request(self, request):
        try:
            return self.client._manager.run(self._send, request)
        except Exception as exc:  # noqa: BLE001
            raise AdminError(_name_of(exc), str(exc)) from exc

    def _alter(self, *, deletions=(), upsertions=()) -> None:
        from kafka.protocol.admin.users import AlterUserScramCredentialsRequest
        response = self._request(AlterUserScramCredentialsRequest(deletions=list(deletions),
                                                                  upsertions=list(upsertions)))
        for result in response.results:
            if result.error_code:
                raise AdminError(ERRORS.get(result.error_code, str(result.error_code)), result.error_message)

    def upsert_user(self, user: str, mechanism: str, password: str, iterations: int) -> None:
        from kafka.admin import ScramMechanism, UserScramCredentialUpsertion
        upsertion = UserScramCredentialUpsertion(user, ScramMechanism[mechanism.replace("-", "_")], password,
                                                 iterations=iterations)
        self._alter(upsertions=[(user, int(upsertion.mechanism), upsertion.iterations, upsertion.salt,
                                 upsertion.salted_password)])

    def delete_user(self, user: str, mechanism: str) -> None:
        from kafka.admin import ScramMechanism
        self._alter(deletions=[(user, int(ScramMechanism[mechanism.replace("-", "_")]))])

    def describe_user(self, user: str) -> list[tuple[str, int]]:
        from kafka.admin import ScramMechanism
        from kafka.protocol.admin.users import DescribeUserScramCredentialsRequest
        response = self._request(DescribeUserScramCredentialsRequest(users=[(user,)]))
        self.last_answer = response
        if response.error_code:
            raise AdminError(ERRORS.get(response.error_code, str(response.error_code)), response.error_message)
        (result,) = response.results
        assert result.user == user
        if result.error_code:
            raise AdminError(ERRORS.get(result.error_code, str(result.error_code)), result.error_message)
        return sorted((ScramMechanism(info.mechanism).name.replace("_", "-"), info.iterations)
                      for info in result.credential_infos)

    def login(self) -> None:
        """A request that needs a logged-in connection: Metadata."""
        self.client.list_topics()


class ConfluentAdmin:
    def __init__(self, bootstrap: str, user: str, password: str, mechanism: str = "SCRAM-SHA-256"):
        from confluent_kafka.admin import AdminClient
        self.client = AdminClient({"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
                                   "sasl.mechanisms": mechanism, "sasl.username": user, "sasl.password": password,
                                   "socket.timeout.ms": 8000})

    def close(self):
        pass  # librdkafka's handle goes with the object

    @staticmethod
    def _result(future):
        try:
            return future.result(timeout=15)
        except Exception as exc:  # noqa: BLE001 - KafkaException carrying a KafkaError
            raise AdminError(_name_of(exc), str(exc)) from exc

    @staticmethod
    def _row(binding) -> tuple:
        return (binding.restype.value, binding.name, binding.resource_pattern_type.value, binding.principal,
                binding.host, binding.operation.value, binding.permission_type.value)

    def create_acl(self, row: tuple) -> None:
        from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType
        kind, name, pattern, principal, host, operation, permission = row
        binding = AclBinding(ResourceType(kind), name, ResourcePatternType(pattern), principal, host,
                             AclOperation(operation), AclPermissionType(permission))
        self._result(self.client.create_acls([binding], request_timeout=10)[binding])

    def _filter(self, topic: str):
        from confluent_kafka.admin import (AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType,
                                           ResourceType)
        return AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                AclPermissionType.ANY)

    def describe_acls(self, topic: str) -> list[tuple]:
        return sorted(self._row(b) for b in self._result(self.client.describe_acls(self._filter(topic),
                                                                                   request_timeout=10)))

    def delete_acls(self, topic: str) -> list[tuple]:
        found = self._filter(topic)
        return sorted(self._row(b) for b in self._result(self.client.delete_acls([found], request_timeout=10)[found]))

    def upsert_user(self, user: str, mechanism: str, password: str, iterations: int) -> None:
        from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
        info = ScramCredentialInfo(ScramMechanism[mechanism.replace("-", "_")], iterations)
        futures = self.client.alter_user_scram_credentials([UserScramCredentialUpsertion(user, info,
                                                                                         password.encode())])
        self._result(futures[user])

    def delete_user(self, user: str, mechanism: str) -> None:
        from confluent_kafka.admin import ScramMechanism, UserScramCredentialDeletion
        futures = self.client.alter_user_scram_credentials(
            [UserScramCredentialDeletion(user, ScramMechanism[mechanism.replace("-", "_")])])
        self._result(futures[user])

    def describe_user(self, user: str) -> list[tuple[str, int]]:
        futures = self.client.describe_user_scram_credentials([user])
        description = self._result(futures[user])
        self.last_answer = description
        return sorted((info.mechanism.name.replace("_", "-"), info.iterations)
                      for info in description.scram_credential_infos)

    def login(self) -> None:
        try:
            self.client.list_topics(timeout=5)
        except Exception as exc:  # noqa: BLE001
            raise AdminError(_name_of(exc), str(exc)) from exc


ADMINS = {"kafka-python": KafkaPythonAdmin, "confluent-kafka": ConfluentAdmin}


@contextlib.contextmanager
def admin_as(client: str, bootstrap: str, user: str, password: str | None = None, mechanism: str = "SCRAM-SHA-256"):
    admin = ADMINS[client](bootstrap, user, USERS[user] if password is None else password, mechanism)
    try:
        yield admin
    finally:
        admin.close()


def can_log_in(client: str, bootstrap: str, user: str, password: str, mechanism: str) -> bool:
    """Whether ``user`` gets a Metadata answer over a connection it authenticated with ``mechanism``
    (bounded: a refused login fails within a few seconds)."""
    try:
        with admin_as(client, bootstrap, user, password, mechanism) as admin:
            admin.login()
    except Exception:  # noqa: BLE001 - an authentication failure, in each client's own words
        return False
    return True


def _data_dir(tmp_path_factory, name: str) -> str:
    from logstore.server.security.credentials import CredentialStore
    data = str(tmp_path_factory.mktemp(name))
    credentials = CredentialStore(data)
    for user, password in USERS.items():
        credentials.set(user, "SCRAM-SHA-256", password)
    return data


def serve(data: str, **config):
    from logstore.server import KafkaServer
    return KafkaServer(data, listen=["SASL_PLAINTEXT://127.0.0.1:0"],
                       config={"super.users": "User:admin", "num.partitions": 1, **GROUP_SETTINGS, **config})


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    with serve(_data_dir(tmp_path_factory, "security-admin")) as server:
        yield server


def _stored_acls(server) -> set:
    return {tuple(b.row()) for b in server.authorizer.describe()}


# --- ACLs ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("client", CLIENTS)
def test_acl_create_describe_delete_survive_restart(tmp_path_factory, client):
    """CreateAcls, then DescribeAcls gives exactly that binding, also after a restart; DeleteAcls by a
    filter returns it; DescribeAcls then gives nothing, also after a restart."""
    data = _data_dir(tmp_path_factory, f"acl-restart-{client}")
    topic = f"acl-{client}"
    row = (TOPIC, topic, LITERAL, "User:alice", "*", READ, ALLOW)
    with serve(data) as server, admin_as(client, server.bootstrap_servers, "admin") as admin:
        assert admin.describe_acls(topic) == []
        admin.create_acl(row)
        assert admin.describe_acls(topic) == [row]
        assert admin.describe_acls(f"{topic}-other") == []
        assert stat.S_IMODE(os.stat(os.path.join(data, ACLS_FILE)).st_mode) == 0o600  # the server wrote it owner-only
    with serve(data) as server, admin_as(client, server.bootstrap_servers, "admin") as admin:
        assert admin.describe_acls(topic) == [row], "the ACL did not survive a restart"
        assert admin.delete_acls(topic) == [row]
        assert admin.describe_acls(topic) == []
        assert admin.delete_acls(topic) == []
    with serve(data) as server, admin_as(client, server.bootstrap_servers, "admin") as admin:
        assert admin.describe_acls(topic) == [], "the deleted ACL came back after a restart"
        assert server.authorizer.describe() == []


# --- SCRAM credentials ------------------------------------------------------------------------------

@pytest.mark.parametrize("client", CLIENTS)
def test_scram_user_added_described_deleted(secured, client):
    """A SCRAM-SHA-512 user with 4096 iterations, added through the admin API, logs in with the same
    client; Describe shows mechanism and iterations and nothing of the secret; once the credential is
    deleted the user cannot log in any more."""
    bootstrap = secured.bootstrap_servers
    user, password = f"carol-{client}", f"carol's secret {client}"
    assert not can_log_in(client, bootstrap, user, password, "SCRAM-SHA-512")
    with admin_as(client, bootstrap, "admin") as admin:
        admin.upsert_user(user, "SCRAM-SHA-512", password, 4096)
        assert admin.describe_user(user) == [("SCRAM-SHA-512", 4096)]
        assert password not in repr(admin.last_answer)
    with open(secured.credentials.path, encoding="utf-8") as stored:
        assert password not in stored.read()
    assert stat.S_IMODE(os.stat(secured.credentials.path).st_mode) == 0o600  # the server wrote it owner-only
    assert (user, "SCRAM-SHA-512", 4096) in secured.credentials.users()
    assert can_log_in(client, bootstrap, user, password, "SCRAM-SHA-512")
    assert not can_log_in(client, bootstrap, user, "a wrong password", "SCRAM-SHA-512")
    with admin_as(client, bootstrap, "admin") as admin:
        admin.delete_user(user, "SCRAM-SHA-512")
        with pytest.raises(AdminError) as described:
            admin.describe_user(user)
        assert described.value.name == "RESOURCE_NOT_FOUND"
    assert not can_log_in(client, bootstrap, user, password, "SCRAM-SHA-512")


@pytest.mark.parametrize("client", CLIENTS)
def test_scram_refusals(secured, client):
    """Kafka's refusals: fewer than 4096 iterations is UNACCEPTABLE_CREDENTIAL (and nothing stored),
    deleting a credential that does not exist and describing an unknown user RESOURCE_NOT_FOUND."""
    bootstrap = secured.bootstrap_servers
    before = secured.credentials.users()
    with admin_as(client, bootstrap, "admin") as admin:
        with pytest.raises(AdminError) as few:
            admin.upsert_user(f"dave-{client}", "SCRAM-SHA-256", "pw", 1024)
        assert few.value.name == "UNACCEPTABLE_CREDENTIAL"
        with pytest.raises(AdminError) as missing:
            admin.delete_user(f"nobody-{client}", "SCRAM-SHA-256")
        assert missing.value.name == "RESOURCE_NOT_FOUND"
        with pytest.raises(AdminError) as unknown:
            admin.describe_user(f"nobody-{client}")
        assert unknown.value.name == "RESOURCE_NOT_FOUND"
    assert secured.credentials.users() == before


# --- who may call them ------------------------------------------------------------------------------

@pytest.mark.parametrize("client", CLIENTS)
def test_non_super_user_refused(secured, client):
    """A user without ALTER on the cluster: CreateAcls and AlterUserScramCredentials are refused with
    CLUSTER_AUTHORIZATION_FAILED; no ACL and no credential changed."""
    bootstrap = secured.bootstrap_servers
    acls, users = _stored_acls(secured), secured.credentials.users()
    with admin_as(client, bootstrap, "mallory") as admin:
        with pytest.raises(AdminError) as create:
            admin.create_acl((TOPIC, "*", LITERAL, "User:mallory", "*", READ, ALLOW))
        assert create.value.name == "CLUSTER_AUTHORIZATION_FAILED"
        with pytest.raises(AdminError) as alter:
            admin.upsert_user("mallory", "SCRAM-SHA-512", "takeover", 4096)
        assert alter.value.name == "CLUSTER_AUTHORIZATION_FAILED"
        with pytest.raises(AdminError) as alter_other:
            admin.upsert_user("admin", "SCRAM-SHA-256", "takeover", 4096)
        assert alter_other.value.name == "CLUSTER_AUTHORIZATION_FAILED"
    assert _stored_acls(secured) == acls
    assert secured.credentials.users() == users
    assert can_log_in(client, bootstrap, "admin", USERS["admin"], "SCRAM-SHA-256")
    assert not can_log_in(client, bootstrap, "admin", "takeover", "SCRAM-SHA-256")


# --- without an authorizer --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def unsecured_acls(tmp_path_factory):
    with serve(_data_dir(tmp_path_factory, "authorizer-off"), **{"authorizer.enable": "false"}) as server:
        assert server.authorizer is None
        yield server


@pytest.mark.parametrize("client", CLIENTS)
def test_acl_apis_security_disabled(unsecured_acls, client):
    """``authorizer.enable=false``: DescribeAcls, CreateAcls and DeleteAcls answer SECURITY_DISABLED.
    (librdkafka 2.16 does not pass DescribeAcls' top-level error on: its describe_acls gives an empty
    list where kafka-python raises SecurityDisabledError from the same answer.)"""
    with admin_as(client, unsecured_acls.bootstrap_servers, "admin") as admin:
        calls = [(admin.delete_acls, ("t",)),
                 (admin.create_acl, ((TOPIC, "t", LITERAL, "User:alice", "*", READ, ALLOW),))]
        if client == "confluent-kafka":
            assert admin.describe_acls("t") == []
        else:
            calls.append((admin.describe_acls, ("t",)))
        for call, args in calls:
            with pytest.raises(AdminError) as refused:
                call(*args)
            assert refused.value.name == "SECURITY_DISABLED", call.__name__
