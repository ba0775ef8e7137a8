"""The command line against a secured server: ``logstore --bootstrap-server HOST:PORT
--command-config FILE`` (security.protocol, ssl.ca.location, sasl.*, or the Java clients'
sasl.jaas.config and PEM truststore as Kafka's tools read them) for users, ACLs, topics, append
and read over SASL_SSL with SCRAM; refusals as one line; and ``logstore serve``'s safe default
against a PLAINTEXT listener beyond loopback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from logstore.cli.main import main
from logstore.server import KafkaServer
from logstore.server.security.credentials import CredentialStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
from tls_material import make_tls_material  # noqa: E402


def run(*args, input=None):
    return CliRunner().invoke(main, list(args), input=input)


def properties(path: Path, material, user: str, password: str) -> str:
    path.write_text(f"# a client of the test\nsecurity.protocol = SASL_SSL\nssl.ca.location={material.ca_cert}\n"
                    f"sasl.mechanism=SCRAM-SHA-256\nsasl.username={user}\nsasl.password={password}\n")
    return str(path)


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    material = make_tls_material(tmp_path_factory.mktemp("tls"))
    data = tmp_path_factory.mktemp("data")
    CredentialStore(str(data)).set("admin", "SCRAM-SHA-256", "admin-secret", iterations=4096)
    config = {"ssl.keystore.location": str(material.server_cert), "ssl.key.location": str(material.server_key),
              "super.users": "User:admin", "connection.failed.authentication.delay.ms": 10}
    with KafkaServer(str(data), listen=["SASL_SSL://127.0.0.1:0"], config=config) as server:
        yield server, material, tmp_path_factory.mktemp("props")


def test_users_acls_and_records_through_a_secured_server(secured):
    server, material, props = secured
    admin = ["--bootstrap-server", server.bootstrap_servers, "--command-config",
             properties(props / "admin.properties", material, "admin", "admin-secret")]
    result = run(*admin, "users", "add", "bob", "--mechanism", "SCRAM-SHA-256", "--iterations", "4096",
                 "--password-stdin", input="bob-secret\n")
    assert result.exit_code == 0, result.output
    assert "bob\tSCRAM-SHA-256\t4096" in run(*admin, "users", "list").output.splitlines()
    assert run(*admin, "topics", "create", "orders").exit_code == 0
    assert run(*admin, "topics", "create", "payroll").exit_code == 0
    result = run(*admin, "acls", "add", "--allow-principal", "User:bob", "--topic", "orders", "--producer",
                 "--idempotent")
    assert result.exit_code == 0 and "Added 4 ACLs." in result.output, result.output
    listed = run(*admin, "acls", "list", "--principal", "User:bob").output.splitlines()
    assert "Topic\tLiteral\torders\tUser:bob\t*\tWrite\tAllow" in listed and len(listed) == 4

    bob = ["--bootstrap-server", server.bootstrap_servers, "--command-config",
           properties(props / "bob.properties", material, "bob", "bob-secret")]
    result = run(*bob, "append", "orders", "first order")
    assert result.exit_code == 0 and '"first_offset": 0' in result.output, result.output
    assert run(*bob, "topics", "list").output.split() == ["orders"]  # payroll is not his to see
    result = run(*bob, "read", "orders")
    assert result.exit_code == 1 and "TOPIC_AUTHORIZATION_FAILED" in result.output
    assert len(result.output.strip().splitlines()) == 1
    result = run(*bob, "append", "payroll", "raise")
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1, result.output
    result = run(*bob, "acls", "add", "--allow-principal", "User:bob", "--topic", "payroll", "--operation", "Read")
    assert result.exit_code == 1 and "CLUSTER_AUTHORIZATION_FAILED" in result.output
    assert server.store.get_log("payroll", 0).log_end_offset == 0

    assert run(*admin, "read", "orders").output.count("first order") == 1
    removed = run(*admin, "acls", "remove", "--principal", "User:bob", "--topic", "orders")
    assert "Removed 3 ACLs." in removed.output  # the topic's; IdempotentWrite is the cluster's
    assert run(*admin, "acls", "list", "--principal", "User:bob").output.splitlines() == [
        "Cluster\tLiteral\tkafka-cluster\tUser:bob\t*\tIdempotentWrite\tAllow"]
    result = run(*admin, "users", "delete", "bob")
    assert result.exit_code == 0 and "Deleted 1 credential of user bob." in result.output
    result = run(*bob, "topics", "list")
    assert result.exit_code == 1 and "refused the credentials of 'bob'" in result.output
    assert "bob-secret" not in result.output


def test_bad_client_settings_are_one_line_errors_naming_the_setting(secured, tmp_path):
    server, material, _props = secured
    wrong = tmp_path / "wrong.properties"
    wrong.write_text("security.protocol=SASL_SSL\nsasl.username=admin\nsasl.password=guess\n"
                     f"ssl.ca.location={material.ca_cert}\nsasl.mechanism=SCRAM-SHA-256\n")
    result = run("--bootstrap-server", server.bootstrap_servers, "--command-config", str(wrong), "topics", "list")
    assert result.exit_code == 1 and "refused the credentials of 'admin'" in result.output
    assert "guess" not in result.output
    untrusting = tmp_path / "untrusting.properties"
    untrusting.write_text("security.protocol=SASL_SSL\nsasl.username=admin\nsasl.password=admin-secret\n")
    result = run("--bootstrap-server", server.bootstrap_servers, "--command-config", str(untrusting), "topics", "list")
    assert result.exit_code == 1 and "certificate is not trusted" in result.output
    typo = tmp_path / "typo.properties"
    typo.write_text("security.protocol=SASL_SSL\nsasl.pasword=x\n")
    result = run("--bootstrap-server", server.bootstrap_servers, "--command-config", str(typo), "topics", "list")
    assert result.exit_code == 2 and "typo.properties line 2: 'sasl.pasword' is not a security setting" in result.output
    assert len(result.output.strip().splitlines()) == 1


# Client properties files as Kafka's docs show them (the Java clients' names): sasl.jaas.config with
# the Plain or Scram login module, a PEM truststore, ':' and '=' separators, continued lines, escapes.
KAFKA_DOCS_SCRAM = """# kafka-topics.sh --command-config client.properties
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-256
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
    username="admin" \\
    password="admin-secret";
