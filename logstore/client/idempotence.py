"""``IdempotenceManager``: an idempotent producer's identity and per-partition sequences (the idempotent
half of Kafka's ``TransactionManager`` and its ``TxnPartitionMap``; no transactions here).

The broker stores a batch once per (producer id, epoch, partition, base sequence) and only in
sequence order: a batch whose base sequence is not the one after the last it stored is refused with
OUT_OF_ORDER_SEQUENCE_NUMBER, a batch it stored already is answered with its first offsets. The
rules that keep a partition's records exactly once and in order with up to
``max.in.flight.requests.per.connection`` batches of it in flight:

- the first batch of a partition under an identity goes alone: until the broker has stored one
  batch of the producer it has no state for it and takes any sequence (Kafka's brokers too, since
  KIP-360), so a second batch that overtook a lost first one would be stored ahead of it. Once one
  is acknowledged, the broker refuses anything but the next sequence and up to five go at once;
- a batch gets its identity and sequence at its first send and keeps them as long as the broker
  may have stored it (an unanswered request, a retriable error): so a retry is a duplicate the
  broker recognises, never a second copy;
- a retried batch is sent again only when it is the first of its partition whose fate is
  unknown (Kafka's "first in-flight sequence" rule): the retries of a partition go one at a time,
  in sequence order, and a later batch refused as out of order waits behind it;
- a batch refused as out of order with no earlier batch of unknown fate ahead of it was not
  stored and cannot be (a sequence before it is missing on the broker): it is marked
  ``not_stored`` and waits;
- a batch that leaves without being acknowledged (failed for good, expired) makes the partition
  *doubtful*: the broker's last sequence may be before or after it. No new batch of the partition
  is sent then. A later batch acknowledged clears the doubt (the broker has everything before it);
- once a partition is doubtful or has ``not_stored`` batches and no batch of unknown fate is left,
  it is *reset* (KIP-360's answer; Kafka 2.5+ bumps the epoch, we take a new producer id from
  InitProducerId, which every broker offers): a new identity, sequences from 0, and the
  ``not_stored`` batches sequenced again in their order. Nothing the broker may have stored is
  ever sent under a new identity, so a reset never duplicates;
- a ``not_stored`` batch behind which a later batch was acknowledged (a broker that had no state
  for the producer took it) can no longer be stored in order: it fails.

Each partition keeps the identity it started with until it is reset (the broker keeps producer
state per partition, so partitions need not share one). A transactional producer never resets a
partition alone: its abort ends with a new epoch for all of them (``restart``). Not thread-safe:
the sender thread's (``restart`` is called with no batch held, the sender idle).
"""

from __future__ import annotations

from .accumulator import ProducerBatch

_SEQUENCE_MODULUS = 2**31  # sequences wrap from 2**31 - 1 to 0, as Kafka's do


class PartitionSequences:
    """One partition's identity, next sequence and the sequenced batches not settled yet."""

    __slots__ = ("producer_id", "producer_epoch", "next_sequence", "batches", "doubtful_serial", "acknowledged")

    def __init__(self, producer_id: int, producer_epoch: int) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.next_sequence = 0
        self.acknowledged = False  # the broker stored a batch under this identity: it checks sequences now
        self.batches: list[ProducerBatch] = []  # sequenced, not acknowledged nor failed, in send order
        self.doubtful_serial: int | None = None  # the last batch that left without an acknowledgement

    def first_unknown(self) -> ProducerBatch | None:
        """The first batch whose fate is unknown (in a request, or waiting for a retry)."""
        return next((batch for batch in self.batches if not batch.not_stored), None)

    @property
    def blocked(self) -> bool:
        """No new batch may be sent: the broker's last sequence is not known to be ours."""
        return self.doubtful_serial is not None or any(batch.not_stored for batch in self.batches)


