"""Tools over a store's files, behind ``logstore dump``, ``logstore check`` and ``logstore demo``.

Owns ``dump`` (one file at a time, without opening a store: batches, index entries, checkpoints),
``check`` (``verify_store``: every file of a store checked, nothing changed) and ``demo`` (the guided
tour).

May import: the engine (foundations up to ``manager``). Nothing in the engine imports this package
(``import logstore`` does not load it); ``bench`` and ``cli`` above it may.
"""
