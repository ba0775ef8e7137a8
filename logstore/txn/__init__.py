"""Transactions: the transaction coordinator (its state machine, driven by the timer) and its state
log, the compacted ``__transaction_state`` topic."""
