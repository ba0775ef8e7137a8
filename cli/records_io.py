"""Record formats of the command line: parsing what ``logstore append`` reads and formatting what
``logstore read`` prints. Parsing only: no store access.

Input (``append``), one record per line of stdin:

- ``text``: the line is the value (its ``\\n`` or ``\\r\\n`` end removed; an empty line is an empty
  value). ``--key``, ``--header`` and ``--timestamp`` apply to every line. With a key separator
  (``--key-separator SEP``, kcat's ``-K``; Kafka's console producer's ``parse.key`` and
  ``key.separator`` properties), the line is ``KEY<SEP>VALUE``, cut at the first SEP; a line
  without SEP is an error naming it, as Kafka's console producer refuses it.
- ``jsonl``: a JSON object per line with optional fields ``key``, ``value`` (null or missing: a
  tombstone), ``headers`` (an object of names to string or null, or a list of ``[name, value]``
  pairs when a name repeats), ``timestamp`` (ms) and ``partition``. The command-line options give
  defaults for missing fields (headers from ``--header`` come first). Blank lines are skipped.

``--encoding`` says how keys, values and header values are written, in input and output alike:
``utf8`` (text; on input a command-line argument is taken byte for byte) or ``base64``.

Output (``read``):

- ``jsonl``: ``{"topic", "partition", "offset", "timestamp", "key", "value", "headers"}`` per record,
  null for a missing key or a tombstone; ``headers`` is an object, or a list of ``[name, value]``
  pairs when a record repeats a header name (so nothing is lost). With ``utf8``, a key, value or
  header value that is not valid UTF-8 is an error that suggests ``--encoding base64`` (never a
  silent replacement).
- ``value``: the value only, one per line: its bytes as stored (``utf8``) or base64; ``null`` for a
  tombstone. With ``--timestamps`` given, each line starts with the record's timestamp and a tab.

``--timestamps`` (``RecordStyle.timestamps``): ``ms`` (ms since the epoch, jsonl's default) or ``iso``
(ISO 8601 UTC with milliseconds, ``2026-11-29T13:05:01.123Z``: a string in jsonl; a record without a
timestamp, -1, is null in jsonl and ``-`` in the value column).

Every parse error is a ``ValueError`` whose message names the line number.
"""

from __future__ import annotations

import base64
import binascii
import json
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

import click

from logstore.errors import LogStoreError

if TYPE_CHECKING:
    from logstore.records.decoder import Record
ENCODINGS = ("utf8", "base64")
INPUT_FORMATS = ("text", "jsonl")
OUTPUT_FORMATS = ("jsonl", "value")
JSONL_FIELDS = ("key", "value", "headers", "timestamp", "partition")
MAX_TIMESTAMP_MS = 2**63 - 1


@dataclass(frozen=True)
class RecordDefaults:
    """What the command-line options say about every record (a jsonl line may override)."""

    key: bytes | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp_ms: int | None = None
    partition: int | None = None


@dataclass(frozen=True)
class InputRecord:
    """A parsed record, the partition it asks for (None: chosen by key) and where it came from
    (line number of stdin; 0 for a value given on the command line)."""

    line_number: int
    partition: int | None
    record: Record


def decode_field(text: str, encoding: str, what: str, strict: bool = False) -> bytes:
    """The bytes of a key, value or header value given as text in ``encoding``. A command-line
    argument (``strict=False``) keeps undecodable argv bytes as they were; JSON text is strict."""
    if encoding == "base64":
        try:
            return base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"{what} is not valid base64: {text[:40]!r}") from None
    try:
        return text.encode("utf-8", "strict" if strict else "surrogateescape")
    except UnicodeEncodeError:
        raise ValueError(f"{what} is not encodable as UTF-8: {text[:40]!r}") from None


def argument_bytes(text: str, encoding: str, param_hint: str) -> bytes:
    """The bytes of a key, value or header value given on the command line in ``encoding``; a
    value that is not in it (bad base64) is a usage error (``click.BadParameter``, exit code 2)."""
    try:
        return decode_field(text, encoding, "the value")
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=param_hint) from None


def parse_header_options(pairs: Iterable[str], encoding: str) -> tuple[tuple[str, bytes], ...]:
    """``--header NAME=VALUE`` options as record headers (the value in ``encoding``); a malformed
    one is a usage error (``click.BadParameter``)."""
    headers = []
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"expected NAME=VALUE, got {pair!r}", param_hint="'--header'")
        headers.append((name, argument_bytes(value, encoding, f"'--header' {name!r}")))
    return tuple(headers)


