"""Kafka's default partitioner (``logstore.client.partitioner``): murmur2 as Kafka's Java client
computes it (its own test vectors), and the same partitions as kafka-python's default partitioner
for any key (hypothesis), so a key lands where Kafka's producers put it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.partitioner.default import DefaultPartitioner
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from logstore.client.partitioner import murmur2, partition_for_key, to_positive
from logstore.manager import topics

# Kafka's UtilsTest.testMurmur2: keys and the signed hashes the Java client returns.
JAVA_VECTORS = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
                b"a-little-bit-longer-string": -1486304829,
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971, b"abc": 479470107}


@pytest.mark.parametrize("key", sorted(JAVA_VECTORS))
def test_murmur2_matches_the_java_clients_vectors(key):
    assert murmur2(key) == JAVA_VECTORS[key]


@pytest.mark.parametrize("key", sorted(JAVA_VECTORS))
def test_the_stores_murmur2_matches_the_java_clients_vectors(key):
    """The engine's own (``topics.murmur2``, unsigned), which every path places keys with."""
    assert topics.murmur2(key) == JAVA_VECTORS[key] & 0xFFFFFFFF
    assert topics.partition_for_key(key, 7) == (JAVA_VECTORS[key] & 0x7FFFFFFF) % 7


@given(st.binary(max_size=300))
def test_murmur2_matches_kafka_python(key):
    assert murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(key) == topics.murmur2(key)
    assert topics.murmur2(memoryview(key)) == topics.murmur2(bytearray(key)) == topics.murmur2(key)


class _Cluster:
    """The part of kafka-python's ClusterMetadata its partitioner asks: one topic of ``partitions``."""

    def __init__(self, partitions: int) -> None:
        self.every = set(range(partitions))

    def topics(self):
        return {"t"}

    def partitions_for_topic(self, topic):
        return self.every

    def available_partitions_for_topic(self, topic):
        return self.every


@given(st.binary(min_size=1, max_size=64), st.integers(1, 1000))
def test_a_key_lands_where_kafka_pythons_default_partitioner_puts_it(key, partitions):
    expected = DefaultPartitioner().partition("t", key, key, None, None, _Cluster(partitions))
    assert partition_for_key(key, partitions) == expected


def test_to_positive_clears_the_sign_bit_as_java_does():
    assert to_positive(-1) == 0x7FFFFFFF and to_positive(-(2**31)) == 0 and to_positive(5) == 5


@pytest.mark.parametrize("partitions", [0, -1, 1.0, None])
def test_a_partition_count_below_one_is_refused(partitions):
    with pytest.raises(ValueError, match="at least one partition"):
        partition_for_key(b"k", partitions)


def test_only_bytes_are_hashed():
    with pytest.raises(TypeError, match="bytes"):
        murmur2("text")
