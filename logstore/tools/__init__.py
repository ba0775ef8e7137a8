"""Tools over a store and its files, behind ``logstore dump``, ``check``, ``read``, ``demo``,
``offsets``, ``delete-records`` and ``topics describe``.

Owns ``dump`` (one file at a time, without opening a store: batches and their producers and
transaction markers, index entries, producer snapshots, checkpoints), ``check`` (``verify_store``:
every file of a store checked, nothing changed; ``txn_check`` replays its transactions), ``reading``
(``logstore read`` on a store at an isolation level, and the waiting multi-partition read the
in-process consumer polls with), ``demo`` (the guided tour), ``offsets`` (``logstore offsets`` and
``delete-records`` on a store) and ``topics`` (``logstore topics describe`` on a store).

May import: the engine (foundations up to ``manager``). Nothing in the engine imports this package
(``import logstore`` does not load it); ``group`` (the in-process consumer), ``bench`` and ``cli``
above it may.
"""
