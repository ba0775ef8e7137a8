"""Hypothesis strategies derived from the codec's own field tables, and the list of every message.

A strategy for a message at a version is built by walking its ``schema.Field`` table: each field
present at that version gets a strategy for its type (integers over the type's whole range, text,
bytes, UUIDs, nested dicts and lists, None where the field is nullable at that version). So a table
entry added later is covered by the round-trip and fuzz tests without writing anything new.
"""

from __future__ import annotations

from hypothesis import strategies as st

from logstore.server.protocol.messages import APIS, SUPPORTED_VERSIONS
from logstore.server.protocol.schema import Field, fields_at, is_nullable

_INTEGERS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
_UNSIGNED = {"uint16": 16, "uint32": 32}

# Short text mostly, sometimes long enough that a compact length needs a two-byte varint (>= 127).
_TEXT = st.one_of(st.text(max_size=6), st.text(min_size=127, max_size=130, alphabet="xyz\u00e9\u4e2d"))
_BINARY = st.one_of(st.binary(max_size=8), st.binary(min_size=127, max_size=140))


def _primitive(type_: str) -> st.SearchStrategy:
    if type_ in _INTEGERS:
        bits = _INTEGERS[type_]
        return st.integers(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    if type_ in _UNSIGNED:
        return st.integers(0, (1 << _UNSIGNED[type_]) - 1)
    return {"bool": st.booleans(), "float64": st.floats(allow_nan=False), "uuid": st.uuids(),
            "string": _TEXT, "bytes": _BINARY, "records": _BINARY}[type_]


def field_strategy(f: Field, version: int) -> st.SearchStrategy:
    """Values of one field at ``version``."""
    if f.is_array:
        element = struct_strategy(f.fields, version) if f.is_struct else _primitive(f.element_type)
        values = st.lists(element, max_size=3)
    elif f.is_struct:
        values = struct_strategy(f.fields, version)
    else:
        values = _primitive(f.type)
    return st.one_of(st.none(), values) if is_nullable(f, version) else values


def struct_strategy(fields: tuple[Field, ...], version: int) -> st.SearchStrategy:
    """Dicts with every field of the struct present at ``version``."""
    return st.fixed_dictionaries({f.key: field_strategy(f, version) for f in fields_at(fields, version)})


def message_strategy(api_key: int, version: int, direction: str) -> st.SearchStrategy:
    """Bodies of the request or response (``direction``) of an API at ``version``."""
    spec = APIS[api_key]
    return struct_strategy(spec.request if direction == "request" else spec.response, version)


EVERY_VERSION = [(key, version) for key, spec in sorted(APIS.items())
                 for version in range(spec.versions[0], spec.versions[1] + 1)]
"""(api key, version) of every version with a table: what we advertise, and the group APIs."""

EVERY_MESSAGE = [(key, version, direction) for key, version in EVERY_VERSION for direction in ("request", "response")]
"""(api key, version, "request" or "response") of every message we can encode and decode."""

ADVERTISED_VERSIONS = [(key, version) for key, (low, high) in sorted(SUPPORTED_VERSIONS.items())
                       for version in range(low, high + 1)]
"""(api key, version) of every version we advertise (what ``decode_request`` accepts)."""


def message_id(param) -> str:
    """Readable pytest ids: ``Fetch-v11-request``."""
    key, version, *rest = param
    return "-".join([APIS[key].name, f"v{version}", *rest])
