"""Access control lists with Kafka's model, and the ``Authorizer`` that answers "may this principal do
this operation on this resource?" (the authorization building block; the request handlers,
``logstore acls`` and the admin APIs DescribeAcls/CreateAcls/DeleteAcls stand on it).

What it owns:
- Kafka's numeric codes (they travel on the wire unchanged): resource types, pattern types,
  operations, permissions, and the name <-> code tables with Kafka's spellings for the CLI;
- ``AclBinding``: one ACL (a resource pattern and an access control entry), valid by construction:
  concrete codes only, a principal ``Type:name``, a host ``*`` or an IP literal, an operation that
  the resource type has; ``AclBindingFilter`` and its ``matches`` (Kafka's filter semantics,
  ``MATCH`` included);
- ``Authorizer``: Kafka's rules (super users; deny beats allow; ``ALL``; the operations that imply
  ``DESCRIBE`` and ``DESCRIBE_CONFIGS``; literal, wildcard and prefixed resources;
  ``allow.everyone.if.no.acl.found``), ``authorize_any`` (Kafka's authorizeByResourceType), and the
  create/delete/describe calls that change or read the ``AclStore``;
- ``bindings_for``/``filters_for``: the bindings and filters that ``logstore acls`` options mean
  (``--producer``, ``--consumer``), so the CLI only parses and prints.

``authorize`` runs for every partition of every produce and fetch, so it takes no lock: changes
build a new immutable index (and a new memo of answers) and swap it in with one assignment; a
reader works on the snapshot it picked up.
"""

from __future__ import annotations

import ipaddress
import threading
from dataclasses import dataclass
from typing import Iterable

RESOURCE_ANY = 1
RESOURCE_TOPIC = 2
RESOURCE_GROUP = 3
RESOURCE_CLUSTER = 4
RESOURCE_TRANSACTIONAL_ID = 5

PATTERN_ANY = 1
PATTERN_MATCH = 2
PATTERN_LITERAL = 3
PATTERN_PREFIXED = 4

OP_ANY = 1
OP_ALL = 2
OP_READ = 3
OP_WRITE = 4
OP_CREATE = 5
OP_DELETE = 6
OP_ALTER = 7
OP_DESCRIBE = 8
OP_CLUSTER_ACTION = 9
OP_DESCRIBE_CONFIGS = 10
OP_ALTER_CONFIGS = 11
OP_IDEMPOTENT_WRITE = 12

PERMISSION_ANY = 1
PERMISSION_DENY = 2
PERMISSION_ALLOW = 3

CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"  # a literal resource named "*" is every resource; a principal "User:*" is every user
WILDCARD_PRINCIPAL = "User:*"

RESOURCE_TYPES = {"Topic": RESOURCE_TOPIC, "Group": RESOURCE_GROUP, "Cluster": RESOURCE_CLUSTER,
                  "TransactionalId": RESOURCE_TRANSACTIONAL_ID}
PATTERN_TYPES = {"Literal": PATTERN_LITERAL, "Prefixed": PATTERN_PREFIXED}
OPERATIONS = {"All": OP_ALL, "Read": OP_READ, "Write": OP_WRITE, "Create": OP_CREATE, "Delete": OP_DELETE,
              "Alter": OP_ALTER, "Describe": OP_DESCRIBE, "ClusterAction": OP_CLUSTER_ACTION,
              "DescribeConfigs": OP_DESCRIBE_CONFIGS, "AlterConfigs": OP_ALTER_CONFIGS,
              "IdempotentWrite": OP_IDEMPOTENT_WRITE}
PERMISSIONS = {"Deny": PERMISSION_DENY, "Allow": PERMISSION_ALLOW}
# Names of the codes, "Any" and "Match" included (for filters and messages).
RESOURCE_TYPE_NAMES = {**{code: name for name, code in RESOURCE_TYPES.items()}, RESOURCE_ANY: "Any"}
PATTERN_TYPE_NAMES = {**{code: name for name, code in PATTERN_TYPES.items()}, PATTERN_ANY: "Any",
                      PATTERN_MATCH: "Match"}
