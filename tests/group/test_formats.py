"""The records of ``__consumer_offsets`` (logstore.group.formats): the group-to-partition mapping
against values computed by Java, golden bytes written out by hand from Kafka's layouts (docs/FORMAT.md §4;
never produced by our encoder), decoding of every older version,
round trips, damage (truncation, bad lengths, bad UTF-8, trailing bytes) and misuse.
"""

from __future__ import annotations

import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logstore.errors import CorruptRecordError
from logstore.group import formats
from logstore.group.formats import (OFFSETS_TOPIC, GroupKey, GroupValue, MemberValue, OffsetKey, OffsetValue,
                                    decode_group_value, decode_key, decode_offset_value, encode_group_key,
                                    encode_group_value, encode_key, encode_offset_key, encode_offset_value,
                                    encode_offset_value_fields, java_string_hash, offset_key_prefix, partition_for)

INT16_MAX = 2**15 - 1
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)


# --- partition_for --------------------------------------------------------------------------------

# docs/FORMAT.md §4: hashCode and partition of 50, checked with java.
JAVA_TABLE = [
    ("my-group", -1906497762, 12),
    ("test-group", 627841412, 12),
    ("group1", -1237460590, 40),
    ("console-consumer-12345", 158455506, 6),
    ("a", 97, 47),
    ("", 0, 0),
    ("polygenelubricants", -(2**31), 0),
]


def test_offsets_topic_name():
    assert OFFSETS_TOPIC == "__consumer_offsets"


@pytest.mark.parametrize("group_id, java_hash, partition", JAVA_TABLE)
def test_partition_for_matches_java(group_id, java_hash, partition):
    assert java_string_hash(group_id) == java_hash
    assert partition_for(group_id) == partition
    assert partition_for(group_id, 50) == partition


def test_integer_min_value_hash_maps_to_partition_zero_for_any_count():
    # abs(Integer.MIN_VALUE) is 0 in Kafka's Utils.abs; Python's abs gives 2**31, which is 2 mod 7 and mod 9.
    assert partition_for("polygenelubricants", 9) == 0
    assert partition_for("polygenelubricants", 7) == 0


def test_hash_runs_over_utf16_code_units():
    # U+1F600 is the surrogate pair D83D DE00 in UTF-16: 31 * 0xD83D + 0xDE00 = 1772899.
    # Hashing the code point (0x1F600 = 128512) would give partition 12 instead of 49.
    assert java_string_hash("\U0001F600") == 1772899
    assert partition_for("\U0001F600") == 49
    # BMP characters beyond ASCII are one unit each: "é" is 0xE9.
    assert java_string_hash("é") == 0xE9
    # Overflow wraps at 32 bits: "g\U0001F600" = 103 * 31**2 + 1772899 = 1871882.
    assert java_string_hash("g\U0001F600") == 103 * 961 + 1772899


@given(st.text(max_size=40), st.integers(1, 1000))
def test_partition_for_is_in_range_and_matches_a_reference_hash(group_id, partitions):
    # A second, independent computation: Java's closed form sum(c[i] * 31**(n-1-i)) mod 2**32.
    utf16 = group_id.encode("utf-16-be")
    units = [int.from_bytes(utf16[i:i + 2], "big") for i in range(0, len(utf16), 2)]
    n = len(units)
    unsigned = sum(unit * pow(31, n - 1 - i, 2**32) for i, unit in enumerate(units)) % 2**32
    signed = unsigned - 2**32 if unsigned >= 2**31 else unsigned
    assert java_string_hash(group_id) == signed
    expected = (0 if signed == -(2**31) else abs(signed)) % partitions
    assert partition_for(group_id, partitions) == expected
    assert 0 <= partition_for(group_id, partitions) < partitions


@pytest.mark.parametrize("args, error", [
    ((None,), TypeError), ((b"g",), TypeError), (("g", 0), ValueError), (("g", -1), ValueError),
    (("g", "50"), TypeError), (("g", True), TypeError),
])
def test_partition_for_misuse(args, error):
    with pytest.raises(error):
        partition_for(*args)


# --- keys -----------------------------------------------------------------------------------------

# Offset commit key v1: version 1, group "g", topic "t", partition 3.
GOLDEN_OFFSET_KEY = bytes.fromhex("0001" "0001" "67" "0001" "74" "00000003")
# Group metadata key v2: version 2, group "my-group" (8 bytes).
GOLDEN_GROUP_KEY = bytes.fromhex("0002" "0008") + b"my-group"


