"""The field tables of the admin APIs: topics, records, producer ids, configs, leader epochs, and the
cluster and topic descriptions of newer admin clients (DescribeCluster, DescribeTopicPartitions).

Transcribed from Kafka's JSON message specs like ``messages`` (same names, versions, nullable
versions, defaults and order; fields that exist only above our highest version are left out). The
versions are the ones the server advertises (https://kafka.apache.org/protocol#protocol_api_keys):
CreateTopics 0-4, DeleteTopics 0-3, DeleteRecords 0-1, InitProducerId 0-1, OffsetForLeaderEpoch 2-3,
DescribeConfigs 0-2, CreatePartitions 0-3 (v2 flexible), AlterConfigs 0-2 (v2 flexible),
IncrementalAlterConfigs 0-1 (v1 flexible),
DescribeCluster 0-1 and DescribeTopicPartitions 0 (both flexible from v0).

It imports only ``schema``; ``messages`` collects ``SPECS`` into the registry.
"""

from __future__ import annotations

from .schema import api, field

f = field

# --- CreateTopics (19) ---------------------------------------------------------------------------

CREATE_TOPICS = api(19, "CreateTopics", "0-4", "5+", request=[
    f("Topics", "[]CreatableTopic", "0+", fields=[
        f("Name", "string", "0+"),
        # -1 means the broker default (v4+, KIP-464).
        f("NumPartitions", "int32", "0+"),
        f("ReplicationFactor", "int16", "0+"),
        f("Assignments", "[]CreatableReplicaAssignment", "0+", fields=[
            f("PartitionIndex", "int32", "0+"),
            f("BrokerIds", "[]int32", "0+"),
        ]),
        f("Configs", "[]CreatableTopicConfig", "0+", fields=[
            f("Name", "string", "0+"),
            f("Value", "string", "0+", nullable="0+"),
        ]),
    ]),
    # The spec spells these two in camelCase; the dict keys are still timeout_ms, validate_only.
    f("timeoutMs", "int32", "0+", default="60000"),
    f("validateOnly", "bool", "1+", default="false"),
], response=[
    f("ThrottleTimeMs", "int32", "2+"),
    f("Topics", "[]CreatableTopicResult", "0+", fields=[
        f("Name", "string", "0+"),
        f("ErrorCode", "int16", "0+"),
        f("ErrorMessage", "string", "1+", nullable="0+"),
    ]),
])

# --- DeleteTopics (20) ---------------------------------------------------------------------------

DELETE_TOPICS = api(20, "DeleteTopics", "0-3", "4+", request=[
    f("TopicNames", "[]string", "0-5"),
    f("TimeoutMs", "int32", "0+"),
], response=[
    f("ThrottleTimeMs", "int32", "1+"),
    f("Responses", "[]DeletableTopicResult", "0+", fields=[
        f("Name", "string", "0+"),
        f("ErrorCode", "int16", "0+"),
    ]),
])

# --- DeleteRecords (21) --------------------------------------------------------------------------

DELETE_RECORDS = api(21, "DeleteRecords", "0-1", "2+", request=[
    f("Topics", "[]DeleteRecordsTopic", "0+", fields=[
        f("Name", "string", "0+"),
        f("Partitions", "[]DeleteRecordsPartition", "0+", fields=[
            f("PartitionIndex", "int32", "0+"),
            # -1 means the high watermark.
            f("Offset", "int64", "0+"),
        ]),
    ]),
    f("TimeoutMs", "int32", "0+"),
], response=[
    f("ThrottleTimeMs", "int32", "0+"),
    f("Topics", "[]DeleteRecordsTopicResult", "0+", fields=[
        f("Name", "string", "0+"),
        f("Partitions", "[]DeleteRecordsPartitionResult", "0+", fields=[
            f("PartitionIndex", "int32", "0+"),
            f("LowWatermark", "int64", "0+"),
            f("ErrorCode", "int16", "0+"),
        ]),
    ]),
])

# --- InitProducerId (22) -------------------------------------------------------------------------

INIT_PRODUCER_ID = api(22, "InitProducerId", "0-4", "2+", request=[
    f("TransactionalId", "string", "0+", nullable="0+"),
    f("TransactionTimeoutMs", "int32", "0+"),
    # v3 (KIP-360): the id and epoch a producer already has, to have its epoch bumped.
    f("ProducerId", "int64", "3+", default="-1"),
    f("ProducerEpoch", "int16", "3+", default="-1"),
], response=[
    f("ThrottleTimeMs", "int32", "0+"),
    f("ErrorCode", "int16", "0+"),
    f("ProducerId", "int64", "0+", default=-1),
    f("ProducerEpoch", "int16", "0+"),
])

