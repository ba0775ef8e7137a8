"""The field tables of the data-path APIs and the registry of every API the server speaks.

Each table is Kafka's JSON message spec (``clients/src/main/resources/common/message/<Name>.json``)
transcribed into ``schema.field`` calls: same names, same version ranges, same nullable versions,
defaults and tags, same order (the wire order). Fields that exist only above the highest version we
support are left out: widening a range in ``api(...)`` means adding them from the spec first. The
Python dicts the codec produces are keyed by the snake_case of each name (``TopicData`` ->
``topic_data``).

What it owns:
- the request and response header tables (the header field names are ours: ``api_key``,
  ``api_version`` rather than the spec's ``RequestApiKey``...);
- ApiVersions, Metadata, Produce, Fetch and ListOffsets (this module), the admin APIs
  (``messages_admin``), the consumer-group APIs (``messages_groups``) and the security APIs (SASL,
  ACLs, SCRAM credentials: ``messages_security``) and the transaction APIs (``messages_txn``),
  collected in ``APIS``;
- which of them the server may advertise (``ADVERTISED``; ``KafkaApis`` lists in ApiVersions only
  those it has a handler for, so the group APIs appear once ``server.groups`` is registered) and
  which have a table only to be refused (``messages_groups.UNSERVED``, KIP-848's heartbeat);
- ``API_KEYS``, ``API_NAMES``, ``SUPPORTED_VERSIONS`` (what ApiVersions advertises) and
  ``is_flexible``.

To add an API: write its table with ``api(key, name, versions, flexible, request, response)``, list
it in ``ADVERTISED`` below (or in a module's ``SPECS``); the codec generates its encoders and
decoders on first use.

It imports only ``schema`` and the sibling table modules.
"""

from __future__ import annotations

from . import messages_admin, messages_groups, messages_security, messages_txn
from .schema import ApiSpec, api, field, in_range

f = field

# --- headers (RequestHeader.json, ResponseHeader.json) -------------------------------------------

REQUEST_HEADER = (
    f("ApiKey", "int16", "0+"),
    f("ApiVersion", "int16", "0+"),
    f("CorrelationId", "int32", "0+"),
    # Classic (int16-length) even in the flexible header v2, so that a broker can read the header
    # of any ApiVersions request, whatever its version (KIP-511).
    f("ClientId", "string", "1+", nullable="1+", flexible="none"),
)
"""Request header v0-2; v2 (flexible) adds the tagged-fields section."""

RESPONSE_HEADER = (f("CorrelationId", "int32", "0+"),)
"""Response header v0-1; v1 (flexible) adds the tagged-fields section."""

REQUEST_HEADER_FLEXIBLE = "2+"
RESPONSE_HEADER_FLEXIBLE = "1+"

# --- ApiVersions (18) ----------------------------------------------------------------------------

NOT_REQUESTED = -2147483648
"""The value of an ``authorized_operations`` field (Metadata v8+, DescribeGroups v3+) when the
request did not ask for them (INT32_MIN, as Kafka answers)."""

API_VERSIONS = api(18, "ApiVersions", "0-4", "3+", request=[
    f("ClientSoftwareName", "string", "3+"),
    f("ClientSoftwareVersion", "string", "3+"),
], response=[
    f("ErrorCode", "int16", "0+"),
    f("ApiKeys", "[]ApiVersion", "0+", fields=[
        f("ApiKey", "int16", "0+"),
        f("MinVersion", "int16", "0+"),
        f("MaxVersion", "int16", "0+"),
    ]),
    f("ThrottleTimeMs", "int32", "1+"),
    f("SupportedFeatures", "[]SupportedFeatureKey", "3+", tag=0, tagged="3+", fields=[
        f("Name", "string", "3+"),
        f("MinVersion", "int16", "3+"),
        f("MaxVersion", "int16", "3+"),
    ]),
    f("FinalizedFeaturesEpoch", "int64", "3+", tag=1, tagged="3+", default="-1"),
    f("FinalizedFeatures", "[]FinalizedFeatureKey", "3+", tag=2, tagged="3+", fields=[
        f("Name", "string", "3+"),
        f("MaxVersionLevel", "int16", "3+"),
        f("MinVersionLevel", "int16", "3+"),
    ]),
    f("ZkMigrationReady", "bool", "3+", tag=3, tagged="3+", default="false"),
])

# --- Metadata (3) --------------------------------------------------------------------------------