def test_offset_key_golden_bytes():
    assert encode_offset_key("g", "t", 3) == GOLDEN_OFFSET_KEY
    assert decode_key(GOLDEN_OFFSET_KEY) == OffsetKey("g", "t", 3)


def test_offset_key_version_0_reads_like_version_1():
    assert decode_key(b"\x00\x00" + GOLDEN_OFFSET_KEY[2:]) == OffsetKey("g", "t", 3)


def test_group_key_golden_bytes():
    assert encode_group_key("my-group") == GOLDEN_GROUP_KEY
    assert decode_key(GOLDEN_GROUP_KEY) == GroupKey("my-group")


def test_key_utf8_and_negative_partition():
    # "é" is two bytes of UTF-8 (C3 A9); partition -1 is FFFFFFFF.
    data = encode_offset_key("é", "", -1)
    assert data == bytes.fromhex("0001" "0002" "c3a9" "0000" "ffffffff")
    assert decode_key(data) == OffsetKey("é", "", -1)


@pytest.mark.parametrize("version", [3, 4, 5, 0x7FFF])
def test_newer_key_versions_are_skipped_with_one_warning(version, caplog, monkeypatch):
    # KIP-848 record types (consumer group metadata, members, assignments...): their bodies differ.
    monkeypatch.setattr(formats, "_warned_key_versions", set())
    data = version.to_bytes(2, "big") + b"\x00\x01g\xde\xad"
    with caplog.at_level(logging.WARNING, logger="logstore.group"):
        assert decode_key(data) is None
        assert decode_key(version.to_bytes(2, "big")) is None  # body not even read
    # Once per version, not once per record: a topic could hold millions of them.
    assert sum(f"key version {version}" in message for message in caplog.messages) == 1


@given(st.text(max_size=30), st.text(max_size=30), st.integers(*INT32))
def test_offset_key_round_trip(group, topic, partition):
    assert decode_key(encode_offset_key(group, topic, partition)) == OffsetKey(group, topic, partition)
    assert encode_key(OffsetKey(group, topic, partition)) == encode_offset_key(group, topic, partition)


@given(st.text(max_size=60))
def test_group_key_round_trip(group):
    assert decode_key(encode_key(GroupKey(group))) == GroupKey(group)


@pytest.mark.parametrize("data, complaint", [
    (b"", "version"),
    (b"\x00", "version"),
    (b"\xff\xff\x00\x01g", "negative key version"),
    (GOLDEN_OFFSET_KEY[:-1], "partition"),
    (GOLDEN_OFFSET_KEY + b"\x00", "left after the last field"),
    (GOLDEN_GROUP_KEY + b"x", "left after the last field"),
    (bytes.fromhex("0002" "ffff"), "group has length -1"),  # group is not nullable
    (bytes.fromhex("0002" "0009") + b"my-group", "group needs 9 bytes, 8 left"),
    (bytes.fromhex("0002" "0002" "c328"), "not valid UTF-8"),
])
def test_damaged_keys(data, complaint):
    with pytest.raises(CorruptRecordError, match=complaint):
        decode_key(data)


def test_every_truncated_key_is_refused():
    for data in (GOLDEN_OFFSET_KEY, GOLDEN_GROUP_KEY):
        for end in range(len(data)):
            with pytest.raises(CorruptRecordError):
                decode_key(data[:end])


def test_key_misuse_names_the_value():
    with pytest.raises(TypeError, match="partition"):
        encode_offset_key("g", "t", "3")
    with pytest.raises(ValueError, match="partition 2147483648"):
        encode_offset_key("g", "t", 2**31)
    with pytest.raises(TypeError, match="group"):
        encode_group_key(None)
    with pytest.raises(ValueError, match="group is 32768 bytes"):
        encode_group_key("x" * 32768)
    assert decode_key(encode_group_key("x" * INT16_MAX)) == GroupKey("x" * INT16_MAX)
    with pytest.raises(ValueError, match="topic"):
        encode_offset_key("g", "\ud800", 0)  # a lone surrogate has no UTF-8
    with pytest.raises(TypeError, match="OffsetKey or a GroupKey"):
        encode_key(("g", "t", 0))
    with pytest.raises(TypeError, match="must be bytes"):
        decode_key("\x00\x02\x00\x01g")


# --- offset commit values -------------------------------------------------------------------------

# v3: offset 100, leaderEpoch 5, metadata "m", commitTimestamp 1000 (0x3E8).
GOLDEN_OFFSET_V3 = bytes.fromhex("0003" "0000000000000064" "00000005" "0001" "6d" "00000000000003e8")
# v1: offset 7, metadata "", commitTimestamp 1, expireTimestamp 2.
GOLDEN_OFFSET_V1 = bytes.fromhex("0001" "0000000000000007" "0000" "0000000000000001" "0000000000000002")
# v0 and v2: offset 7, metadata "ab", commitTimestamp 1.
BODY_V0 = bytes.fromhex("0000000000000007" "0002" "6162" "0000000000000001")


