"""``FetchSessionHandler``: the client's half of an incremental fetch session (Kafka's KIP-227) with
one broker, as Kafka's Java consumer keeps it: what the broker's session holds, and so what the next
Fetch must name.

- The first Fetch is full (epoch 0): it names every partition to fetch. When the answer carries a
  session id, the next Fetches are incremental (epoch 1, 2, ...): they name only the partitions added
  or whose fetch offset or size changed since the last answered Fetch, and list the ones no longer
  wanted in ``forgotten_topics_data``; the answer holds only the partitions that changed (absent:
  nothing new), so the caller reads it against everything it wanted.
- An answer with session id 0 means no session (the broker refused or does not keep one, or closed
  it): the next Fetch is full again, which is what a sessionless consumer sends anyway.
- ``FETCH_SESSION_ID_NOT_FOUND``: the broker forgot the session (evicted, restarted): start over
  with a full Fetch. Any other error of the whole answer, or a lost answer (``failed``): the next
  Fetch is full and closes the old session (its id with epoch 0). A broker that keeps answering
  session errors (``MAX_SESSION_ERRORS`` in a row) is fetched sessionless (epoch -1) from then on.
- Versions before 7 have no sessions: ``build`` is told the version and sends epoch -1 there.
"""

from __future__ import annotations

import logging

from ..server.protocol import errors as kafka_errors

logger = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
FIRST_SESSION_VERSION = 7
MAX_SESSION_ERRORS = 3
"""Session errors in a row after which a broker is fetched sessionless."""


def next_epoch(epoch: int) -> int:
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == 0x7FFFFFFF else epoch + 1


class FetchSessionHandler:
    """One broker's fetch session as the client sees it (see the module docstring)."""

    __slots__ = ("node", "session_id", "epoch", "session", "_pending", "_pending_full", "errors", "sessionless")

    def __init__(self, node: object = None, *, enabled: bool = True) -> None:
        self.node = node
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self.session: dict[TopicPartition, tuple[int, int]] = {}  # what the broker's session holds
        self._pending: dict[TopicPartition, tuple[int, int]] | None = None
        self._pending_full = True
        self.errors = 0
        self.sessionless = not enabled

    @property
    def incremental(self) -> bool:
        return self.session_id != INVALID_SESSION_ID and self.epoch > 0

    def build(self, wanted: dict[TopicPartition, tuple[int, int]], version: int = 11
              ) -> tuple[int, int, dict[TopicPartition, tuple[int, int]], list[TopicPartition]]:
        """(session id, epoch, the partitions to name with (fetch offset, max bytes), the ones to
        forget) of the next Fetch of ``wanted`` (``{tp: (fetch offset, partition max bytes)}``)."""
        wanted = dict(wanted)
        self._pending = wanted
        if self.sessionless or version < FIRST_SESSION_VERSION:
            self._pending_full = True
            return INVALID_SESSION_ID, FINAL_EPOCH, wanted, []
        if not self.incremental:
            self._pending_full = True
            return self.session_id, INITIAL_EPOCH, wanted, []
        self._pending_full = False
        session = self.session
        changed = {tp: value for tp, value in wanted.items() if session.get(tp) != value}
        forgotten = [tp for tp in session if tp not in wanted]
        return self.session_id, self.epoch, changed, forgotten

    def handle_response(self, body: dict) -> bool:
        """Take a Fetch answer; whether its partitions may be used (False: a session error, the
        answer holds none)."""
        code = body.get("error_code") or kafka_errors.NONE
        response_id = body.get("session_id", INVALID_SESSION_ID)
        if code != kafka_errors.NONE:
            self.errors += 1
            if code == kafka_errors.FETCH_SESSION_ID_NOT_FOUND:
                logger.info("fetch session %d with %s not found: starting a new one", self.session_id, self.node)
                self._reset(INVALID_SESSION_ID)
            else:
                logger.info("fetch session %d with %s: %s: starting over", self.session_id, self.node,
                            kafka_errors.NAMES.get(code, code))
                self._reset(self.session_id)  # the next full fetch closes it
            if self.errors >= MAX_SESSION_ERRORS and not self.sessionless:
                logger.warning("%s answered %d fetch session errors in a row: fetching without a session",
                               self.node, self.errors)
                self.sessionless = True
            return False
        self.errors = 0
        if self.sessionless:
            return True
        if self._pending_full:
            if response_id == INVALID_SESSION_ID:
                self._reset(INVALID_SESSION_ID)
            else:
                self.session_id, self.epoch = response_id, next_epoch(INITIAL_EPOCH)
                self.session = dict(self._pending or {})
        elif response_id == INVALID_SESSION_ID:
            self._reset(INVALID_SESSION_ID)  # closed by the broker: this answer still counts
        else:
            self.epoch = next_epoch(self.epoch)
            self.session = dict(self._pending or {})
        self._pending = None
        return True

    def failed(self) -> None:
        """The Fetch got no answer: the broker's session may be ahead of ours."""
        self._reset(self.session_id)

    def _reset(self, session_id: int) -> None:
        self.session_id = session_id
        self.epoch = INITIAL_EPOCH
        self.session = {}
        self._pending = None

    def __repr__(self) -> str:
        return (f"FetchSessionHandler(node={self.node!r}, session_id={self.session_id}, epoch={self.epoch}, "
                f"partitions={len(self.session)}, sessionless={self.sessionless})")
