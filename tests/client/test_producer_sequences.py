"""``IdempotenceManager`` (``logstore.client.idempotence``), the rules that keep an idempotent
producer's partition exactly once and in order, on batches of a real ``RecordAccumulator`` (no
broker: the answers are played by hand): sequences given at the first send and kept by retries, the
first batch of an identity alone in flight, retries one at a time from the first batch of unknown
fate, a batch refused out of order behind an earlier one sent again behind it, and the reset of a
partition whose sequence is in doubt: only once nothing the broker may have stored is left, with
new sequences from 0 in the old order."""

from __future__ import annotations

import pytest

from logstore import Record
from logstore.client.accumulator import RecordAccumulator
from logstore.client.idempotence import IdempotenceManager

KEY = ("t", 0)


def _batches(count: int, records_each: int = 2) -> tuple[RecordAccumulator, list]:
    """``count`` queued batches of ``records_each`` records for partition t-0, in order."""
    accumulator = RecordAccumulator(batch_size=61 + 25 * records_each, linger_ms=0, max_in_flight=100)
    for i in range(count * records_each):
        accumulator.append(*KEY, Record(b"k", b"%03d" % i, (), 1))
    batches = []
    while True:  # take them all off, in order, without sending
        taken = accumulator.drain([KEY], 0)
        if not taken:
            return accumulator, batches
        batches.extend(taken)


def _manager(producer_id: int = 7) -> IdempotenceManager:
    manager = IdempotenceManager()
    manager.set_producer_id(producer_id, 0)
    return manager


def test_nothing_is_sent_before_the_producer_has_an_id():
    _, (batch,) = _batches(1)
    assert not IdempotenceManager().may_send(batch)
    with pytest.raises(ValueError, match="-1"):
        IdempotenceManager().set_producer_id(-1, 0)


def test_sequences_are_given_at_the_first_send_and_kept_by_retries():
    _, batches = _batches(3)
    manager = _manager()
    assert manager.may_send(batches[0])
    manager.sending(batches[0])
    assert (batches[0].producer_id, batches[0].producer_epoch, batches[0].base_sequence) == (7, 0, 0)
    # The first batch of an identity goes alone: the broker has no state yet and would take any sequence.
    assert not manager.may_send(batches[1])
    assert manager.acknowledged(batches[0]) == []
    for batch in batches[1:]:
        assert manager.may_send(batch)
        manager.sending(batch)
    assert [b.base_sequence for b in batches] == [0, 2, 4] and batches[2].last_sequence == 5
    manager.unanswered(batches[1])  # its request went unanswered: retried with the same sequence
    manager.sending(batches[1])
    assert batches[1].base_sequence == 2 and manager.sequences(*KEY).next_sequence == 6


def test_sequences_wrap_as_kafkas_do():
    _, batches = _batches(2)
    manager = _manager()
    manager.sending(batches[0])
    manager.acknowledged(batches[0])
    manager.sequences(*KEY).next_sequence = 2**31 - 1
    manager.sending(batches[1])
    assert (batches[1].base_sequence, batches[1].last_sequence, manager.sequences(*KEY).next_sequence) == (2**31 - 1, 0, 1)


def _five_in_flight():
    accumulator, batches = _batches(6)
    manager = _manager()
    manager.sending(batches[0])
    manager.acknowledged(batches[0])
    for batch in batches[1:]:
        manager.sending(batch)
    return manager, batches[1:]


def test_a_batch_refused_out_of_order_behind_an_earlier_retry_goes_again_behind_it():
    manager, batches = _five_in_flight()
    manager.unanswered(batches[0])  # NOT_LEADER for the first: its fate is unknown
    for batch in batches[1:]:
        assert manager.refused_out_of_order(batch)  # behind it: sent again, same sequence
        assert not batch.not_stored
    # Retries go one at a time, from the first batch of unknown fate
    assert [manager.may_send(batch) for batch in batches] == [True, False, False, False, False]
    manager.sending(batches[0])
    assert not manager.may_send(batches[1])  # not while the first is in a request again
    manager.acknowledged(batches[0])
    assert manager.may_send(batches[1]) and not manager.may_send(batches[2])
    assert [b.base_sequence for b in batches] == [2, 4, 6, 8, 10]
    assert manager.partitions_to_reset() == []


def test_a_sequence_gap_resets_the_partition_once_nothing_stored_may_be_left():
    manager, batches = _five_in_flight()
    first, second, *rest = batches
    first.fail(RuntimeError("refused for good"))
    manager.left_unacknowledged(first)
    assert manager.sequences(*KEY).blocked
    _, (new,) = _batches(1)  # a new batch waits while the sequence is in doubt
    assert not manager.may_send(new)
    assert not manager.refused_out_of_order(second)  # nothing of unknown fate before it: not stored
    assert second.not_stored
    assert manager.partitions_to_reset() == []  # the rest may still have been stored: not yet
    for batch in rest:
        manager.unanswered(batch)
    assert manager.may_send(rest[0])  # asked again under the old identity, to learn their fate
    for batch in rest:
        assert not manager.refused_out_of_order(batch)
    assert manager.partitions_to_reset() == [KEY]
    assert manager.needs_new_producer_id([KEY])
    with pytest.raises(ValueError, match="new identity"):
        manager.reset(KEY)
    manager.set_producer_id(8, 0)
    manager.reset(KEY)
    assert [(b.producer_id, b.base_sequence, b.not_stored) for b in [second, *rest]] == [
        (8, 0, False), (8, 2, False), (8, 4, False), (8, 6, False)]
    assert manager.may_send(second) and not manager.may_send(rest[0]) and not manager.may_send(new)
    manager.sending(second)
    manager.acknowledged(second)
    assert manager.resets == 1 and not manager.sequences(*KEY).blocked


def test_a_later_acknowledgement_clears_the_doubt_and_fails_what_cannot_be_placed_in_order():
    manager, batches = _five_in_flight()
    manager.left_unacknowledged(batches[0])  # expired: maybe stored
    manager.unanswered(batches[1])
    assert manager.sequences(*KEY).blocked
    assert manager.acknowledged(batches[1]) == []  # the broker has everything before it
    assert not manager.sequences(*KEY).blocked
    # A batch refused as out of order with nothing unknown before it, then one after it stored
    # (a broker that lost the producer's state takes any sequence): it can no longer go in order.
    assert not manager.refused_out_of_order(batches[2])
    assert manager.acknowledged(batches[3]) == [batches[2]]


def test_a_partition_in_doubt_with_nothing_left_resets_without_a_new_id_if_it_has_an_old_one():
    manager, batches = _five_in_flight()
    for batch in batches:
        manager.left_unacknowledged(batch)
    assert manager.partitions_to_reset() == [KEY]
    manager.set_producer_id(9, 0)  # another partition's reset took a new id already
    assert not manager.needs_new_producer_id([KEY])
    manager.reset(KEY)
    assert manager.sequences(*KEY).producer_id == 9 and manager.sequences(*KEY).next_sequence == 0
