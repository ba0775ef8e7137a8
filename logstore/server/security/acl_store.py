"""``AclStore``: the server's ACLs (``acls.AclBinding``), kept in the first data dir as ``acls.json``
(the ``Authorizer``, ``logstore acls`` and the admin APIs stand on it).

What it owns:
- the file: JSON with a version, one entry per binding in Kafka's words (``Topic``, ``Prefixed``,
  ``User:alice``, ``Read``, ``Allow``) so that a person can read it, and a CRC-32 of the body. It
  replaces its previous copy durably (temp file, fsync, rename, directory fsync:
  ``FileSystem.write_file_atomic``), so a crash leaves the old set or the new one; owner-only (0600,
  ``checked_json``): who may do what is not for other local users to read or change;
- ``add(bindings)`` and ``remove(filters)``: one durable write per call, whatever the number of
  bindings (and none when nothing changes); a failed write changes nothing in memory either;
- a damaged file (bad JSON, a checksum that does not match, an unknown version, a binding that is
  not valid) is refused with ``CorruptCheckpointError`` naming it: a server must not start with
  ACLs it cannot trust (a lost DENY would open what it closed); nothing is rewritten over it.

Not thread-safe on its own: the ``Authorizer`` serializes its changes with a lock, and the CLI has
the store to itself (it opens the store as a writer, which takes the store's lock).
"""

from __future__ import annotations

import os
from typing import Iterable

from ...fs import FileSystem
from .acls import OPERATIONS, PATTERN_TYPES, PERMISSIONS, RESOURCE_TYPES, AclBinding, AclBindingFilter
from .checked_json import load_document, save_document

ACLS_FILE = "acls.json"
VERSION = 1


def _entry(binding: AclBinding) -> dict:
    resource_type, pattern_type, name, principal, host, operation, permission = binding.row()
    return {"resource_type": resource_type, "pattern_type": pattern_type, "resource_name": name,
            "principal": principal, "host": host, "operation": operation, "permission": permission}


def _binding(entry: dict) -> AclBinding:
    """The binding an entry of the file stands for; ValueError/KeyError/TypeError when it stands
    for none (an unknown name is not guessed at: exact spellings only)."""
    def code(table: dict[str, int], key: str) -> int:
        value = entry[key]
        if not isinstance(value, str) or value not in table:
            raise ValueError(f"unknown {key.replace('_', ' ')} {value!r} (one of {', '.join(table)})")
        return table[value]

    return AclBinding(code(RESOURCE_TYPES, "resource_type"), entry["resource_name"], code(PATTERN_TYPES, "pattern_type"),
                      entry["principal"], entry["host"], code(OPERATIONS, "operation"),
                      code(PERMISSIONS, "permission"))


class AclStore:
    """The ACLs in ``dir_path`` (see the module docstring)."""

    def __init__(self, dir_path: str, fs: FileSystem | None = None) -> None:
        self._fs = fs or FileSystem()
        self.path = os.path.join(dir_path, ACLS_FILE)
        self._bindings: frozenset[AclBinding] = self._load()

    def _load(self) -> frozenset[AclBinding]:
        loaded = load_document(self._fs, self.path, VERSION,
                               lambda body: frozenset(_binding(entry) for entry in body["acls"]),
                               "ACL file", "fix or remove it (then add the ACLs again)")
        return frozenset() if loaded is None else loaded

    def _save(self, bindings: frozenset[AclBinding]) -> None:
        """Write ``bindings`` durably, then make them this store's (a failed write changes nothing)."""
        save_document(self._fs, self.path, VERSION, {"acls": [_entry(binding) for binding in sorted(bindings)]})
        self._bindings = bindings

    def add(self, bindings: Iterable[AclBinding]) -> list[AclBinding]:
        """Add ``bindings`` durably (one write); those that were not there yet, in the order given
        (a binding already present, or given twice, is added once)."""
        added: dict[AclBinding, None] = {}
        for binding in bindings:
            if not isinstance(binding, AclBinding):
                raise TypeError(f"an ACL is an AclBinding, got {binding!r}")
            if binding not in self._bindings:
                added[binding] = None
        if added:
            self._save(self._bindings | added.keys())
        return list(added)

    def remove(self, filters: Iterable[AclBindingFilter]) -> list[AclBinding]:
        """Remove every binding that one of ``filters`` matches, durably (one write); those removed,
        sorted."""
        filters = list(filters)
        for found in filters:
            if not isinstance(found, AclBindingFilter):
                raise TypeError(f"an ACL filter is an AclBindingFilter, got {found!r}")
        removed = {binding for binding in self._bindings if any(found.matches(binding) for found in filters)}
        if removed:
            self._save(self._bindings - removed)
        return sorted(removed)

    def bindings(self) -> tuple[AclBinding, ...]:
        """Every binding, sorted."""
        return tuple(sorted(self._bindings))
