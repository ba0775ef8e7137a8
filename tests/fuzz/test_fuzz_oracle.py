"""The fuzz oracle's own rules (``fuzz_oracle.classify``), on hand-made views: what counts as a
reported power-loss cut of an unclean store and what stays a silent loss."""

from __future__ import annotations

from fuzz_oracle import LOSS, TORN, WRONG, Mutation, PartitionView, classify, cut_reported_by
from fuzz_store import PartitionModel, StoreModel

MODEL = PartitionModel("plain", 0, {offset: (offset, None, b"", (), 0) for offset in range(200)}, 0, 200, 120)
UNCLEAN = StoreModel(["u0"], {("plain", 0): MODEL}, clean=False)
CLEAN = StoreModel(["d0"], {("plain", 0): MODEL}, clean=True)
NOT_LAST = Mutation("u0/plain-0/00000000000000000102.log", "tail", 1857, 40, b"x" * 40)
CUT = "u0/plain-0/00000000000000000102.log: cut a torn tail of 40 bytes at position 1857 (offset 136, ...)"


def _view(kept: range) -> PartitionView:
    lost = set(range(200)) - set(kept)
    return PartitionView(missing=[f"{len(lost)} records missing"], lost_offsets=lost, kept_offsets=set(kept))


def test_a_reported_cut_above_the_recovery_point_is_a_torn_tail():
    """Fuzz #69/#33 "after writable": the writable open cut a power loss's tail (and dropped the
    later segments) and said so: the read-only open after it sees a shorter log, not a silent loss."""
    cut = cut_reported_by([CUT], MODEL, UNCLEAN, NOT_LAST)
    assert cut
    assert classify(_view(range(136)), False, MODEL, NOT_LAST, UNCLEAN, False, cut).outcome == TORN


def test_losses_the_cut_rule_does_not_excuse():
    assert classify(_view(range(136)), False, MODEL, NOT_LAST, UNCLEAN, False, False).outcome == LOSS  # unreported
    assert classify(_view(range(100)), False, MODEL, NOT_LAST, UNCLEAN, False, True).outcome == LOSS  # below 120
    hole = _view([*range(136), 150])
    assert classify(hole, False, MODEL, NOT_LAST, UNCLEAN, False, True).outcome == LOSS  # a hole
    wrong = _view(range(136))
    wrong.wrong.append("offset 3 differs from what was written")
    assert classify(wrong, False, MODEL, NOT_LAST, UNCLEAN, False, True).outcome == WRONG
    assert not cut_reported_by([CUT], MODEL, CLEAN, NOT_LAST)  # a clean store has no torn tail
    assert not cut_reported_by(["plain-1: cut a torn tail"], MODEL, UNCLEAN, NOT_LAST)  # another partition
    assert not cut_reported_by(["plain-0: something else"], MODEL, UNCLEAN, NOT_LAST)