OPERATION_NAMES = {**{code: name for name, code in OPERATIONS.items()}, OP_ANY: "Any"}
PERMISSION_NAMES = {**{code: name for name, code in PERMISSIONS.items()}, PERMISSION_ANY: "Any"}

# The operations each resource type has (Kafka's AclEntry.supportedOperations, plus All).
SUPPORTED_OPERATIONS = {
    RESOURCE_TOPIC: frozenset({OP_READ, OP_WRITE, OP_CREATE, OP_DELETE, OP_ALTER, OP_DESCRIBE, OP_DESCRIBE_CONFIGS,
                               OP_ALTER_CONFIGS}),
    RESOURCE_GROUP: frozenset({OP_READ, OP_DESCRIBE, OP_DELETE}),
    RESOURCE_CLUSTER: frozenset({OP_CREATE, OP_CLUSTER_ACTION, OP_DESCRIBE_CONFIGS, OP_ALTER_CONFIGS,
                                 OP_IDEMPOTENT_WRITE, OP_ALTER, OP_DESCRIBE}),
    RESOURCE_TRANSACTIONAL_ID: frozenset({OP_DESCRIBE, OP_WRITE}),
}
# An ALLOW of any of these grants the key: who may read, write, delete or alter a resource may see it.
_ALLOWED_BY = {op: frozenset({op, OP_ALL}) for op in OPERATIONS.values()}
_ALLOWED_BY[OP_DESCRIBE] = frozenset({OP_DESCRIBE, OP_ALL, OP_READ, OP_WRITE, OP_DELETE, OP_ALTER})
_ALLOWED_BY[OP_DESCRIBE_CONFIGS] = frozenset({OP_DESCRIBE_CONFIGS, OP_ALL, OP_ALTER_CONFIGS})
MEMO_LIMIT = 65536  # answers remembered between two changes; past it the memo starts again


def _code(value, names: dict[int, str], what: str, concrete: bool) -> int:
    if type(value) is not int:
        raise TypeError(f"{what} is an int code, got {value!r}")
    if value not in names or (concrete and names[value] in ("Any", "Match")):
        allowed = ", ".join(f"{code} ({name})" for code, name in sorted(names.items())
                            if not concrete or name not in ("Any", "Match"))
        raise ValueError(f"{what} {value!r} is not one of {allowed}")
    return value


def _text(value, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} is a str, got {value!r}")
    if not value or any(ord(char) < 0x20 for char in value):
        raise ValueError(f"{what} is a non-empty str without control characters, got {value!r}")
    return value


def check_principal(principal) -> str:
    """``principal`` when it reads ``Type:name`` (``User:alice``, ``User:*``), else ValueError naming it."""
    _text(principal, "a principal")
    kind, colon, name = principal.partition(":")
    if not colon or not kind or not name:
        raise ValueError(f"a principal reads Type:name (e.g. User:alice), got {principal!r}")
    return principal


def check_host(host) -> str:
    """``host`` when it is ``*`` or an IP address literal, else ValueError naming it."""
    _text(host, "a host")
    if host != WILDCARD:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ValueError(f"a host is '*' or an IP address, got {host!r}") from None
    return host


