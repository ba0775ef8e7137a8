"""The admin APIs: CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs,
IncrementalAlterConfigs and DeleteRecords, mapped onto the store's topic operations.

Topic configs already use Kafka's keys (``cleanup.policy``, ``retention.ms``, ...), so a request's
configs go to the store as they are and the store's own validation decides (an unknown key or a bad
value is INVALID_CONFIG with the store's message). One broker means a replication factor of 1 (or
-1, "the default"); anything else is INVALID_REPLICATION_FACTOR, as a one-broker Kafka answers.

CreatePartitions grows topics (``LogManager.create_partitions``): a count not above the topic's is
INVALID_PARTITIONS, a name given twice INVALID_REQUEST, an unknown topic UNKNOWN_TOPIC_OR_PARTITION, and
assignments, when given, must be one per new partition, each naming this broker alone
(INVALID_REPLICA_ASSIGNMENT otherwise), as a one-broker Kafka answers.

A topic's key placement (``logstore.key.placement``: ``murmur2``, Kafka's, or ``crc32`` for a topic
created before placements were recorded) is a config DescribeConfigs shows read-only. CreateTopics
takes it (``mirror`` copies a crc32 topic with its placement); IncrementalAlterConfigs refuses it: a
placement never changes, or keys would move between partitions.

Internal topics (``__consumer_offsets``, and ``__transaction_state``, reserved) hold the broker's own
state: DeleteTopics and DeleteRecords of one are answered INVALID_TOPIC_EXCEPTION whatever the ACLs
allow (Kafka's rule), and CreateTopics of a missing one too (its owner creates it), and so is
CreatePartitions of one (a group's offsets partition is its id's hash modulo the count: growing
``__consumer_offsets`` would orphan every group's offsets). Their configs
can be altered, as in Kafka (an operator tunes ``segment.bytes`` of ``__consumer_offsets``).
"""

from __future__ import annotations

import logging
import threading

from ...config import BROKER_SYNONYMS, MANAGER_KEYS, TOPIC_KEYS, LogConfig, config_string, parse_overrides
from ...errors import InvalidTopicError, LogStoreError, RequestError
from ...manager.log_manager import MAX_PARTITIONS
from ...manager.topics import MURMUR2, PLACEMENT_CONFIG, check_placement, is_internal_topic, validate_topic_name
from ..network.request_context import RequestContext
from ..protocol import errors
from ..server_config import SENSITIVE_KEYS
from .kafka_apis import Broker

logger = logging.getLogger(__name__)

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
CONFIG_SOURCE_DYNAMIC_TOPIC = 1
CONFIG_SOURCE_DYNAMIC_BROKER = 2
CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER = 3
CONFIG_SOURCE_STATIC_BROKER = 4
CONFIG_SOURCE_DEFAULT = 5
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_LIST_KEYS = {"cleanup.policy"}  # the topic keys whose values are lists (APPEND and SUBTRACT apply)


MAX_DYNAMIC_BROKER_CONFIGS = 1000
"""How many dynamic broker configs (per-broker and cluster default together) IncrementalAlterConfigs
may hold: a bound on what clients can make the broker keep."""