def parse_input(lines: Iterable[bytes], input_format: str, encoding: str, defaults: RecordDefaults,
                key_separator: bytes | None = None) -> list[InputRecord]:
    """Parse every line of ``lines`` (bytes, as read from stdin) into records; raises ``ValueError``
    naming the first bad line. Nothing is appended until all input parsed. ``key_separator``
    (text input only): each line is ``KEY<SEP>VALUE``."""
    from logstore.records.decoder import Record  # the engine's record type, loaded by the commands that parse

    parsed = []
    for number, line in enumerate(lines, start=1):
        if line.endswith(b"\n"):
            line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
        try:
            if input_format == "jsonl":
                if not line.strip():
                    continue
                parsed.append(_parse_jsonl(line, number, encoding, defaults))
            else:
                key = defaults.key
                if key_separator is not None:
                    key_bytes, sep, line = bytes(line).partition(key_separator)
                    if not sep:
                        raise ValueError(f"no key separator {key_separator.decode('utf-8', 'replace')!r} in the line")
                    key = _text_field(key_bytes, encoding, "key")
                parsed.append(InputRecord(number, defaults.partition, Record(
                    key, _text_field(bytes(line), encoding, "value"), defaults.headers, defaults.timestamp_ms)))
        except ValueError as exc:
            raise ValueError(f"line {number}: {exc}") from None
    return parsed


def _text_field(data: bytes, encoding: str, what: str) -> bytes:
    """A key or value of a text line: its bytes, or decoded from base64."""
    if encoding == "base64":
        return decode_field(data.decode("ascii", "replace").strip(), encoding, what)
    return data


CONSOLE_PRODUCER_PROPERTIES = ("parse.key", "key.separator")


def key_separator_of(separator: str | None, properties: Iterable[str]) -> bytes | None:
    """The key separator of ``--key-separator`` or of Kafka's console producer's ``--property
    parse.key=true`` (with ``key.separator``, default a tab); None: lines are values only."""
    given: dict[str, str] = {}
    for pair in properties:
        name, sep, value = pair.partition("=")
        if not sep or name not in CONSOLE_PRODUCER_PROPERTIES:
            raise click.BadParameter(f"{pair!r}: the properties taken are {', '.join(CONSOLE_PRODUCER_PROPERTIES)} "
                                     "(NAME=VALUE)", param_hint="'--property'")
        given[name] = value
    parse_key = given.get("parse.key", "false").lower()
    if parse_key not in ("true", "false"):
        raise click.BadParameter(f"parse.key={given['parse.key']!r}: true or false", param_hint="'--property'")
    if parse_key == "true":  # as Kafka's console producer: key.separator counts only with parse.key=true
        property_separator = given.get("key.separator", "\t")
        if separator is not None and separator != property_separator:
            raise click.UsageError(f"--key-separator {separator!r} and --property key.separator "
                                   f"{property_separator!r} differ")
        separator = property_separator
    if separator is None:
        return None
    if not separator:
        raise click.BadParameter("the key separator must not be empty", param_hint="'--key-separator'")
    return separator.encode("utf-8", "surrogateescape")


def _parse_jsonl(line: bytes, number: int, encoding: str, defaults: RecordDefaults) -> InputRecord:
    from logstore.records.decoder import Record

    try:
        obj = json.loads(line)
    except UnicodeDecodeError:
        raise ValueError("not valid UTF-8") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:  # json's decoder recurses once per nesting level
        raise ValueError("invalid JSON: nested too deeply") from None
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object with fields {', '.join(JSONL_FIELDS)}, got {_kind(obj)}")
    unknown = sorted(set(obj) - set(JSONL_FIELDS))
    if unknown:
        raise ValueError(f"unknown field {unknown[0]!r} (fields: {', '.join(JSONL_FIELDS)})")
    key = _bytes_field(obj, "key", encoding) if "key" in obj else defaults.key
    value = _bytes_field(obj, "value", encoding)
    headers = defaults.headers + _headers_field(obj.get("headers"), encoding)
    timestamp_ms = _int_field(obj, "timestamp", MAX_TIMESTAMP_MS)
    partition = _int_field(obj, "partition", 2**31 - 1)
    return InputRecord(number, defaults.partition if partition is None else partition,
                       Record(key, value, headers, defaults.timestamp_ms if timestamp_ms is None else timestamp_ms))


def _bytes_field(obj: dict, name: str, encoding: str) -> bytes | None:
    text = obj.get(name)
    if text is None:
        return None
    if not isinstance(text, str):
        raise ValueError(f"{name} must be a string or null, got {_kind(text)}")
    return decode_field(text, encoding, name, strict=True)


def _headers_field(headers: Any, encoding: str) -> tuple[tuple[str, bytes | None], ...]:
    if headers is None:
        return ()
    if isinstance(headers, dict):
        pairs = list(headers.items())
    elif isinstance(headers, list):
        pairs = headers
    else:
        raise ValueError(f"headers must be an object or a list of [name, value] pairs, got {_kind(headers)}")
    result = []
    for pair in pairs:
        if not isinstance(pair, (list, tuple)) or len(pair) != 2 or not isinstance(pair[0], str):
            raise ValueError(f"a header must be a [name, value] pair with a string name, got {pair!r}")
        name, value = pair
        if value is not None and not isinstance(value, str):
            raise ValueError(f"header {name!r} must be a string or null, got {_kind(value)}")
        result.append((name, None if value is None else decode_field(value, encoding, f"header {name!r}", strict=True)))
    return tuple(result)


