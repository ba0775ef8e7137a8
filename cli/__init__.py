"""The ``logstore`` command line (installed as ``logstore.cli``): parses arguments, calls the public
API, formats output. No logic lives here.

The top layer: it may import every other one (the engine, ``tools``, ``group``, ``server``,
``client``, ``bench`` and, lazily, ``spark``); nothing imports it.
"""