class IdempotenceManager:
    """The producer's current identity (from InitProducerId) and each partition's sequences (see
    the module docstring)."""

    def __init__(self) -> None:
        self.producer_id = -1
        self.producer_epoch = -1
        self._partitions: dict[tuple[str, int], PartitionSequences] = {}
        self.resets = 0  # partitions reset so far (for tests and logs)

    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    def set_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        """A new identity from InitProducerId: partitions starting or reset from now on use it."""
        if type(producer_id) is not int or producer_id < 0:
            raise ValueError(f"a producer id is an int >= 0, got {producer_id!r}")
        self.producer_id, self.producer_epoch = producer_id, producer_epoch

    def restart(self, producer_id: int, producer_epoch: int) -> None:
        """A new identity for every partition, sequences from 0 (a transactional producer's new
        epoch after an abort). Only with no batch held: the abort settled them all."""
        held = [key for key, state in self._partitions.items() if state.batches]
        if held:
            raise ValueError(f"partitions {held} still hold batches: no restart under them")
        self.set_producer_id(producer_id, producer_epoch)
        self._partitions.clear()

    def sequences(self, topic: str, partition: int) -> PartitionSequences | None:
        """The partition's state (None before its first batch is sent)."""
        return self._partitions.get((topic, partition))

    # --- sending ---------------------------------------------------------------------------------

    def may_send(self, batch: ProducerBatch) -> bool:
        """Whether ``batch``, first in its partition's queue, may go in a request now."""
        if not self.has_producer_id():
            return False
        state = self._partitions.get((batch.topic, batch.partition))
        if batch.base_sequence < 0:  # a new batch: not while the partition's sequence is in doubt,
            # nor beside a first batch not acknowledged yet (the broker would take any sequence)
            return state is None or (not state.blocked and (state.acknowledged or not state.batches))
        # A retry: only the first batch of unknown fate, so the broker sees them in order
        return not batch.not_stored and state is not None and state.first_unknown() is batch

    def sending(self, batch: ProducerBatch) -> None:
        """``batch`` goes in a request: a new one gets its partition's identity and next sequence."""
        batch.in_request = True
        if batch.base_sequence >= 0:
            return
        key = (batch.topic, batch.partition)
        state = self._partitions.get(key)
        if state is None:
            state = self._partitions[key] = PartitionSequences(self.producer_id, self.producer_epoch)
        batch.producer_id, batch.producer_epoch = state.producer_id, state.producer_epoch
        batch.base_sequence = state.next_sequence
        state.next_sequence = (state.next_sequence + len(batch.records)) % _SEQUENCE_MODULUS
        state.batches.append(batch)

    # --- answers ---------------------------------------------------------------------------------

    def acknowledged(self, batch: ProducerBatch) -> list[ProducerBatch]:
        """The broker stored ``batch``: it leaves, and the partition's doubt before it is cleared.
        Returns the ``not_stored`` batches before it, which can no longer be stored in order (the
        caller fails them)."""
        state = self._settle(batch)
        if state is None:
            return []
        state.acknowledged = True
        if state.doubtful_serial is not None and state.doubtful_serial < batch.serial:
            state.doubtful_serial = None
        orphans = [queued for queued in state.batches if queued.not_stored and queued.serial < batch.serial]
        for orphan in orphans:
            state.batches.remove(orphan)
        return orphans

    def refused_out_of_order(self, batch: ProducerBatch) -> bool:
        """The broker refused ``batch`` as out of order (or with UNKNOWN_PRODUCER_ID). True: an earlier
        batch of unknown fate is ahead of it, so send it again behind that one, same sequence.
        False: it was not stored and cannot be with this sequence; it is marked ``not_stored``
        and waits for the partition's reset."""
        batch.in_request = False
        state = self._partitions.get((batch.topic, batch.partition))
        if state is None or batch not in state.batches:
            return True
        if any(earlier.serial < batch.serial and not earlier.not_stored for earlier in state.batches
               if earlier is not batch):
            return True
        batch.not_stored = True
        return False

    def unanswered(self, batch: ProducerBatch) -> None:
        """The request carrying ``batch`` got no answer for it (a retriable error, a broken
        connection): its fate is unknown; it keeps its sequence for a retry."""
        batch.in_request = False

    def left_unacknowledged(self, batch: ProducerBatch) -> None:
        """``batch`` failed for good or expired without an acknowledgement: whether the broker
        stored it may be unknown, so the partition is doubtful until a later batch is acknowledged
        or the partition is reset."""
        state = self._settle(batch)
        if state is not None:
            state.doubtful_serial = max(batch.serial, state.doubtful_serial or 0)

    def _settle(self, batch: ProducerBatch) -> PartitionSequences | None:
        batch.in_request = False
        state = self._partitions.get((batch.topic, batch.partition))
        if state is None or batch not in state.batches:
            return None
        state.batches.remove(batch)
        return state

    # --- resets ----------------------------------------------------------------------------------

    def partitions_to_reset(self) -> list[tuple[str, int]]:
        """The partitions whose sequence is in doubt with no batch of unknown fate left."""
        return [key for key, state in self._partitions.items()
                if state.blocked and state.first_unknown() is None]

    def needs_new_producer_id(self, keys) -> bool:
        """Whether resetting ``keys`` needs a new identity: one of them uses the current one."""
        return any((self._partitions[key].producer_id, self._partitions[key].producer_epoch)
                   == (self.producer_id, self.producer_epoch) for key in keys)

    def reset(self, key: tuple[str, int]) -> None:
        """Move the partition to the current identity (which it must not use already), sequences
        from 0: its ``not_stored`` batches get new sequences, in their order."""
        state = self._partitions[key]
        if (state.producer_id, state.producer_epoch) == (self.producer_id, self.producer_epoch):
            raise ValueError(f"{key[0]}-{key[1]} already uses producer {self.producer_id} epoch "
                             f"{self.producer_epoch}: a reset needs a new identity")
        if state.first_unknown() is not None:
            raise ValueError(f"{key[0]}-{key[1]} has batches the broker may have stored: not reset")
        fresh = PartitionSequences(self.producer_id, self.producer_epoch)
        for batch in state.batches:
            batch.not_stored = False
            batch.producer_id, batch.producer_epoch = fresh.producer_id, fresh.producer_epoch
            batch.base_sequence = fresh.next_sequence
            fresh.next_sequence = (fresh.next_sequence + len(batch.records)) % _SEQUENCE_MODULUS
            fresh.batches.append(batch)
        self._partitions[key] = fresh
        self.resets += 1
