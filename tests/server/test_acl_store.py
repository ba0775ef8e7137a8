"""``AclStore`` (``logstore.server.security.acl_store``): ACLs kept durably in the data dir; a hypothesis model
with reopen as a step; duplicates; removal by filters; a damaged file refused and left alone; a failed
write leaving the previous set in memory and on disk; one write per call; the file owner-only (0600)."""

from __future__ import annotations

import json
import os
import stat
import tempfile

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from logstore.errors import CorruptCheckpointError
from logstore.fs import FileSystem
from logstore.server.security.acl_store import ACLS_FILE, AclStore
from logstore.server.security.acls import (CLUSTER_NAME, OP_ALL, OP_IDEMPOTENT_WRITE, OP_READ, OP_WRITE, PATTERN_ANY,
                                           PATTERN_LITERAL, PATTERN_MATCH, PATTERN_PREFIXED, PERMISSION_ALLOW,
                                           PERMISSION_DENY, RESOURCE_CLUSTER, RESOURCE_GROUP, RESOURCE_TOPIC,
                                           AclBinding, AclBindingFilter)

ALICE, BOB = "User:alice", "User:bob"


def acl(name, op=OP_READ, permission=PERMISSION_ALLOW, principal=ALICE, pattern=PATTERN_LITERAL, kind=RESOURCE_TOPIC,
        host="*"):
    return AclBinding(kind, name, pattern, principal, host, op, permission)


