"""Java properties files, as Kafka's broker and tools read them (``java.util.Properties.load``), and
reading a small file of settings named by a user safely.

What it owns:
- ``parse_properties``: the syntax of ``java.util.Properties``: ``key=value``, ``key: value`` and
  ``key value``; ``#`` and ``!`` comment lines; a line ending in an odd number of backslashes goes on
  on the next line (whose leading whitespace is dropped); the escapes ``\\t \\n \\r \\f \\uXXXX``, and
  ``\\`` before any other character stands for that character (``\\:``, ``\\=``, ``\\ ``, ``\\\\``).
  Whitespace around the key and the separator is dropped, a value's trailing whitespace is kept, and
  a key given twice keeps its last value, as Java does. Each entry carries the line it starts on, so
  an error can name it. Files are read as UTF-8 (an ASCII file, with ``\\uXXXX`` escapes for the
  rest, reads the same as Java's ISO-8859-1 ``Properties.load`` reads it);
- ``read_regular_file``: the bytes of a regular file of at most a given size, refusing a directory,
  a device (``/dev/zero`` would be read without end) or a FIFO (it would wait for a writer) before
  it is opened and again on the descriptor; ``read_properties_file`` both together.

Standard library only: the engine's foundations use nothing else.
"""

from __future__ import annotations

import os
import stat
from typing import NamedTuple

_WHITESPACE = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))


class NotARegularFileError(ValueError):
    """A path given for a small file of settings names none: nothing there, or a directory, a
    device, a FIFO or a socket."""


class Property(NamedTuple):
    """One entry of a properties file: its key and value (escapes resolved) and the line it starts on."""

    key: str
    value: str
    line: int


def parse_properties(text: str, source: str = "<properties>") -> list[Property]:
    """The entries of ``text`` in the order written (see the module docstring for the syntax).
    ``ValueError`` naming ``source`` and the line for a malformed ``\\uXXXX`` escape, the one thing
    Java refuses."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    entries: list[Property] = []
    index = 0
    while index < len(lines):
        number = index + 1
        line = lines[index].lstrip(_WHITESPACE)
        index += 1
        if not line or line[0] in "#!":  # a comment line never goes on to the next
            continue
        while _continues(line):
            line = line[:-1]
            if index >= len(lines):
                break
            line += lines[index].lstrip(_WHITESPACE)
            index += 1
        key, value = _split(line)
        entries.append(Property(_unescape(key, source, number), _unescape(value, source, number), number))
    return entries


def _continues(line: str) -> bool:
    backslashes = len(line) - len(line.rstrip("\\"))
    return backslashes % 2 == 1


def _split(line: str) -> tuple[str, str]:
    """(raw key, raw value) of a logical line, as ``Properties.load`` splits it: the key ends at the
    first unescaped ``=``, ``:`` or whitespace; then whitespace and at most one ``=`` or ``:``."""
    end, escaped, separator = 0, False, False
    value_start = len(line)
    while end < len(line):
        char = line[end]
        if not escaped and char in "=:":
            value_start, separator = end + 1, True
            break
        if not escaped and char in _WHITESPACE:
            value_start = end + 1
            break
        escaped = char == "\\" and not escaped
        end += 1
    while value_start < len(line):
        char = line[value_start]
        if char not in _WHITESPACE:
            if separator or char not in "=:":
                break
            separator = True
        value_start += 1
    return line[:end], line[value_start:]


def _unescape(raw: str, source: str, number: int) -> str:
    if "\\" not in raw:
        return raw
    out: list[str] = []
    index = 0
    while index < len(raw):
        char = raw[index]
        index += 1
        if char != "\\" or index >= len(raw):
            out.append(char)
            continue
        char = raw[index]
        index += 1
        if char == "u":
            digits = raw[index:index + 4]
            if len(digits) < 4 or any(digit not in "0123456789abcdefABCDEF" for digit in digits):
                raise ValueError(f"{source} line {number}: malformed \\uxxxx escape")
            out.append(chr(int(digits, 16)))
            index += 4
        else:
            out.append(_ESCAPES.get(char, char))
    return "".join(out)


def regular_file_problem(path: str) -> str | None:
    """Why ``path`` is not a regular file (``"no such file"``, ``"a FIFO, not a regular file"``...),
    or None when it is one. ``os.stat`` only: nothing is opened, so a FIFO does not block."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "no such file"
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return _not_regular(mode)


def _not_regular(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), "not a file")
    return f"{kind}, not a regular file"


def read_regular_file(path: str, max_bytes: int, what: str) -> bytes:
    """The bytes of ``path``, a small file of settings named by the user (``what`` says which, in
    errors). ``NotARegularFileError`` unless it is a regular file (checked before it is opened,
    and again on the descriptor, opened with O_NONBLOCK so that a FIFO put there meanwhile does not
    block); ``ValueError`` when it holds more than ``max_bytes``; ``OSError`` when it cannot be read."""
    problem = regular_file_problem(path)
    if problem is not None:
        raise NotARegularFileError(f"{what} {path!r}: {problem}")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | _O_CLOEXEC)
    try:
        problem = _not_regular(os.fstat(fd).st_mode)
        if problem is not None:
            raise NotARegularFileError(f"{what} {path!r}: {problem}")
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(fd, max_bytes + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > max_bytes:
        raise ValueError(f"{what} {path!r} holds more than {max_bytes} bytes: not a file of settings")
    return b"".join(chunks)


def read_properties_file(path: str, max_bytes: int, what: str) -> list[Property]:
    """The entries of the properties file ``path`` (``read_regular_file``, then UTF-8, then
    ``parse_properties``); errors name ``path``."""
    data = read_regular_file(path, max_bytes, what)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{what} {path!r}: not UTF-8 text (byte {exc.start})") from None
    return parse_properties(text, path)


__all__ = ["NotARegularFileError", "Property", "parse_properties", "read_properties_file", "read_regular_file",
           "regular_file_problem"]
