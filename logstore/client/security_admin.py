"""A broker's ACLs and SCRAM users through Kafka's admin APIs (DescribeAcls, CreateAcls,
DeleteAcls, DescribeUserScramCredentials, AlterUserScramCredentials): what ``logstore acls`` and
``logstore users`` do with ``--bootstrap-server``, so a running server (whose store is locked) or
any Kafka broker is managed the same way as a store on disk.

What it owns: ``BrokerSecurityAdmin``, with the methods of ``server.acl_store.AclStore`` (``add``,
``remove``, ``bindings``) and of ``server.credentials.CredentialStore`` (``set``, ``delete``,
``users``), so the command line uses either without knowing which. A password is salted and
iterated here (SCRAM's SaltedPassword), never sent. A refusal raises ``BrokerResponseError`` naming
Kafka's error (CLUSTER_AUTHORIZATION_FAILED without ALTER on the cluster, SECURITY_DISABLED on a
broker without ACLs, RESOURCE_NOT_FOUND...).
"""

from __future__ import annotations

import secrets
from typing import Iterable

from ..server.security.acls import MATCH_ALL, AclBinding, AclBindingFilter
from ..server.security.scram import DEFAULT_ITERATIONS, MECHANISM_CODES, MECHANISMS, MECHANISMS_BY_CODE, salted_password
from .admin import BrokerAdmin, _check


def _binding(resource_type: int, resource_name: str, pattern_type: int, acl: dict) -> AclBinding:
    """The binding of one ACL of a DescribeAcls or DeleteAcls answer."""
    return AclBinding(resource_type, resource_name, pattern_type, acl["principal"], acl["host"], acl["operation"],
                      acl["permission_type"])


def _filter_body(found: AclBindingFilter) -> dict:
    return {"resource_type_filter": found.resource_type, "resource_name_filter": found.resource_name,
            "pattern_type_filter": found.pattern_type, "principal_filter": found.principal,
            "host_filter": found.host, "operation": found.operation, "permission_type": found.permission}


class BrokerSecurityAdmin:
    """The ACLs and SCRAM users of the broker ``admin`` talks to (see the module docstring)."""

    def __init__(self, admin: BrokerAdmin) -> None:
        self.admin = admin

    # --- ACLs ----------------------------------------------------------------------------------------

    def bindings(self) -> list[AclBinding]:
        """Every ACL of the broker, sorted."""
        body = self.admin.network.request_any("DescribeAcls", _filter_body(MATCH_ALL))
        _check("DescribeAcls", body["error_code"], body.get("error_message"))
        return sorted(_binding(resource["resource_type"], resource["resource_name"], resource["pattern_type"], acl)
                      for resource in body["resources"] for acl in resource["acls"])

    def add(self, bindings: Iterable[AclBinding]) -> list[AclBinding]:
        """Create ``bindings`` (those already there stay as they are); the ones that were new."""
        bindings = list(bindings)
        before = set(self.bindings())
        body = self.admin.network.request_any("CreateAcls", {"creations": [
            {"resource_type": b.resource_type, "resource_name": b.resource_name, "resource_pattern_type": b.pattern_type,
             "principal": b.principal, "host": b.host, "operation": b.operation, "permission_type": b.permission}
            for b in bindings]})
        for binding, result in zip(bindings, body["results"]):
            _check(f"CreateAcls {' '.join(binding.row())}", result["error_code"], result.get("error_message"))
        return [binding for binding in dict.fromkeys(bindings) if binding not in before]

    def remove(self, filters: Iterable[AclBindingFilter]) -> list[AclBinding]:
        """Delete every ACL one of ``filters`` matches; those deleted, sorted."""
        body = self.admin.network.request_any("DeleteAcls", {"filters": [_filter_body(f) for f in filters]})
        removed = set()
        for result in body["filter_results"]:
            _check("DeleteAcls", result["error_code"], result.get("error_message"))
            for acl in result["matching_acls"]:
                _check("DeleteAcls", acl["error_code"], acl.get("error_message"))
                removed.add(_binding(acl["resource_type"], acl["resource_name"], acl["pattern_type"], acl))
        return sorted(removed)

    # --- SCRAM users ---------------------------------------------------------------------------------

    def users(self) -> list[tuple[str, str, int]]:
        """``(user, mechanism, iterations)`` of every credential, sorted: no secrets."""
        body = self.admin.network.request_any("DescribeUserScramCredentials", {"users": None})
        _check("DescribeUserScramCredentials", body["error_code"], body.get("error_message"))
        found = []
        for result in body["results"]:
            _check(f"DescribeUserScramCredentials {result['user']!r}", result["error_code"], result.get("error_message"))
            for info in result["credential_infos"]:
                found.append((result["user"], MECHANISMS_BY_CODE.get(info["mechanism"], str(info["mechanism"])),
                              info["iterations"]))
        return sorted(found)

    def set(self, user: str, mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS) -> None:
        """Give ``user`` a credential for ``mechanism`` (a new salt; only the salted password is sent)."""
        if mechanism not in MECHANISMS:
            raise ValueError(f"unknown SCRAM mechanism {mechanism!r} (known: {', '.join(MECHANISMS)})")
        salt = secrets.token_bytes(32)
        self._alter([], [{"name": user, "mechanism": MECHANISM_CODES[mechanism], "iterations": iterations,
                          "salt": salt, "salted_password": salted_password(mechanism, password, salt, iterations)}])

    def delete(self, user: str, mechanism: str | None = None) -> int:
        """Remove ``user``'s credential for ``mechanism`` (every one when None); how many went.
        ``KeyError`` naming the user when it had none."""
        mechanisms = [m for u, m, _i in self.users() if u == user and (mechanism is None or m == mechanism)]
        if not mechanisms:
            raise KeyError(f"no SCRAM credential for user {user!r}" + (f" and {mechanism}" if mechanism else ""))
        self._alter([{"name": user, "mechanism": MECHANISM_CODES[m]} for m in mechanisms], [])
        return len(mechanisms)

    def _alter(self, deletions: list[dict], upsertions: list[dict]) -> None:
        body = self.admin.network.request_any("AlterUserScramCredentials",
                                              {"deletions": deletions, "upsertions": upsertions})
        for result in body["results"]:
            _check(f"AlterUserScramCredentials {result['user']!r}", result["error_code"], result.get("error_message"))


__all__ = ["BrokerSecurityAdmin"]