def test_offset_value_v3_golden_bytes():
    value = OffsetValue(offset=100, leader_epoch=5, metadata="m", commit_timestamp_ms=1000)
    assert encode_offset_value(value) == GOLDEN_OFFSET_V3
    assert decode_offset_value(GOLDEN_OFFSET_V3) == value


def test_offset_value_with_expire_timestamp_is_written_as_v1():
    value = OffsetValue(offset=7, leader_epoch=-1, metadata="", commit_timestamp_ms=1, expire_timestamp_ms=2)
    assert encode_offset_value(value) == GOLDEN_OFFSET_V1
    assert decode_offset_value(GOLDEN_OFFSET_V1) == value


def test_v1_has_no_leader_epoch_so_it_reads_back_unknown():
    value = OffsetValue(offset=7, leader_epoch=9, commit_timestamp_ms=1, expire_timestamp_ms=2)
    assert decode_offset_value(encode_offset_value(value)).leader_epoch == -1


def test_offset_value_v0_and_v2():
    expected = OffsetValue(offset=7, leader_epoch=-1, metadata="ab", commit_timestamp_ms=1, expire_timestamp_ms=None)
    assert decode_offset_value(b"\x00\x00" + BODY_V0) == expected
    assert decode_offset_value(b"\x00\x02" + BODY_V0) == expected


def test_offset_value_defaults_and_none_metadata():
    assert OffsetValue(5) == OffsetValue(5, -1, "", -1, None)
    # Kafka's metadata field is not nullable: a commit without metadata stores "" (NoMetadata).
    assert decode_offset_value(encode_offset_value(OffsetValue(5, metadata=None))).metadata == ""


def test_tombstone_value_decodes_to_none():
    assert decode_offset_value(None) is None
    assert decode_group_value(None) is None


@given(st.integers(*INT64), st.integers(*INT32), st.text(max_size=50), st.integers(*INT64),
       st.none() | st.integers(*INT64))
def test_offset_value_round_trip(offset, leader_epoch, metadata, commit, expire):
    value = OffsetValue(offset, leader_epoch, metadata, commit, expire)
    data = encode_offset_value(value)
    assert data[:2] == (b"\x00\x01" if expire is not None else b"\x00\x03")
    expected = value if expire is None else OffsetValue(offset, -1, metadata, commit, expire)
    assert decode_offset_value(data) == expected


@pytest.mark.parametrize("data, complaint", [
    (b"\x00\x04" + GOLDEN_OFFSET_V3[2:], "unknown offset commit value version 4"),
    (b"\xff\xff" + GOLDEN_OFFSET_V3[2:], "version -1"),
    (GOLDEN_OFFSET_V3 + b"\x00", "1 bytes left"),
    (b"\x00\x01" + BODY_V0, "expire_timestamp needs 8 bytes"),  # v1 without its expire timestamp
    (b"\x00\x03" + BODY_V0, "commit_timestamp needs 8 bytes"),  # v0 body read as v3: fields shift
])
def test_damaged_offset_values(data, complaint):
    with pytest.raises(CorruptRecordError, match=complaint):
        decode_offset_value(data)


def test_every_truncated_offset_value_is_refused():
    for data in (GOLDEN_OFFSET_V3, GOLDEN_OFFSET_V1):
        for end in range(len(data)):
            with pytest.raises(CorruptRecordError, match="offset commit value"):
                decode_offset_value(data[:end])


@pytest.mark.parametrize("value, error, name", [
    (OffsetValue("1"), TypeError, "offset"),
    (OffsetValue(True), TypeError, "offset"),
    (OffsetValue(2**63), ValueError, "offset"),
    (OffsetValue(1, leader_epoch=2**31), ValueError, "leader_epoch"),
    (OffsetValue(1, metadata=b"m"), TypeError, "metadata"),
    (OffsetValue(1, commit_timestamp_ms=None), TypeError, "commit_timestamp_ms"),
    (OffsetValue(1, expire_timestamp_ms=1.5), TypeError, "expire_timestamp_ms"),
])
def test_offset_value_misuse(value, error, name):
    with pytest.raises(error, match=name):
        encode_offset_value(value)


def test_encode_offset_value_needs_an_offset_value():
    with pytest.raises(TypeError, match="OffsetValue"):
        encode_offset_value({"offset": 1})