ssl.truststore.type=PEM
ssl.truststore.location={ca}
"""
KAFKA_DOCS_PLAIN = """! the same with ':' separators and escapes
security.protocol: SASL_SSL
sasl.mechanism: PLAIN
sasl.jaas.config: org.apache.kafka.common.security.plain.PlainLoginModule required username\\="\\u0061dmin" \\
                  password="admin\\u002dsecret";
ssl.truststore.location : {ca}
ssl.truststore.type : PEM
"""


@pytest.mark.parametrize("text", [KAFKA_DOCS_SCRAM, KAFKA_DOCS_PLAIN], ids=["scram", "plain"])
def test_a_kafka_tools_client_properties_file_reaches_the_sasl_server(secured, tmp_path, text):
    server, material, _props = secured
    path = tmp_path / "client.properties"
    path.write_text(text.format(ca=material.ca_cert))
    result = run("--bootstrap-server", server.bootstrap_servers, "--command-config", str(path), "topics", "create",
                 f"java-{tmp_path.name}")
    assert result.exit_code == 0, result.output
    result = run("--bootstrap-server", server.bootstrap_servers, "--command-config", str(path), "topics", "list")
    assert result.exit_code == 0 and f"java-{tmp_path.name}" in result.output.split(), result.output
    wrong = tmp_path / "wrong.properties"
    wrong.write_text(text.format(ca=material.ca_cert).replace("secret", "guess"))
    result = run("--bootstrap-server", server.bootstrap_servers, "--command-config", str(wrong), "topics", "list")
    assert result.exit_code == 1 and "refused the credentials of 'admin'" in result.output, result.output
    assert "guess" not in result.output


@pytest.mark.parametrize("lines, said", [
    ("sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
     "line 3: login module org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule is not read here"),
    ("sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"a\" "
     "password=\"hidden\";", "line 3: ScramLoginModule serves sasl.mechanism SCRAM-SHA-256 or SCRAM-SHA-512, "
     "not PLAIN"),
    ("sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"a\" "
     "password=\"hidden\"", "line 3: sasl.jaas.config must be one login module"),
    ("sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"a\";",
     "line 3: sasl.jaas.config has no password"),
    ("ssl.truststore.type=JKS", "line 3: ssl.truststore.type=JKS: only PEM files are read"),
    ("sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"a\" "
     "password=\"hidden\";\nsasl.username=b", "line 3: sasl.jaas.config and sasl.username disagree"),
])
def test_a_bad_java_client_setting_is_one_line_naming_the_file_and_line(tmp_path, lines, said):
    path = tmp_path / "client.properties"
    path.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n{lines}\n")
    result = run("--bootstrap-server", "127.0.0.1:1", "--command-config", str(path), "topics", "list")
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert f"{path} {said}" in result.output and "hidden" not in result.output


def test_serve_refuses_a_remote_plaintext_listener_without_the_flag(tmp_path):
    result = run("--dir", str(tmp_path), "serve", "--listen", "PLAINTEXT://0.0.0.0:0")
    assert result.exit_code == 1 and "--allow-plaintext-remote" in result.output
    assert len(result.output.strip().splitlines()) == 1
    result = run("--dir", str(tmp_path), "serve", "--listen", "SSL://127.0.0.1:0")
    assert result.exit_code == 1 and "ssl.keystore.location" in result.output