@dataclass(frozen=True, order=True)
class AclBinding:
    """One ACL: ``permission`` of ``operation`` on the resources of ``resource_type`` that
    ``resource_name`` names (``pattern_type`` literal or prefixed), for ``principal`` from ``host``.
    Valid by construction: misuse raises ValueError/TypeError naming the value."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int

    def __post_init__(self) -> None:
        _code(self.resource_type, RESOURCE_TYPE_NAMES, "a resource type", concrete=True)
        _code(self.pattern_type, PATTERN_TYPE_NAMES, "a pattern type", concrete=True)
        _code(self.operation, OPERATION_NAMES, "an operation", concrete=True)
        _code(self.permission, PERMISSION_NAMES, "a permission", concrete=True)
        _text(self.resource_name, "a resource name")
        check_principal(self.principal)
        check_host(self.host)
        if self.resource_type == RESOURCE_CLUSTER and (self.resource_name, self.pattern_type) != (CLUSTER_NAME,
                                                                                                 PATTERN_LITERAL):
            raise ValueError(f"the cluster resource is the literal {CLUSTER_NAME!r}, got "
                             f"{PATTERN_TYPE_NAMES[self.pattern_type]} {self.resource_name!r}")
        if self.operation != OP_ALL and self.operation not in SUPPORTED_OPERATIONS[self.resource_type]:
            raise ValueError(f"operation {OPERATION_NAMES[self.operation]} is not one of a "
                             f"{RESOURCE_TYPE_NAMES[self.resource_type]}'s: "
                             + ", ".join(sorted(OPERATION_NAMES[op] for op in SUPPORTED_OPERATIONS[self.resource_type])))

    def row(self) -> tuple[str, str, str, str, str, str, str]:
        """The binding in words, Kafka's names: type, pattern, name, principal, host, operation, permission."""
        return (RESOURCE_TYPE_NAMES[self.resource_type], PATTERN_TYPE_NAMES[self.pattern_type], self.resource_name,
                self.principal, self.host, OPERATION_NAMES[self.operation], PERMISSION_NAMES[self.permission])


@dataclass(frozen=True)
class AclBindingFilter:
    """A filter over ACLs (DescribeAcls, DeleteAcls): None is any name, principal or host; the ANY
    codes are any type, operation or permission; pattern ``MATCH`` with a name is every binding
    that applies to a resource of that name (see ``matches``)."""

    resource_type: int = RESOURCE_ANY
    resource_name: str | None = None
    pattern_type: int = PATTERN_ANY
    principal: str | None = None
    host: str | None = None
    operation: int = OP_ANY
    permission: int = PERMISSION_ANY

    def __post_init__(self) -> None:
        _code(self.resource_type, RESOURCE_TYPE_NAMES, "a resource type", concrete=False)
        _code(self.pattern_type, PATTERN_TYPE_NAMES, "a pattern type", concrete=False)
        _code(self.operation, OPERATION_NAMES, "an operation", concrete=False)
        _code(self.permission, PERMISSION_NAMES, "a permission", concrete=False)
        for value, what in ((self.resource_name, "a resource name"), (self.principal, "a principal"),
                            (self.host, "a host")):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{what} in a filter is a str or None, got {value!r}")

    def matches(self, binding: AclBinding) -> bool:
        """Whether ``binding`` passes the filter (Kafka's ResourcePatternFilter and
        AccessControlEntryFilter)."""
        if self.resource_type not in (RESOURCE_ANY, binding.resource_type):
            return False
        if self.pattern_type not in (PATTERN_ANY, PATTERN_MATCH, binding.pattern_type):
            return False
        if self.principal is not None and self.principal != binding.principal:
            return False
        if self.host is not None and self.host != binding.host:
            return False
        if self.operation not in (OP_ANY, binding.operation) or self.permission not in (PERMISSION_ANY,
                                                                                       binding.permission):
            return False
        name = self.resource_name
        if name is None:
            return True
        if self.pattern_type != PATTERN_MATCH:  # ANY, LITERAL, PREFIXED: that very name
            return name == binding.resource_name
        if binding.pattern_type == PATTERN_LITERAL:
            return binding.resource_name in (name, WILDCARD)
        return name.startswith(binding.resource_name)


MATCH_ALL = AclBindingFilter()