# --- group metadata values ------------------------------------------------------------------------

MEMBER = MemberValue(member_id="m1", group_instance_id=None, client_id="c", client_host="/h",
                     rebalance_timeout_ms=300000, session_timeout_ms=45000, subscription=b"\x01\x02",
                     assignment=b"")
GROUP = GroupValue(protocol_type="consumer", generation=2, protocol="range", leader="m1",
                   current_state_timestamp_ms=1700, members=[MEMBER])

# v3, worked out from the layout: 300000 = 0x493E0, 45000 = 0xAFC8, 1700 = 0x6A4.
GOLDEN_GROUP_V3 = b"".join([
    bytes.fromhex("0003"),
    bytes.fromhex("0008"), b"consumer",      # protocolType
    bytes.fromhex("00000002"),               # generation
    bytes.fromhex("0005"), b"range",         # protocol
    bytes.fromhex("0002"), b"m1",            # leader
    bytes.fromhex("00000000000006a4"),       # currentStateTimestamp
    bytes.fromhex("00000001"),               # one member
    bytes.fromhex("0002"), b"m1",            #   memberId
    bytes.fromhex("ffff"),                   #   groupInstanceId null
    bytes.fromhex("0001"), b"c",             #   clientId
    bytes.fromhex("0002"), b"/h",            #   clientHost
    bytes.fromhex("000493e0"),               #   rebalanceTimeout
    bytes.fromhex("0000afc8"),               #   sessionTimeout
    bytes.fromhex("00000002" "0102"),        #   subscription
    bytes.fromhex("00000000"),               #   assignment (empty)
])

# An Empty group as Kafka writes it: no protocol type, no protocol, no leader, no members.
GOLDEN_EMPTY_GROUP_V3 = bytes.fromhex("0003" "0000" "00000005" "ffff" "ffff" "ffffffffffffffff" "00000000")


def test_group_value_v3_golden_bytes():
    assert encode_group_value(GROUP) == GOLDEN_GROUP_V3
    assert decode_group_value(GOLDEN_GROUP_V3) == GROUP


def test_empty_group_golden_bytes():
    empty = GroupValue("", 5, None, None, -1, [])
    assert encode_group_value(empty) == GOLDEN_EMPTY_GROUP_V3
    assert decode_group_value(GOLDEN_EMPTY_GROUP_V3) == empty
    # Kafka writes protocolType.getOrElse(""): None is accepted and reads back as "".
    assert encode_group_value(GroupValue(None, 5, None, None, -1, ())) == GOLDEN_EMPTY_GROUP_V3


def test_static_member_instance_id_in_v3():
    static = GroupValue("consumer", 1, "range", "m1", 0, [MemberValue("m1", "i1", "", "", 1, 2, b"", b"")])
    data = encode_group_value(static)
    assert b"\x00\x02i1" in data
    assert decode_group_value(data).members[0].group_instance_id == "i1"


def _older(version: int) -> bytes:
    """GOLDEN_GROUP_V3 rewritten by hand to an older version, dropping the fields it lacks."""
    head = bytes.fromhex("0008") + b"consumer" + bytes.fromhex("00000002" "0005") + b"range" + \
        bytes.fromhex("0002") + b"m1"
    timestamp = bytes.fromhex("00000000000006a4") if version >= 2 else b""
    member = bytes.fromhex("0002") + b"m1" + bytes.fromhex("0001") + b"c" + bytes.fromhex("0002") + b"/h"
    if version >= 1:
        member += bytes.fromhex("000493e0")
    member += bytes.fromhex("0000afc8" "00000002" "0102" "00000000")
    return version.to_bytes(2, "big") + head + timestamp + bytes.fromhex("00000001") + member


def test_group_value_v2():
    assert decode_group_value(_older(2)) == GROUP  # v2 only lacks the instance id, null anyway


def test_group_value_v1_has_no_state_timestamp():
    decoded = decode_group_value(_older(1))
    assert decoded.current_state_timestamp_ms == -1
    assert decoded.members == GROUP.members


def test_group_value_v0_uses_the_session_timeout_as_rebalance_timeout():
    decoded = decode_group_value(_older(0))
    assert decoded.current_state_timestamp_ms == -1
    (member,) = decoded.members
    assert member.rebalance_timeout_ms == member.session_timeout_ms == 45000
    assert member.group_instance_id is None
    assert (member.member_id, member.client_id, member.client_host) == ("m1", "c", "/h")
    assert (member.subscription, member.assignment) == (b"\x01\x02", b"")


