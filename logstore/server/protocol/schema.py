"""The shape of a Kafka message description: fields, version ranges, APIs (pure data, no codec).

Kafka describes every message in a JSON spec (``clients/src/main/resources/common/message/*.json``):
a list of fields, each with a type, the versions it exists in, the versions in which it may be null,
and for flexible versions an optional tag. This module holds the same description as plain Python
data (``Field`` and ``ApiSpec`` named tuples) so that the tables in ``messages*.py`` read like the
specs they come from, and so that a new API is added by adding one table, nothing else.

What it owns:
- ``Field``: one field of a message or of a nested struct; its ``key`` is the snake_case form of the
  spec's name (``PartitionIndex`` -> ``partition_index``), which is the key of the Python dicts the
  codec reads and writes;
- ``ApiSpec``: one API (key, name, the versions we support, the flexible versions, the request and
  response field lists);
- ``field()`` and ``api()``, the constructors the tables use, which parse the spec's notation
  (``"0+"``, ``"3-12"``, ``"none"``, JSON defaults such as ``"null"`` and ``"0x7fffffff"``);
- ``type_default()`` and ``in_range()``, shared by the code generator and the tests.

It imports only the standard library.
"""

from __future__ import annotations

import re
import uuid
from typing import NamedTuple

MAX_VERSION = 0x7FFF
"""The upper bound of an open range such as ``"3+"`` (versions are int16 on the wire)."""

FIXED_FORMATS = {"int8": "b", "int16": "h", "uint16": "H", "int32": "i", "uint32": "I",
                 "int64": "q", "float64": "d", "bool": "?", "uuid": "16s"}
"""Types of a fixed width and their ``struct`` codes (big-endian, with ``>``)."""

VARIABLE_TYPES = {"string", "bytes", "records"}
"""Types with a length prefix (int16 or int32 classic, unsigned varint compact)."""

NO_DEFAULT = object()
"""Marks a field whose spec gives no ``default``: the type's own default applies."""

Range = tuple[int, int] | None
"""An inclusive ``(first, last)`` version range, or None for "no version"."""


class Field(NamedTuple):
    """One field of a message or nested struct, as its JSON spec describes it.

    ``type`` is the spec's type string: a primitive (``int32``, ``string``, ``records``...), an
    array of a primitive (``[]int32``), an array of structs (``[]Name``, with ``fields``) or a single
    struct (``Name``, with ``fields``)."""

    key: str
    """The snake_case name, the key of the field in decoded and encoded dicts."""
    type: str
    versions: Range
    nullable: Range = None
    default: object = NO_DEFAULT
    fields: tuple[Field, ...] = ()
    tag: int | None = None
    tagged: Range = None
    flexible: Range | str = "inherit"
    """The versions in which this field uses compact encodings: ``"inherit"`` (the message's), or
    a range (the request header's client_id is ``None``: classic even in header v2)."""
    name: str = ""
    """The spec's own name, for messages."""

    @property
    def is_struct(self) -> bool:
        return bool(self.fields)

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        return self.type[2:]


class ApiSpec(NamedTuple):
    """One API: what we support of it and the fields of its request and response bodies."""

    key: int
    name: str
    versions: tuple[int, int]
    """The versions we support and advertise in ApiVersions."""
    flexible: Range
    """The versions whose bodies use compact encodings and tagged fields (from the spec, so also
    valid for versions we do not support: the request header of those depends on it)."""
    request: tuple[Field, ...]
    response: tuple[Field, ...]


def parse_range(text: str | None) -> Range:
    """``"0+"`` -> (0, 0x7fff); ``"3-12"`` -> (3, 12); ``"4"`` -> (4, 4); ``"none"``/None -> None."""
    if text is None or text == "none":
        return None
    if text.endswith("+"):
        return int(text[:-1]), MAX_VERSION
    first, _, last = text.partition("-")
    return int(first), int(last or first)


def in_range(version: int, versions: Range) -> bool:
    """Whether ``version`` lies in ``versions`` (None contains nothing)."""
    return versions is not None and versions[0] <= version <= versions[1]


_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def snake_case(name: str) -> str:
    """``TopicData`` -> ``topic_data``; ``timeoutMs`` -> ``timeout_ms``; ``IsrNodes`` -> ``isr_nodes``."""
    return _CAMEL_BOUNDARY.sub("_", name).lower()


def _parse_default(type_: str, value: object) -> object:
    """A spec ``default`` (always given as JSON text or a number) as the Python value it means."""
    if value is NO_DEFAULT:
        return NO_DEFAULT
    if value is None or value == "null":
        return None
    if type_ == "bool":
        return value in (True, "true")
    if type_ in ("int8", "int16", "uint16", "int32", "uint32", "int64"):
        return int(value, 0) if isinstance(value, str) else int(value)
    if type_ == "float64":
        return float(value)
    return value


def field(name: str, type_: str, versions: str, *, nullable: str | None = None, default: object = NO_DEFAULT,
          fields: tuple[Field, ...] | list[Field] = (), tag: int | None = None, tagged: str | None = None,
          flexible: str | None = "inherit") -> Field:
    """A field in the spec's own notation: ``field("Name", "string", "0+", nullable="12+")``."""
    return Field(key=snake_case(name), type=type_, versions=parse_range(versions), nullable=parse_range(nullable),
                 default=_parse_default(type_, default), fields=tuple(fields), tag=tag, tagged=parse_range(tagged),
                 flexible="inherit" if flexible == "inherit" else parse_range(flexible), name=name)


def api(key: int, name: str, versions: str, flexible: str, request: list[Field], response: list[Field]) -> ApiSpec:
    """An API table: ``versions`` is what we support, ``flexible`` the spec's ``flexibleVersions``."""
    supported = parse_range(versions)
    assert supported is not None, name
    return ApiSpec(key, name, supported, parse_range(flexible), tuple(request), tuple(response))


def is_nullable(f: Field, version: int) -> bool:
    """Whether ``f`` may be null at ``version``."""
    return in_range(version, f.nullable)


def is_tagged(f: Field, version: int) -> bool:
    """Whether ``f`` is a tagged field at ``version`` (it then lives in the tagged-fields section)."""
    return f.tag is not None and in_range(version, f.tagged)


def fields_at(fields: tuple[Field, ...], version: int) -> list[Field]:
    """The fields of a struct present at ``version``, in wire order (tagged ones included)."""
    return [f for f in fields if in_range(version, f.versions)]


ZERO_UUID = uuid.UUID(int=0)


def type_default(f: Field, version: int) -> object:
    """The value a field takes when an encoder is given no value for it, and when a decoder finds
    a tagged field absent: the spec's default if it has one, else the type's (0, "", [], False,
    None when nullable at ``version``, b"", the zero UUID, a struct of defaults)."""
    if f.default is not NO_DEFAULT:
        if f.default is None and not is_nullable(f, version):
            return [] if f.is_array else ("" if f.type == "string" else b"")
        return f.default
    if is_nullable(f, version):
        return None
    if f.is_array:
        return []
    if f.is_struct:
        return {sub.key: type_default(sub, version) for sub in fields_at(f.fields, version)}
    return {"string": "", "bytes": b"", "records": b"", "bool": False, "float64": 0.0,
            "uuid": ZERO_UUID}.get(f.type, 0)
