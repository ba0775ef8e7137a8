"""ACLs and the ``Authorizer`` (``logstore.server.security.acls``): Kafka's rules one by one (deny beats
allow, prefixes, wildcards, hosts, implied operations, super users, allow.everyone.if.no.acl.found),
authorize_any, validation, filters; and hypothesis comparing ``authorize`` with a plain loop over the
bindings and ``authorize_any`` with a brute-force search over a finite universe of names."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logstore.server.security.acl_store import AclStore
from logstore.server.security.acls import (CLUSTER_NAME, OP_ALL, OP_ALTER, OP_ALTER_CONFIGS, OP_CREATE, OP_DELETE,
                                           OP_DESCRIBE, OP_DESCRIBE_CONFIGS, OP_IDEMPOTENT_WRITE, OP_READ, OP_WRITE,
                                           PATTERN_ANY, PATTERN_LITERAL, PATTERN_MATCH, PATTERN_PREFIXED,
                                           PERMISSION_ALLOW, PERMISSION_DENY, RESOURCE_ANY, RESOURCE_CLUSTER,
                                           RESOURCE_GROUP, RESOURCE_TOPIC, RESOURCE_TRANSACTIONAL_ID, OPERATIONS,
                                           SUPPORTED_OPERATIONS, AclBinding, AclBindingFilter, Authorizer,
                                           bindings_for, filters_for)

ALICE, BOB, EVERYONE = "User:alice", "User:bob", "User:*"
HOST = "10.0.0.1"


class MemoryStore:
    """The three calls the Authorizer makes of an AclStore, in memory (for hypothesis)."""

    def __init__(self, bindings=()) -> None:
        self.set = set(bindings)

    def add(self, bindings):
        added = [binding for binding in dict.fromkeys(bindings) if binding not in self.set]
        self.set.update(added)
        return added

    def remove(self, filters):
        removed = {binding for binding in self.set if any(found.matches(binding) for found in filters)}
        self.set -= removed
        return sorted(removed)

    def bindings(self):
        return tuple(sorted(self.set))


def acl(name, op, permission=PERMISSION_ALLOW, principal=ALICE, host="*", pattern=PATTERN_LITERAL,
        kind=RESOURCE_TOPIC):
    return AclBinding(kind, name, pattern, principal, host, op, permission)


def authorizer(*bindings, **options) -> Authorizer:
    return Authorizer(MemoryStore(bindings), **options)


def test_deny_beats_allow_and_all_covers_every_operation():
    auth = authorizer(acl("t", OP_READ), acl("t", OP_WRITE), acl("t", OP_WRITE, PERMISSION_DENY))
    assert auth.authorize(ALICE, HOST, OP_READ, RESOURCE_TOPIC, "t")
    assert not auth.authorize(ALICE, HOST, OP_WRITE, RESOURCE_TOPIC, "t")
    assert not auth.authorize(ALICE, HOST, OP_DELETE, RESOURCE_TOPIC, "t")  # ACLs exist: no allow, no access
    auth = authorizer(acl("t", OP_ALL), acl("t", OP_ALL, PERMISSION_DENY, principal=BOB), acl("t", OP_READ, principal=BOB))
    assert all(auth.authorize(ALICE, HOST, op, RESOURCE_TOPIC, "t") for op in SUPPORTED_OPERATIONS[RESOURCE_TOPIC])
    assert not auth.authorize(BOB, HOST, OP_READ, RESOURCE_TOPIC, "t")
    auth = authorizer(acl("t", OP_READ), acl("t", OP_READ, PERMISSION_DENY, principal=EVERYONE))
    assert not auth.authorize(ALICE, HOST, OP_READ, RESOURCE_TOPIC, "t")  # a deny for everyone is one for alice


def test_prefixed_literal_and_wildcard_resources():
    auth = authorizer(acl("pay", OP_READ, pattern=PATTERN_PREFIXED), acl("log", OP_READ))
    assert auth.authorize(ALICE, HOST, OP_READ, RESOURCE_TOPIC, "payments")
    assert auth.authorize(ALICE, HOST, OP_READ, RESOURCE_TOPIC, "pay")
    assert not auth.authorize(ALICE, HOST, OP_READ, RESOURCE_TOPIC, "pa")
    assert not auth.authorize(ALICE, HOST, OP_READ, RESOURCE_TOPIC, "logs")  # a literal is no prefix
    assert not auth.authorize(ALICE, HOST, OP_READ, RESOURCE_GROUP, "payments")  # nor another type
    auth = authorizer(acl("*", OP_READ), acl("sec", OP_READ, PERMISSION_DENY, pattern=PATTERN_PREFIXED))
    assert auth.authorize(ALICE, HOST, OP_READ, RESOURCE_TOPIC, "anything")
    assert not auth.authorize(ALICE, HOST, OP_READ, RESOURCE_TOPIC, "secrets")
    auth = authorizer(acl("*", OP_READ, pattern=PATTERN_PREFIXED))  # a prefixed "*" is just the character
    assert not auth.authorize(ALICE, HOST, OP_READ, RESOURCE_TOPIC, "t")
    assert auth.authorize(ALICE, HOST, OP_READ, RESOURCE_TOPIC, "*t")


def test_wildcard_principal_and_hosts():
    auth = authorizer(acl("t", OP_READ, principal=EVERYONE), acl("t", OP_WRITE, host="10.0.0.2"))
    assert auth.authorize(BOB, HOST, OP_READ, RESOURCE_TOPIC, "t")
    assert auth.authorize("Group:ops", HOST, OP_READ, RESOURCE_TOPIC, "t")  # "User:*" is every principal
    assert auth.authorize(ALICE, "10.0.0.2", OP_WRITE, RESOURCE_TOPIC, "t")
    assert not auth.authorize(ALICE, HOST, OP_WRITE, RESOURCE_TOPIC, "t")
    assert not auth.authorize(BOB, "10.0.0.2", OP_WRITE, RESOURCE_TOPIC, "t")
    auth = authorizer(acl("t", OP_READ, principal="Group:*"))
    assert not auth.authorize(ALICE, HOST, OP_READ, RESOURCE_TOPIC, "t")  # only User:* is a wildcard


def test_operations_that_imply_describe():
    for op in (OP_READ, OP_WRITE, OP_DELETE, OP_ALTER):
        auth = authorizer(acl("t", op))
        assert auth.authorize(ALICE, HOST, OP_DESCRIBE, RESOURCE_TOPIC, "t"), op
    auth = authorizer(acl("t", OP_CREATE), acl("t", OP_ALTER_CONFIGS, principal=BOB))
    assert not auth.authorize(ALICE, HOST, OP_DESCRIBE, RESOURCE_TOPIC, "t")
    assert auth.authorize(BOB, HOST, OP_DESCRIBE_CONFIGS, RESOURCE_TOPIC, "t")
    assert not auth.authorize(BOB, HOST, OP_ALTER_CONFIGS, RESOURCE_TOPIC, "u")
    auth = authorizer(acl("t", OP_READ))
    assert not auth.authorize(ALICE, HOST, OP_WRITE, RESOURCE_TOPIC, "t")  # implication goes one way
    # Kafka: a deny is for its operation (or All) only; denying Read does not deny the Describe it implied.
    auth = authorizer(acl("t", OP_READ), acl("t", OP_DESCRIBE), acl("t", OP_READ, PERMISSION_DENY))
    assert auth.authorize(ALICE, HOST, OP_DESCRIBE, RESOURCE_TOPIC, "t")
    auth = authorizer(acl("t", OP_READ), acl("t", OP_DESCRIBE, PERMISSION_DENY))
    assert not auth.authorize(ALICE, HOST, OP_DESCRIBE, RESOURCE_TOPIC, "t")


def test_super_users_and_allow_everyone_if_no_acl_found():
    auth = authorizer(acl("t", OP_ALL, PERMISSION_DENY, principal=EVERYONE), super_users=["User:admin"])
    assert auth.authorize("User:admin", HOST, OP_DELETE, RESOURCE_TOPIC, "t")
    assert auth.authorize_any("User:admin", HOST, OP_WRITE, RESOURCE_TOPIC)
    assert not auth.authorize(ALICE, HOST, OP_DELETE, RESOURCE_TOPIC, "t")
    open_auth = authorizer(acl("t", OP_READ, principal=BOB), allow_everyone_if_no_acl_found=True)
    assert open_auth.authorize(ALICE, HOST, OP_WRITE, RESOURCE_TOPIC, "other")  # no ACL on "other"
    assert not open_auth.authorize(ALICE, HOST, OP_READ, RESOURCE_TOPIC, "t")  # bob's ACL applies to "t"
    assert not authorizer(acl("t", OP_READ, principal=BOB)).authorize(ALICE, HOST, OP_WRITE, RESOURCE_TOPIC, "other")
    with pytest.raises(ValueError, match="'admin'"):
        authorizer(super_users=["admin"])


def test_authorize_any():
    def any_write(*bindings, **options):
        return authorizer(*bindings, **options).authorize_any(ALICE, HOST, OP_WRITE, RESOURCE_TOPIC)

    assert any_write(acl("t", OP_WRITE))
    assert not any_write(acl("t", OP_READ))
    assert not any_write(acl("t", OP_WRITE), acl("t", OP_WRITE, PERMISSION_DENY))
    assert any_write(acl("t", OP_WRITE), acl("u", OP_WRITE, PERMISSION_DENY))
    assert not any_write(acl("t", OP_WRITE), acl("*", OP_ALL, PERMISSION_DENY))
    assert not any_write(acl("payments", OP_WRITE), acl("pay", OP_WRITE, PERMISSION_DENY, pattern=PATTERN_PREFIXED))
    assert not any_write(acl("pay", OP_WRITE, pattern=PATTERN_PREFIXED),
                         acl("p", OP_WRITE, PERMISSION_DENY, pattern=PATTERN_PREFIXED))
    # A longer denied prefix, or a denied literal of the same name, leaves other names under the prefix.
    assert any_write(acl("pay", OP_WRITE, pattern=PATTERN_PREFIXED),
                     acl("paym", OP_WRITE, PERMISSION_DENY, pattern=PATTERN_PREFIXED),
                     acl("pay", OP_WRITE, PERMISSION_DENY))
    # A denied prefix covers an allowed literal or prefix of its very name.
    assert not any_write(acl("t", OP_WRITE), acl("t", OP_WRITE, PERMISSION_DENY, pattern=PATTERN_PREFIXED))
    assert not any_write(acl("t", OP_WRITE, pattern=PATTERN_PREFIXED),
                         acl("t", OP_ALL, PERMISSION_DENY, pattern=PATTERN_PREFIXED))
    assert any_write(acl("*", OP_WRITE), acl("t", OP_WRITE, PERMISSION_DENY),
                     acl("t", OP_WRITE, PERMISSION_DENY, pattern=PATTERN_PREFIXED))
    assert not any_write(acl("t", OP_WRITE, host="10.0.0.9"))
    assert not any_write(acl("t", OP_WRITE, kind=RESOURCE_TRANSACTIONAL_ID))
    assert not any_write()
    assert any_write(acl("g", OP_READ, kind=RESOURCE_GROUP), allow_everyone_if_no_acl_found=True)
    assert any_write(acl("t", OP_READ, principal=BOB), allow_everyone_if_no_acl_found=True)  # "u" has no ACL
    assert not any_write(acl("*", OP_READ, principal=BOB), allow_everyone_if_no_acl_found=True)
    auth = authorizer(acl("t", OP_READ), acl(CLUSTER_NAME, OP_IDEMPOTENT_WRITE, kind=RESOURCE_CLUSTER))
    assert auth.authorize_any(ALICE, HOST, OP_DESCRIBE, RESOURCE_TOPIC)  # Read implies Describe
    assert auth.authorize_any(ALICE, HOST, OP_IDEMPOTENT_WRITE, RESOURCE_CLUSTER)
    assert not auth.authorize_any(BOB, HOST, OP_IDEMPOTENT_WRITE, RESOURCE_CLUSTER)


def test_authorized_operations():
    auth = authorizer(acl("t", OP_READ), acl("t", OP_ALTER_CONFIGS))
    assert auth.authorized_operations(ALICE, HOST, RESOURCE_TOPIC, "t") == {OP_READ, OP_DESCRIBE, OP_ALTER_CONFIGS,
                                                                            OP_DESCRIBE_CONFIGS}
    assert auth.authorized_operations(BOB, HOST, RESOURCE_TOPIC, "t") == set()
    assert authorizer(super_users=[BOB]).authorized_operations(BOB, HOST, RESOURCE_GROUP, "g") == \
        SUPPORTED_OPERATIONS[RESOURCE_GROUP]


@pytest.mark.parametrize("fields, message", [
    ((RESOURCE_ANY, "t", PATTERN_LITERAL, ALICE, "*", OP_READ, PERMISSION_ALLOW), "resource type 1"),
    ((RESOURCE_TOPIC, "t", PATTERN_MATCH, ALICE, "*", OP_READ, PERMISSION_ALLOW), "pattern type 2"),
    ((RESOURCE_TOPIC, "t", PATTERN_LITERAL, ALICE, "*", 99, PERMISSION_ALLOW), "operation 99"),
    ((RESOURCE_TOPIC, "t", PATTERN_LITERAL, ALICE, "*", OP_READ, 1), "permission 1"),
    ((RESOURCE_TOPIC, "t", PATTERN_LITERAL, "alice", "*", OP_READ, PERMISSION_ALLOW), "'alice'"),
    ((RESOURCE_TOPIC, "t", PATTERN_LITERAL, "User:", "*", OP_READ, PERMISSION_ALLOW), "'User:'"),
    ((RESOURCE_TOPIC, "t", PATTERN_LITERAL, ALICE, "example.com", OP_READ, PERMISSION_ALLOW), "'example.com'"),
    ((RESOURCE_CLUSTER, "c", PATTERN_LITERAL, ALICE, "*", OP_ALTER, PERMISSION_ALLOW), "'c'"),
    ((RESOURCE_CLUSTER, CLUSTER_NAME, PATTERN_PREFIXED, ALICE, "*", OP_ALTER, PERMISSION_ALLOW), "Prefixed"),
    ((RESOURCE_TOPIC, "", PATTERN_PREFIXED, ALICE, "*", OP_READ, PERMISSION_ALLOW), "''"),
    ((RESOURCE_GROUP, "g", PATTERN_LITERAL, ALICE, "*", OP_WRITE, PERMISSION_ALLOW), "Write"),
    ((RESOURCE_TRANSACTIONAL_ID, "x", PATTERN_LITERAL, ALICE, "*", OP_READ, PERMISSION_ALLOW), "Read"),
    ((RESOURCE_TOPIC, "t", PATTERN_LITERAL, ALICE, "*", OP_IDEMPOTENT_WRITE, PERMISSION_ALLOW), "IdempotentWrite"),
])
def test_invalid_bindings_are_refused_naming_the_value(fields, message):
    with pytest.raises(ValueError, match=message):
        AclBinding(*fields)


def test_valid_bindings_and_type_errors():
    AclBinding(RESOURCE_TOPIC, "t", PATTERN_LITERAL, ALICE, "::1", OP_ALL, PERMISSION_DENY)
    AclBinding(RESOURCE_CLUSTER, CLUSTER_NAME, PATTERN_LITERAL, EVERYONE, "192.168.1.1", OP_IDEMPOTENT_WRITE,
               PERMISSION_ALLOW)
    with pytest.raises(TypeError, match="'3'"):
        AclBinding(RESOURCE_TOPIC, "t", PATTERN_LITERAL, ALICE, "*", "3", PERMISSION_ALLOW)
    with pytest.raises(TypeError, match="b't'"):
        AclBinding(RESOURCE_TOPIC, b"t", PATTERN_LITERAL, ALICE, "*", OP_READ, PERMISSION_ALLOW)
    with pytest.raises(ValueError, match="got 1$"):
        authorizer().authorize(ALICE, HOST, 1, RESOURCE_TOPIC, "t")


def test_filters_match_as_kafkas_do():
    literal, wild, prefixed = acl("payments", OP_READ), acl("*", OP_READ), acl("pay", OP_READ, pattern=PATTERN_PREFIXED)
    other = acl("pay", OP_WRITE, PERMISSION_DENY, principal=BOB, host=HOST)
    everything = [literal, wild, prefixed, other]

    def matched(**fields):
        found = AclBindingFilter(**fields)
        return [binding for binding in everything if found.matches(binding)]

    assert matched() == everything
    assert matched(resource_type=RESOURCE_GROUP) == []
    assert matched(resource_name="pay") == [prefixed, other]  # ANY pattern with a name: that very name
    assert matched(resource_name="pay", pattern_type=PATTERN_LITERAL) == [other]
    assert matched(pattern_type=PATTERN_PREFIXED) == [prefixed]
    assert matched(resource_name="payments", pattern_type=PATTERN_MATCH) == [literal, wild, prefixed]
    assert matched(resource_name="pa", pattern_type=PATTERN_MATCH) == [wild]
    assert matched(resource_name="pay", pattern_type=PATTERN_MATCH) == [wild, prefixed, other]
    assert matched(pattern_type=PATTERN_MATCH) == everything
    assert matched(principal=BOB) == [other] == matched(host=HOST) == matched(permission=PERMISSION_DENY)
    assert matched(operation=OP_WRITE) == [other]
    with pytest.raises(ValueError, match="operation 42"):
        AclBindingFilter(operation=42)
    with pytest.raises(TypeError, match="3"):
        AclBindingFilter(principal=3)


def test_create_delete_describe_through_the_store_and_the_memo_follows(tmp_path):
    auth = Authorizer(AclStore(str(tmp_path)))
    assert not auth.authorize(ALICE, HOST, OP_READ, RESOURCE_TOPIC, "t")  # remembered as False
    assert auth.create([acl("t", OP_READ), acl("t", OP_READ), acl("u", OP_WRITE)]) == [None, None, None]
    assert auth.authorize(ALICE, HOST, OP_READ, RESOURCE_TOPIC, "t")
    assert auth.describe() == sorted([acl("t", OP_READ), acl("u", OP_WRITE)])
    assert auth.describe(AclBindingFilter(operation=OP_WRITE)) == [acl("u", OP_WRITE)]
    assert Authorizer(AclStore(str(tmp_path))).authorize(ALICE, HOST, OP_READ, RESOURCE_TOPIC, "t")  # durable
    removed = auth.delete([AclBindingFilter(resource_name="t"), AclBindingFilter(pattern_type=PATTERN_ANY),
                           AclBindingFilter(resource_name="x")])
    assert removed == [[acl("t", OP_READ)], sorted([acl("t", OP_READ), acl("u", OP_WRITE)]), []]
    assert not auth.authorize(ALICE, HOST, OP_READ, RESOURCE_TOPIC, "t")
    assert auth.describe() == []
    with pytest.raises(TypeError):
        auth.create([("t", OP_READ)])


def test_a_failed_write_is_each_creations_error_and_changes_no_answer():
    class FullStore(MemoryStore):
        def add(self, bindings):
            raise OSError(28, "No space left on device")

    auth = Authorizer(FullStore())
    results = auth.create([acl("t", OP_READ), acl("u", OP_READ)])
    assert [type(result) for result in results] == [OSError, OSError]
    assert not auth.authorize(ALICE, HOST, OP_READ, RESOURCE_TOPIC, "t")


def test_bindings_and_filters_for_cli_options():
    assert bindings_for(allow_principals=[ALICE], operations=["read", "DESCRIBE"], topics=["t"]) == [
        acl("t", OP_READ), acl("t", OP_DESCRIBE)]
    producer = bindings_for(allow_principals=[ALICE], topics=["t"], producer=True, idempotent=True,
                            pattern_type=PATTERN_PREFIXED)
    assert producer == [acl("t", op, pattern=PATTERN_PREFIXED) for op in (OP_WRITE, OP_DESCRIBE, OP_CREATE)] + [
        acl(CLUSTER_NAME, OP_IDEMPOTENT_WRITE, kind=RESOURCE_CLUSTER)]
    consumer = bindings_for(deny_principals=[BOB], deny_hosts=[HOST], topics=["t"], groups=["g"], consumer=True)
    assert consumer == [acl("t", OP_READ, PERMISSION_DENY, BOB, HOST), acl("t", OP_DESCRIBE, PERMISSION_DENY, BOB, HOST),
                        acl("g", OP_READ, PERMISSION_DENY, BOB, HOST, kind=RESOURCE_GROUP)]
    for options, message in [(dict(operations=["Read"], topics=["t"]), "principal"),
                             (dict(allow_principals=[ALICE], operations=["Reed"], topics=["t"]), "'Reed'"),
                             (dict(allow_principals=["alice"], operations=["Read"], topics=["t"]), "'alice'"),
                             (dict(allow_principals=[ALICE], operations=["Read"]), "resource"),
                             (dict(allow_principals=[ALICE], topics=["t"]), "operation"),
                             (dict(allow_principals=[ALICE], topics=["t"], consumer=True), "group"),
                             (dict(allow_principals=[ALICE], groups=["g"], operations=["Write"]), "Write"),
                             (dict(allow_principals=[ALICE], allow_hosts=["nowhere"], topics=["t"],
                                   operations=["Read"]), "'nowhere'")]:
        with pytest.raises(ValueError, match=message):
            bindings_for(**options)
    assert filters_for() == [AclBindingFilter()]
    assert filters_for(principals=[BOB], topics=["t"], pattern_type=PATTERN_MATCH) == [
        AclBindingFilter(RESOURCE_TOPIC, "t", PATTERN_MATCH, BOB)]
    assert filters_for(cluster=True, allow_hosts=[HOST]) == [
        AclBindingFilter(RESOURCE_CLUSTER, CLUSTER_NAME, PATTERN_ANY, None, HOST, permission=PERMISSION_ALLOW)]


# --- hypothesis: the index against a plain loop ----------------------------------------------------

NAMES = st.one_of(st.just("*"), st.text("ab", min_size=1, max_size=3))
PRINCIPALS = [ALICE, BOB, EVERYONE]
HOSTS = ["*", HOST, "10.0.0.2"]
KINDS = [RESOURCE_TOPIC, RESOURCE_GROUP]
QUERY_OPS = sorted(set(OPERATIONS.values()))


@st.composite
def bindings(draw, names=NAMES, principals=PRINCIPALS, hosts=HOSTS):
    kind = draw(st.sampled_from(KINDS))
    return AclBinding(kind, draw(names), draw(st.sampled_from([PATTERN_LITERAL, PATTERN_PREFIXED])),
                      draw(st.sampled_from(principals)), draw(st.sampled_from(hosts)),
                      draw(st.sampled_from(sorted(SUPPORTED_OPERATIONS[kind] | {OP_ALL}))),
                      draw(st.sampled_from([PERMISSION_ALLOW, PERMISSION_DENY])))


def model_authorize(acls, super_users, allow_everyone, principal, host, op, kind, name) -> bool:
    """Kafka's rules as they read, over every binding: no index, no memo."""
    if principal in super_users:
        return True
    applying = [b for b in acls if b.resource_type == kind and (
        (b.pattern_type == PATTERN_LITERAL and b.resource_name in (name, "*"))
        or (b.pattern_type == PATTERN_PREFIXED and name.startswith(b.resource_name)))]
    if not applying:
        return allow_everyone
    mine = [b for b in applying if b.principal in (principal, EVERYONE) and b.host in (host, "*")]
    if any(b.permission == PERMISSION_DENY and b.operation in (op, OP_ALL) for b in mine):
        return False
    granting = {op, OP_ALL} | ({OP_READ, OP_WRITE, OP_DELETE, OP_ALTER} if op == OP_DESCRIBE else set()) | (
        {OP_ALTER_CONFIGS} if op == OP_DESCRIBE_CONFIGS else set())
    return any(b.permission == PERMISSION_ALLOW and b.operation in granting for b in mine)