class AdminHandler:
    """CreateTopics 0-4, DeleteTopics 0-3, CreatePartitions 0-3, DescribeConfigs 0-2, IncrementalAlterConfigs 0-1, DeleteRecords 0-1.

    Dynamic broker configs (IncrementalAlterConfigs of a BROKER resource: ``""`` the cluster default,
    or this broker's id) are kept in memory, not persisted: they are reported by DescribeConfigs
    (source DYNAMIC_BROKER_CONFIG / DYNAMIC_DEFAULT_BROKER_CONFIG) and have no effect on this
    server, whose own settings (``SERVER_KEYS``, the store's) are read at start and refused here
    as Kafka refuses its non-dynamic ones ("Cannot update these configs dynamically")."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._dynamic: dict[str, dict[str, str]] = {"": {}, str(broker.node_id): {}}  # resource name -> configs
        self._dynamic_lock = threading.Lock()

    # --- CreateTopics ----------------------------------------------------------------------------

    def create_topics(self, context: RequestContext, request: dict) -> None:
        validate_only = bool(request.get("validate_only", False))
        topics = request.get("topics") or []
        names = [topic["name"] for topic in topics]
        results = []
        for topic in topics:
            name = topic["name"]
            if names.count(name) > 1:
                code, message = errors.INVALID_REQUEST, f"topic {name!r} appears more than once in the request"
            else:
                code, message = self._create_topic(topic, validate_only)
            results.append({"name": name, "error_code": code, "error_message": message})
        context.respond({"throttle_time_ms": 0, "topics": results})

    def _create_topic(self, topic: dict, validate_only: bool) -> tuple[int, str | None]:
        broker = self.broker
        store = broker.store
        name = topic["name"]
        partitions = topic.get("num_partitions", -1)
        replication_factor = topic.get("replication_factor", -1)
        assignments = topic.get("assignments") or []
        configs = {entry["name"]: entry["value"] for entry in topic.get("configs") or []}
        try:
            validate_topic_name(name)
        except InvalidTopicError as exc:
            return errors.INVALID_TOPIC_EXCEPTION, str(exc)
        if name in store.topics():
            return errors.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists."
        if is_internal_topic(name):
            return errors.INVALID_TOPIC_EXCEPTION, f"Topic '{name}' is internal: the broker creates it, clients cannot."
        if assignments:
            if partitions != -1 or replication_factor != -1:
                return errors.INVALID_REQUEST, "both assignments and num_partitions/replication_factor were given"
            for assignment in assignments:
                if list(assignment.get("broker_ids") or []) != [broker.node_id]:
                    return (errors.INVALID_REPLICA_ASSIGNMENT,
                            f"partition {assignment.get('partition_index')} is assigned to brokers "
                            f"{assignment.get('broker_ids')}; this cluster is broker {broker.node_id} alone")
            indexes = sorted(assignment["partition_index"] for assignment in assignments)
            if indexes != list(range(len(indexes))):
                return errors.INVALID_REPLICA_ASSIGNMENT, f"partition indexes {indexes} are not 0..{len(indexes) - 1}"
            partitions = len(indexes)
        if partitions == -1:
            partitions = broker.config.num_partitions
        if partitions < 1:
            return errors.INVALID_PARTITIONS, f"Number of partitions must be larger than 0, got {partitions}."
        if replication_factor == -1:
            replication_factor = broker.config.default_replication_factor
        if replication_factor != 1:
            return (errors.INVALID_REPLICATION_FACTOR,
                    f"Replication factor: {replication_factor} larger than available brokers: 1."
                    if replication_factor > 1 else f"Replication factor must be larger than 0, got {replication_factor}.")
        try:
            if any(value is None for value in configs.values()):
                raise RequestError("a config value is null")
            log_configs = dict(configs)
            check_placement(log_configs.pop(PLACEMENT_CONFIG, MURMUR2))
            LogConfig.from_properties(parse_overrides(log_configs), store.default_config)
        except (LogStoreError, ValueError, TypeError) as exc:
            return errors.INVALID_CONFIG, str(exc)
        if validate_only:
            return errors.NONE, None
        try:
            store.create_topic(name, partitions=partitions, config=configs)
        except LogStoreError as exc:
            return errors.error_code_for(exc), str(exc)
        except ValueError as exc:
            return errors.INVALID_PARTITIONS, str(exc)
        logger.info("created topic %r (%d partitions, config %s)", name, partitions, configs)
        return errors.NONE, None

    # --- DeleteTopics ----------------------------------------------------------------------------

    def delete_topics(self, context: RequestContext, request: dict) -> None:
        store = self.broker.store
        results = []
        for name in request.get("topic_names") or []:
            code = errors.NONE
            if is_internal_topic(name):
                logger.warning("refused to delete internal topic %r (asked by %s)", name, context.peer)
                results.append({"name": name, "error_code": errors.INVALID_TOPIC_EXCEPTION})
                continue
            try:
                store.delete_topic(name)
                self.broker.producers.forget_topic(name)
                logger.info("deleted topic %r", name)
            except LogStoreError as exc:
                code = errors.error_code_for(exc)
            results.append({"name": name, "error_code": code})
        context.respond({"throttle_time_ms": 0, "responses": results})

    # --- CreatePartitions ------------------------------------------------------------------------

    def create_partitions(self, context: RequestContext, request: dict) -> None:
        validate_only = bool(request.get("validate_only", False))
        topics = request.get("topics") or []
        names = [topic["name"] for topic in topics]
        results = []
        for name in dict.fromkeys(names):  # a name given twice is answered once, as Kafka does
            if names.count(name) > 1:
                code, message = errors.INVALID_REQUEST, "Duplicate topic in request."
            else:
                topic = next(topic for topic in topics if topic["name"] == name)
                code, message = self._create_partitions(topic, validate_only)
            results.append({"name": name, "error_code": code, "error_message": message})
        context.respond({"throttle_time_ms": 0, "results": results})

    def _create_partitions(self, topic: dict, validate_only: bool) -> tuple[int, str | None]:
        broker = self.broker
        store = broker.store
        name, count, assignments = topic["name"], topic["count"], topic.get("assignments")
        if is_internal_topic(name):  # whether or not its owner has made it yet
            return (errors.INVALID_TOPIC_EXCEPTION,
                    f"Topic '{name}' is internal: its partition count is fixed once the broker created it.")
        if name not in store.topics():
            return errors.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist."
        try:
            current = store.partitions(name)
        except LogStoreError as exc:  # deleted meanwhile
            return errors.error_code_for(exc), str(exc)
        if count == current:
            return errors.INVALID_PARTITIONS, f"Topic already has {current} partition(s)."
        if count < current:
            return (errors.INVALID_PARTITIONS,
                    f"The topic {name} currently has {current} partition(s); {count} would not be an increase.")
        if count > MAX_PARTITIONS:
            return errors.INVALID_PARTITIONS, f"{count} partitions is above this broker's limit of {MAX_PARTITIONS}."
        if assignments is not None:
            added = count - current
            if len(assignments) != added:
                return (errors.INVALID_REPLICA_ASSIGNMENT,
                        f"Attempted to add {added} additional partition(s), but only {len(assignments)} "
                        "assignment(s) were specified.")
            for index, assignment in enumerate(assignments):
                if list(assignment.get("broker_ids") or []) != [broker.node_id]:
                    return (errors.INVALID_REPLICA_ASSIGNMENT,
                            f"partition {current + index} is assigned to brokers {assignment.get('broker_ids')}; "
                            f"this cluster is broker {broker.node_id} alone")
        if validate_only:
            return errors.NONE, None
        try:
            store.create_partitions(name, count)
        except LogStoreError as exc:
            return errors.error_code_for(exc), str(exc)
        logger.info("topic %r grew from %d to %d partitions", name, current, count)
        return errors.NONE, None

    # --- DescribeConfigs -------------------------------------------------------------------------

    def describe_configs(self, context: RequestContext, request: dict) -> None:
        version = context.api_version
        synonyms_wanted = bool(request.get("include_synonyms", False))
        results = []
        for resource in request.get("resources") or []:
            kind, name = resource["resource_type"], resource["resource_name"]
            keys = resource.get("configuration_keys")
            result = {"error_code": errors.NONE, "error_message": None, "resource_type": kind,
                      "resource_name": name, "configs": []}
            try:
                entries = self._describe(kind, name)
            except _ResourceError as exc:
                result["error_code"], result["error_message"] = exc.code, str(exc)
                results.append(result)
                continue
            for key, value, source in entries:
                if keys is not None and key not in keys:
                    continue
                # a password (ours, or one a client set dynamically): never its value
                sensitive = kind == BROKER_RESOURCE and (key in SENSITIVE_KEYS or "password" in key
                                                         or key.endswith("sasl.jaas.config"))
                shown = None if sensitive else config_string(value)
                entry = {"name": key, "value": shown,
                         "read_only": (kind == BROKER_RESOURCE and source == CONFIG_SOURCE_STATIC_BROKER)
                         or key == PLACEMENT_CONFIG,
                         "is_default": source == CONFIG_SOURCE_DEFAULT, "config_source": source,
                         "is_sensitive": sensitive, "synonyms": []}
                if synonyms_wanted and version >= 1:
                    entry["synonyms"] = [{"name": key, "value": shown, "source": source}]
                result["configs"].append(entry)
            results.append(result)
        context.respond({"throttle_time_ms": 0, "results": results})

    def _describe(self, kind: int, name: str) -> list[tuple[str, object, int]]:
        store = self.broker.store
        if kind == TOPIC_RESOURCE:
            if name not in store.topics():
                raise _ResourceError(errors.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name!r} does not exist")
            overrides = store.topic_overrides(name)
            effective = store.topic_config(name).to_properties()
            placement = store.topic_placement(name)
            entries = [(key, value, CONFIG_SOURCE_DYNAMIC_TOPIC if key in overrides else CONFIG_SOURCE_DEFAULT)
                       for key, value in effective.items()]
            # The topic's own (an override) when it is not the default of new topics: mirror copies it.
            entries.append((PLACEMENT_CONFIG, placement,
                            CONFIG_SOURCE_DEFAULT if placement == MURMUR2 else CONFIG_SOURCE_DYNAMIC_TOPIC))
            return sorted(entries)
        if kind == BROKER_RESOURCE:
            if name not in ("", str(self.broker.node_id)):
                raise _ResourceError(errors.INVALID_REQUEST, f"this cluster has one broker, {self.broker.node_id}")
            entries = {key: (key, value, CONFIG_SOURCE_STATIC_BROKER)
                       for key, value in self.broker.config.to_properties().items() if value is not None}
            entries["node.id"] = ("node.id", self.broker.node_id, CONFIG_SOURCE_STATIC_BROKER)
            with self._dynamic_lock:
                for key, value in self._dynamic[""].items():
                    entries[key] = (key, value, CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER)
                if name:
                    for key, value in self._dynamic[name].items():
                        entries[key] = (key, value, CONFIG_SOURCE_DYNAMIC_BROKER)
            return sorted(entries.values(), key=lambda entry: entry[0])
        raise _ResourceError(errors.INVALID_REQUEST, f"resource type {kind} is not supported (topics: 2, broker: 4)")

    # --- IncrementalAlterConfigs -----------------------------------------------------------------

    def alter_configs(self, context: RequestContext, request: dict) -> None:
        """AlterConfigs 0-2 (KIP-133, the older, non-incremental form): each resource's given configs
        replace all of its dynamic ones, as in Kafka: a topic's overrides (or a broker's dynamic
        configs) not given are removed, a null value removes that one. Answered as the same SETs and
        DELETEs through IncrementalAlterConfigs, with its checks and errors."""
        store = self.broker.store
        resources = []
        for resource in request.get("resources") or []:
            kind, name = resource["resource_type"], resource["resource_name"]
            given = {entry["name"]: entry.get("value") for entry in resource.get("configs") or []}
            if kind == TOPIC_RESOURCE and name in store.topics():
                current = dict(store.topic_overrides(name))
            elif kind == BROKER_RESOURCE:
                with self._dynamic_lock:
                    current = dict(self._dynamic.get(name) or {})
            else:
                current = {}
            configs = [{"name": key, "config_operation": SET if value is not None else DELETE, "value": value}
                       for key, value in given.items()]
            configs += [{"name": key, "config_operation": DELETE, "value": None}
                        for key in current if key not in given and key != PLACEMENT_CONFIG]
            resources.append({**resource, "configs": configs})
        self.incremental_alter_configs(context, {**request, "resources": resources})

    def incremental_alter_configs(self, context: RequestContext, request: dict) -> None:
        store = self.broker.store
        validate_only = bool(request.get("validate_only", False))
        results = []
        for resource in request.get("resources") or []:
            kind, name = resource["resource_type"], resource["resource_name"]
            result = {"error_code": errors.NONE, "error_message": None, "resource_type": kind, "resource_name": name}
            try:
                if kind == BROKER_RESOURCE:
                    self._alter_broker(name, resource.get("configs") or [], validate_only)
                    results.append(result)
                    continue
                if kind != TOPIC_RESOURCE:
                    raise _ResourceError(errors.INVALID_REQUEST, f"Unknown resource type {kind}")
                if name not in store.topics():
                    raise _ResourceError(errors.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name!r} does not exist")
                changes = self._changes(name, resource.get("configs") or [])
                if validate_only:
                    overrides = dict(store.topic_overrides(name))
                    for key, value in changes.items():
                        if value is None:
                            overrides.pop(key, None)
                        else:
                            overrides[key] = value
                    LogConfig.from_properties(parse_overrides(overrides), store.default_config)
                else:
                    store.alter_topic_config(name, changes)
                    logger.info("altered topic %r: %s", name, changes)
            except _ResourceError as exc:
                result["error_code"], result["error_message"] = exc.code, str(exc)
            except LogStoreError as exc:
                result["error_code"], result["error_message"] = errors.error_code_for(exc), str(exc)
            except (ValueError, TypeError) as exc:
                result["error_code"], result["error_message"] = errors.INVALID_CONFIG, str(exc)
            results.append(result)
        context.respond({"throttle_time_ms": 0, "responses": results})

    def _alter_broker(self, name: str, configs: list[dict], validate_only: bool) -> None:
        """SET and DELETE of dynamic broker configs, Kafka's way: a setting this server reads at
        start (its own or the store's) cannot be changed dynamically (INVALID_REQUEST), a null SET
        value is INVALID_REQUEST, APPEND/SUBTRACT INVALID_CONFIG (the values are not known lists)."""
        if name not in self._dynamic:
            raise _ResourceError(errors.INVALID_REQUEST, f"this cluster has one broker, {self.broker.node_id}")
        static = set(self.broker.config.to_properties()) | {"node.id"} | set(BROKER_SYNONYMS) | set(MANAGER_KEYS)
        fixed = sorted({entry["name"] for entry in configs} & static)
        if fixed:
            raise _ResourceError(errors.INVALID_REQUEST,
                                 f"Cannot update these configs dynamically: Set({', '.join(fixed)})")
        changes: dict[str, str | None] = {}
        for entry in configs:
            key, operation, value = entry["name"], entry.get("config_operation", SET), entry.get("value")
            if key in changes:
                raise _ResourceError(errors.INVALID_REQUEST, "Error due to duplicate config keys")
            if operation == SET:
                if value is None:
                    raise _ResourceError(errors.INVALID_REQUEST, f"Null value not supported for : {key}")
                changes[key] = value
            elif operation == DELETE:
                changes[key] = None
            elif operation in (APPEND, SUBTRACT):
                raise _ResourceError(errors.INVALID_CONFIG, f"Config value append is not allowed for config key: {key}")
            else:
                raise _ResourceError(errors.INVALID_REQUEST, f"Unknown operations type {operation}")
        with self._dynamic_lock:
            updated = dict(self._dynamic[name])
            for key, value in changes.items():
                if value is None:
                    updated.pop(key, None)
                else:
                    updated[key] = value
            total = len(updated) + sum(len(held) for held_name, held in self._dynamic.items() if held_name != name)
            if total > MAX_DYNAMIC_BROKER_CONFIGS:
                raise _ResourceError(errors.INVALID_REQUEST,
                                     f"at most {MAX_DYNAMIC_BROKER_CONFIGS} dynamic broker configs are kept")
            if not validate_only:
                self._dynamic[name] = updated
        if not validate_only:
            logger.info("altered dynamic broker configs of %r (in memory, no effect here): %s", name or "<default>",
                        changes)

    def _changes(self, topic: str, configs: list[dict]) -> dict[str, str | None]:
        """The request's operations as a store override update (None removes an override)."""
        store = self.broker.store
        effective = store.topic_config(topic).to_properties()
        changes: dict[str, str | None] = {}
        for entry in configs:
            key, operation, value = entry["name"], entry.get("config_operation", SET), entry.get("value")
            if key == PLACEMENT_CONFIG:
                raise _ResourceError(errors.INVALID_CONFIG, f"{key} is read-only: a topic's key placement is set "
                                     "when it is created and never changes (its keys would move)")
            if key not in TOPIC_KEYS:
                raise _ResourceError(errors.INVALID_CONFIG, f"unknown topic config {key!r}")
            if operation == SET:
                if value is None:
                    raise _ResourceError(errors.INVALID_CONFIG, f"SET of {key!r} needs a value")
                changes[key] = value
            elif operation == DELETE:
                changes[key] = None
            elif operation in (APPEND, SUBTRACT):
                if key not in _LIST_KEYS:
                    raise _ResourceError(errors.INVALID_CONFIG, f"{key!r} is not a list: APPEND/SUBTRACT do not apply")
                current = [item for item in str(changes.get(key) or effective[key]).split(",") if item]
                items = [item.strip() for item in (value or "").split(",") if item.strip()]
                if operation == APPEND:
                    current += [item for item in items if item not in current]
                else:
                    current = [item for item in current if item not in items]
                changes[key] = ",".join(current)
            else:
                raise _ResourceError(errors.INVALID_REQUEST, f"unknown config operation {operation}")
        return changes

    # --- DeleteRecords ---------------------------------------------------------------------------

    def delete_records(self, context: RequestContext, request: dict) -> None:
        store = self.broker.store
        topics = []
        for topic in request.get("topics") or []:
            name = topic["name"]
            partitions = []
            for partition in topic.get("partitions") or []:
                index, offset = partition["partition_index"], partition["offset"]
                result = {"partition_index": index, "low_watermark": -1, "error_code": errors.NONE}
                if is_internal_topic(name):
                    result["error_code"] = errors.INVALID_TOPIC_EXCEPTION  # Kafka: records of internal topics stay
                    partitions.append(result)
                    continue
                try:
                    log = store.get_log(name, index)
                    end_offset = log.log_end_offset
                    if offset == -1:
                        offset = end_offset
                    if offset < 0 or offset > end_offset:
                        result["error_code"] = errors.OFFSET_OUT_OF_RANGE
                    else:
                        log.delete_records(offset)
                        result["low_watermark"] = log.log_start_offset
                except LogStoreError as exc:
                    result["error_code"] = errors.error_code_for(exc)
                partitions.append(result)
            topics.append({"name": name, "partitions": partitions})
        context.respond({"throttle_time_ms": 0, "topics": topics})


class _ResourceError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
