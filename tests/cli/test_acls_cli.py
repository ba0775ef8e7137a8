"""``logstore acls`` (add, remove, list): ACLs stored in the store's first data dir, Kafka's names in
and out, the --producer/--consumer conveniences, and bad input refused in one line with exit code 2
and nothing stored."""

from __future__ import annotations

from click.testing import CliRunner

from logstore.cli.main import main
from logstore.server.security.acl_store import ACLS_FILE, AclStore
from logstore.server.security.acls import (CLUSTER_NAME, OP_CREATE, OP_DESCRIBE, OP_IDEMPOTENT_WRITE, OP_READ,
                                           OP_WRITE, PATTERN_LITERAL, PATTERN_PREFIXED, PERMISSION_ALLOW,
                                           RESOURCE_CLUSTER, RESOURCE_GROUP, RESOURCE_TOPIC, AclBinding, Authorizer)


def cli(store_dir, *args):
    return CliRunner().invoke(main, ["--dir", str(store_dir), *args])


def acl(name, op, principal="User:alice", permission=PERMISSION_ALLOW, pattern=PATTERN_LITERAL, kind=RESOURCE_TOPIC,
        host="*"):
    return AclBinding(kind, name, pattern, principal, host, op, permission)


def test_add_list_remove_round_trip(tmp_path):
    result = cli(tmp_path, "acls", "add", "--allow-principal", "User:alice", "--operation", "read",
                 "--operation", "Describe", "--topic", "payments")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == ["Topic\tLiteral\tpayments\tUser:alice\t*\tRead\tAllow",
                                          "Topic\tLiteral\tpayments\tUser:alice\t*\tDescribe\tAllow",
                                          "Added 2 ACLs."]
    result = cli(tmp_path, "acls", "add", "--deny-principal", "User:bob", "--deny-host", "10.0.0.9",
                 "--operation", "WRITE", "--topic", "pay", "--resource-pattern-type", "prefixed",
                 "--operation", "read")
    assert result.exit_code == 0 and result.output.splitlines()[-1] == "Added 2 ACLs."
    result = cli(tmp_path, "acls", "add", "--allow-principal", "User:alice", "--operation", "Read", "--topic",
                 "payments")
    assert result.output.strip() == "Added 0 ACLs (1 already present)."
    assert cli(tmp_path, "acls", "list").output.splitlines() == [  # sorted: type, name, pattern, ...
        "Topic\tPrefixed\tpay\tUser:bob\t10.0.0.9\tRead\tDeny",
        "Topic\tPrefixed\tpay\tUser:bob\t10.0.0.9\tWrite\tDeny",
        "Topic\tLiteral\tpayments\tUser:alice\t*\tRead\tAllow",
        "Topic\tLiteral\tpayments\tUser:alice\t*\tDescribe\tAllow"]
    # What the server will enforce: alice reads, bob from 10.0.0.9 does not, bob from elsewhere has no allow.
    auth = Authorizer(AclStore(str(tmp_path)))
    assert auth.authorize("User:alice", "10.0.0.9", OP_READ, RESOURCE_TOPIC, "payments")
    assert not auth.authorize("User:bob", "10.0.0.9", OP_WRITE, RESOURCE_TOPIC, "payments")
    # Filters: MATCH finds what applies to a topic; --principal either permission.
    assert len(cli(tmp_path, "acls", "list", "--topic", "payments", "--resource-pattern-type", "match")
               .output.splitlines()) == 4
    assert cli(tmp_path, "acls", "list", "--principal", "User:bob", "--operation", "write").output.splitlines() == [
        "Topic\tPrefixed\tpay\tUser:bob\t10.0.0.9\tWrite\tDeny"]
    assert cli(tmp_path, "acls", "list", "--group", "g").output.strip() == "No ACLs."
    result = cli(tmp_path, "acls", "remove", "--deny-principal", "User:bob")
    assert result.exit_code == 0 and result.output.splitlines() == [
        "Topic\tPrefixed\tpay\tUser:bob\t10.0.0.9\tRead\tDeny",
        "Topic\tPrefixed\tpay\tUser:bob\t10.0.0.9\tWrite\tDeny", "Removed 2 ACLs."]
    result = cli(tmp_path, "acls", "remove")
    assert result.exit_code == 2 and "--force" in result.output  # everything, only when asked
    assert cli(tmp_path, "acls", "remove", "--force").output.splitlines()[-1] == "Removed 2 ACLs."
    assert cli(tmp_path, "acls", "list").output.strip() == "No ACLs."


