"""Generates the Python source of one message's decoder and encoder at one version (pure text).

The codec's hot path is the per-request decode and per-response encode, so instead of walking the
field table at run time for every message, this module turns a field table (``schema.Field``) at a
given version into the source of two straight-line functions, which ``codec`` compiles once per
(API, version, direction) and caches:

- ``decode(buf, p) -> (dict, p)``: ``buf`` is a byte ``memoryview``, ``p`` where the body starts;
- ``encode(out, b, value) -> b``: appends the body to the bytearray ``b``; ``out`` is the list of
  frame chunks, to which large records values are appended as they are (never copied), with a new
  ``b`` started after them.

How the generated code keeps per-field work small:
- consecutive fixed-width fields, with the classic length prefix of the variable-length field after
  them, are read or written by one precompiled ``struct.Struct`` call (a Fetch partition's five
  numbers are one ``unpack_from``; a Produce partition's index and records size are another), and an
  array of numbers is one call too (a Struct per element count, cached);
- nested structs and arrays are inlined as loops in the same function (no call per element);
- truncation inside fixed-width reads is left to ``struct.error``/``IndexError``, which the caller
  turns into ``ProtocolError`` once: only lengths are checked explicitly (a slice past the end of a
  memoryview does not fail), and array counts are checked against the bytes left so garbage cannot
  make a decoder allocate a huge list.

Helpers the generated code calls (``_uvarint``, ``_uvarint_bytes``, ``_records``, ``_Error``,
``_UUID``, ``_array_unpacker``, ``_array_packer``) are supplied by ``codec`` when it compiles the source; this
module returns the source and the ``struct`` constants it needs and imports only the standard
library and ``schema``.
"""

from __future__ import annotations

import struct
import uuid

from .schema import FIXED_FORMATS, Field, Range, fields_at, in_range, is_nullable, is_tagged, type_default

_SIZE = {code: struct.calcsize(">" + code) for code in FIXED_FORMATS.values()}


