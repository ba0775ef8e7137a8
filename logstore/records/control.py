"""The control record of a transaction marker: its key and value bytes (docs/FORMAT.md 1.12).

A control batch (magic 3, attributes ``HAS_PRODUCER | TRANSACTIONAL | CONTROL``) holds exactly one
record, whose key and value are Kafka's end-transaction marker bytes as they are (big-endian, unlike
the rest of the batch), so the Kafka-protocol server passes them through and Kafka tools agree::

    key   = version int16 (0) | type int16 (0 ABORT, 1 COMMIT)
    value = version int16 (0) | coordinator_epoch int32

We write only version 0 and types 0 and 1; any other key or value is corrupt (a newer layout would
change the batch magic, so nothing unknown is silently skipped). Pure: bytes in, values out.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from ..errors import CorruptRecordError

ABORT = 0
COMMIT = 1
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
KEY_BYTES = _KEY.size  # 4
VALUE_BYTES = _VALUE.size  # 6


class Marker(NamedTuple):
    """A decoded transaction marker: whether it commits (else aborts), and the coordinator epoch
    that wrote it."""

    commit: bool
    coordinator_epoch: int


def encode_marker(commit: bool, coordinator_epoch: int) -> tuple[bytes, bytes]:
    """``(key, value)`` of the control record of a COMMIT (``commit``) or ABORT marker."""
    if type(commit) is not bool:
        raise TypeError(f"commit must be a bool, got {commit!r}")
    if type(coordinator_epoch) is not int or not -2**31 <= coordinator_epoch < 2**31:
        raise ValueError(f"coordinator_epoch must be an int32, got {coordinator_epoch!r}")
    return _KEY.pack(0, COMMIT if commit else ABORT), _VALUE.pack(0, coordinator_epoch)


def decode_marker(key: bytes | None, value: bytes | None) -> Marker:
    """The marker a control record's ``key`` and ``value`` hold; raises CorruptRecordError for
    anything but a version-0 COMMIT or ABORT key and a version-0 value."""
    if key is None or len(key) != KEY_BYTES:
        raise CorruptRecordError(f"control record key {key!r} is not 4 bytes")
    version, kind = _KEY.unpack(key)
    if version != 0 or kind not in (ABORT, COMMIT):
        raise CorruptRecordError(f"control record key version {version} type {kind}: not a transaction marker")
    if value is None or len(value) != VALUE_BYTES:
        raise CorruptRecordError(f"control record value {value!r} is not 6 bytes")
    value_version, coordinator_epoch = _VALUE.unpack(value)
    if value_version != 0:
        raise CorruptRecordError(f"control record value version {value_version} is unknown")
    return Marker(kind == COMMIT, coordinator_epoch)
