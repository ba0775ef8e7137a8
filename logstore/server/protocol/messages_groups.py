"""The field tables of the consumer-group APIs: coordinator lookup, membership, offsets, listing,
deletion; and the one KIP-848 API that has a table only so that it can be refused.

Transcribed from Kafka's JSON message specs like ``messages`` (same names, versions, nullable
versions, defaults and order; fields that exist only above our highest version are left out). The
versions are the ones the server advertises once ``server.groups`` serves them: the classic
protocol's non-flexible versions that every client we test (docs/design.md §12) negotiates down to
(JoinGroup 0-5, SyncGroup 0-3, Heartbeat 0-3, LeaveGroup 0-3, OffsetCommit 2-7, OffsetFetch 1-5),
plus flexible versions: OffsetFetch 6-7 (v7: ``RequireStable``, KIP-447, which a transactional
reader sends), FindCoordinator 0-4 (v4: batched keys, KIP-699; kafka-python 3.x sends
it), ListGroups 0-5 (v4: the states filter; librdkafka and kafka-python send it; v5: the group
types of KIP-848, every group here being ``classic``), DescribeGroups 0-5 (v5: the first flexible
version, with v4's fields), DeleteGroups 0-2 and OffsetDelete 0. Member metadata and assignments
are opaque ``bytes``: the coordinator stores and returns them as they came.

TxnOffsetCommit 0-4 (a transactional producer's offsets; v3+ flexible, with KIP-447's member fields)
goes to the group coordinator and is here too.

``SPECS`` are served; ``UNSERVED`` (ConsumerGroupHeartbeat, KIP-848) is never advertised, and its
table exists so that a client that sends it anyway is answered UNSUPPORTED_VERSION, as Kafka answers
it with the new protocol disabled, instead of having its connection closed.

It imports only ``schema``; ``messages`` collects ``SPECS`` and ``UNSERVED`` into the registry.
"""

from __future__ import annotations

from .schema import api, field

f = field

# --- OffsetCommit (8) ----------------------------------------------------------------------------

OFFSET_COMMIT = api(8, "OffsetCommit", "2-7", "8+", request=[
    f("GroupId", "string", "0+"),
    # Kafka's spec named this GenerationId before KIP-848; -1 with an empty member id is a "simple"
    # commit (no group membership), which confluent-kafka's assign() mode sends.
    f("GenerationIdOrMemberEpoch", "int32", "1+", default="-1"),
    f("MemberId", "string", "1+"),
    f("GroupInstanceId", "string", "7+", nullable="7+", default="null"),
    f("RetentionTimeMs", "int64", "2-4", default="-1"),
    f("Topics", "[]OffsetCommitRequestTopic", "0+", fields=[
        f("Name", "string", "0-9"),
        f("Partitions", "[]OffsetCommitRequestPartition", "0+", fields=[
            f("PartitionIndex", "int32", "0+"),
            f("CommittedOffset", "int64", "0+"),
            f("CommittedLeaderEpoch", "int32", "6+", default="-1"),
            # Kept exactly as sent and returned by OffsetFetch.
            f("CommittedMetadata", "string", "0+", nullable="0+"),
        ]),
    ]),
], response=[
    f("ThrottleTimeMs", "int32", "3+"),
    f("Topics", "[]OffsetCommitResponseTopic", "0+", fields=[
        f("Name", "string", "0-9"),
        f("Partitions", "[]OffsetCommitResponsePartition", "0+", fields=[
            f("PartitionIndex", "int32", "0+"),
            f("ErrorCode", "int16", "0+"),
        ]),
    ]),
])

# --- OffsetFetch (9) -----------------------------------------------------------------------------

