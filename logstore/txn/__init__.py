"""Transactions: the transaction coordinator (its state machine, driven by the timer) and its state
log, the compacted ``__transaction_state`` topic.

No network code lives here: the server maps Kafka's transaction requests onto the coordinator. It
imports only from the layers below it (the foundations up to ``manager``, the timer, and ``group``,
whose coordinator holds a transaction's offsets until its commit); ``server`` builds on it."""
