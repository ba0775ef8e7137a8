"""Kafka's error codes, and how the store's own exceptions map onto them.

Every answer the server gives carries Kafka's code for the situation (https://kafka.apache.org/protocol#protocol_error_codes): a client
decides from the code alone whether to retry, refresh its metadata, reset its offset or give up.
``error_code_for`` is the one place where a ``LogStoreError`` becomes a code, so the same failure gets
the same code from every API.
"""

from __future__ import annotations

from ...errors import (CodecUnavailableError, CorruptDataError, InvalidConfigError, InvalidPartitionsError,
                       InvalidProducerEpochError, InvalidRecordError, InvalidTimestampError, InvalidTopicError,
                       InvalidTxnStateError, LogFailedError, OffsetOutOfRangeError, ReadOnlyError, RecordTooLargeError,
                       StorageError, StoreClosedError, TopicExistsError, TransactionCoordinatorFencedError,
                       UnknownTopicOrPartitionError)

UNKNOWN_SERVER_ERROR = -1
NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_FETCH_SIZE = 4
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
MESSAGE_TOO_LARGE = 10
NETWORK_EXCEPTION = 13
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
INVALID_TOPIC_EXCEPTION = 17
RECORD_LIST_TOO_LARGE = 18
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
INVALID_REQUIRED_ACKS = 21
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
INVALID_TIMESTAMP = 32
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REPLICA_ASSIGNMENT = 39
INVALID_CONFIG = 40
NOT_CONTROLLER = 41
INVALID_REQUEST = 42
POLICY_VIOLATION = 44
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = 51
TRANSACTION_COORDINATOR_FENCED = 52
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
SECURITY_DISABLED = 54
OPERATION_NOT_ATTEMPTED = 55
KAFKA_STORAGE_ERROR = 56
SASL_AUTHENTICATION_FAILED = 58
UNKNOWN_PRODUCER_ID = 59
FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
UNSUPPORTED_COMPRESSION_TYPE = 76
INVALID_RECORD = 87
PRODUCER_FENCED = 90
RESOURCE_NOT_FOUND = 91
DUPLICATE_RESOURCE = 92
UNACCEPTABLE_CREDENTIAL = 93
TRANSACTIONAL_ID_NOT_FOUND = 105
TRANSACTION_ABORTABLE = 120

NAMES = {value: name for name, value in globals().items() if name.isupper() and isinstance(value, int)}


def error_code_for(exc: BaseException) -> int:
    """Kafka's code for an exception the store raised while serving a request."""
    if isinstance(exc, UnknownTopicOrPartitionError):
        return UNKNOWN_TOPIC_OR_PARTITION
    if isinstance(exc, OffsetOutOfRangeError):
        return OFFSET_OUT_OF_RANGE
    if isinstance(exc, RecordTooLargeError):
        return MESSAGE_TOO_LARGE
    if isinstance(exc, InvalidTimestampError):
        return INVALID_TIMESTAMP
    if isinstance(exc, InvalidRecordError):
        return INVALID_RECORD
    if isinstance(exc, CodecUnavailableError):
        return UNSUPPORTED_COMPRESSION_TYPE
    if isinstance(exc, InvalidTopicError):
        return INVALID_TOPIC_EXCEPTION
    if isinstance(exc, TopicExistsError):
        return TOPIC_ALREADY_EXISTS
    if isinstance(exc, InvalidConfigError):
        return INVALID_CONFIG
    if isinstance(exc, InvalidPartitionsError):
        return INVALID_PARTITIONS
    # a producer's append the partition's producer state refuses (a fenced epoch, a batch outside
    # its transaction, a marker from a stale coordinator)
    if isinstance(exc, InvalidProducerEpochError):
        return INVALID_PRODUCER_EPOCH
    if isinstance(exc, InvalidTxnStateError):
        return INVALID_TXN_STATE
    if isinstance(exc, TransactionCoordinatorFencedError):
        return TRANSACTION_COORDINATOR_FENCED
    if isinstance(exc, (LogFailedError, StoreClosedError, ReadOnlyError, StorageError, CorruptDataError, OSError)):
        # The partition's dir is offline or its data damaged: Kafka's answer for a log dir that failed.
        return KAFKA_STORAGE_ERROR
    return UNKNOWN_SERVER_ERROR