# --- OffsetForLeaderEpoch (23) -------------------------------------------------------------------

OFFSET_FOR_LEADER_EPOCH = api(23, "OffsetForLeaderEpoch", "2-3", "4+", request=[
    f("ReplicaId", "int32", "3+", default=-2),
    f("Topics", "[]OffsetForLeaderTopic", "0+", fields=[
        f("Topic", "string", "0+"),
        f("Partitions", "[]OffsetForLeaderPartition", "0+", fields=[
            f("Partition", "int32", "0+"),
            f("CurrentLeaderEpoch", "int32", "2+", default="-1"),
            f("LeaderEpoch", "int32", "0+"),
        ]),
    ]),
], response=[
    f("ThrottleTimeMs", "int32", "2+"),
    f("Topics", "[]OffsetForLeaderTopicResult", "0+", fields=[
        f("Topic", "string", "0+"),
        f("Partitions", "[]EpochEndOffset", "0+", fields=[
            f("ErrorCode", "int16", "0+"),
            f("Partition", "int32", "0+"),
            f("LeaderEpoch", "int32", "1+", default="-1"),
            f("EndOffset", "int64", "0+", default="-1"),
        ]),
    ]),
])

# --- DescribeConfigs (32) ------------------------------------------------------------------------

DESCRIBE_CONFIGS = api(32, "DescribeConfigs", "0-2", "4+", request=[
    f("Resources", "[]DescribeConfigsResource", "0+", fields=[
        # TOPIC = 2, BROKER = 4.
        f("ResourceType", "int8", "0+"),
        f("ResourceName", "string", "0+"),
        # null means all keys.
        f("ConfigurationKeys", "[]string", "0+", nullable="0+"),
    ]),
    f("IncludeSynonyms", "bool", "1+", default="false"),
], response=[
    f("ThrottleTimeMs", "int32", "0+"),
    f("Results", "[]DescribeConfigsResult", "0+", fields=[
        f("ErrorCode", "int16", "0+"),
        f("ErrorMessage", "string", "0+", nullable="0+"),
        f("ResourceType", "int8", "0+"),
        f("ResourceName", "string", "0+"),
        f("Configs", "[]DescribeConfigsResourceResult", "0+", fields=[
            f("Name", "string", "0+"),
            f("Value", "string", "0+", nullable="0+"),
            f("ReadOnly", "bool", "0+"),
            # 1 topic config, 4 static broker config, 5 default.
            f("ConfigSource", "int8", "1+", default="-1"),
            f("IsDefault", "bool", "0"),
            f("IsSensitive", "bool", "0+"),
            f("Synonyms", "[]DescribeConfigsSynonym", "1+", fields=[
                f("Name", "string", "1+"),
                f("Value", "string", "1+", nullable="0+"),
                f("Source", "int8", "1+"),
            ]),
        ]),
    ]),
])

# --- CreatePartitions (37) ------------------------------------------------------------------------

CREATE_PARTITIONS = api(37, "CreatePartitions", "0-3", "2+", request=[
    f("Topics", "[]CreatePartitionsTopic", "0+", fields=[
        f("Name", "string", "0+"),
        # The new total partition count.
        f("Count", "int32", "0+"),
        # null: the broker places the new partitions; else one entry (the brokers) per new partition.
        f("Assignments", "[]CreatePartitionsAssignment", "0+", nullable="0+", fields=[
            f("BrokerIds", "[]int32", "0+"),
        ]),
    ]),
    f("TimeoutMs", "int32", "0+"),
    f("ValidateOnly", "bool", "0+"),
], response=[
    f("ThrottleTimeMs", "int32", "0+"),
    f("Results", "[]CreatePartitionsTopicResult", "0+", fields=[
        f("Name", "string", "0+"),
        f("ErrorCode", "int16", "0+"),
        f("ErrorMessage", "string", "0+", nullable="0+", default="null"),
    ]),
])

# --- IncrementalAlterConfigs (44) ----------------------------------------------------------------

# --- AlterConfigs (33) ---------------------------------------------------------------------------
# KIP-133's non-incremental form: each resource's given configs replace all of its dynamic ones.

ALTER_CONFIGS = api(33, "AlterConfigs", "0-2", "2+", request=[
    f("Resources", "[]AlterConfigsResource", "0+", fields=[
        f("ResourceType", "int8", "0+"),
        f("ResourceName", "string", "0+"),
        f("Configs", "[]AlterableConfig", "0+", fields=[
            f("Name", "string", "0+"),
            f("Value", "string", "0+", nullable="0+"),
        ]),
    ]),
    f("ValidateOnly", "bool", "0+"),
], response=[
    f("ThrottleTimeMs", "int32", "0+"),
    f("Responses", "[]AlterConfigsResourceResponse", "0+", fields=[
        f("ErrorCode", "int16", "0+"),
        f("ErrorMessage", "string", "0+", nullable="0+"),
        f("ResourceType", "int8", "0+"),
        f("ResourceName", "string", "0+"),
    ]),
])

