"""The consumer protocol (logstore.group.consumer_protocol): subscription and assignment bytes against
golden bytes worked out by hand from Kafka's ConsumerProtocol schemas, every version, Kafka's
forward-compatibility rule, damage and misuse; then the range and round-robin assignors: worked
examples (some from Kafka's own javadoc) and properties over random groups.

Interop with a real client's encoder and assignors is in test_consumer_protocol_interop.py.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logstore.errors import CorruptRecordError
from logstore.group.consumer_protocol import (ASSIGNORS, Assignment, Subscription, decode_assignment,
                                              decode_subscription, encode_assignment, encode_subscription,
                                              range_assign, round_robin_assign)

INT32 = (-(2**31), 2**31 - 1)

# --- subscription bytes ---------------------------------------------------------------------------

# v0: topics ["a", "b"], userData empty (not null).
GOLDEN_SUB_V0 = bytes.fromhex("0000" "00000002" "0001" "61" "0001" "62" "00000000")
# v1: topics ["t"], userData null, ownedPartitions [t: [0]].
GOLDEN_SUB_V1 = bytes.fromhex("0001" "00000001" "0001" "74" "ffffffff" "00000001" "0001" "74" "00000001" "00000000")
# v3: topics ["t"], userData "u", ownedPartitions [t: [1, 2]], generationId 5, rackId "r".
GOLDEN_SUB_V3 = bytes.fromhex("0003" "00000001" "0001" "74" "00000001" "75"
                              "00000001" "0001" "74" "00000002" "00000001" "00000002" "00000005" "0001" "72")


def test_subscription_v0_golden_bytes():
    sub = Subscription(["a", "b"], user_data=b"")
    assert encode_subscription(sub, version=0) == GOLDEN_SUB_V0
    assert decode_subscription(GOLDEN_SUB_V0) == sub


def test_subscription_v1_golden_bytes_and_default_version():
    sub = Subscription(["t"], owned_partitions=[("t", 0)])
    assert encode_subscription(sub) == GOLDEN_SUB_V1
    assert decode_subscription(GOLDEN_SUB_V1) == sub


def test_subscription_v3_golden_bytes():
    sub = Subscription(["t"], b"u", [("t", 1), ("t", 2)], generation_id=5, rack_id="r")
    assert encode_subscription(sub, version=3) == GOLDEN_SUB_V3
    assert decode_subscription(GOLDEN_SUB_V3) == sub


def test_subscription_v2_is_v1_plus_generation():
    sub = Subscription(["t"], owned_partitions=[("t", 0)], generation_id=7)
    assert encode_subscription(sub, version=2) == b"\x00\x02" + GOLDEN_SUB_V1[2:] + bytes.fromhex("00000007")
    assert decode_subscription(encode_subscription(sub, version=2)) == sub


def test_encoding_an_older_version_drops_the_fields_it_lacks():
    # Kafka marks ownedPartitions, generationId and rackId "ignorable": dropped, not an error.
    sub = Subscription(["t"], b"u", [("t", 1), ("t", 2)], generation_id=5, rack_id="r")
    assert decode_subscription(encode_subscription(sub, version=0)) == Subscription(["t"], b"u")
    assert decode_subscription(encode_subscription(sub, version=1)) == Subscription(["t"], b"u", [("t", 1), ("t", 2)])
    assert decode_subscription(encode_subscription(sub, version=2)).rack_id is None


@pytest.mark.parametrize("version", [4, 5, 0x7FFF])
def test_newer_subscription_versions_read_as_v3(version):
    # A future version may only append fields (the schema's rule): read the v3 prefix, ignore the rest.
    data = version.to_bytes(2, "big") + GOLDEN_SUB_V3[2:] + bytes.fromhex("00000063" "0003") + b"new"
    assert decode_subscription(data) == Subscription(["t"], b"u", [("t", 1), ("t", 2)], 5, "r")


def test_bytes_after_the_known_fields_are_ignored():
    # Kafka's generated readers stop after the last field they know, whatever follows.
    assert decode_subscription(GOLDEN_SUB_V1 + b"junk") == decode_subscription(GOLDEN_SUB_V1)
    assert decode_subscription(GOLDEN_SUB_V0 + b"\x00") == Subscription(["a", "b"], b"")


def test_owned_partitions_are_grouped_by_topic_on_the_wire():
    sub = Subscription([], owned_partitions=[("a", 0), ("b", 0), ("a", 1)])
    data = encode_subscription(sub)
    # After version 1, no topics and null userData: two topic entries, a: [0, 1] then b: [0].
    assert data[:10] == bytes.fromhex("0001" "00000000" "ffffffff")
    assert data[10:] == bytes.fromhex("00000002" "0001" "61" "00000002" "00000000" "00000001"
                                      "0001" "62" "00000001" "00000000")
    assert decode_subscription(data).owned_partitions == (("a", 0), ("a", 1), ("b", 0))


def test_subscription_values_compare_equal_from_any_sequence():
    assert Subscription(["t"]) == Subscription(("t",), None, [], -1, None)
    assert Subscription(["t"], owned_partitions=[["t", 1]]).owned_partitions == (("t", 1),)
    assert decode_subscription(GOLDEN_SUB_V0).topics == ("a", "b")


TOPICS = st.text(max_size=12)
PAIRS = st.lists(st.tuples(TOPICS, st.integers(*INT32)), max_size=8)
SUBSCRIPTIONS = st.builds(Subscription, st.lists(TOPICS, max_size=6), st.none() | st.binary(max_size=30), PAIRS,
                          st.integers(*INT32), st.none() | TOPICS)


def _grouped(pairs):
    """What the wire keeps of a flat (topic, partition) list: grouped by topic in first-seen order."""
    order = list(dict.fromkeys(topic for topic, _ in pairs))
    return tuple(pair for topic in order for pair in pairs if pair[0] == topic)


@given(SUBSCRIPTIONS, st.integers(0, 3))
def test_subscription_round_trip(sub, version):
    decoded = decode_subscription(encode_subscription(sub, version))
    assert decoded.topics == sub.topics
    assert decoded.user_data == sub.user_data
    assert decoded.owned_partitions == (_grouped(sub.owned_partitions) if version >= 1 else ())
    assert decoded.generation_id == (sub.generation_id if version >= 2 else -1)
    assert decoded.rack_id == (sub.rack_id if version >= 3 else None)


@given(SUBSCRIPTIONS, st.integers(0, 3), st.data())
def test_truncated_subscriptions_are_refused(sub, version, data):
    encoded = encode_subscription(sub, version)
    end = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(CorruptRecordError, match="consumer protocol subscription"):
        decode_subscription(encoded[:end])


@pytest.mark.parametrize("data, complaint", [
    (b"", "version"),
    (b"\xff\xff" + GOLDEN_SUB_V0[2:], "negative version -1"),
    (bytes.fromhex("0000" "ffffffff" "ffffffff"), "topics has count -1"),  # topics is not nullable
    (bytes.fromhex("0000" "7fffffff" "0000"), "topics claims 2147483647 elements"),
    (bytes.fromhex("0000" "00000001" "ffff" "ffffffff"), "topic has length -1"),
    (bytes.fromhex("0000" "00000000" "fffffffe"), "user_data has length -2"),
    (bytes.fromhex("0000" "00000001" "0001" "ff" "ffffffff"), "topic is not valid UTF-8"),
    (GOLDEN_SUB_V1[:13] + bytes.fromhex("7fffffff"), "owned_partitions claims"),
])
def test_damaged_subscriptions(data, complaint):
    with pytest.raises(CorruptRecordError, match=complaint):
        decode_subscription(data)


@pytest.mark.parametrize("make, error, name", [
    (lambda: Subscription("orders"), TypeError, "topics"),
    (lambda: Subscription(None), TypeError, "topics"),
    (lambda: Subscription(["t"], owned_partitions=[("t",)]), TypeError, "owned_partitions"),
    (lambda: Subscription(["t"], owned_partitions=["t0"]), TypeError, "owned_partitions"),
    (lambda: encode_subscription(Subscription(["t"]), version=4), ValueError, "version 4"),
    (lambda: encode_subscription(Subscription(["t"]), version=-1), ValueError, "version -1"),
    (lambda: encode_subscription(Subscription(["t"]), version="1"), TypeError, "version"),
    (lambda: encode_subscription(["t"]), TypeError, "Subscription"),
    (lambda: encode_subscription(Subscription([1])), TypeError, "topic"),
    (lambda: encode_subscription(Subscription(["t"], user_data="u")), TypeError, "user_data"),
    (lambda: encode_subscription(Subscription(["t"], owned_partitions=[("t", 2**31)])), ValueError, "partition"),
    (lambda: encode_subscription(Subscription(["t"], owned_partitions=[(0, 1)])), TypeError, "topic"),
    (lambda: encode_subscription(Subscription(["t"], generation_id=None), 2), TypeError, "generation_id"),
    (lambda: encode_subscription(Subscription(["t"], rack_id=3), 3), TypeError, "rack_id"),
    (lambda: decode_subscription("\x00\x00"), TypeError, "must be bytes"),
])
def test_subscription_misuse(make, error, name):
    with pytest.raises(error, match=name):
        make()


# --- assignment bytes -----------------------------------------------------------------------------

# v0: assignedPartitions [t: [0, 1]], userData empty.
GOLDEN_ASSIGNMENT_V0 = bytes.fromhex("0000" "00000001" "0001" "74" "00000002" "00000000" "00000001" "00000000")
# v1: nothing assigned, userData null.
GOLDEN_ASSIGNMENT_V1_EMPTY = bytes.fromhex("0001" "00000000" "ffffffff")


def test_assignment_golden_bytes():
    assignment = Assignment([("t", 0), ("t", 1)], user_data=b"")
    assert encode_assignment(assignment, version=0) == GOLDEN_ASSIGNMENT_V0
    assert decode_assignment(GOLDEN_ASSIGNMENT_V0) == assignment
    assert encode_assignment(Assignment([])) == GOLDEN_ASSIGNMENT_V1_EMPTY
    assert decode_assignment(GOLDEN_ASSIGNMENT_V1_EMPTY) == Assignment([], None)


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4, 9])
def test_assignment_versions_share_one_layout(version):
    data = version.to_bytes(2, "big") + GOLDEN_ASSIGNMENT_V0[2:]
    assert decode_assignment(data) == Assignment([("t", 0), ("t", 1)], b"")
    if version <= 3:
        assert encode_assignment(Assignment([("t", 0), ("t", 1)], b""), version) == data


@given(PAIRS, st.none() | st.binary(max_size=30), st.integers(0, 3))
def test_assignment_round_trip(pairs, user_data, version):
    decoded = decode_assignment(encode_assignment(Assignment(pairs, user_data), version))
    assert decoded == Assignment(_grouped(pairs), user_data)


def test_every_truncated_assignment_is_refused():
    for end in range(len(GOLDEN_ASSIGNMENT_V0)):
        with pytest.raises(CorruptRecordError, match="consumer protocol assignment"):
            decode_assignment(GOLDEN_ASSIGNMENT_V0[:end])


@pytest.mark.parametrize("data, complaint", [
    (b"\x80\x00" + GOLDEN_ASSIGNMENT_V0[2:], "negative version"),
    (bytes.fromhex("0000" "00000001" "0001" "74" "ffffffff" "00000000"), "partitions has count -1"),
    (bytes.fromhex("0000" "00000001" "0001" "74" "00000002" "00000000"), "partitions claims 2 elements"),
])
def test_damaged_assignments(data, complaint):
    with pytest.raises(CorruptRecordError, match=complaint):
        decode_assignment(data)


def test_assignment_misuse():
    with pytest.raises(TypeError, match="partitions"):
        Assignment("t0")
    with pytest.raises(TypeError, match="partitions"):
        Assignment([("t", 0, 1)])
    with pytest.raises(TypeError, match="Assignment"):
        encode_assignment([("t", 0)])
    with pytest.raises(ValueError, match="version 4"):
        encode_assignment(Assignment([]), version=4)
    with pytest.raises(TypeError, match="partition"):
        encode_assignment(Assignment([("t", "0")]))


# --- assignors: worked examples -------------------------------------------------------------------


def _subs(**topics_by_member):
    return {member: Subscription(topics) for member, topics in topics_by_member.items()}


@pytest.mark.parametrize("assign", [range_assign, round_robin_assign])
def test_two_members_four_partitions_two_each(assign):
    result = assign(_subs(m1=["t"], m2=["t"]), {"t": 4})
    if assign is range_assign:
        assert result == {"m1": [("t", 0), ("t", 1)], "m2": [("t", 2), ("t", 3)]}
    else:
        assert result == {"m1": [("t", 0), ("t", 2)], "m2": [("t", 1), ("t", 3)]}


@pytest.mark.parametrize("assign", [range_assign, round_robin_assign])
def test_three_members_two_topics_of_three_partitions(assign):
    # Both algorithms give each member one partition of each topic here.
    result = assign(_subs(c2=["t0", "t1"], c0=["t0", "t1"], c1=["t1", "t0"]), {"t0": 3, "t1": 3})
    assert result == {"c0": [("t0", 0), ("t1", 0)], "c1": [("t0", 1), ("t1", 1)], "c2": [("t0", 2), ("t1", 2)]}


def test_range_javadoc_example():
    # Kafka's RangeAssignor javadoc: C0 and C1, t0 and t1 of 3 partitions each.
    result = range_assign(_subs(C0=["t0", "t1"], C1=["t0", "t1"]), {"t0": 3, "t1": 3})
    assert result == {"C0": [("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1)], "C1": [("t0", 2), ("t1", 2)]}


def test_round_robin_javadoc_examples():
    # Kafka's RoundRobinAssignor javadoc, identical then differing subscriptions.
    same = round_robin_assign(_subs(C0=["t0", "t1"], C1=["t0", "t1"]), {"t0": 3, "t1": 3})
    assert same == {"C0": [("t0", 0), ("t0", 2), ("t1", 1)], "C1": [("t0", 1), ("t1", 0), ("t1", 2)]}
    differing = round_robin_assign(_subs(C0=["t0"], C1=["t0", "t1"], C2=["t0", "t1", "t2"]),
                                   {"t0": 1, "t1": 2, "t2": 3})
    assert differing == {"C0": [("t0", 0)], "C1": [("t1", 0)],
                         "C2": [("t1", 1), ("t2", 0), ("t2", 1), ("t2", 2)]}


def test_range_gives_the_first_members_the_extra_partitions():
    result = range_assign(_subs(a=["t"], b=["t"], c=["t"]), {"t": 7})
    assert result == {"a": [("t", 0), ("t", 1), ("t", 2)], "b": [("t", 3), ("t", 4)], "c": [("t", 5), ("t", 6)]}


@pytest.mark.parametrize("assign", [range_assign, round_robin_assign])
def test_members_without_partitions_still_appear(assign):
    result = assign(_subs(a=["t"], b=["t"], c=[], d=["unknown"]), {"t": 1, "other": 5})
    assert result == {"a": [("t", 0)], "b": [], "c": [], "d": []}
    assert assign({}, {"t": 3}) == {}


@pytest.mark.parametrize("assign", [range_assign, round_robin_assign])
def test_a_topic_named_twice_is_one_subscription(assign):
    assert assign(_subs(a=["t", "t"], b=["t"]), {"t": 2}) == {"a": [("t", 0)], "b": [("t", 1)]}


@pytest.mark.parametrize("assign", [range_assign, round_robin_assign])
def test_static_members_sort_first_by_instance_id(assign):
    # Kafka's MemberInfo order: a restarted static member gets a new member id but keeps its place.
    subs = _subs(**{"a-uuid": ["t"], "b-uuid": ["t"], "0-dynamic": ["t"]})
    result = assign(subs, {"t": 3}, instance_ids={"a-uuid": "i-2", "b-uuid": "i-1", "0-dynamic": None})
    assert result == {"a-uuid": [("t", 1)], "b-uuid": [("t", 0)], "0-dynamic": [("t", 2)]}
    assert assign(subs, {"t": 3}) == {"a-uuid": [("t", 1)], "b-uuid": [("t", 2)], "0-dynamic": [("t", 0)]}


@pytest.mark.parametrize("assign", [range_assign, round_robin_assign])
def test_members_sort_as_java_strings(assign):
    # U+10000 is D800 DC00 in UTF-16, so Java sorts it before U+FFFF; Python's code point order would not.
    result = assign({"\uffff": Subscription(["t"]), "\U00010000": Subscription(["t"])}, {"t": 2})
    assert result == {"\uffff": [("t", 1)], "\U00010000": [("t", 0)]}


@pytest.mark.parametrize("assign", [range_assign, round_robin_assign])
@pytest.mark.parametrize("subscriptions, partitions, error, name", [
    (["m"], {"t": 1}, TypeError, "subscriptions"),
    ({"m": ["t"]}, {"t": 1}, TypeError, "Subscription"),
    ({1: Subscription(["t"])}, {"t": 1}, TypeError, "member ids"),
    ({"m": Subscription(["t"])}, {"t": -1}, ValueError, "negative"),
    ({"m": Subscription(["t"])}, {"t": "3"}, TypeError, "partitions_per_topic"),
    ({"m": Subscription(["t"])}, [("t", 1)], TypeError, "partitions_per_topic"),
])
def test_assignor_misuse(assign, subscriptions, partitions, error, name):
    with pytest.raises(error, match=name):
        assign(subscriptions, partitions)


def test_assignors_by_protocol_name():
    assert ASSIGNORS == {"range": range_assign, "roundrobin": round_robin_assign}


# --- assignors: properties ------------------------------------------------------------------------

POOL = ["a", "b", "c", "d"]


@st.composite
def groups(draw, same_topics=False):
    """(subscriptions, partitions_per_topic): up to 7 members, each subscribed to some of four topics,
    of which some are unknown (no partition count) and some have no partitions."""
    members = draw(st.lists(st.text("xyz0", min_size=1, max_size=4), min_size=0, max_size=7, unique=True))
    shared = draw(st.lists(st.sampled_from(POOL), unique=True))
    subscriptions = {member: Subscription(shared if same_topics else draw(st.lists(st.sampled_from(POOL), unique=True)))
                     for member in members}
    partitions = draw(st.dictionaries(st.sampled_from(POOL), st.integers(0, 12)))
    return subscriptions, partitions


def _check_complete(subscriptions, partitions, result):
    assert list(result) == list(subscriptions)
    owner = {}
    for member, pairs in result.items():
        assert pairs == sorted(pairs)
        for topic, partition in pairs:
            assert (topic, partition) not in owner, f"{topic}-{partition} assigned twice"
            assert topic in subscriptions[member].topics, f"{member} got {topic} without subscribing"
            owner[(topic, partition)] = member
    subscribed = {topic for sub in subscriptions.values() for topic in sub.topics}
    expected = {(topic, p) for topic, count in partitions.items() if topic in subscribed for p in range(count)}
    assert set(owner) == expected


@given(groups())
def test_range_assigns_every_partition_once_and_balances_each_topic(group):
    subscriptions, partitions = group
    result = range_assign(subscriptions, partitions)
    _check_complete(subscriptions, partitions, result)
    for topic in partitions:
        subscribers = [member for member, sub in subscriptions.items() if topic in sub.topics]
        if not subscribers:
            continue
        # In member order: contiguous ranges that cover the topic, sizes differing by at most one,
        # the larger ones first.
        blocks = [[p for t, p in result[member] if t == topic] for member in sorted(subscribers)]
        assert [p for block in blocks for p in block] == list(range(partitions[topic]))
        sizes = [len(block) for block in blocks]
        assert max(sizes) - min(sizes) <= 1
        assert sizes == sorted(sizes, reverse=True)


@given(groups())
def test_round_robin_assigns_every_partition_once(group):
    subscriptions, partitions = group
    _check_complete(subscriptions, partitions, round_robin_assign(subscriptions, partitions))


@given(groups(same_topics=True))
def test_round_robin_balances_identical_subscriptions(group):
    subscriptions, partitions = group
    result = round_robin_assign(subscriptions, partitions)
    _check_complete(subscriptions, partitions, result)
    counts = Counter({member: len(pairs) for member, pairs in result.items()})
    if counts:
        assert max(counts.values()) - min(counts.values()) <= 1