QUERIES = st.tuples(st.sampled_from([ALICE, BOB, "User:carol"]), st.sampled_from([HOST, "10.0.0.2", "10.0.0.3"]),
                    st.sampled_from(QUERY_OPS), st.sampled_from(KINDS), st.text("ab*", min_size=1, max_size=4))


@settings(max_examples=300, deadline=None)
@given(first=st.lists(bindings(), max_size=12), second=st.lists(bindings(), max_size=6),
       queries=st.lists(QUERIES, min_size=1, max_size=20), super_users=st.sampled_from([(), (BOB,)]),
       allow_everyone=st.booleans())
def test_authorize_agrees_with_a_loop_over_the_bindings(first, second, queries, super_users, allow_everyone):
    auth = authorizer(*first, super_users=super_users, allow_everyone_if_no_acl_found=allow_everyone)
    for acls in (first, first + second):
        for _ in range(2):  # the second round is answered from the memo
            for query in queries:
                assert auth.authorize(*query) == model_authorize(acls, super_users, allow_everyone, *query), query
        auth.create(second)  # the memo and the index follow the change


# Fewer names, principals and hosts than above: denies and allows must meet on one name to matter.
@settings(max_examples=400, deadline=None)
@given(acls=st.lists(bindings(st.sampled_from(["a", "ab", "b", "*"]), [ALICE, EVERYONE],
                              ["*", HOST]), max_size=12), query=QUERIES, super_users=st.sampled_from([(), (BOB,)]),
       allow_everyone=st.booleans())
def test_authorize_any_agrees_with_a_search_over_names(acls, query, super_users, allow_everyone):
    principal, host, op, kind, _ = query

    def expected(acls):
        # Every name a binding has, each followed by a character no binding uses (a name under each
        # prefix that no longer literal or prefix reaches), and that character alone (no ACL reaches it).
        universe = {b.resource_name for b in acls} | {b.resource_name + "~" for b in acls} | {"~"}
        return any(model_authorize(acls, super_users, allow_everyone, principal, host, op, kind, name)
                   for name in universe)

    half = len(acls) // 2
    auth = authorizer(*acls[:half], super_users=super_users, allow_everyone_if_no_acl_found=allow_everyone)
    for _ in range(2):  # the second answer comes from the memo
        assert auth.authorize_any(principal, host, op, kind) == expected(acls[:half])
    auth.create(acls[half:])
    assert auth.authorize_any(principal, host, op, kind) == expected(acls)