def _int_field(obj: dict, name: str, maximum: int) -> int | None:
    number = obj.get(name)
    if number is None:
        return None
    if not isinstance(number, int) or isinstance(number, bool) or not 0 <= number <= maximum:
        raise ValueError(f"{name} must be an integer between 0 and {maximum}, got {number!r}")
    return number


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
            int: "a number", float: "a number"}.get(type(value), "null")


# --- output --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordStyle:
    """How ``read`` prints records: ``output_format`` (jsonl or value), ``encoding`` of keys, values
    and header values, and ``timestamps`` (None: not asked, ms in jsonl and no column in value;
    ``ms``; ``iso``)."""

    output_format: str = "jsonl"
    encoding: str = "utf8"
    timestamps: str | None = None


def shown_timestamp(timestamp_ms: int, timestamps: str | None) -> int | str | None:
    """A record's timestamp as ``--timestamps`` shows it: the number, or ISO 8601 UTC text (None
    for a record without one, -1)."""
    if timestamps != "iso":
        return timestamp_ms
    if timestamp_ms < 0:
        return None
    from logstore.clock import format_iso_ms
    return format_iso_ms(timestamp_ms)


def format_jsonl(topic: str, partition: int, record: Record, encoding: str, timestamps: str | None = None) -> bytes:
    """One JSON line for ``record`` (with its newline)."""
    where = f"record at offset {record.offset} of {topic}-{partition}"
    headers: Any = [[name, _encode_field(value, encoding, where, f"header {name!r}")]
                    for name, value in record.headers]
    if len({name for name, _value in headers}) == len(headers):
        headers = dict(headers)
    obj = {"topic": topic, "partition": partition, "offset": record.offset,
           "timestamp": shown_timestamp(record.timestamp_ms, timestamps),
           "key": _encode_field(record.key, encoding, where, "key"),
           "value": _encode_field(record.value, encoding, where, "value"), "headers": headers}
    return json.dumps(obj, ensure_ascii=False).encode("utf-8") + b"\n"


def format_value(record: Record, encoding: str, timestamps: str | None = None) -> bytes:
    """The value of ``record`` on a line of its own: raw bytes (utf8) or base64; ``null`` for a
    tombstone. With ``timestamps`` (ms or iso), after the record's timestamp and a tab."""
    if record.value is None:
        line = b"null\n"
    elif encoding == "base64":
        line = base64.b64encode(record.value) + b"\n"
    else:
        line = record.value + b"\n"
    if timestamps is None:
        return line
    shown = shown_timestamp(record.timestamp_ms, timestamps)
    return ("-" if shown is None else str(shown)).encode("ascii") + b"\t" + line


def _encode_field(data: bytes | None, encoding: str, where: str, what: str) -> str | None:
    if data is None:
        return None
    if encoding == "base64":
        return base64.b64encode(data).decode("ascii")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"the {what} of the {where} is not valid UTF-8; read it with --encoding base64") from None


# --- checks against the topic --------------------------------------------------------------------


def check_against_topic(entries: Sequence[InputRecord], topic: str, partitions: int,
                        validate: Callable[[Sequence[Record]], None], chunk_size: int = 1000) -> None:
    """Raise ``ValueError`` (naming the line) for a record the topic would refuse, before anything
    is appended: a partition it does not have, or whatever ``validate`` (``LogManager.validate_append``,
    the engine's own checks) rejects. Records are validated in chunks; only a failing chunk is
    re-checked record by record to find the line."""
    for entry in entries:
        if entry.partition is not None and entry.partition >= partitions:
            raise ValueError(f"{_where(entry)}: topic {topic!r} has no partition {entry.partition} "
                             f"(partitions: 0..{partitions - 1})")
    for start in range(0, len(entries), chunk_size):
        chunk = entries[start : start + chunk_size]
        try:
            validate([entry.record for entry in chunk])
        except (LogStoreError, TypeError, ValueError):
            for entry in chunk:
                try:
                    validate([entry.record])
                except (LogStoreError, TypeError, ValueError) as exc:
                    raise ValueError(f"{_where(entry)}: {exc}") from None
            raise


def _where(entry: InputRecord) -> str:
    return f"line {entry.line_number}" if entry.line_number else "the record"


def print_records(topic: str, partition: int, records: list[Record], style: RecordStyle) -> None:
    """Print ``records`` of ``topic``/``partition`` as ``style`` says (one write, then a flush)."""
    if style.output_format == "jsonl":
        lines = [format_jsonl(topic, partition, record, style.encoding, style.timestamps) for record in records]
    else:
        lines = [format_value(record, style.encoding, style.timestamps) for record in records]
    click.echo(b"".join(lines), nl=False)
    sys.stdout.flush()
