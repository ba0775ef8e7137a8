"""Small JSON documents the server keeps in its first data dir (``scram-credentials.json``,
``acls.json``): one format, one way to read and to replace them.

What it owns: the document ``{"version": N, "body": {...}, "crc32": C}`` where C is the CRC-32 of
the body's canonical JSON; ``load_document`` (a missing file is None; bad JSON, an unknown version,
a checksum that does not match, or a body its parser refuses is ``CorruptCheckpointError`` naming
the file, and nothing is rewritten over it) and ``save_document`` (temp file, fsync, rename,
directory fsync: ``FileSystem.write_file_atomic``, so a crash leaves the old document or the new).

Both documents are secrets (password verifiers an offline search can attack; the ACLs say who may
do what): they are written owner-only, 0600, whatever the umask; a file another user can read (one
written before, or chmodded) is warned about when it is loaded, and is 0600 again from its next change.
"""

from __future__ import annotations

import json
import logging
import zlib
from typing import Any, Callable, TypeVar

from ...errors import CorruptCheckpointError
from ...fs import FileSystem

logger = logging.getLogger(__name__)

T = TypeVar("T")


def body_crc(body: Any) -> int:
    """The CRC-32 of ``body``'s canonical JSON (sorted keys, no spaces)."""
    return zlib.crc32(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


def load_document(fs: FileSystem, path: str, version: int, parse: Callable[[dict], T], what: str,
                  remedy: str) -> T | None:
    """``parse(body)`` of the document at ``path``, or None when there is none. ``what`` names the
    file in the error (``"ACL file"``), ``remedy`` says what to do about it."""
    if not fs.exists(path):
        return None
    data = fs.read_file(path)
    mode = fs.permissions(path)
    if mode & 0o077:
        logger.warning("%s %s can be read or changed by other users (mode %03o): it is made 0600 at its next change; "
                       "chmod 600 it now", what, path, mode)
    try:
        document = json.loads(data.decode("utf-8"))
        if not isinstance(document, dict) or document.get("version") != version:
            raise ValueError(f"unknown version {document.get('version') if isinstance(document, dict) else None!r}")
        body = document["body"]
        if body_crc(body) != document["crc32"]:
            raise ValueError("checksum mismatch")
        return parse(body)
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        raise CorruptCheckpointError(f"{what} {path} is damaged: {exc}; {remedy}") from None


def save_document(fs: FileSystem, path: str, version: int, body: dict) -> None:
    """Replace the document at ``path`` with ``body``, durably, readable by its owner only (0600)."""
    document = {"version": version, "body": body, "crc32": body_crc(body)}
    fs.write_file_atomic(path, json.dumps(document, indent=1, sort_keys=True).encode() + b"\n", private=True)


__all__ = ["body_crc", "load_document", "save_document"]