class _Source:
    """Lines of generated code plus the constants they refer to."""

    def __init__(self, label: str, version: int, flexible: Range):
        self.label = label
        self.version = version
        self.flexible = in_range(version, flexible)
        self.lines: list[str] = []
        self.constants: dict[str, object] = {}
        self._names: dict[tuple[str, object], str] = {}
        self._count = 0

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)

    def var(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def constant(self, kind: str, key: object, make) -> str:
        """The name of a module-level constant, created once per (kind, key)."""
        name = self._names.get((kind, key))
        if name is None:
            name = self._names[(kind, key)] = f"_{kind}{len(self._names)}"
            self.constants[name] = make()
        return name

    def unpacker(self, codes: str) -> str:
        return self.constant("u", codes, lambda: struct.Struct(">" + codes).unpack_from)

    def packer(self, codes: str) -> str:
        return self.constant("p", codes, lambda: struct.Struct(">" + codes).pack)

    def literal(self, value: object) -> str:
        """Source text that evaluates to a fresh copy of ``value`` (a default)."""
        if isinstance(value, list):
            return "[" + ", ".join(self.literal(item) for item in value) + "]"
        if isinstance(value, dict):
            return "{" + ", ".join(f"{key!r}: {self.literal(item)}" for key, item in value.items()) + "}"
        if isinstance(value, uuid.UUID):
            return self.constant("k", value, lambda: value)
        return repr(value)

    def compact(self, f: Field) -> bool:
        """Whether ``f`` uses compact (varint) lengths at this version."""
        return self.flexible if f.flexible == "inherit" else in_range(self.version, f.flexible)

    def fail(self, indent: int, what: str) -> None:
        """Emit a raise of ProtocolError naming the message and version; ``what`` is f-string text."""
        self.emit(indent, f'raise _Error(f"{self.label}: {what}")')


def _min_size(src: _Source, f: Field, element: bool = False) -> int:
    """The fewest bytes a value of ``f`` (or, with ``element``, one element of it) takes on the wire."""
    if f.is_struct and (element or not f.is_array):
        regular = [sub for sub in fields_at(f.fields, src.version) if not is_tagged(sub, src.version)]
        return sum(_min_size(src, sub) for sub in regular) + (1 if src.flexible else 0)
    type_ = f.element_type if element else f.type
    if type_ in FIXED_FORMATS:
        return _SIZE[FIXED_FORMATS[type_]]
    if src.compact(f):
        return 1
    return 2 if type_ == "string" else 4


# --- decoding ------------------------------------------------------------------------------------


def _read_uvarint(src: _Source, indent: int, target: str) -> None:
    # Lengths and counts are almost always < 128: one byte, no call.
    src.emit(indent, f"{target} = buf[p]")
    src.emit(indent, "p += 1")
    src.emit(indent, f"if {target} > 127: {target}, p = _uvarint(buf, p - 1)")


def _read_length(src: _Source, indent: int, f: Field, code: str, length: str | None) -> str:
    """Emit the read of a length or count (-1 for null), unless it was already read (``length``)."""
    if length is not None:
        return length
    length = src.var("n")
    if src.compact(f):
        _read_uvarint(src, indent, length)
        src.emit(indent, f"{length} -= 1")
    else:
        src.emit(indent, f"{length} = {src.unpacker(code)}(buf, p)[0]")
        src.emit(indent, f"p += {_SIZE[code]}")
    return length


def _length_code(src: _Source, f: Field) -> str | None:
    """The struct code of the classic length prefix of ``f``, None if it has none (fixed width,
    a single struct, or compact)."""
    if f.type in FIXED_FORMATS or (f.is_struct and not f.is_array) or src.compact(f):
        return None
    return "h" if f.type == "string" else "i"


def _decode_null_or_fail(src: _Source, indent: int, f: Field, length: str, target: str) -> None:
    if is_nullable(f, src.version):
        src.emit(indent, f"if {length} == -1: {target} = None")
        src.emit(indent, "else:")
        src.fail(indent + 1, f"{f.key}: invalid length {{{length}}} at byte {{p}}")
    else:
        src.fail(indent, f"{f.key}: null or negative length {{{length}}} in a non-nullable field at byte {{p}}")


def _flush_reads(src: _Source, indent: int, run: list[tuple[str, str, bool]]) -> None:
    """Emit one ``unpack_from`` of the pending fixed-width reads: (struct code, variable, is a uuid)."""
    if not run:
        return
    codes = "".join(code for code, _, _ in run)
    src.emit(indent, f"{', '.join(name for _, name, _ in run)}, = {src.unpacker(codes)}(buf, p)")
    src.emit(indent, f"p += {struct.calcsize('>' + codes)}")
    for _, name, is_uuid in run:
        if is_uuid:
            src.emit(indent, f"{name} = _UUID(bytes={name})")
    run.clear()


def _decode_sized(src: _Source, indent: int, f: Field, type_: str, target: str, length: str | None) -> None:
    """string, bytes or records: a length, then that many bytes."""
    length = _read_length(src, indent, f, "h" if type_ == "string" else "i", length)
    src.emit(indent, f"if {length} < 0:")
    _decode_null_or_fail(src, indent + 1, f, length, target)
    src.emit(indent, "else:")
    end = src.var("e")
    src.emit(indent + 1, f"{end} = p + {length}")
    src.emit(indent + 1, f"if {end} > end_:")
    src.fail(indent + 2, f"{f.key}: truncated: {{{length}}} bytes at byte {{p}}, {{end_ - p}} left")
    value = {"string": "buf[p:{e}].tobytes().decode()", "bytes": "buf[p:{e}].tobytes()",
             "records": "buf[p:{e}]"}[type_].format(e=end)
    src.emit(indent + 1, f"{target} = {value}")
    src.emit(indent + 1, f"p = {end}")


def _decode_array(src: _Source, indent: int, f: Field, target: str, count: str | None) -> None:
    count = _read_length(src, indent, f, "i", count)
    src.emit(indent, f"if {count} < 0:")
    _decode_null_or_fail(src, indent + 1, f, count, target)
    src.emit(indent, "else:")
    inner = indent + 1
    least = _min_size(src, f, element=True)
    if least:
        src.emit(inner, f"if {count} * {least} > end_ - p:")
        src.fail(inner + 1, f"{f.key}: {{{count}}} elements at byte {{p}} cannot fit in {{end_ - p}} bytes")
    element = f.element_type
    if element in FIXED_FORMATS and element != "uuid":
        code = FIXED_FORMATS[element]
        cache = src.constant("a", ("unpack", code), dict)
        src.emit(inner, f"{target} = list(({cache}.get({count}) or _array_unpacker({cache}, '{code}', {count}))(buf, p))")
        src.emit(inner, f"p += {count} * {_SIZE[code]}")
        return
    src.emit(inner, f"{target} = []")
    src.emit(inner, f"for _ in range({count}):")
    if f.is_struct:
        item = _decode_struct(src, inner + 1, f.fields)
    else:
        item = src.var("x")
        _decode_value(src, inner + 1, Field(key=f.key, type=element, versions=f.versions, flexible=f.flexible), item)
    src.emit(inner + 1, f"{target}.append({item})")


def _decode_value(src: _Source, indent: int, f: Field, target: str, length: str | None = None) -> None:
    """Emit the decode of one field's value into the variable ``target``; ``length`` names the
    variable holding its length prefix when that was read with the fields before it."""
    if f.is_array:
        _decode_array(src, indent, f, target, length)
    elif f.is_struct:
        if is_nullable(f, src.version):  # an int8 marker: negative for null, else a struct follows
            marker = src.var("k")
            _flush_reads(src, indent, [("b", marker, False)])
            src.emit(indent, f"if {marker} < 0:")
            src.emit(indent + 1, f"{target} = None")
            src.emit(indent, "else:")
            indent += 1
        src.emit(indent, f"{target} = {_decode_struct(src, indent, f.fields)}")
    elif f.type in FIXED_FORMATS:
        _flush_reads(src, indent, [(FIXED_FORMATS[f.type], target, f.type == "uuid")])
    else:
        _decode_sized(src, indent, f, f.type, target, length)


def _decode_tagged(src: _Source, indent: int, tagged: list[Field], values: dict[str, str]) -> None:
    """The tagged-fields section: known tags decoded (absent ones keep their defaults), others skipped."""
    for f in tagged:
        values[f.key] = src.var("t")
        src.emit(indent, f"{values[f.key]} = {src.literal(type_default(f, src.version))}")
    count, tag, size, end = src.var("c"), src.var("g"), src.var("z"), src.var("e")
    _read_uvarint(src, indent, count)
    src.emit(indent, f"for _ in range({count}):")
    _read_uvarint(src, indent + 1, tag)
    _read_uvarint(src, indent + 1, size)
    src.emit(indent + 1, f"{end} = p + {size}")
    src.emit(indent + 1, f"if {end} > end_:")
    src.fail(indent + 2, f"tagged field {{{tag}}}: truncated: {{{size}}} bytes at byte {{p}}")
    keyword = "if"
    for f in sorted(tagged, key=lambda f: f.tag):
        src.emit(indent + 1, f"{keyword} {tag} == {f.tag}:")
        _decode_value(src, indent + 2, f, values[f.key])
        src.emit(indent + 2, f"if p != {end}:")
        src.fail(indent + 3, f"tagged field {f.key}: size {{{size}}} but its value took {{p - {end} + {size}}}")
        keyword = "elif"
    if tagged:
        src.emit(indent + 1, "else:")
        src.emit(indent + 2, f"p = {end}")
    else:
        src.emit(indent + 1, f"p = {end}")


def _decode_struct(src: _Source, indent: int, fields: tuple[Field, ...]) -> str:
    """Emit the decode of a struct's fields; returns the variable holding its dict. Fixed-width
    fields, and the classic length prefix of the variable field after them, are read together."""
    present = fields_at(fields, src.version)
    values: dict[str, str] = {}
    run: list[tuple[str, str, bool]] = []
    for f in present:
        if is_tagged(f, src.version):
            continue
        values[f.key] = src.var("v")
        if f.type in FIXED_FORMATS:
            run.append((FIXED_FORMATS[f.type], values[f.key], f.type == "uuid"))
            continue
        code, length = _length_code(src, f), None
        if code:
            length = src.var("n")
            run.append((code, length, False))
        _flush_reads(src, indent, run)
        _decode_value(src, indent, f, values[f.key], length)
    _flush_reads(src, indent, run)
    if src.flexible:
        _decode_tagged(src, indent, [f for f in present if is_tagged(f, src.version)], values)
    result = src.var("d")
    src.emit(indent, f"{result} = {{" + ", ".join(f"{f.key!r}: {values[f.key]}" for f in present) + "}")
    return result


def decoder_source(label: str, fields: tuple[Field, ...], version: int, flexible: Range) -> tuple[str, dict]:
    """The source of ``decode(buf, p) -> (dict, p)`` for ``fields`` at ``version`` and the constants
    it needs. ``label`` (e.g. ``"FetchRequest v11"``) names the message in error messages."""
    src = _Source(label, version, flexible)
    src.emit(0, "def decode(buf, p):")
    src.emit(1, "end_ = len(buf)")
    result = _decode_struct(src, 1, fields)
    src.emit(1, f"return {result}, p")
    return "\n".join(src.lines) + "\n", src.constants


# --- encoding ------------------------------------------------------------------------------------


def _write_uvarint_length(src: _Source, indent: int, buf: str, length: str) -> None:
    size = src.var("m")
    src.emit(indent, f"{size} = {length} + 1")
    src.emit(indent, f"if {size} < 128: {buf}.append({size})")
    src.emit(indent, f"else: {buf} += _uvarint_bytes({size})")


def _null_marker(src: _Source, f: Field, code: str) -> str:
    return "b'\\x00'" if src.compact(f) else repr(struct.pack(">" + code, -1))


def _getter(src: _Source, f: Field, value: str) -> str:
    """Source of ``value.get(key, default)``; mutable defaults are shared read-only constants."""
    default = type_default(f, src.version)
    if isinstance(default, list) and not default:
        text = "()"
    elif isinstance(default, dict):
        text = src.constant("k", "empty struct", dict)  # {}: the nested fields take their defaults
    else:
        text = src.literal(default)
    return f"{value}.get({f.key!r}, {text})"


def _flush_writes(src: _Source, indent: int, pending: list[tuple[str, str]], buf: str) -> None:
    """Emit one ``pack`` of the pending fixed-width writes: (struct code, expression)."""
    if pending == [("B", "0")]:
        src.emit(indent, f"{buf}.append(0)")
    elif pending:
        codes = "".join(code for code, _ in pending)
        src.emit(indent, f"{buf} += {src.packer(codes)}({', '.join(expr for _, expr in pending)})")
    pending.clear()


def _encode_value(src: _Source, indent: int, f: Field, expr: str, buf: str, pending: list[tuple[str, str]]) -> None:
    """Emit the encode of field ``f``, whose value the expression ``expr`` gives, onto ``buf``.
    ``pending`` holds fixed-width writes not emitted yet: a classic length prefix joins them, and
    they are all emitted before any variable-length data; it is left empty."""
    type_ = f.type
    if type_ in FIXED_FORMATS:
        pending.append((FIXED_FORMATS[type_], expr + (".bytes" if type_ == "uuid" else "")))
        _flush_writes(src, indent, pending, buf)
        return
    if type_ == "records":
        if buf != "b":
            raise NotImplementedError(f"{src.label}: records field {f.key} inside a tagged field")
        _flush_writes(src, indent, pending, buf)
        src.emit(indent, f"b = _records(out, b, {expr}, {src.compact(f)})")
        return
    value = src.var("w")
    src.emit(indent, f"{value} = {expr}")
    if f.is_struct and not f.is_array:
        _flush_writes(src, indent, pending, buf)
        if is_nullable(f, src.version):  # an int8 marker: -1 null, 1 a struct follows
            src.emit(indent, f"if {value} is None: {buf}.append(255)")
            src.emit(indent, "else:")
            indent += 1
            src.emit(indent, f"{buf}.append(1)")
        _encode_struct(src, indent, f.fields, value, buf)
        return
    code = "h" if type_ == "string" else "i"
    if is_nullable(f, src.version):
        _flush_writes(src, indent, pending, buf)
        src.emit(indent, f"if {value} is None: {buf} += {_null_marker(src, f, code)}")
        src.emit(indent, "else:")
        indent += 1
    if type_ == "string":
        src.emit(indent, f"{value} = {value}.encode()")
    element = f.element_type if f.is_array else None
    if element in FIXED_FORMATS and element != "uuid":
        # The count and the elements in one pack, from a Struct cached per count.
        _flush_writes(src, indent, pending, buf)
        count, compact = src.var("k"), src.compact(f)
        src.emit(indent, f"{count} = len({value})")
        if compact:
            _write_uvarint_length(src, indent, buf, count)
        cache = src.constant("a", ("pack", element, compact), dict)
        counted = "" if compact else f"{count}, "
        src.emit(indent, f"{buf} += ({cache}.get({count}) or _array_packer({cache}, '{FIXED_FORMATS[element]}', "
                         f"{count}, {not compact}))({counted}*{value})")
        return
    if src.compact(f):
        _flush_writes(src, indent, pending, buf)
        _write_uvarint_length(src, indent, buf, f"len({value})")
    else:
        pending.append((code, f"len({value})"))
        _flush_writes(src, indent, pending, buf)
    if not f.is_array:
        src.emit(indent, f"{buf} += {value}")
        return
    item = src.var("x")
    src.emit(indent, f"for {item} in {value}:")
    if f.is_struct:
        _encode_struct(src, indent + 1, f.fields, item, buf)
    else:
        _encode_value(src, indent + 1, Field(key=f.key, type=element, versions=f.versions, flexible=f.flexible),
                      item, buf, [])


def _encode_tagged(src: _Source, indent: int, tagged: list[Field], value: str, buf: str) -> None:
    # A tagged field is written only when it differs from its default (Kafka's rule), so the size of
    # each must be known first: each is encoded into its own small buffer.
    found = src.var("f")
    src.emit(indent, f"{found} = []")
    for f in sorted(tagged, key=lambda f: f.tag):
        item, inner = src.var("y"), src.var("tb")
        default = type_default(f, src.version)
        src.emit(indent, f"{item} = {value}.get({f.key!r}, {src.literal(default)})")
        src.emit(indent, f"if {item} != {src.literal(default)}:")
        src.emit(indent + 1, f"{inner} = bytearray()")
        _encode_value(src, indent + 1, f, item, inner, [])
        src.emit(indent + 1, f"{found}.append(({f.tag}, {inner}))")
    tag, data = src.var("g"), src.var("tb")
    src.emit(indent, f"{buf} += _uvarint_bytes(len({found}))")
    src.emit(indent, f"for {tag}, {data} in {found}:")
    src.emit(indent + 1, f"{buf} += _uvarint_bytes({tag}) + _uvarint_bytes(len({data})) + {data}")


def _encode_struct(src: _Source, indent: int, fields: tuple[Field, ...], value: str, buf: str) -> None:
    """Emit the encode of the struct held by the variable ``value``. Fixed-width fields, and the
    classic length prefix of the variable field after them, are written by one pack."""
    present = fields_at(fields, src.version)
    pending: list[tuple[str, str]] = []
    for f in present:
        if is_tagged(f, src.version):
            continue
        if f.type in FIXED_FORMATS:
            pending.append((FIXED_FORMATS[f.type], _getter(src, f, value) + (".bytes" if f.type == "uuid" else "")))
        else:
            _encode_value(src, indent, f, _getter(src, f, value), buf, pending)
    tagged = [f for f in present if is_tagged(f, src.version)]
    if src.flexible and not tagged:
        pending.append(("B", "0"))  # an empty tagged-fields section
    _flush_writes(src, indent, pending, buf)
    if tagged and src.flexible:
        _encode_tagged(src, indent, tagged, value, buf)


def encoder_source(label: str, fields: tuple[Field, ...], version: int, flexible: Range) -> tuple[str, dict]:
    """The source of ``encode(out, b, value) -> b`` for ``fields`` at ``version`` and its constants."""
    src = _Source(label, version, flexible)
    src.emit(0, "def encode(out, b, v):")
    _encode_struct(src, 1, fields, "v", "b")
    src.emit(1, "return b")
    return "\n".join(src.lines) + "\n", src.constants