METADATA = api(3, "Metadata", "0-8", "9+", request=[
    # v0: an empty array means all topics; v1+: null means all topics, empty means none.
    f("Topics", "[]MetadataRequestTopic", "0+", nullable="1+", fields=[
        f("Name", "string", "0+"),
    ]),
    f("AllowAutoTopicCreation", "bool", "4+", default="true"),
    f("IncludeClusterAuthorizedOperations", "bool", "8-10"),
    f("IncludeTopicAuthorizedOperations", "bool", "8+"),
], response=[
    f("ThrottleTimeMs", "int32", "3+"),
    f("Brokers", "[]MetadataResponseBroker", "0+", fields=[
        f("NodeId", "int32", "0+"),
        f("Host", "string", "0+"),
        f("Port", "int32", "0+"),
        f("Rack", "string", "1+", nullable="1+", default="null"),
    ]),
    f("ClusterId", "string", "2+", nullable="2+", default="null"),
    f("ControllerId", "int32", "1+", default="-1"),
    f("Topics", "[]MetadataResponseTopic", "0+", fields=[
        f("ErrorCode", "int16", "0+"),
        f("Name", "string", "0+"),
        f("IsInternal", "bool", "1+", default="false"),
        f("Partitions", "[]MetadataResponsePartition", "0+", fields=[
            f("ErrorCode", "int16", "0+"),
            f("PartitionIndex", "int32", "0+"),
            f("LeaderId", "int32", "0+"),
            f("LeaderEpoch", "int32", "7+", default="-1"),
            f("ReplicaNodes", "[]int32", "0+"),
            f("IsrNodes", "[]int32", "0+"),
            f("OfflineReplicas", "[]int32", "5+"),
        ]),
        f("TopicAuthorizedOperations", "int32", "8+", default="-2147483648"),
    ]),
    f("ClusterAuthorizedOperations", "int32", "8-10", default="-2147483648"),
])

# --- Produce (0) ---------------------------------------------------------------------------------

PRODUCE = api(0, "Produce", "0-8", "9+", request=[
    f("TransactionalId", "string", "3+", nullable="3+", default="null"),
    f("Acks", "int16", "0+"),
    f("TimeoutMs", "int32", "0+"),
    f("TopicData", "[]TopicProduceData", "0+", fields=[
        f("Name", "string", "0+"),
        f("PartitionData", "[]PartitionProduceData", "0+", fields=[
            f("Index", "int32", "0+"),
            f("Records", "records", "0+", nullable="0+"),
        ]),
    ]),
], response=[
    f("Responses", "[]TopicProduceResponse", "0+", fields=[
        f("Name", "string", "0+"),
        f("PartitionResponses", "[]PartitionProduceResponse", "0+", fields=[
            f("Index", "int32", "0+"),
            f("ErrorCode", "int16", "0+"),
            f("BaseOffset", "int64", "0+"),
            f("LogAppendTimeMs", "int64", "2+", default="-1"),
            f("LogStartOffset", "int64", "5+", default="-1"),
            f("RecordErrors", "[]BatchIndexAndErrorMessage", "8+", fields=[
                f("BatchIndex", "int32", "8+"),
                f("BatchIndexErrorMessage", "string", "8+", nullable="8+", default="null"),
            ]),
            f("ErrorMessage", "string", "8+", nullable="8+", default="null"),
        ]),
    ]),
    f("ThrottleTimeMs", "int32", "1+", default="0"),
])

# --- Fetch (1) -----------------------------------------------------------------------------------

