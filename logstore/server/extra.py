"""The server extra (``pip install 'kafka-logstore[server]'``): which of its modules are installed.

The server refuses to start without them (a pure-Python CRC-32C is a thousand times slower than
``google_crc32c``, and without ``cramjam`` snappy, lz4 and zstd batches could not be read). This
module imports nothing of the server, so the CLI can ask before loading the codec.

May import: the standard library only.
"""

import importlib.util

EXTRA_MODULES = ("google_crc32c", "cramjam")
INSTALL_HINT = "pip install 'kafka-logstore[server]'"


def missing_extra() -> list[str]:
    """The server extra's modules that are not installed."""
    return [name for name in EXTRA_MODULES if importlib.util.find_spec(name) is None]


__all__ = ["EXTRA_MODULES", "INSTALL_HINT", "missing_extra"]
