"""The admin APIs of security: ACLs (DescribeAcls, CreateAcls, DeleteAcls) and users' SCRAM
credentials (DescribeUserScramCredentials, AlterUserScramCredentials), so that Kafka's own tools and
clients' admin APIs manage a running server. Who may call them is the authorization
layer's concern (ALTER or DESCRIBE on the cluster); this module only answers.

What it owns:
- ``SecurityAdminHandler``: the five handlers over the server's ``acls.Authorizer`` (None: ACLs are
  not enforced, and the ACL APIs answer SECURITY_DISABLED, as Kafka without an authorizer) and its
  ``credentials.CredentialStore``;
- Kafka's answers for bad input: an invalid ACL or filter is refused alone with INVALID_REQUEST and
  says why; a SCRAM change with an unknown mechanism is UNSUPPORTED_SASL_MECHANISM, too few or too
  many iterations or an empty salt UNACCEPTABLE_CREDENTIAL, a user named twice for one mechanism
  DUPLICATE_RESOURCE, a deletion of a credential that does not exist RESOURCE_NOT_FOUND. A user's
  changes apply all together or not at all; every user's accepted changes go in one durable write.
"""

from __future__ import annotations

import logging
import threading

from ..network.request_context import RequestContext
from ..protocol import errors
from ..security.acls import AclBinding, AclBindingFilter
from ..security.scram import (MAX_ITERATIONS, MECHANISM_CODES, MECHANISMS, MECHANISMS_BY_CODE, MIN_ITERATIONS,
                              credential_from_salted)

logger = logging.getLogger(__name__)


def _acl_filter(entry: dict, version: int) -> AclBindingFilter:
    return AclBindingFilter(resource_type=entry["resource_type_filter"], resource_name=entry["resource_name_filter"],
                            pattern_type=entry.get("pattern_type_filter", 3) if version >= 1 else 3,
                            principal=entry["principal_filter"], host=entry["host_filter"],
                            operation=entry["operation"], permission=entry["permission_type"])