OFFSET_FETCH = api(9, "OffsetFetch", "1-7", "6+", request=[
    f("GroupId", "string", "0-7"),
    # v2+: null means every committed offset of the group.
    f("Topics", "[]OffsetFetchRequestTopic", "0-7", nullable="2-7", fields=[
        f("Name", "string", "0-7"),
        f("PartitionIndexes", "[]int32", "0-7"),
    ]),
    # v7 (KIP-447): answer UNSTABLE_OFFSET_COMMIT for a partition whose offsets a transaction holds
    # pending, so a consumer does not start from where that transaction began.
    f("RequireStable", "bool", "7+", default="false"),
], response=[
    f("ThrottleTimeMs", "int32", "3+"),
    f("Topics", "[]OffsetFetchResponseTopic", "0-7", fields=[
        f("Name", "string", "0-7"),
        f("Partitions", "[]OffsetFetchResponsePartition", "0-7", fields=[
            f("PartitionIndex", "int32", "0-7"),
            # -1 (with metadata "" and no error) for a partition with no committed offset.
            f("CommittedOffset", "int64", "0-7"),
            f("CommittedLeaderEpoch", "int32", "5-7", default="-1"),
            f("Metadata", "string", "0-7", nullable="0-7"),
            f("ErrorCode", "int16", "0-7"),
        ]),
    ]),
    f("ErrorCode", "int16", "2-7", default="0"),
])

# --- TxnOffsetCommit (28) ------------------------------------------------------------------------
# A transactional producer's offsets, sent to the group coordinator after AddOffsetsToTxn. v1 = v0;
# v2 adds the leader epoch; v3 (flexible) KIP-447's member fields (and their three errors); v4 only
# allows TRANSACTION_ABORTABLE in the answer.

TXN_OFFSET_COMMIT = api(28, "TxnOffsetCommit", "0-4", "3+", request=[
    f("TransactionalId", "string", "0+"),
    f("GroupId", "string", "0+"),
    f("ProducerId", "int64", "0+"),
    f("ProducerEpoch", "int16", "0+"),
    f("GenerationId", "int32", "3+", default="-1"),
    f("MemberId", "string", "3+", default=""),
    f("GroupInstanceId", "string", "3+", nullable="3+", default="null"),
    f("Topics", "[]TxnOffsetCommitRequestTopic", "0+", fields=[
        f("Name", "string", "0+"),
        f("Partitions", "[]TxnOffsetCommitRequestPartition", "0+", fields=[
            f("PartitionIndex", "int32", "0+"),
            f("CommittedOffset", "int64", "0+"),
            f("CommittedLeaderEpoch", "int32", "2+", default="-1"),
            f("CommittedMetadata", "string", "0+", nullable="0+"),
        ]),
    ]),
], response=[
    f("ThrottleTimeMs", "int32", "0+"),
    f("Topics", "[]TxnOffsetCommitResponseTopic", "0+", fields=[
        f("Name", "string", "0+"),
        f("Partitions", "[]TxnOffsetCommitResponsePartition", "0+", fields=[
            f("PartitionIndex", "int32", "0+"),
            f("ErrorCode", "int16", "0+"),
        ]),
    ]),
])

# --- FindCoordinator (10) ------------------------------------------------------------------------

FIND_COORDINATOR = api(10, "FindCoordinator", "0-4", "3+", request=[
    f("Key", "string", "0-3"),
    # 0 group, 1 transaction (2 share, from v6).
    f("KeyType", "int8", "1+", default="0"),
    # v4+ (KIP-699): several keys of one type in one request, each answered in Coordinators.
    f("CoordinatorKeys", "[]string", "4+"),
], response=[
    f("ThrottleTimeMs", "int32", "1+"),
    f("ErrorCode", "int16", "0-3"),
    f("ErrorMessage", "string", "1-3", nullable="1-3"),
    f("NodeId", "int32", "0-3"),
    f("Host", "string", "0-3"),
    f("Port", "int32", "0-3"),
    f("Coordinators", "[]Coordinator", "4+", fields=[
        f("Key", "string", "4+"),
        f("NodeId", "int32", "4+"),
        f("Host", "string", "4+"),
        f("Port", "int32", "4+"),
        f("ErrorCode", "int16", "4+"),
        f("ErrorMessage", "string", "4+", nullable="4+"),
    ]),
])

# --- JoinGroup (11) ------------------------------------------------------------------------------