class _Index:
    """An immutable snapshot of the ACLs, arranged for ``authorize``: literal bindings by (type,
    name), prefixed ones by type then name with the lengths their names have, and a memo of answers
    that lives and dies with the snapshot."""

    __slots__ = ("literal", "prefixed", "prefix_lengths", "memo")

    def __init__(self, bindings: Iterable[AclBinding]) -> None:
        literal: dict[tuple[int, str], list[AclBinding]] = {}
        prefixed: dict[int, dict[str, list[AclBinding]]] = {}
        for binding in bindings:
            if binding.pattern_type == PATTERN_LITERAL:
                literal.setdefault((binding.resource_type, binding.resource_name), []).append(binding)
            else:
                prefixed.setdefault(binding.resource_type, {}).setdefault(binding.resource_name, []).append(binding)
        self.literal = {key: tuple(found) for key, found in literal.items()}
        self.prefixed = {kind: {name: tuple(found) for name, found in by_name.items()}
                         for kind, by_name in prefixed.items()}
        # Probing name[:n] for each length some prefix has costs a few dict lookups, not a scan.
        self.prefix_lengths = {kind: tuple(sorted({len(name) for name in by_name}))
                               for kind, by_name in prefixed.items()}
        self.memo: dict[tuple, bool] = {}

    def applying(self, resource_type: int, name: str) -> tuple[AclBinding, ...]:
        """Every binding (any principal) that applies to the resource ``resource_type``/``name``."""
        found = self.literal.get((resource_type, name), ()) + self.literal.get((resource_type, WILDCARD), ())
        by_name = self.prefixed.get(resource_type)
        if by_name:
            for length in self.prefix_lengths[resource_type]:
                if length > len(name):
                    break
                found += by_name.get(name[:length], ())
        return found


def _allowed_by(operation: int) -> frozenset[int]:
    """The operations whose ALLOW grants ``operation`` (ValueError for ANY or an unknown code)."""
    allowed_by = _ALLOWED_BY.get(operation)
    if allowed_by is None:
        raise ValueError(f"an operation to authorize is one of {sorted(_ALLOWED_BY)}, got {operation!r}")
    return allowed_by


def _applies_to(binding: AclBinding, principal: str, host: str) -> bool:
    return binding.principal in (principal, WILDCARD_PRINCIPAL) and binding.host in (host, WILDCARD)


