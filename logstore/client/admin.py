"""Administration of a Kafka-compatible broker: its topics (``BrokerAdmin``) and its consumer groups
(``BrokerGroupAdmin``), for the command line's ``--bootstrap-server`` and for ``mirror``.

What it owns:
- topics: list, partition counts, create (with config overrides), delete, describe one or every
  topic (the effective config, the overrides, and per partition its leader and log start and end
  offsets), alter
  (IncrementalAlterConfigs), grow (CreatePartitions), through the broker's admin APIs (Metadata,
  CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs, IncrementalAlterConfigs, ListOffsets);
- groups: ``BrokerGroupAdmin`` is ``logstore.group.admin.GroupAdmin`` with its primitives answered by
  the broker (ListGroups from every broker, DescribeGroups, OffsetFetch and OffsetCommit with
  generation -1 at the group's coordinator, DeleteGroups, LeaveGroup; the coordinator's requests
  ride a restart or a move of the coordinator: ``GroupMember.call``), so ``list``, ``describe``,
  the reset plans and ``start_positions`` compute the same results, with the same rules (a group
  with members is refused), as against a store.

Errors: a broker's error code raises ``BrokerResponseError`` naming the topic or group and Kafka's
error; an unreachable broker ``NetworkError``.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from ..errors import UnknownTopicOrPartitionError
from ..group import errors as group_errors
from ..group.admin import GroupAdmin
from ..group.consumer import GroupRequestError
from ..group.results import GroupOverview, GroupSummary, MemberSummary
from ..server.protocol import errors as kafka_errors
from ..tools.topics import listed_topics, partition_description, topic_description
from .cluster import BootstrapServers, NetworkClient
from .errors import BrokerResponseError, NetworkError
from .fetcher import EARLIEST, high_watermarks, list_offsets
from .group_member import GroupMember
from .security import ClientSecurity

TOPIC_RESOURCE = 2
DYNAMIC_TOPIC_CONFIG = 1  # DescribeConfigs' source of a topic's own override
_SET, _DELETE = 0, 1


def _check(what: str, code: int, message: str | None = None) -> None:
    if code:
        name = kafka_errors.NAMES.get(code) or group_errors.name_of(code)
        raise BrokerResponseError(f"{what}: {name}{': ' + message if message else ''}", code, name)


class BrokerAdmin:
    """The topics of the cluster at ``bootstrap_servers``; use it as a context manager."""

    def __init__(self, bootstrap_servers: BootstrapServers, *, client_id: str = "logstore-admin",
                 request_timeout_ms: int = 30_000, security: ClientSecurity | None = None) -> None:
        self.network = NetworkClient(bootstrap_servers, client_id=client_id, request_timeout_ms=request_timeout_ms,
                                     security=security)
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms

    def close(self) -> None:
        self.network.close()

    def __enter__(self) -> BrokerAdmin:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _controller_request(self, api: str, body: dict[str, Any]) -> dict[str, Any]:
        metadata = self.network.metadata
        if metadata.controller_id in metadata.brokers:
            try:
                return self.network.connection(metadata.controller_id).request(api, body)
            except NetworkError:
                pass  # the controller moved or is down: any broker forwards or answers NOT_CONTROLLER
        return self.network.request_any(api, body)

    # --- topics ----------------------------------------------------------------------------------

    def topics(self) -> list[str]:
        """Every topic's name, sorted (internal ones such as ``__consumer_offsets`` included)."""
        return sorted(self.network.refresh_metadata(None).leaders)

    def partitions(self, topic: str) -> int:
        """The partition count of ``topic``; ``UnknownTopicOrPartitionError`` when there is none."""
        metadata = self.network.refresh_metadata([topic])
        count = metadata.partitions(topic)
        if count is None:
            code = metadata.topic_errors.get(topic)
            raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist on the broker "
                                               f"({'' if code is None else kafka_errors.NAMES.get(code, '')})")
        return count

    def create_topic(self, name: str, partitions: int = 1, config: Mapping[str, str] | None = None) -> None:
        """Create topic ``name`` with ``partitions`` and the config overrides ``config``."""
        self.network.refresh_metadata([])
        body = self._controller_request("CreateTopics", {
            "topics": [{"name": name, "num_partitions": partitions, "replication_factor": -1, "assignments": [],
                        "configs": [{"name": key, "value": str(value)} for key, value in (config or {}).items()]}],
            "timeout_ms": self.request_timeout_ms, "validate_only": False})
        for result in body["topics"]:
            _check(f"creating topic {name!r}", result["error_code"], result.get("error_message"))

    def delete_topic(self, name: str) -> None:
        """Delete topic ``name`` and its records."""
        self.network.refresh_metadata([])
        body = self._controller_request("DeleteTopics", {"topic_names": [name], "timeout_ms": self.request_timeout_ms})
        for result in body["responses"]:
            _check(f"deleting topic {name!r}", result["error_code"], result.get("error_message"))

    def create_partitions(self, name: str, total_count: int, *, validate_only: bool = False) -> None:
        """Grow topic ``name`` to ``total_count`` partitions (CreatePartitions; the broker places the
        new ones). ``BrokerResponseError`` INVALID_PARTITIONS when that is no increase."""
        if not isinstance(total_count, int) or isinstance(total_count, bool):
            raise TypeError(f"total_count must be an int, got {total_count!r}")
        self.network.refresh_metadata([])
        body = self._controller_request("CreatePartitions", {
            "topics": [{"name": name, "count": total_count, "assignments": None}],
            "timeout_ms": self.request_timeout_ms, "validate_only": validate_only})
        for result in body["results"]:
            _check(f"adding partitions to topic {name!r}", result["error_code"], result.get("error_message"))

    def topic_configs(self, name: str) -> tuple[dict[str, str | None], dict[str, str | None]]:
        """``(effective config, overrides)`` of topic ``name``, as DescribeConfigs gives them."""
        return self._topics_configs([name])[name]

    def _topics_configs(self, names: Sequence[str]) -> dict[str, tuple[dict[str, str | None], dict[str, str | None]]]:
        """``topic_configs`` of each of ``names``, in one DescribeConfigs."""
        body = self.network.request_any("DescribeConfigs", {
            "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": name, "configuration_keys": None}
                          for name in names],
            "include_synonyms": False})
        found = {}
        for result in body["results"]:
            name = result["resource_name"]
            _check(f"describing the configs of topic {name!r}", result["error_code"], result.get("error_message"))
            found[name] = ({entry["name"]: entry["value"] for entry in result["configs"]},
                           {entry["name"]: entry["value"] for entry in result["configs"]
                            if entry.get("config_source") == DYNAMIC_TOPIC_CONFIG})
        missing = [name for name in names if name not in found]
        if missing:
            raise NetworkError(f"DescribeConfigs answered nothing for topic {missing[0]!r}")
        return found

    def alter_topic_config(self, name: str, changes: Mapping[str, str | None]) -> None:
        """Set (a value) or remove (None) config overrides of topic ``name``."""
        body = self.network.request_any("IncrementalAlterConfigs", {
            "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": name, "configs": [
                {"name": key, "config_operation": _DELETE if value is None else _SET,
                 "value": None if value is None else str(value)} for key, value in changes.items()]}],
            "validate_only": False})
        for result in body["responses"]:
            _check(f"altering the configs of topic {name!r}", result["error_code"], result.get("error_message"))

    def log_offsets(self, topic: str, partitions: Sequence[int]) -> dict[int, tuple[int, int]]:
        """``{partition: (log start offset, log end offset)}``."""
        self.partitions(topic)  # an unknown topic fails here, naming it
        starts = {tp: offset for tp, (offset, _) in
                  list_offsets(self.network, {(topic, p): EARLIEST for p in partitions}).items()}
        ends = high_watermarks(self.network, list(starts), starts)
        return {p: (starts[(topic, p)], ends[(topic, p)]) for p in partitions}

    def offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        """The first offset of ``topic``/``partition`` whose timestamp is at or after ``timestamp_ms``."""
        offset, _ = list_offsets(self.network, {(topic, partition): timestamp_ms})[(topic, partition)]
        return None if offset < 0 else offset

    def describe_topic(self, name: str) -> dict[str, Any]:
        """What ``logstore topics describe`` prints for a topic on a broker."""
        self.partitions(name)  # an unknown topic fails here, naming it
        return self._describe([name])[0]

    def describe_topics(self, exclude_internal: bool = False) -> list[dict[str, Any]]:
        """``describe_topic`` of every topic, by name (``kafka-topics --describe`` without a topic),
        leaving out internal ones when asked: one Metadata, the offsets of all partitions together,
        one DescribeConfigs."""
        metadata = self.network.refresh_metadata(None)
        names = listed_topics(metadata.leaders, exclude_internal)
        return self._describe(names) if names else []

    def _describe(self, names: Sequence[str]) -> list[dict[str, Any]]:
        """``describe_topic`` of each of ``names``, whose leaders the current metadata holds."""
        leaders = {name: self.network.metadata.leaders[name] for name in names}
        partitions = [(name, p) for name in names for p in sorted(leaders[name])]
        starts = {tp: offset for tp, (offset, _) in
                  list_offsets(self.network, {tp: EARLIEST for tp in partitions}).items()}
        ends = high_watermarks(self.network, partitions, starts)
        configs = self._topics_configs(names)
        return [topic_description(name, configs[name][0], configs[name][1], [
            partition_description(p, leader=None if leader is None or leader < 0 else leader,
                                  log_start_offset=starts[(name, p)], log_end_offset=ends[(name, p)])
            for p, leader in sorted(leaders[name].items())]) for name in names]