FETCH = api(1, "Fetch", "4-11", "12+", request=[
    f("ReplicaId", "int32", "0-14", default="-1"),
    f("MaxWaitMs", "int32", "0+"),
    f("MinBytes", "int32", "0+"),
    f("MaxBytes", "int32", "3+", default="0x7fffffff"),
    f("IsolationLevel", "int8", "4+", default="0"),
    f("SessionId", "int32", "7+", default="0"),
    f("SessionEpoch", "int32", "7+", default="-1"),
    f("Topics", "[]FetchTopic", "0+", fields=[
        f("Topic", "string", "0-12"),
        f("Partitions", "[]FetchPartition", "0+", fields=[
            f("Partition", "int32", "0+"),
            f("CurrentLeaderEpoch", "int32", "9+", default="-1"),
            f("FetchOffset", "int64", "0+"),
            f("LogStartOffset", "int64", "5+", default="-1"),
            f("PartitionMaxBytes", "int32", "0+"),
        ]),
    ]),
    f("ForgottenTopicsData", "[]ForgottenTopic", "7+", fields=[
        f("Topic", "string", "7-12"),
        f("Partitions", "[]int32", "7+"),
    ]),
    f("RackId", "string", "11+", default=""),
], response=[
    f("ThrottleTimeMs", "int32", "1+"),
    f("ErrorCode", "int16", "7+"),
    f("SessionId", "int32", "7+", default="0"),
    f("Responses", "[]FetchableTopicResponse", "0+", fields=[
        f("Topic", "string", "0-12"),
        f("Partitions", "[]PartitionData", "0+", fields=[
            f("PartitionIndex", "int32", "0+"),
            f("ErrorCode", "int16", "0+"),
            f("HighWatermark", "int64", "0+"),
            f("LastStableOffset", "int64", "4+", default="-1"),
            f("LogStartOffset", "int64", "5+", default="-1"),
            # Kafka sends null unless the fetch was read_committed.
            f("AbortedTransactions", "[]AbortedTransaction", "4+", nullable="4+", fields=[
                f("ProducerId", "int64", "4+"),
                f("FirstOffset", "int64", "4+"),
            ]),
            f("PreferredReadReplica", "int32", "11+", default="-1"),
            f("Records", "records", "0+", nullable="0+"),
        ]),
    ]),
])

# --- ListOffsets (2) -----------------------------------------------------------------------------

# Timestamps: -1 latest, -2 earliest, -3 max timestamp (v7+, KIP-734), -4 earliest local (v8+,
# KIP-1005), -5 latest tiered (v9+, KIP-1005); v6 is the first flexible version, v10 adds TimeoutMs.
LIST_OFFSETS = api(2, "ListOffsets", "1-10", "6+", request=[
    f("ReplicaId", "int32", "0+"),
    f("IsolationLevel", "int8", "2+"),
    f("Topics", "[]ListOffsetsTopic", "0+", fields=[
        f("Name", "string", "0+"),
        f("Partitions", "[]ListOffsetsPartition", "0+", fields=[
            f("PartitionIndex", "int32", "0+"),
            f("CurrentLeaderEpoch", "int32", "4+", default="-1"),
            f("Timestamp", "int64", "0+"),
        ]),
    ]),
    f("TimeoutMs", "int32", "10+"),
], response=[
    f("ThrottleTimeMs", "int32", "2+"),
    f("Topics", "[]ListOffsetsTopicResponse", "0+", fields=[
        f("Name", "string", "0+"),
        f("Partitions", "[]ListOffsetsPartitionResponse", "0+", fields=[
            f("PartitionIndex", "int32", "0+"),
            f("ErrorCode", "int16", "0+"),
            f("Timestamp", "int64", "1+", default="-1"),
            f("Offset", "int64", "1+", default="-1"),
            f("LeaderEpoch", "int32", "4+", default="-1"),
        ]),
    ]),
])

# --- the registry --------------------------------------------------------------------------------

ADVERTISED: tuple[ApiSpec, ...] = (PRODUCE, FETCH, LIST_OFFSETS, METADATA, API_VERSIONS, *messages_admin.SPECS,
                                   *messages_groups.SPECS, *messages_security.SPECS, *messages_txn.SPECS)
"""The APIs the server may serve and advertise: ApiVersions lists those of them that have a handler
registered (``KafkaApis.advertised``)."""

APIS: dict[int, ApiSpec] = {spec.key: spec for spec in sorted((*ADVERTISED, *messages_groups.UNSERVED),
                                                                key=lambda spec: spec.key)}
"""Every API with a table, by key: what the codec can encode and decode."""

API_KEYS: dict[str, int] = {spec.name: key for key, spec in APIS.items()}
"""API name -> key (``"Produce"`` -> 0), for every API with a table."""

API_NAMES: dict[int, str] = {key: spec.name for key, spec in APIS.items()}
"""API key -> name, for every API with a table."""

SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {spec.key: spec.versions for spec in
                                                  sorted(ADVERTISED, key=lambda spec: spec.key)}
"""API key -> (min, max) version: what ApiVersions advertises (for the APIs with a handler) and
``decode_request`` accepts."""


def is_flexible(api_key: int, version: int) -> bool:
    """Whether ``version`` of the API uses flexible encodings (compact lengths, tagged fields) and
    so the flexible request header (v2) and response header (v1). False for unknown APIs."""
    spec = APIS.get(api_key)
    return spec is not None and in_range(version, spec.flexible)
