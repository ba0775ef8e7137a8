"""``TransactionManager`` (``logstore.client.transactions``) against a scripted coordinator, on a
manual clock: CONCURRENT_TRANSACTIONS and a coordinator that moves are retried (the coordinator
found again), up to ``max.block.ms``; PRODUCER_FENCED from a coordinator is fatal for good; an
abortable refusal allows only an abort, which ends with a new epoch asked for with the producer id
and epoch held (KIP-360); EndTxn is skipped for a transaction that added nothing; AddPartitionsToTxn
goes at most at v3 (v4+ is the brokers' shape)."""

from __future__ import annotations

import pytest

from logstore.clock import ManualClock
from logstore.client.errors import (AbortableTransactionError, FatalTransactionError, ProducerFencedError,
                                    RequestTimedOutError, TransactionStateError)
from logstore.client.consumer import GroupMetadata
from logstore.client.transactions import State, TransactionManager

NONE, NOT_COORDINATOR, CONCURRENT, FENCED, UNKNOWN_PRODUCER_ID, INVALID_TXN_STATE = 0, 16, 51, 90, 59, 48


class FakeCoordinators:
    """A NetworkClient as the manager uses it: FindCoordinator answers from ``coordinators`` (a list:
    the next answer each time), every other request from ``script`` (api -> list of bodies)."""

    def __init__(self, script: dict[str, list[dict]], coordinators: list[tuple[str, int]] | None = None) -> None:
        self.script = script
        self.coordinators = coordinators or [("broker-1", 9092)]
        self.sent: list[tuple[str, tuple[str, int], int, dict]] = []
        self.found: list[dict] = []
        self._address = None

    def request_any(self, api: str, body: dict) -> dict:
        assert api == "FindCoordinator"
        self.found.append(body)
        host, port = self.coordinators.pop(0) if len(self.coordinators) > 1 else self.coordinators[0]
        return {"coordinators": [{"key": body["key"], "node_id": 1, "host": host, "port": port, "error_code": 0}]}

    def connection_to(self, host: str, port: int) -> FakeCoordinators:
        self._address = (host, port)
        return self

    def version_of(self, api: str) -> int:
        return 5 if api == "AddPartitionsToTxn" else 4

    def request(self, api: str, body: dict, version: int | None = None) -> dict:
        self.sent.append((api, self._address, version, body))
        return self.script[api].pop(0)


def _init(code: int = NONE, pid: int = 7, epoch: int = 0) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "producer_id": pid, "producer_epoch": epoch}


def _added(code: int) -> dict:
    return {"results_by_topic_v3_and_below": [{"name": "t", "results_by_partition": [
        {"partition_index": 0, "partition_error_code": code}]}]}


def _manager(script, coordinators=None, max_block_ms=10_000):
    network = FakeCoordinators(script, coordinators)
    clock = ManualClock()
    manager = TransactionManager(network, "tx", 60_000, retry_backoff_ms=100, max_block_ms=max_block_ms, clock=clock)
    identities = []
    return manager, network, clock, identities, lambda pid, epoch: identities.append((pid, epoch))


def test_concurrent_transactions_and_a_moved_coordinator_are_retried_and_end_calls_go_where_it_moved():
    manager, network, clock, identities, identity = _manager(
        {"InitProducerId": [_init(CONCURRENT), _init(NOT_COORDINATOR), _init(pid=7, epoch=3)],
         "AddPartitionsToTxn": [_added(CONCURRENT), _added(NONE)], "EndTxn": [{"error_code": NONE}]},
        coordinators=[("old", 1), ("new", 2)])
    manager.init(identity)
    assert identities == [(7, 3)] and manager.state is State.READY
    assert [address for _, address, _, _ in network.sent] == [("old", 1), ("old", 1), ("new", 2)]
    assert [body["key_type"] for body in network.found] == [1, 1] and network.found[0]["key"] == "tx"
    assert clock.monotonic_ms() - ManualClock().monotonic_ms() == 20 + 100  # 20 ms after CONCURRENT_TRANSACTIONS
    manager.begin()
    manager.add_partition("t", 0)
    manager.add_partition("t", 0)  # added already: no second request
    adds = [(version, body) for api, _, version, body in network.sent if api == "AddPartitionsToTxn"]
    assert len(adds) == 2 and all(version == 3 for version, _ in adds)
    assert adds[0][1]["v3_and_below_producer_epoch"] == 3
    manager.begin_commit()
    manager.end(True, identity)
    assert manager.state is State.READY and network.sent[-1][3]["committed"] is True


