"""The group layer: consumer groups (Kafka's classic group coordinator) over a store.

It owns the group state machine (groups and members, the five states, rebalances completed through
the timer layer's ``DelayedOperationPurgatory``: DelayedJoin, InitialDelayedJoin, DelayedSync,
DelayedHeartbeat), committed offsets kept in the compacted internal topic ``__consumer_offsets``
(Kafka's key and value layouts and group-to-partition mapping, replayed at start-up, expired by
``offsets.retention.minutes``), the consumer protocol's subscription and assignment bytes with the
range and round-robin assignors, an in-process ``Consumer`` for applications that embed a store, and
``GroupAdmin`` (``admin``), Kafka's ``kafka-consumer-groups`` as plain data for the CLI.

No network code lives here: the server layer maps Kafka requests onto ``GroupCoordinator``, and the
CLI and the in-process consumer call it directly. It imports only from the layers below it (the
foundations up to ``manager``, and ``tools``); ``server``, ``spark`` and
``cli`` build on it.
"""