JOIN_GROUP = api(11, "JoinGroup", "0-5", "6+", request=[
    f("GroupId", "string", "0+"),
    f("SessionTimeoutMs", "int32", "0+"),
    f("RebalanceTimeoutMs", "int32", "1+", default="-1"),
    f("MemberId", "string", "0+"),
    f("GroupInstanceId", "string", "5+", nullable="5+", default="null"),
    f("ProtocolType", "string", "0+"),
    f("Protocols", "[]JoinGroupRequestProtocol", "0+", fields=[
        f("Name", "string", "0+"),
        f("Metadata", "bytes", "0+"),
    ]),
], response=[
    f("ThrottleTimeMs", "int32", "2+"),
    f("ErrorCode", "int16", "0+"),
    f("GenerationId", "int32", "0+", default="-1"),
    f("ProtocolName", "string", "0+", nullable="7+"),
    f("Leader", "string", "0+"),
    f("MemberId", "string", "0+"),
    # The leader gets every member with its metadata; followers get an empty list.
    f("Members", "[]JoinGroupResponseMember", "0+", fields=[
        f("MemberId", "string", "0+"),
        f("GroupInstanceId", "string", "5+", nullable="5+", default="null"),
        f("Metadata", "bytes", "0+"),
    ]),
])

# --- Heartbeat (12) ------------------------------------------------------------------------------

HEARTBEAT = api(12, "Heartbeat", "0-3", "4+", request=[
    f("GroupId", "string", "0+"),
    f("GenerationId", "int32", "0+"),
    f("MemberId", "string", "0+"),
    f("GroupInstanceId", "string", "3+", nullable="3+", default="null"),
], response=[
    f("ThrottleTimeMs", "int32", "1+"),
    f("ErrorCode", "int16", "0+"),
])

# --- LeaveGroup (13) -----------------------------------------------------------------------------

LEAVE_GROUP = api(13, "LeaveGroup", "0-3", "4+", request=[
    f("GroupId", "string", "0+"),
    f("MemberId", "string", "0-2"),
    f("Members", "[]MemberIdentity", "3+", fields=[
        f("MemberId", "string", "3+"),
        f("GroupInstanceId", "string", "3+", nullable="3+", default="null"),
    ]),
], response=[
    f("ThrottleTimeMs", "int32", "1+"),
    f("ErrorCode", "int16", "0+"),
    f("Members", "[]MemberResponse", "3+", fields=[
        f("MemberId", "string", "3+"),
        f("GroupInstanceId", "string", "3+", nullable="3+"),
        f("ErrorCode", "int16", "3+"),
    ]),
])

# --- SyncGroup (14) ------------------------------------------------------------------------------

SYNC_GROUP = api(14, "SyncGroup", "0-3", "4+", request=[
    f("GroupId", "string", "0+"),
    f("GenerationId", "int32", "0+"),
    f("MemberId", "string", "0+"),
    f("GroupInstanceId", "string", "3+", nullable="3+", default="null"),
    # Sent by the leader only: every member's assignment.
    f("Assignments", "[]SyncGroupRequestAssignment", "0+", fields=[
        f("MemberId", "string", "0+"),
        f("Assignment", "bytes", "0+"),
    ]),
], response=[
    f("ThrottleTimeMs", "int32", "1+"),
    f("ErrorCode", "int16", "0+"),
    f("Assignment", "bytes", "0+"),
])

# --- DescribeGroups (15) -------------------------------------------------------------------------

DESCRIBE_GROUPS = api(15, "DescribeGroups", "0-5", "5+", request=[
    f("Groups", "[]string", "0+"),
    f("IncludeAuthorizedOperations", "bool", "3+"),
], response=[
    f("ThrottleTimeMs", "int32", "1+"),
    f("Groups", "[]DescribedGroup", "0+", fields=[
        f("ErrorCode", "int16", "0+"),
        f("GroupId", "string", "0+"),
        # Empty, PreparingRebalance, CompletingRebalance, Stable or Dead.
        f("GroupState", "string", "0+"),
        f("ProtocolType", "string", "0+"),
        f("ProtocolData", "string", "0+"),
        f("Members", "[]DescribedGroupMember", "0+", fields=[
            f("MemberId", "string", "0+"),
            f("GroupInstanceId", "string", "4+", nullable="4+", default="null"),
            f("ClientId", "string", "0+"),
            f("ClientHost", "string", "0+"),
            f("MemberMetadata", "bytes", "0+"),
            f("MemberAssignment", "bytes", "0+"),
        ]),
        f("AuthorizedOperations", "int32", "3+", default="-2147483648"),
    ]),
])

# --- ListGroups (16) -----------------------------------------------------------------------------