def test_producer_and_consumer_conveniences(tmp_path):
    result = cli(tmp_path, "acls", "add", "--allow-principal", "User:app", "--producer", "--idempotent",
                 "--topic", "orders", "--resource-pattern-type", "prefixed")
    assert result.exit_code == 0, result.output
    result = cli(tmp_path, "acls", "add", "--allow-principal", "User:reader", "--consumer", "--topic", "orders",
                 "--group", "billing")
    assert result.exit_code == 0, result.output
    assert set(AclStore(str(tmp_path)).bindings()) == {
        *(acl("orders", op, "User:app", pattern=PATTERN_PREFIXED) for op in (OP_WRITE, OP_DESCRIBE, OP_CREATE)),
        acl(CLUSTER_NAME, OP_IDEMPOTENT_WRITE, "User:app", kind=RESOURCE_CLUSTER),
        acl("orders", OP_READ, "User:reader"), acl("orders", OP_DESCRIBE, "User:reader"),
        acl("billing", OP_READ, "User:reader", kind=RESOURCE_GROUP)}
    auth = Authorizer(AclStore(str(tmp_path)))
    assert auth.authorize("User:app", "10.1.1.1", OP_WRITE, RESOURCE_TOPIC, "orders-eu")
    assert auth.authorize_any("User:app", "10.1.1.1", OP_IDEMPOTENT_WRITE, RESOURCE_CLUSTER)
    assert not auth.authorize("User:reader", "10.1.1.1", OP_WRITE, RESOURCE_TOPIC, "orders")
    # A filter's name is every pattern type's unless narrowed: the literal ones are the consumer's.
    result = cli(tmp_path, "acls", "remove", "--consumer", "--topic", "orders", "--group", "billing",
                 "--resource-pattern-type", "literal")
    assert result.exit_code == 0 and result.output.splitlines()[-1] == "Removed 3 ACLs."
    assert len(AclStore(str(tmp_path)).bindings()) == 4


def test_bad_input_is_one_line_exit_2_and_nothing_stored(tmp_path):
    for args, named in [
            (["--allow-principal", "User:alice", "--operation", "Reed", "--topic", "t"], "'Reed'"),
            (["--allow-principal", "alice", "--operation", "Read", "--topic", "t"], "'alice'"),
            (["--allow-principal", "User:alice", "--allow-host", "somewhere", "--operation", "Read", "--topic", "t"],
             "'somewhere'"),
            (["--allow-principal", "User:alice", "--operation", "Write", "--group", "g"], "Write"),
            (["--allow-principal", "User:alice", "--operation", "Read"], "resource"),
            (["--operation", "Read", "--topic", "t"], "principal"),
            (["--allow-principal", "User:alice", "--consumer", "--topic", "t"], "group"),
            (["--allow-principal", "User:alice", "--operation", "Read", "--topic", "t",
              "--resource-pattern-type", "match"], "'match'")]:
        result = cli(tmp_path, "acls", "add", *args)
        assert result.exit_code == 2, (args, result.output)
        assert len(result.output.strip().splitlines()) == 1 and named in result.output, (args, result.output)
    result = cli(tmp_path, "acls", "list", "--principal", "bob")
    assert result.exit_code == 2 and "'bob'" in result.output
    assert not (tmp_path / ACLS_FILE).exists()
    assert cli(tmp_path, "acls", "list").output.strip() == "No ACLs."
