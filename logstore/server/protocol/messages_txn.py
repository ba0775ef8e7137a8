"""The field tables of the transaction APIs a transactional producer sends: AddPartitionsToTxn 0-3,
AddOffsetsToTxn 0-3, EndTxn 0-3 (to the transaction coordinator) and TxnOffsetCommit 0-3 (to the
group coordinator). InitProducerId is an admin table (``messages_admin``), FindCoordinator's key
type 1 a group one (``messages_groups``).

Transcribed from Kafka's JSON specs (``AddPartitionsToTxnRequest.json`` and the others), same
names, version ranges, nullable versions and defaults. AddPartitionsToTxn v4+ is a broker-to-broker
shape (batched transactions, ``VerifyOnly``), which clients never send, so it stops at v3 here;
EndTxn v5 (KIP-890 part 2, a new epoch on every transaction) and the versions that only allow
TRANSACTION_ABORTABLE (AddOffsetsToTxn v4, EndTxn v4, TxnOffsetCommit v4) are left out until a
server answers them.

It imports only ``schema``; ``messages`` collects ``SPECS`` into the registry (a server advertises
an API only once it has a handler for it).
"""

from __future__ import annotations

from .schema import api, field

f = field

# --- AddPartitionsToTxn (24) ---------------------------------------------------------------------

ADD_PARTITIONS_TO_TXN = api(24, "AddPartitionsToTxn", "0-3", "3+", request=[
    f("V3AndBelowTransactionalId", "string", "0-3"),
    f("V3AndBelowProducerId", "int64", "0-3"),
    f("V3AndBelowProducerEpoch", "int16", "0-3"),
    f("V3AndBelowTopics", "[]AddPartitionsToTxnTopic", "0-3", fields=[
        f("Name", "string", "0+"),
        f("Partitions", "[]int32", "0+"),
    ]),
], response=[
    f("ThrottleTimeMs", "int32", "0+"),
    # Every error is per partition, a transaction-wide one (PRODUCER_FENCED) repeated on each.
    f("ResultsByTopicV3AndBelow", "[]AddPartitionsToTxnTopicResult", "0-3", fields=[
        f("Name", "string", "0+"),
        f("ResultsByPartition", "[]AddPartitionsToTxnPartitionResult", "0+", fields=[
            f("PartitionIndex", "int32", "0+"),
            f("PartitionErrorCode", "int16", "0+"),
        ]),
    ]),
])

# --- AddOffsetsToTxn (25) ------------------------------------------------------------------------

ADD_OFFSETS_TO_TXN = api(25, "AddOffsetsToTxn", "0-3", "3+", request=[
    f("TransactionalId", "string", "0+"),
    f("ProducerId", "int64", "0+"),
    f("ProducerEpoch", "int16", "0+"),
    f("GroupId", "string", "0+"),
], response=[
    f("ThrottleTimeMs", "int32", "0+"),
    f("ErrorCode", "int16", "0+"),
])

# --- EndTxn (26) ---------------------------------------------------------------------------------

END_TXN = api(26, "EndTxn", "0-3", "3+", request=[
    f("TransactionalId", "string", "0+"),
    f("ProducerId", "int64", "0+"),
    f("ProducerEpoch", "int16", "0+"),
    f("Committed", "bool", "0+"),
], response=[
    f("ThrottleTimeMs", "int32", "0+"),
    f("ErrorCode", "int16", "0+"),
])

# --- TxnOffsetCommit (28) ------------------------------------------------------------------------

TXN_OFFSET_COMMIT = api(28, "TxnOffsetCommit", "0-3", "3+", request=[
    f("TransactionalId", "string", "0+"),
    f("GroupId", "string", "0+"),
    f("ProducerId", "int64", "0+"),
    f("ProducerEpoch", "int16", "0+"),
    # v3 (KIP-447): the consumer's group membership, so a member kicked out of the group (a zombie)
    # can no longer commit offsets; -1 / "" / null skip the checks.
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

SPECS = (ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT)
