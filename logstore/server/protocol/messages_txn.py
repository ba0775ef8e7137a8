"""The field tables of the transaction APIs a transaction coordinator answers, and DescribeProducers.

Transcribed from Kafka's JSON message specs like ``messages`` (same names, versions, nullable
versions, defaults and order; fields that exist only above our highest version are left out).
The versions served (https://kafka.apache.org/protocol#protocol_api_keys):

- AddPartitionsToTxn 0-5: v0-3 are the clients' form (one transaction); v4+ (KIP-890) are the
  brokers' form, several transactions per request, each possibly ``VerifyOnly``; v5 may answer
  TRANSACTION_ABORTABLE;
- AddOffsetsToTxn 0-4, EndTxn 0-4 (v2: PRODUCER_FENCED; v3: flexible; v4: TRANSACTION_ABORTABLE;
  EndTxn v5, KIP-890 part 2's epoch bump per transaction, is not served);
- DescribeProducers 0, DescribeTransactions 0, ListTransactions 0-1 (v1: the duration filter),
  all flexible.

InitProducerId and FindCoordinator, which transactional producers use too, are in
``messages_admin`` and ``messages_groups``; TxnOffsetCommit is with the group APIs.

It imports only ``schema``; ``messages`` collects ``SPECS`` into the registry.
"""

from __future__ import annotations

from .schema import api, field

f = field

# --- AddPartitionsToTxn (24) ---------------------------------------------------------------------

_ADD_PARTITIONS_TOPIC = [
    f("Name", "string", "0+"),
    f("Partitions", "[]int32", "0+"),
]
_ADD_PARTITIONS_TOPIC_RESULT = [
    f("Name", "string", "0+"),
    f("ResultsByPartition", "[]AddPartitionsToTxnPartitionResult", "0+", fields=[
        f("PartitionIndex", "int32", "0+"),
        f("PartitionErrorCode", "int16", "0+"),
    ]),
]

ADD_PARTITIONS_TO_TXN = api(24, "AddPartitionsToTxn", "0-5", "3+", request=[
    f("Transactions", "[]AddPartitionsToTxnTransaction", "4+", fields=[
        f("TransactionalId", "string", "4+"),
        f("ProducerId", "int64", "4+"),
        f("ProducerEpoch", "int16", "4+"),
        f("VerifyOnly", "bool", "4+", default="false"),
        f("Topics", "[]AddPartitionsToTxnTopic", "4+", fields=_ADD_PARTITIONS_TOPIC),
    ]),
    f("V3AndBelowTransactionalId", "string", "0-3"),
    f("V3AndBelowProducerId", "int64", "0-3"),
    f("V3AndBelowProducerEpoch", "int16", "0-3"),
    f("V3AndBelowTopics", "[]AddPartitionsToTxnTopic", "0-3", fields=_ADD_PARTITIONS_TOPIC),
], response=[
    f("ThrottleTimeMs", "int32", "0+"),
    f("ErrorCode", "int16", "4+"),
    f("ResultsByTransaction", "[]AddPartitionsToTxnResult", "4+", fields=[
        f("TransactionalId", "string", "4+"),
        f("TopicResults", "[]AddPartitionsToTxnTopicResult", "4+", fields=_ADD_PARTITIONS_TOPIC_RESULT),
    ]),
    f("ResultsByTopicV3AndBelow", "[]AddPartitionsToTxnTopicResult", "0-3", fields=_ADD_PARTITIONS_TOPIC_RESULT),
])

# --- AddOffsetsToTxn (25) ------------------------------------------------------------------------

ADD_OFFSETS_TO_TXN = api(25, "AddOffsetsToTxn", "0-4", "3+", request=[
    f("TransactionalId", "string", "0+"),
    f("ProducerId", "int64", "0+"),
    f("ProducerEpoch", "int16", "0+"),
    f("GroupId", "string", "0+"),
], response=[
    f("ThrottleTimeMs", "int32", "0+"),
    f("ErrorCode", "int16", "0+"),
])

# --- EndTxn (26) ---------------------------------------------------------------------------------

END_TXN = api(26, "EndTxn", "0-4", "3+", request=[
    f("TransactionalId", "string", "0+"),
    f("ProducerId", "int64", "0+"),
    f("ProducerEpoch", "int16", "0+"),
    # True to commit, false to abort.
    f("Committed", "bool", "0+"),
], response=[
    f("ThrottleTimeMs", "int32", "0+"),
    f("ErrorCode", "int16", "0+"),
])

# --- DescribeProducers (61) ----------------------------------------------------------------------

DESCRIBE_PRODUCERS = api(61, "DescribeProducers", "0", "0+", request=[
    f("Topics", "[]TopicRequest", "0+", fields=[
        f("Name", "string", "0+"),
        f("PartitionIndexes", "[]int32", "0+"),
    ]),
], response=[
    f("ThrottleTimeMs", "int32", "0+"),
    f("Topics", "[]TopicResponse", "0+", fields=[
        f("Name", "string", "0+"),
        f("Partitions", "[]PartitionResponse", "0+", fields=[
            f("PartitionIndex", "int32", "0+"),
            f("ErrorCode", "int16", "0+"),
            f("ErrorMessage", "string", "0+", nullable="0+", default="null"),
            f("ActiveProducers", "[]ProducerState", "0+", fields=[
                f("ProducerId", "int64", "0+"),
                f("ProducerEpoch", "int32", "0+"),
                f("LastSequence", "int32", "0+", default="-1"),
                f("LastTimestamp", "int64", "0+", default="-1"),
                f("CoordinatorEpoch", "int32", "0+"),
                f("CurrentTxnStartOffset", "int64", "0+", default="-1"),
            ]),
        ]),
    ]),
])

# --- DescribeTransactions (65) -------------------------------------------------------------------

DESCRIBE_TRANSACTIONS = api(65, "DescribeTransactions", "0", "0+", request=[
    f("TransactionalIds", "[]string", "0+"),
], response=[
    f("ThrottleTimeMs", "int32", "0+"),
    f("TransactionStates", "[]TransactionState", "0+", fields=[
        f("ErrorCode", "int16", "0+"),
        f("TransactionalId", "string", "0+"),
        f("TransactionState", "string", "0+"),
        f("TransactionTimeoutMs", "int32", "0+"),
        f("TransactionStartTimeMs", "int64", "0+"),
        f("ProducerId", "int64", "0+"),
        f("ProducerEpoch", "int16", "0+"),
        f("Topics", "[]TopicData", "0+", fields=[
            f("Topic", "string", "0+"),
            f("Partitions", "[]int32", "0+"),
        ]),
    ]),
])

# --- ListTransactions (66) -----------------------------------------------------------------------

LIST_TRANSACTIONS = api(66, "ListTransactions", "0-1", "0+", request=[
    f("StateFilters", "[]string", "0+"),
    f("ProducerIdFilters", "[]int64", "0+"),
    # v1 (KIP-994): only transactions open longer than this (ms); < 0: every one.
    f("DurationFilter", "int64", "1+", default="-1"),
], response=[
    f("ThrottleTimeMs", "int32", "0+"),
    f("ErrorCode", "int16", "0+"),
    f("UnknownStateFilters", "[]string", "0+"),
    f("TransactionStates", "[]TransactionState", "0+", fields=[
        f("TransactionalId", "string", "0+"),
        f("ProducerId", "int64", "0+"),
        f("TransactionState", "string", "0+"),
    ]),
])

SPECS = (ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS,
         LIST_TRANSACTIONS)
