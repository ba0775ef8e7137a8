"""Tools over a store and its files, behind ``logstore dump``, ``check``, ``demo``, ``offsets``,
``delete-records`` and ``topics describe``.

Owns ``dump`` (one file at a time, without opening a store: batches, index entries, checkpoints),
``check`` (``verify_store``: every file of a store checked, nothing changed), ``demo`` (the guided
tour), ``offsets`` (``logstore offsets`` and ``delete-records`` on a store) and ``topics`` (``logstore
topics describe`` on a store).

May import: the engine (foundations up to ``manager``). Nothing in the engine imports this package
(``import logstore`` does not load it); ``bench`` and ``cli`` above it may.
"""