LIST_GROUPS = api(16, "ListGroups", "0-5", "3+", request=[
    # v4+: the states to list (Empty, Stable...); empty means every group.
    f("StatesFilter", "[]string", "4+"),
    # v5+ (KIP-848): the types to list (classic, consumer, share); empty means every group.
    f("TypesFilter", "[]string", "5+"),
], response=[
    f("ThrottleTimeMs", "int32", "1+"),
    f("ErrorCode", "int16", "0+"),
    f("Groups", "[]ListedGroup", "0+", fields=[
        f("GroupId", "string", "0+"),
        f("ProtocolType", "string", "0+"),
        f("GroupState", "string", "4+"),
        f("GroupType", "string", "5+"),
    ]),
])

# --- DeleteGroups (42) ---------------------------------------------------------------------------

DELETE_GROUPS = api(42, "DeleteGroups", "0-2", "2+", request=[
    f("GroupsNames", "[]string", "0+"),
], response=[
    f("ThrottleTimeMs", "int32", "0+"),
    f("Results", "[]DeletableGroupResult", "0+", fields=[
        f("GroupId", "string", "0+"),
        f("ErrorCode", "int16", "0+"),
    ]),
])

# --- OffsetDelete (47) ---------------------------------------------------------------------------

OFFSET_DELETE = api(47, "OffsetDelete", "0", "none", request=[
    f("GroupId", "string", "0+"),
    f("Topics", "[]OffsetDeleteRequestTopic", "0+", fields=[
        f("Name", "string", "0+"),
        f("Partitions", "[]OffsetDeleteRequestPartition", "0+", fields=[
            f("PartitionIndex", "int32", "0+"),
        ]),
    ]),
], response=[
    # The spec puts the top-level error before the throttle time here.
    f("ErrorCode", "int16", "0+"),
    f("ThrottleTimeMs", "int32", "0+"),
    f("Topics", "[]OffsetDeleteResponseTopic", "0+", fields=[
        f("Name", "string", "0+"),
        f("Partitions", "[]OffsetDeleteResponsePartition", "0+", fields=[
            f("PartitionIndex", "int32", "0+"),
            f("ErrorCode", "int16", "0+"),
        ]),
    ]),
])

# --- ConsumerGroupHeartbeat (68, KIP-848): a table to refuse it with, never advertised -----------

CONSUMER_GROUP_HEARTBEAT = api(68, "ConsumerGroupHeartbeat", "0-1", "0+", request=[
    f("GroupId", "string", "0+"),
    f("MemberId", "string", "0+"),
    f("MemberEpoch", "int32", "0+"),
    f("InstanceId", "string", "0+", nullable="0+", default="null"),
    f("RackId", "string", "0+", nullable="0+", default="null"),
    f("RebalanceTimeoutMs", "int32", "0+", default="-1"),
    f("SubscribedTopicNames", "[]string", "0+", nullable="0+", default="null"),
    f("SubscribedTopicRegex", "string", "1+", nullable="1+", default="null"),
    f("ServerAssignor", "string", "0+", nullable="0+", default="null"),
    f("TopicPartitions", "[]TopicPartitions", "0+", nullable="0+", default="null", fields=[
        f("TopicId", "uuid", "0+"),
        f("Partitions", "[]int32", "0+"),
    ]),
], response=[
    f("ThrottleTimeMs", "int32", "0+"),
    f("ErrorCode", "int16", "0+"),
    f("ErrorMessage", "string", "0+", nullable="0+", default="null"),
    f("MemberId", "string", "0+", nullable="0+", default="null"),
    f("MemberEpoch", "int32", "0+"),
    f("HeartbeatIntervalMs", "int32", "0+"),
    # The spec's Assignment is a nullable struct (TopicPartitions[TopicId, Partitions]), which the
    # codec does not do; only the refusal is ever sent, whose Assignment is null, and a null struct
    # is its int8 presence marker -1 alone. So the table holds just that marker.
    f("Assignment", "int8", "0+", default="-1"),
])

SPECS = (OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP,
         DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS, OFFSET_DELETE, TXN_OFFSET_COMMIT)
"""The consumer-group APIs the server serves, for the registry in ``messages``."""

UNSERVED = (CONSUMER_GROUP_HEARTBEAT,)
"""APIs with a table that are never advertised nor served: requests for them are refused with an
error answer (``KafkaApis.refuse``), the way Kafka answers them when the feature is off."""