INCREMENTAL_ALTER_CONFIGS = api(44, "IncrementalAlterConfigs", "0-1", "1+", request=[
    f("Resources", "[]AlterConfigsResource", "0+", fields=[
        f("ResourceType", "int8", "0+"),
        f("ResourceName", "string", "0+"),
        f("Configs", "[]AlterableConfig", "0+", fields=[
            f("Name", "string", "0+"),
            # 0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT.
            f("ConfigOperation", "int8", "0+"),
            f("Value", "string", "0+", nullable="0+"),
        ]),
    ]),
    f("ValidateOnly", "bool", "0+"),
], response=[
    f("ThrottleTimeMs", "int32", "0+"),
    f("Responses", "[]AlterConfigsResourceResponse", "0+", fields=[
        f("ErrorCode", "int16", "0+"),
        f("ErrorMessage", "string", "0+", nullable="0+"),
        f("ResourceType", "int8", "0+"),
        f("ResourceName", "string", "0+"),
    ]),
])

# --- DescribeCluster (60) ------------------------------------------------------------------------

DESCRIBE_CLUSTER = api(60, "DescribeCluster", "0-1", "0+", request=[
    f("IncludeClusterAuthorizedOperations", "bool", "0+"),
    # v1+: 1 brokers, 2 controllers (a broker answers only 1).
    f("EndpointType", "int8", "1+", default="1"),
], response=[
    f("ThrottleTimeMs", "int32", "0+"),
    f("ErrorCode", "int16", "0+"),
    f("ErrorMessage", "string", "0+", nullable="0+", default="null"),
    f("EndpointType", "int8", "1+", default="1"),
    f("ClusterId", "string", "0+"),
    f("ControllerId", "int32", "0+", default="-1"),
    f("Brokers", "[]DescribeClusterBroker", "0+", fields=[
        f("BrokerId", "int32", "0+"),
        f("Host", "string", "0+"),
        f("Port", "int32", "0+"),
        f("Rack", "string", "0+", nullable="0+", default="null"),
    ]),
    f("ClusterAuthorizedOperations", "int32", "0+", default="-2147483648"),
])

# --- DescribeTopicPartitions (75) ----------------------------------------------------------------

DESCRIBE_TOPIC_PARTITIONS = api(75, "DescribeTopicPartitions", "0", "0+", request=[
    f("Topics", "[]TopicRequest", "0+", fields=[
        f("Name", "string", "0+"),
    ]),
    f("ResponsePartitionLimit", "int32", "0+", default="2000"),
    f("Cursor", "Cursor", "0+", nullable="0+", default="null", fields=[
        f("TopicName", "string", "0+"),
        f("PartitionIndex", "int32", "0+"),
    ]),
], response=[
    f("ThrottleTimeMs", "int32", "0+"),
    f("Topics", "[]DescribeTopicPartitionsResponseTopic", "0+", fields=[
        f("ErrorCode", "int16", "0+"),
        f("Name", "string", "0+", nullable="0+"),
        f("TopicId", "uuid", "0+"),
        f("IsInternal", "bool", "0+", default="false"),
        f("Partitions", "[]DescribeTopicPartitionsResponsePartition", "0+", fields=[
            f("ErrorCode", "int16", "0+"),
            f("PartitionIndex", "int32", "0+"),
            f("LeaderId", "int32", "0+"),
            f("LeaderEpoch", "int32", "0+", default="-1"),
            f("ReplicaNodes", "[]int32", "0+"),
            f("IsrNodes", "[]int32", "0+"),
            f("EligibleLeaderReplicas", "[]int32", "0+", nullable="0+", default="null"),
            f("LastKnownElr", "[]int32", "0+", nullable="0+", default="null"),
            f("OfflineReplicas", "[]int32", "0+"),
        ]),
        f("TopicAuthorizedOperations", "int32", "0+", default="-2147483648"),
    ]),
    f("NextCursor", "Cursor", "0+", nullable="0+", default="null", fields=[
        f("TopicName", "string", "0+"),
        f("PartitionIndex", "int32", "0+"),
    ]),
])

SPECS = (CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS, INIT_PRODUCER_ID, OFFSET_FOR_LEADER_EPOCH,
         DESCRIBE_CONFIGS, CREATE_PARTITIONS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS, DESCRIBE_CLUSTER,
         DESCRIBE_TOPIC_PARTITIONS)
"""The admin APIs, for the registry in ``messages``."""