class Authorizer:
    """Kafka's authorizer over an ``AclStore`` (see the module docstring). ``super_users`` are
    principals (``User:admin``) allowed everything; ``allow_everyone_if_no_acl_found`` is the answer
    for a resource that no ACL applies to (Kafka's ``allow.everyone.if.no.acl.found``)."""

    def __init__(self, acl_store, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False) -> None:
        self._store = acl_store
        self.super_users = frozenset(check_principal(user) for user in super_users)
        self.allow_everyone_if_no_acl_found = bool(allow_everyone_if_no_acl_found)
        self._lock = threading.Lock()  # writers only: readers use the snapshot in self._index
        self._index = _Index(acl_store.bindings())

    # --- the hot path ----------------------------------------------------------------------------

    def authorize(self, principal: str, host: str, operation: int, resource_type: int, name: str) -> bool:
        """Whether ``principal`` connected from ``host`` may do ``operation`` on the resource
        ``resource_type``/``name``. Lock-free; answers are remembered until the ACLs change."""
        if principal in self.super_users:
            return True
        index = self._index  # one snapshot for the whole decision
        key = (principal, host, operation, resource_type, name)
        answer = index.memo.get(key)
        if answer is None:
            answer = self._decide(index, principal, host, operation, resource_type, name)
            memo = index.memo
            if len(memo) >= MEMO_LIMIT:  # many distinct callers: bound the memory, not the speed
                memo.clear()
            memo[key] = answer
        return answer

    def _decide(self, index: _Index, principal: str, host: str, operation: int, resource_type: int,
                name: str) -> bool:
        allowed_by = _allowed_by(operation)
        acls = index.applying(resource_type, name)
        if not acls:
            return self.allow_everyone_if_no_acl_found
        allowed = False
        for binding in acls:
            if not _applies_to(binding, principal, host):
                continue
            if binding.permission == PERMISSION_DENY:
                if binding.operation == operation or binding.operation == OP_ALL:
                    return False  # deny beats allow, whatever comes later
            elif binding.operation in allowed_by:
                allowed = True
        return allowed

    def authorize_any(self, principal: str, host: str, operation: int, resource_type: int) -> bool:
        """Whether ``principal`` from ``host`` may do ``operation`` on at least one resource of
        ``resource_type`` (Kafka's authorizeByResourceType: "an idempotent producer needs
        IdempotentWrite on the cluster or Write on some topic"). An allowed literal name that no
        deny covers, or an allowed prefix that no denied prefix of it covers, is such a resource;
        with ``allow_everyone_if_no_acl_found``, so is any name no ACL applies to, which exists
        unless a literal ``*`` binding of the type does."""
        if principal in self.super_users:
            return True
        index = self._index
        key = (principal, host, operation, resource_type)  # 4 items: never one of authorize's keys
        answer = index.memo.get(key)
        if answer is None:
            answer = self._decide_any(index, principal, host, operation, resource_type)
            index.memo[key] = answer  # bounded by authorize's clearing: these are few
        return answer

    def _decide_any(self, index: _Index, principal: str, host: str, operation: int, resource_type: int) -> bool:
        allowed_by = _allowed_by(operation)
        deny_literal, deny_prefixed, allow_literal, allow_prefixed = set(), set(), set(), set()
        candidates = [binding for found in index.literal.values() for binding in found
                      if binding.resource_type == resource_type]
        candidates += [binding for found in index.prefixed.get(resource_type, {}).values() for binding in found]
        for binding in candidates:
            if not _applies_to(binding, principal, host):
                continue
            literal = binding.pattern_type == PATTERN_LITERAL
            if binding.permission == PERMISSION_DENY:
                if binding.operation in (operation, OP_ALL):
                    if literal and binding.resource_name == WILDCARD:
                        return False  # every resource of the type is denied
                    (deny_literal if literal else deny_prefixed).add(binding.resource_name)
            elif binding.operation in allowed_by:
                (allow_literal if literal else allow_prefixed).add(binding.resource_name)
        if WILDCARD in allow_literal:
            return True  # denies name finitely many names and prefixes: some other name is allowed

        def prefix_denied(name: str) -> bool:
            return any(name[:length] in deny_prefixed for length in range(1, len(name) + 1))

        if any(name not in deny_literal and not prefix_denied(name) for name in allow_literal):
            return True
        if any(not prefix_denied(name) for name in allow_prefixed):
            return True
        return self.allow_everyone_if_no_acl_found and (resource_type, WILDCARD) not in index.literal

    def authorized_operations(self, principal: str, host: str, resource_type: int, name: str) -> set[int]:
        """The operations of the resource's type that ``principal`` from ``host`` may do on it (for
        Metadata's and DescribeGroups' authorized-operations bit fields)."""
        _code(resource_type, RESOURCE_TYPE_NAMES, "a resource type", concrete=True)
        return {op for op in SUPPORTED_OPERATIONS[resource_type]
                if self.authorize(principal, host, op, resource_type, name)}

    # --- changes (CreateAcls, DeleteAcls, logstore acls) and DescribeAcls --------------------------

    def create(self, bindings: Iterable[AclBinding]) -> list[Exception | None]:
        """Add ``bindings`` (one durable write), one result per binding: None, or the exception that
        kept it out (the store's write failed: nothing was added). Existing ones are no-ops."""
        bindings = list(bindings)
        for binding in bindings:
            if not isinstance(binding, AclBinding):
                raise TypeError(f"create takes AclBinding values, got {binding!r}")
        with self._lock:
            try:
                self._store.add(bindings)
            except Exception as exc:  # the write failed: every creation failed with it (Kafka's answer)
                return [exc for _ in bindings]
            self._index = _Index(self._store.bindings())
        return [None for _ in bindings]

    def delete(self, filters: Iterable[AclBindingFilter]) -> list[list[AclBinding]]:
        """Remove every binding that one of ``filters`` matches (one durable write); for each filter
        the bindings it matched, sorted. A failed write raises and removes nothing."""
        filters = list(filters)
        for found in filters:
            if not isinstance(found, AclBindingFilter):
                raise TypeError(f"delete takes AclBindingFilter values, got {found!r}")
        with self._lock:
            before = sorted(self._store.bindings())
            self._store.remove(filters)
            self._index = _Index(self._store.bindings())
        return [[binding for binding in before if found.matches(binding)] for found in filters]

    def describe(self, binding_filter: AclBindingFilter = MATCH_ALL) -> list[AclBinding]:
        """The bindings ``binding_filter`` matches, sorted."""
        with self._lock:
            bindings = self._store.bindings()
        return sorted(binding for binding in bindings if binding_filter.matches(binding))