def test_members_compare_equal_from_any_sequence():
    assert GroupValue("", 0, None, None, -1, []) == GroupValue("", 0, None, None, -1, ())
    assert isinstance(decode_group_value(GOLDEN_GROUP_V3).members, tuple)


def _texts(max_size=20):
    return st.text(max_size=max_size)


MEMBERS = st.builds(MemberValue, _texts(), st.none() | _texts(), _texts(), _texts(), st.integers(*INT32),
                    st.integers(*INT32), st.binary(max_size=40), st.binary(max_size=40))
GROUPS = st.builds(GroupValue, _texts(), st.integers(*INT32), st.none() | _texts(), st.none() | _texts(),
                   st.integers(*INT64), st.lists(MEMBERS, max_size=5))


@given(GROUPS)
def test_group_value_round_trip(group):
    data = encode_group_value(group)
    assert data[:2] == b"\x00\x03"
    assert decode_group_value(data) == group
    assert decode_group_value(bytearray(data)) == group
    assert decode_group_value(memoryview(data)) == group


@given(GROUPS, st.data())
def test_truncated_group_values_are_refused(group, data):
    encoded = encode_group_value(group)
    end = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(CorruptRecordError, match="group metadata value"):
        decode_group_value(encoded[:end])


@pytest.mark.parametrize("data, complaint", [
    (b"\x00\x04" + GOLDEN_GROUP_V3[2:], "unknown group metadata value version 4"),
    (GOLDEN_GROUP_V3 + b"\x00", "left after the last field"),
    (GOLDEN_EMPTY_GROUP_V3[:-4] + b"\xff\xff\xff\xff", "members has count -1"),
    # Two billion members in a 4-byte tail: refused before any loop.
    (GOLDEN_EMPTY_GROUP_V3[:-4] + b"\x7f\xff\xff\xff", "claims 2147483647 elements"),
    (bytes.fromhex("0003" "ffff") + GOLDEN_EMPTY_GROUP_V3[4:], "protocol_type has length -1"),
    (GOLDEN_GROUP_V3.replace(b"\x00\x00\x00\x02\x01\x02", b"\xff\xff\xff\xfe\x01\x02"), "subscription has length -2"),
])
def test_damaged_group_values(data, complaint):
    with pytest.raises(CorruptRecordError, match=complaint):
        decode_group_value(data)


@pytest.mark.parametrize("change, error, name", [
    (dict(generation="2"), TypeError, "generation"),
    (dict(protocol=1), TypeError, "protocol"),
    (dict(current_state_timestamp_ms=2**63), ValueError, "current_state_timestamp_ms"),
    (dict(members=[("m1", None)]), TypeError, "MemberValue"),
    (dict(members=[MemberValue("m1", None, "c", "h", 1, 2, None, b"")]), TypeError, "subscription"),
    (dict(members=[MemberValue("m1", None, "c", "h", 1, 2**31, b"", b"")]), ValueError, "session_timeout_ms"),
    (dict(members=[MemberValue(None, None, "c", "h", 1, 2, b"", b"")]), TypeError, "member_id"),
])
def test_group_value_misuse(change, error, name):
    fields = dict(protocol_type="consumer", generation=1, protocol="range", leader="m1",
                  current_state_timestamp_ms=0, members=[])
    fields.update(change)
    with pytest.raises(error, match=name):
        encode_group_value(GroupValue(**fields))


@given(st.text(max_size=30), st.text(max_size=30), st.lists(st.integers(*INT32), min_size=1, max_size=4))
def test_an_offset_key_is_its_topics_prefix_and_the_partition(group, topic, partitions):
    """What a commit of several partitions of one topic encodes once: the key without its partition."""
    prefix = offset_key_prefix(group, topic)
    for partition in partitions:
        assert prefix + partition.to_bytes(4, "big", signed=True) == encode_offset_key(group, topic, partition)


def test_offset_key_prefix_misuse_names_the_value():
    with pytest.raises(TypeError, match="group"):
        offset_key_prefix(b"g", "t")
    with pytest.raises(ValueError, match="topic"):
        offset_key_prefix("g", "\ud800")
    assert offset_key_prefix("g", "\ud800", checked=False) is None


@given(st.integers(0, 2**63 - 1), st.integers(-1, 2**31 - 1), st.one_of(st.none(), st.text(max_size=20)),
       st.integers(-1, 2**62), st.one_of(st.none(), st.integers(0, 2**62)))
def test_offset_value_fields_encode_as_the_offset_value(offset, leader_epoch, metadata, commit, expire):
    assert encode_offset_value_fields(offset, leader_epoch, metadata, commit, expire) == \
        encode_offset_value(OffsetValue(offset, leader_epoch, metadata, commit, expire))
