"""The consumer protocol against a real client: kafka-python's own ConsumerProtocolSubscription /
ConsumerProtocolAssignment codec (generated from Kafka's schema files) and its range and round-robin
assignors. Bytes it encodes decode with ours and ours decode with it, at every version; our assignors
hand out exactly what its assignors do.

kafka-python is in the ``clients`` extra, not ``test``: without it these tests are skipped.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logstore.group.consumer_protocol import (Assignment, Subscription, decode_assignment, decode_subscription,
                                              encode_assignment, encode_subscription, range_assign,
                                              round_robin_assign)

metadata = pytest.importorskip("kafka.protocol.consumer.metadata", reason="needs kafka-python 3.x")
KafkaSubscription = metadata.ConsumerProtocolSubscription
KafkaAssignment = metadata.ConsumerProtocolAssignment
from kafka.coordinator.assignors.range import RangePartitionAssignor  # noqa: E402
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor  # noqa: E402

INT32 = (-(2**31), 2**31 - 1)
TOPIC = st.text(max_size=10)
# The wire groups partitions by topic, so generate them grouped, each topic once.
GROUPED = st.dictionaries(TOPIC, st.lists(st.integers(*INT32), max_size=5), max_size=4).map(lambda d: list(d.items()))


def _flat(grouped):
    return tuple((topic, partition) for topic, partitions in grouped for partition in partitions)


def _nonempty(grouped):
    # A topic with no partitions has no (topic, partition) pair in our flat list, so it is not sent.
    return [(topic, partitions) for topic, partitions in grouped if partitions]


def _kafka_grouped(containers):
    return [(tp.topic, list(tp.partitions)) for tp in containers or ()]


@given(st.lists(TOPIC, max_size=5), st.none() | st.binary(max_size=20), GROUPED, st.integers(*INT32),
       st.none() | TOPIC, st.integers(0, 3))
def test_our_subscription_bytes_decode_in_kafka_python(topics, user_data, owned, generation_id, rack_id, version):
    sub = Subscription(topics, user_data, _flat(owned), generation_id, rack_id)
    theirs = KafkaSubscription.decode(encode_subscription(sub, version))
    assert theirs.version == version
    assert list(theirs.topics) == topics
    assert theirs.user_data == user_data
    if version >= 1:
        assert _kafka_grouped(theirs.owned_partitions) == _nonempty(owned)
    if version >= 2:
        assert theirs.generation_id == generation_id
    if version >= 3:
        assert theirs.rack_id == rack_id


@given(st.lists(TOPIC, max_size=5), st.none() | st.binary(max_size=20), GROUPED, st.integers(*INT32),
       st.none() | TOPIC, st.integers(0, 3))
def test_kafka_python_subscription_bytes_decode_with_ours(topics, user_data, owned, generation_id, rack_id, version):
    theirs = KafkaSubscription(topics=topics, user_data=user_data, generation_id=generation_id, rack_id=rack_id,
                               owned_partitions=[KafkaSubscription.TopicPartition(topic=t, partitions=p)
                                                 for t, p in owned])
    ours = decode_subscription(theirs.encode(version=version))
    assert ours.topics == tuple(topics)
    assert ours.user_data == user_data
    assert ours.owned_partitions == (_flat(owned) if version >= 1 else ())
    assert ours.generation_id == (generation_id if version >= 2 else -1)
    assert ours.rack_id == (rack_id if version >= 3 else None)


@given(GROUPED, st.none() | st.binary(max_size=20), st.integers(0, 3))
def test_assignment_bytes_both_ways(grouped, user_data, version):
    ours = Assignment(_flat(grouped), user_data)
    theirs = KafkaAssignment.decode(encode_assignment(ours, version))
    assert theirs.version == version
    assert _kafka_grouped(theirs.assigned_partitions) == _nonempty(grouped)
    assert theirs.user_data == user_data

    theirs = KafkaAssignment(assigned_partitions=[KafkaAssignment.TopicPartition(topic=t, partitions=p)
                                                  for t, p in grouped], user_data=user_data)
    assert decode_assignment(theirs.encode(version=version)) == ours


def test_kafka_python_v0_structs():
    # The hand-written v0 structs kafka-python 2.0 used, still shipped in kafka.protocol.old.
    old = pytest.importorskip("kafka.protocol.old.consumer_protocol")
    data = old.ConsumerProtocolMemberMetadata_v0(0, ["t", "u"], b"x").encode()
    assert decode_subscription(data) == Subscription(["t", "u"], b"x")
    data = old.ConsumerProtocolMemberAssignment_v0(0, [("t", [0, 2])], b"").encode()
    assert decode_assignment(data) == Assignment([("t", 0), ("t", 2)], b"")
    decoded = old.ConsumerProtocolMemberAssignment_v0.decode(encode_assignment(Assignment([("t", 1)]), version=0))
    assert decoded.partitions()[0].topic == "t" and decoded.partitions()[0].partition == 1


# --- assignors against kafka-python's ------------------------------------------------------------

POOL = ["a", "b", "c", "d"]


@st.composite
def groups(draw, same_topics=False):
    members = draw(st.lists(st.text("xyz01", min_size=1, max_size=4), min_size=1, max_size=7, unique=True))
    shared = draw(st.lists(st.sampled_from(POOL), unique=True))
    topics = {member: shared if same_topics else draw(st.lists(st.sampled_from(POOL), unique=True))
              for member in members}
    partitions = draw(st.dictionaries(st.sampled_from(POOL), st.integers(0, 12)))
    # All static or all dynamic: kafka-python groups static and dynamic members with itertools.groupby
    # over an unsorted list, which drops members when the two kinds interleave (its bug, not Kafka's).
    static = draw(st.booleans())
    instance_ids = {member: (f"i-{draw(st.integers(0, 99))}-{member}" if static else None) for member in members}
    return topics, partitions, instance_ids


def _kafka_python_assign(assignor, topics, partitions, instance_ids):
    cluster = SimpleNamespace(partitions_for_topic=lambda topic: set(range(partitions[topic]))
                              if topic in partitions else None)
    members = [SimpleNamespace(member_id=member, group_instance_id=instance_ids[member],
                               metadata=KafkaSubscription(topics=subscribed))
               for member, subscribed in topics.items()]
    result = assignor.assign(cluster, members)
    return {member: [(topic, partition) for topic, parts in assignment.assigned_partitions for partition in parts]
            for member, assignment in result.items()}


def _ours(assign, topics, partitions, instance_ids):
    subscriptions = {member: Subscription(subscribed) for member, subscribed in topics.items()}
    return assign(subscriptions, partitions, instance_ids=instance_ids)


@given(groups())
def test_range_matches_kafka_python(group):
    assert _ours(range_assign, *group) == _kafka_python_assign(RangePartitionAssignor, *group)


@given(groups(same_topics=True))
def test_round_robin_matches_kafka_python(group):
    # Identical subscriptions only: kafka-python's skip loop rebinds member_id to a (instance id,
    # member id) tuple and raises KeyError whenever it has to skip a member. Skipping is covered by
    # Kafka's javadoc example in test_consumer_protocol.py.
    assert _ours(round_robin_assign, *group) == _kafka_python_assign(RoundRobinPartitionAssignor, *group)