# --- what logstore acls options mean ------------------------------------------------------------


def parse_name(kind: dict[str, int], value: str, what: str) -> int:
    """The code of ``value`` in ``kind`` (one of the name tables), case-insensitive; ValueError
    naming the value and the choices otherwise (``parse_name(OPERATIONS, "read", "operation")``)."""
    for name, code in kind.items():
        if name.lower() == str(value).lower():
            return code
    raise ValueError(f"unknown {what} {value!r}: one of {', '.join(kind)}")


_PRODUCER = {RESOURCE_TOPIC: (OP_WRITE, OP_DESCRIBE, OP_CREATE), RESOURCE_TRANSACTIONAL_ID: (OP_WRITE, OP_DESCRIBE)}
_CONSUMER = {RESOURCE_TOPIC: (OP_READ, OP_DESCRIBE), RESOURCE_GROUP: (OP_READ,)}


def _resource_operations(topics, groups, cluster, transactional_ids, operations, producer, consumer, idempotent,
                         pattern_type, for_filter: bool) -> list[tuple[int, str | None, int, int]]:
    """``(resource type, name, pattern type, operation)`` for the options, in their order."""
    resources = ([(RESOURCE_TOPIC, name) for name in topics] + [(RESOURCE_GROUP, name) for name in groups]
                 + ([(RESOURCE_CLUSTER, CLUSTER_NAME)] if cluster else [])
                 + [(RESOURCE_TRANSACTIONAL_ID, name) for name in transactional_ids])
    codes = [parse_name(OPERATIONS, name, "operation") for name in operations]
    if idempotent and not producer:
        raise ValueError("idempotent only goes with producer")
    if producer or consumer:
        if codes:
            raise ValueError("give operations or producer/consumer, not both")
        if not topics:
            raise ValueError("producer and consumer ACLs need a topic")
        if consumer and not groups:
            raise ValueError("consumer ACLs need a group")
        if cluster and not idempotent:
            raise ValueError("the cluster resource goes with producer only as idempotent")
        if groups and not consumer:
            raise ValueError("groups go with consumer ACLs")
        if transactional_ids and not producer:
            raise ValueError("transactional ids go with producer ACLs")
        wanted: dict[int, list[int]] = {}
        for table in ([_PRODUCER] if producer else []) + ([_CONSUMER] if consumer else []):
            for kind, ops in table.items():
                known = wanted.setdefault(kind, [])
                known += [op for op in ops if op not in known]
        found = [(kind, name, pattern_type, op) for kind, name in resources
                 if kind != RESOURCE_CLUSTER for op in wanted.get(kind, ())]
        if idempotent:
            found.append((RESOURCE_CLUSTER, CLUSTER_NAME, PATTERN_LITERAL, OP_IDEMPOTENT_WRITE))
        return found
    if not resources:
        if not for_filter:
            raise ValueError("no resource: give a topic, a group, the cluster or a transactional id")
        resources = [(RESOURCE_ANY, None)]
    if not codes:
        if not for_filter:
            raise ValueError("no operation: give one, or producer/consumer")
        codes = [OP_ANY]
    # The cluster is one literal resource, whatever pattern the other resources were given.
    return [(kind, name, PATTERN_LITERAL if kind == RESOURCE_CLUSTER and not for_filter else pattern_type, op)
            for kind, name in resources for op in codes]