def test_no_answer_within_max_block_ms_raises_and_the_call_can_be_made_again():
    manager, network, clock, identities, identity = _manager(
        {"InitProducerId": [_init(CONCURRENT)] * 30 + [_init(pid=1, epoch=0)]}, max_block_ms=500)
    with pytest.raises(RequestTimedOutError, match="CONCURRENT_TRANSACTIONS"):
        manager.init(identity)
    manager._max_block_ms = 60_000
    manager.init(identity)
    assert identities == [(1, 0)]


def test_producer_fenced_from_a_coordinator_is_fatal_for_good():
    manager, network, clock, identities, identity = _manager(
        {"InitProducerId": [_init()], "AddPartitionsToTxn": [_added(FENCED)]})
    manager.init(identity)
    manager.begin()
    with pytest.raises(ProducerFencedError, match="PRODUCER_FENCED"):
        manager.add_partition("t", 0)
    for call in (manager.begin, manager.begin_abort, manager.check_send):
        with pytest.raises(FatalTransactionError):
            call()


def test_an_abortable_error_allows_only_an_abort_which_ends_with_a_new_epoch():
    manager, network, clock, identities, identity = _manager(
        {"InitProducerId": [_init(pid=7, epoch=0), _init(pid=7, epoch=1)],
         "AddPartitionsToTxn": [_added(NONE)], "EndTxn": [{"error_code": NONE}]})
    manager.init(identity)
    manager.begin()
    manager.add_partition("t", 0)
    manager.batch_failed(AbortableTransactionError("refused", UNKNOWN_PRODUCER_ID, "UNKNOWN_PRODUCER_ID"))
    assert manager.state is State.ABORTABLE_ERROR
    with pytest.raises(AbortableTransactionError, match="refused"):
        manager.begin_commit()
    with pytest.raises(AbortableTransactionError):
        manager.check_send()
    manager.begin_abort()
    manager.end(False, identity)
    bump = network.sent[-1]
    assert bump[0] == "InitProducerId" and (bump[3]["producer_id"], bump[3]["producer_epoch"]) == (7, 0)
    assert identities == [(7, 0), (7, 1)] and manager.state is State.READY and manager.error is None
    assert [api for api, *_ in network.sent].count("EndTxn") == 1


def test_a_transaction_that_added_nothing_ends_without_end_txn_and_calls_out_of_order_are_refused():
    manager, network, clock, identities, identity = _manager({"InitProducerId": [_init()]})
    with pytest.raises(TransactionStateError, match="uninitialized"):
        manager.begin()
    manager.init(identity)
    manager.begin()
    with pytest.raises(TransactionStateError, match="in a transaction"):
        manager.begin()
    manager.begin_commit()
    manager.end(True, identity)
    assert [api for api, *_ in network.sent] == ["InitProducerId"] and manager.state is State.READY


def test_offsets_go_to_the_groups_coordinator_with_the_members_generation():
    manager, network, clock, identities, identity = _manager(
        {"InitProducerId": [_init()], "AddOffsetsToTxn": [{"error_code": NONE}],
         "TxnOffsetCommit": [{"topics": [{"name": "in", "partitions": [{"partition_index": 0, "error_code": 22}]}]}]},
        coordinators=[("txn", 1), ("group", 2)])
    manager.init(identity)
    manager.begin()
    with pytest.raises(AbortableTransactionError, match="ILLEGAL_GENERATION"):
        manager.send_offsets({("in", 0): (5, "")}, GroupMetadata("readers", 4, "member-1", None))
    commit = network.sent[-1]
    assert commit[1] == ("group", 2) and network.found[-1] == {"key": "readers", "key_type": 0,
                                                                "coordinator_keys": ["readers"]}
    assert (commit[3]["generation_id"], commit[3]["member_id"]) == (4, "member-1")
    assert commit[3]["topics"] == [{"name": "in", "partitions": [{"partition_index": 0, "committed_offset": 5,
                                                                  "committed_leader_epoch": -1,
                                                                  "committed_metadata": ""}]}]
    assert manager.state is State.ABORTABLE_ERROR