class SecurityAdminHandler:
    """The handlers of APIs 29, 30, 31, 50 and 51 (see the module docstring)."""

    def __init__(self, authorizer, credentials) -> None:
        self.authorizer = authorizer
        self.credentials = credentials
        self._credentials_lock = threading.Lock()  # two handler threads must not both read-modify-write

    def register(self, apis) -> None:
        from ..protocol.messages import API_KEYS
        for name, handler in (("DescribeAcls", self.describe_acls), ("CreateAcls", self.create_acls),
                              ("DeleteAcls", self.delete_acls),
                              ("DescribeUserScramCredentials", self.describe_user_scram_credentials),
                              ("AlterUserScramCredentials", self.alter_user_scram_credentials)):
            apis.register(API_KEYS[name], handler)

    # --- ACLs --------------------------------------------------------------------------------------

    def describe_acls(self, context: RequestContext, request: dict) -> None:
        body = {"throttle_time_ms": 0, "error_code": errors.NONE, "error_message": None, "resources": []}
        if self.authorizer is None:
            body.update(error_code=errors.SECURITY_DISABLED, error_message="ACLs are not enforced (authorizer.enable)")
            context.respond(body)
            return
        try:
            found = self.authorizer.describe(_acl_filter(request, context.api_version))
        except (ValueError, TypeError) as exc:
            body.update(error_code=errors.INVALID_REQUEST, error_message=str(exc))
            context.respond(body)
            return
        resources: dict[tuple, list] = {}
        for binding in found:
            resources.setdefault((binding.resource_type, binding.resource_name, binding.pattern_type), []).append(
                {"principal": binding.principal, "host": binding.host, "operation": binding.operation,
                 "permission_type": binding.permission})
        body["resources"] = [{"resource_type": kind, "resource_name": name, "pattern_type": pattern, "acls": acls}
                             for (kind, name, pattern), acls in resources.items()]
        context.respond(body)

    def create_acls(self, context: RequestContext, request: dict) -> None:
        creations = request["creations"] or []
        results: list[dict] = [{"error_code": errors.NONE, "error_message": None} for _ in creations]
        if self.authorizer is None:
            for result in results:
                result.update(error_code=errors.SECURITY_DISABLED, error_message="ACLs are not enforced")
            context.respond({"throttle_time_ms": 0, "results": results})
            return
        valid: list[tuple[int, AclBinding]] = []
        for index, entry in enumerate(creations):
            try:
                pattern = entry.get("resource_pattern_type", 3) if context.api_version >= 1 else 3
                valid.append((index, AclBinding(entry["resource_type"], entry["resource_name"], pattern,
                                                entry["principal"], entry["host"], entry["operation"],
                                                entry["permission_type"])))
            except (ValueError, TypeError) as exc:
                results[index].update(error_code=errors.INVALID_REQUEST, error_message=str(exc))
        outcomes = self.authorizer.create([binding for _index, binding in valid]) if valid else []
        for (index, binding), outcome in zip(valid, outcomes):
            if outcome is not None:
                logger.error("storing ACL %s failed: %s", binding.row(), outcome)
                results[index].update(error_code=errors.UNKNOWN_SERVER_ERROR, error_message=f"storing failed: {outcome}")
            else:
                logger.info("ACL added by %s from %s: %s", context.session.principal if context.session else "-",
                            context.peer, " ".join(binding.row()))
        context.respond({"throttle_time_ms": 0, "results": results})

    def delete_acls(self, context: RequestContext, request: dict) -> None:
        filters = request["filters"] or []
        results: list[dict] = [{"error_code": errors.NONE, "error_message": None, "matching_acls": []}
                               for _ in filters]
        if self.authorizer is None:
            for result in results:
                result.update(error_code=errors.SECURITY_DISABLED, error_message="ACLs are not enforced")
            context.respond({"throttle_time_ms": 0, "filter_results": results})
            return
        valid: list[tuple[int, AclBindingFilter]] = []
        for index, entry in enumerate(filters):
            try:
                valid.append((index, _acl_filter(entry, context.api_version)))
            except (ValueError, TypeError) as exc:
                results[index].update(error_code=errors.INVALID_REQUEST, error_message=str(exc))
        try:
            removed = self.authorizer.delete([found for _index, found in valid]) if valid else []
        except OSError as exc:
            logger.error("removing ACLs failed: %s", exc)
            for index, _found in valid:
                results[index].update(error_code=errors.UNKNOWN_SERVER_ERROR, error_message=f"storing failed: {exc}")
            removed = []
        for (index, _found), bindings in zip(valid, removed):
            results[index]["matching_acls"] = [
                {"error_code": errors.NONE, "error_message": None, "resource_type": b.resource_type,
                 "resource_name": b.resource_name, "pattern_type": b.pattern_type, "principal": b.principal,
                 "host": b.host, "operation": b.operation, "permission_type": b.permission} for b in bindings]
            for binding in bindings:
                logger.info("ACL removed by %s from %s: %s", context.session.principal if context.session else "-",
                            context.peer, " ".join(binding.row()))
        context.respond({"throttle_time_ms": 0, "filter_results": results})

    # --- SCRAM credentials -------------------------------------------------------------------------

    def describe_user_scram_credentials(self, context: RequestContext, request: dict) -> None:
        stored: dict[str, list[dict]] = {}
        for user, mechanism, iterations in self.credentials.users():
            stored.setdefault(user, []).append({"mechanism": MECHANISM_CODES[mechanism], "iterations": iterations})
        wanted = request.get("users")
        results = []
        if wanted is None:
            names = sorted(stored)
        else:
            names = [entry["name"] for entry in wanted]
        counts = {name: names.count(name) for name in names}
        for name in dict.fromkeys(names):
            result = {"user": name, "error_code": errors.NONE, "error_message": None, "credential_infos": []}
            if counts[name] > 1:
                result.update(error_code=errors.DUPLICATE_RESOURCE, error_message="the user is named more than once")
            elif name not in stored:
                result.update(error_code=errors.RESOURCE_NOT_FOUND,
                              error_message="attempt to describe a user credential that does not exist")
            else:
                result["credential_infos"] = stored[name]
            results.append(result)
        context.respond({"throttle_time_ms": 0, "error_code": errors.NONE, "error_message": None, "results": results})

    def alter_user_scram_credentials(self, context: RequestContext, request: dict) -> None:
        with self._credentials_lock:
            self._alter_user_scram_credentials(context, request)

    def _alter_user_scram_credentials(self, context: RequestContext, request: dict) -> None:
        deletions = request.get("deletions") or []
        upsertions = request.get("upsertions") or []
        order = list(dict.fromkeys([entry["name"] for entry in (*deletions, *upsertions)]))
        failed: dict[str, tuple[int, str]] = {}
        named = [(entry["name"], entry["mechanism"]) for entry in (*deletions, *upsertions)]
        for name, mechanism in named:
            if named.count((name, mechanism)) > 1:
                failed.setdefault(name, (errors.DUPLICATE_RESOURCE,
                                         "a user's credential for one mechanism is altered more than once"))
        upserts, removals = {}, []
        for entry in deletions:
            name, mechanism = entry["name"], MECHANISMS_BY_CODE.get(entry["mechanism"])
            if name in failed:
                continue
            if mechanism is None:
                failed[name] = (errors.UNSUPPORTED_SASL_MECHANISM, f"unknown SCRAM mechanism {entry['mechanism']}")
            elif self.credentials.lookup(name, mechanism) is None:
                failed[name] = (errors.RESOURCE_NOT_FOUND, "attempt to delete a user credential that does not exist")
            else:
                removals.append((name, mechanism))
        for entry in upsertions:
            name, mechanism = entry["name"], MECHANISMS_BY_CODE.get(entry["mechanism"])
            if name in failed:
                continue
            if mechanism is None or mechanism not in MECHANISMS:
                failed[name] = (errors.UNSUPPORTED_SASL_MECHANISM, f"unknown SCRAM mechanism {entry['mechanism']}")
            elif not name:
                failed[name] = (errors.UNACCEPTABLE_CREDENTIAL, "the user name is empty")
            elif not MIN_ITERATIONS <= entry["iterations"] <= MAX_ITERATIONS:
                failed[name] = (errors.UNACCEPTABLE_CREDENTIAL, f"iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}, "
                                                                f"got {entry['iterations']}")
            else:
                try:
                    upserts[(name, mechanism)] = credential_from_salted(mechanism, entry["salt"], entry["iterations"],
                                                                        entry["salted_password"])
                except ValueError as exc:
                    failed[name] = (errors.UNACCEPTABLE_CREDENTIAL, str(exc))
        upserts = {key: value for key, value in upserts.items() if key[0] not in failed}
        removals = [key for key in removals if key[0] not in failed]
        if upserts or removals:
            try:
                self.credentials.apply(upserts, removals)
            except (OSError, ValueError) as exc:
                logger.error("storing SCRAM credentials failed: %s", exc)
                for name in {key[0] for key in (*upserts, *removals)}:
                    failed[name] = (errors.UNKNOWN_SERVER_ERROR, f"storing failed: {exc}")
            else:
                logger.info("SCRAM credentials changed by %s from %s: set %s, deleted %s",
                            context.session.principal if context.session else "-", context.peer,
                            sorted(upserts), sorted(removals))
        results = []
        for name in order:
            code, message = failed.get(name, (errors.NONE, None))
            results.append({"user": name, "error_code": code, "error_message": message})
        context.respond({"throttle_time_ms": 0, "results": results})


__all__ = ["SecurityAdminHandler"]