def _entries(allow_principals, deny_principals, allow_hosts, deny_hosts, default_host):
    entries = []
    for principals, hosts, permission in ((allow_principals, allow_hosts, PERMISSION_ALLOW),
                                          (deny_principals, deny_hosts, PERMISSION_DENY)):
        if principals or hosts:
            entries += [(principal, host, permission)
                        for principal in principals or [None] for host in hosts or [default_host]]
    return entries


def bindings_for(*, allow_principals: Iterable[str] = (), deny_principals: Iterable[str] = (),
                 allow_hosts: Iterable[str] = (), deny_hosts: Iterable[str] = (), operations: Iterable[str] = (),
                 topics: Iterable[str] = (), groups: Iterable[str] = (), cluster: bool = False,
                 transactional_ids: Iterable[str] = (), pattern_type: int = PATTERN_LITERAL, producer: bool = False,
                 consumer: bool = False, idempotent: bool = False) -> list[AclBinding]:
    """The bindings ``logstore acls add`` means: every operation (Kafka's names, any case) on every
    resource for every principal and host (hosts default to ``*``), without repeats. ``producer``:
    Write, Describe, Create on the topics (Write, Describe on the transactional ids), with
    ``idempotent`` IdempotentWrite on the cluster; ``consumer``: Read, Describe on the topics,
    Read on the groups. ValueError naming what is wrong or missing."""
    allow_principals, deny_principals = list(allow_principals), list(deny_principals)
    if not allow_principals and not deny_principals:
        raise ValueError("no principal to allow or deny")
    for principal in allow_principals + deny_principals:
        check_principal(principal)
    entries = _entries(allow_principals, deny_principals, list(allow_hosts), list(deny_hosts), WILDCARD)
    found = {}
    for kind, name, pattern, op in _resource_operations(
            list(topics), list(groups), cluster, list(transactional_ids), list(operations), producer, consumer,
            idempotent, pattern_type, for_filter=False):
        for principal, host, permission in entries:
            found.setdefault(AclBinding(kind, name, pattern, principal, host, op, permission))
    return list(found)


def filters_for(*, allow_principals: Iterable[str] = (), deny_principals: Iterable[str] = (),
                principals: Iterable[str] = (), allow_hosts: Iterable[str] = (), deny_hosts: Iterable[str] = (),
                operations: Iterable[str] = (), topics: Iterable[str] = (), groups: Iterable[str] = (),
                cluster: bool = False, transactional_ids: Iterable[str] = (), pattern_type: int = PATTERN_ANY,
                producer: bool = False, consumer: bool = False, idempotent: bool = False) -> list[AclBindingFilter]:
    """The filters ``logstore acls remove|list`` mean: like ``bindings_for``, with whatever is not
    given matching anything (``principals``: those principals with either permission)."""
    for principal in [*allow_principals, *deny_principals, *principals]:
        check_principal(principal)
    for host in [*allow_hosts, *deny_hosts]:
        check_host(host)
    entries = _entries(list(allow_principals), list(deny_principals), list(allow_hosts), list(deny_hosts), None)
    entries += [(principal, None, PERMISSION_ANY) for principal in principals]
    found = {}
    for kind, name, pattern, op in _resource_operations(
            list(topics), list(groups), cluster, list(transactional_ids), list(operations), producer, consumer,
            idempotent, pattern_type, for_filter=True):
        for principal, host, permission in entries or [(None, None, PERMISSION_ANY)]:
            found.setdefault(AclBindingFilter(kind, name, pattern, principal, host, op, permission))
    return list(found)