class BrokerGroupAdmin(GroupAdmin):
    """``GroupAdmin`` (list, describe, reset plans, commits, deletes) for the groups of a broker."""

    def __init__(self, admin: BrokerAdmin, *, owns_admin: bool = False) -> None:
        super().__init__(None)  # type: ignore[arg-type]  # no store: every primitive below asks the broker
        self.admin = admin
        self._owns_admin = owns_admin
        self._members: dict[str, GroupMember] = {}

    @classmethod
    def connect(cls, bootstrap_servers: BootstrapServers, **settings: Any) -> BrokerGroupAdmin:
        return cls(BrokerAdmin(bootstrap_servers, **settings), owns_admin=True)

    def close(self) -> None:
        for member in self._members.values():
            member.close()
        if self._owns_admin:
            self.admin.close()

    def _member(self, group_id: str) -> GroupMember:
        """A handle on ``group_id``'s coordinator (it never joins the group)."""
        member = self._members.get(group_id)
        if member is None:
            member = self._members[group_id] = GroupMember(
                self.admin.network, group_id, session_timeout_ms=10_000, rebalance_timeout_ms=0,
                heartbeat_interval_ms=3000, assignors=["range"], group_instance_id=None,
                client_id=self.admin.client_id, request_timeout_ms=self.admin.request_timeout_ms)
        return member

    # --- the primitives --------------------------------------------------------------------------

    def _summary(self, group_id: str, timeout_ms: int | None = None) -> GroupSummary:
        body = self._member(group_id).call("DescribeGroups", {"groups": [group_id],
                                                              "include_authorized_operations": False},
                                           error_code=lambda answer: answer["groups"][0]["error_code"],
                                           timeout_ms=timeout_ms)
        group = body["groups"][0]
        members = [MemberSummary(m["member_id"], m.get("group_instance_id"), m["client_id"], m["client_host"],
                                 m["member_metadata"], m["member_assignment"]) for m in group["members"]]
        return GroupSummary(group["error_code"], group["group_id"], group["group_state"], group["protocol_type"],
                            group["protocol_data"], -1, "", members)

    def _partition_count(self, topic: str) -> int:
        return self.admin.partitions(topic)

    def _log_offsets(self, topic: str, partition: int) -> tuple[int, int]:
        return self.admin.log_offsets(topic, [partition])[partition]

    def _offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        return self.admin.offset_for_timestamp(topic, partition, timestamp_ms)

    # --- what a coordinator of our own answered --------------------------------------------------

    def list_groups(self) -> list[GroupOverview]:
        """Every group of every broker, by group id."""
        network = self.admin.network
        network.refresh_metadata([])
        found: dict[str, GroupOverview] = {}
        for node_id in sorted(network.metadata.brokers):
            body = network.connection(node_id).request("ListGroups", {"states_filter": []})
            _check("listing the groups", body["error_code"])
            for group in body["groups"]:
                found[group["group_id"]] = GroupOverview(group["group_id"], group["protocol_type"],
                                                         group.get("group_state") or "")
        if any(not group.state for group in found.values()):  # ListGroups below v4 gives no state
            found = {group_id: GroupOverview(group_id, group.protocol_type, group.state or self._summary(group_id).state)
                     for group_id, group in found.items()}
        return [found[group_id] for group_id in sorted(found)]

    def committed_entries(self, group_id: str, partitions: Iterable[tuple[str, int]] | None = None, *,
                          require_stable: bool = False) -> dict[tuple[str, int], tuple[int, str | None]]:
        # Partitions named when known: Tansu answers an OffsetFetch for all partitions (null topics)
        # without its topics array. Not known: all of them asked for, then, when that answer does
        # not parse, every partition of every topic named.
        member = self._member(group_id)
        if partitions is None:
            try:
                entries = member.committed_entries(None, timeout_ms=0)  # one try: an answer that does not parse
            except NetworkError:
                metadata = self.admin.network.refresh_metadata(None)
                entries = member.committed_entries([(topic, p) for topic, leaders in sorted(metadata.leaders.items())
                                                    for p in sorted(leaders)])
        else:
            entries = member.committed_entries(list(partitions), require_stable=require_stable)
        return {tp: entry for tp, entry in entries.items() if entry is not None}

    def commit(self, group_id: str, offsets: Mapping[tuple[str, int], int], *, doing: str | None = None,
               metadata: Mapping[tuple[str, int], str] | None = None, timeout_ms: int | None = None) -> None:
        """``GroupAdmin.commit``; with ``timeout_ms``, the coordinator is looked for (to check the
        group has no members, then to commit) for up to that long in all (0: one try each)."""
        if not offsets:
            return
        member = self._member(group_id)
        deadline_ms = None if timeout_ms is None else member.clock.monotonic_ms() + timeout_ms
        self.require_no_members(group_id, doing or "committing its offsets",
                                summary=self._summary(group_id, timeout_ms=timeout_ms))
        if deadline_ms is not None:
            timeout_ms = max(deadline_ms - member.clock.monotonic_ms(), 0)
        try:
            member.commit(offsets, metadata, timeout_ms=timeout_ms)
        except BrokerResponseError as exc:
            code = group_errors.NON_EMPTY_GROUP if exc.error_code == group_errors.UNKNOWN_MEMBER_ID else exc.error_code
            raise GroupRequestError(f"group {group_id!r} refused the commit: {exc}", code) from exc

    def delete_group(self, group_id: str) -> None:
        body = self._member(group_id).call("DeleteGroups", {"groups_names": [group_id]},
                                           error_code=lambda answer: answer["results"][0]["error_code"])
        code = body["results"][0]["error_code"]
        if code == group_errors.NON_EMPTY_GROUP:
            raise GroupRequestError(f"cannot delete group {group_id!r}: it has members (stop its consumers first)",
                                    code)
        if code == group_errors.GROUP_ID_NOT_FOUND:
            raise GroupRequestError(f"cannot delete group {group_id!r}: it does not exist", code)
        if code:
            raise GroupRequestError(f"deleting group {group_id!r}", code)

    def remove_members(self, group_id: str, member_ids: Sequence[str] = ()) -> list[str]:
        summary = self._summary(group_id)
        known = {member.member_id: member.group_instance_id for member in summary.members}
        chosen = list(member_ids) or list(known)
        unknown = [member_id for member_id in chosen if member_id not in known]
        if unknown:
            raise GroupRequestError(f"group {group_id!r} has no member {unknown[0]!r}", group_errors.UNKNOWN_MEMBER_ID)
        body = self._member(group_id).call("LeaveGroup", {"group_id": group_id, "member_id": "", "members": [
            {"member_id": "" if known[m] is not None else m, "group_instance_id": known[m]} for m in chosen]})
        codes = [body["error_code"], *(member["error_code"] for member in body.get("members", []))]
        if any(codes):
            raise GroupRequestError(f"removing members of group {group_id!r}", next(code for code in codes if code))
        return chosen