class CountingFileSystem(FileSystem):
    """Counts atomic writes; raises ENOSPC from them while ``fail`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0
        self.fail = False

    def write_file_atomic(self, path, data, **options):
        if self.fail:
            raise OSError(28, "No space left on device")
        self.writes += 1
        super().write_file_atomic(path, data, **options)


def test_round_trip_through_reopen_with_duplicates_and_one_write_per_call(tmp_path):
    fs = CountingFileSystem()
    store = AclStore(str(tmp_path), fs)
    assert store.bindings() == () and not (tmp_path / ACLS_FILE).exists()
    everything = [acl("t"), acl("pay", OP_WRITE, PERMISSION_DENY, BOB, PATTERN_PREFIXED, host="10.0.0.1"),
                  acl("g", OP_ALL, kind=RESOURCE_GROUP),
                  acl(CLUSTER_NAME, OP_IDEMPOTENT_WRITE, principal="User:*", kind=RESOURCE_CLUSTER)]
    assert store.add(everything + [acl("t")]) == everything  # given twice, added once
    assert fs.writes == 1
    assert store.add([acl("t"), acl("g", OP_ALL, kind=RESOURCE_GROUP)]) == []  # nothing new: no write either
    assert fs.writes == 1
    assert store.add([acl("u"), acl("t")]) == [acl("u")]
    assert fs.writes == 2
    reopened = AclStore(str(tmp_path))
    assert reopened.bindings() == store.bindings() == tuple(sorted(everything + [acl("u")]))
    document = json.loads((tmp_path / ACLS_FILE).read_text())
    assert {"resource_type": "Topic", "pattern_type": "Prefixed", "resource_name": "pay", "principal": BOB,
            "host": "10.0.0.1", "operation": "Write", "permission": "Deny"} in document["body"]["acls"]
    with pytest.raises(TypeError, match="'t'"):
        store.add(["t"])


def test_remove_by_filters(tmp_path):
    fs = CountingFileSystem()
    store = AclStore(str(tmp_path), fs)
    bindings = [acl("payments"), acl("*"), acl("pay", pattern=PATTERN_PREFIXED), acl("pay", OP_WRITE, principal=BOB),
                acl("g", kind=RESOURCE_GROUP)]
    store.add(bindings)
    assert store.remove([AclBindingFilter(resource_name="nothing")]) == []
    assert fs.writes == 1  # nothing removed, nothing written
    removed = store.remove([AclBindingFilter(RESOURCE_TOPIC, "payments", PATTERN_MATCH),
                            AclBindingFilter(principal=BOB)])
    assert removed == sorted(bindings[:4]) and fs.writes == 2
    assert AclStore(str(tmp_path)).bindings() == (acl("g", kind=RESOURCE_GROUP),)
    assert store.remove([AclBindingFilter(pattern_type=PATTERN_ANY)]) == [acl("g", kind=RESOURCE_GROUP)]
    assert AclStore(str(tmp_path)).bindings() == ()


@pytest.mark.parametrize("damage, message", [
    (lambda text: text.replace('"Read"', '"Write"', 1), "checksum"),
    (lambda text: "{not json", ACLS_FILE),
    (lambda text: text.replace('"version": 1', '"version": 7'), "version 7"),
    (lambda text: text[:len(text) // 2], ACLS_FILE),
])
def test_a_damaged_file_is_refused_and_left_as_it_is(tmp_path, damage, message):
    AclStore(str(tmp_path)).add([acl("t"), acl("u", OP_WRITE, PERMISSION_DENY)])
    path = tmp_path / ACLS_FILE
    damaged = damage(path.read_text()).encode()
    path.write_bytes(damaged)
    with pytest.raises(CorruptCheckpointError, match=message):
        AclStore(str(tmp_path))
    assert path.read_bytes() == damaged


def test_an_invalid_binding_with_a_good_checksum_is_refused(tmp_path):
    from logstore.server.security.acl_store import VERSION
    from logstore.server.security.checked_json import body_crc as _body_crc

    path = tmp_path / ACLS_FILE
    for entry, message in [({"principal": "alice"}, "'alice'"), ({"operation": "read"}, "'read'"),
                           ({"resource_type": "Group", "operation": "Write"}, "Write"), ({"host": None}, "None")]:
        good = {"resource_type": "Topic", "pattern_type": "Literal", "resource_name": "t", "principal": ALICE,
                "host": "*", "operation": "Read", "permission": "Allow"}
        body = {"acls": [{**good, **entry}]}
        data = json.dumps({"version": VERSION, "body": body, "crc32": _body_crc(body)}).encode()
        path.write_bytes(data)
        with pytest.raises(CorruptCheckpointError, match=message):
            AclStore(str(tmp_path))
        assert path.read_bytes() == data


def test_a_failed_write_changes_nothing(tmp_path):
    fs = CountingFileSystem()
    store = AclStore(str(tmp_path), fs)
    store.add([acl("t")])
    before = (tmp_path / ACLS_FILE).read_bytes()
    fs.fail = True
    with pytest.raises(OSError):
        store.add([acl("u")])
    with pytest.raises(OSError):
        store.remove([AclBindingFilter()])
    assert store.bindings() == (acl("t"),)  # nor in memory
    assert (tmp_path / ACLS_FILE).read_bytes() == before
    assert AclStore(str(tmp_path)).bindings() == (acl("t"),)


NAMES = ["a", "ab", "*"]
BINDINGS = st.builds(acl, st.sampled_from(NAMES), st.sampled_from([OP_READ, OP_WRITE, OP_ALL]),
                     st.sampled_from([PERMISSION_ALLOW, PERMISSION_DENY]), st.sampled_from([ALICE, BOB]),
                     st.sampled_from([PATTERN_LITERAL, PATTERN_PREFIXED]))
FILTERS = st.builds(AclBindingFilter, st.just(RESOURCE_TOPIC), st.sampled_from([None, *NAMES]),
                    st.sampled_from([PATTERN_ANY, PATTERN_MATCH, PATTERN_LITERAL, PATTERN_PREFIXED]),
                    st.sampled_from([None, ALICE, BOB]))


def test_acl_store_against_a_set_with_reopens(tmp_path):
    class Model(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.dir = tempfile.mkdtemp(dir=tmp_path)  # not id(self): a collected machine's id comes back
            self.store = AclStore(self.dir)
            self.model: set[AclBinding] = set()

        @rule(bindings=st.lists(BINDINGS, max_size=4))
        def add(self, bindings):
            expected = [b for b in dict.fromkeys(bindings) if b not in self.model]
            assert self.store.add(bindings) == expected
            self.model.update(bindings)

        @rule(filters=st.lists(FILTERS, max_size=2))
        def remove(self, filters):
            expected = sorted(b for b in self.model if any(f.matches(b) for f in filters))
            assert self.store.remove(filters) == expected
            self.model.difference_update(expected)

        @rule()
        def reopen(self):
            self.store = AclStore(self.dir)

        @invariant()
        def agrees(self):
            assert self.store.bindings() == tuple(sorted(self.model))

    run_state_machine_as_test(Model, settings=settings(max_examples=30, stateful_step_count=10, deadline=None))


def test_the_acl_file_is_owner_only_whatever_the_umask(tmp_path):
    previous = os.umask(0o000)
    try:
        AclStore(str(tmp_path)).add([acl("orders")])
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / ACLS_FILE).stat().st_mode) == 0o600
