"""The codecs of a stored batch's body: their ids (the low three bits of a batch's attributes), the
names ``compression.type`` gives them, and ``compress``/``decompress`` for the ones the standard
library lacks.

Ids are Kafka's: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd. none and gzip (``zlib``) are the
encoder's and decoder's own, inline on their paths. snappy (raw snappy, one block), lz4 (an LZ4
frame) and zstd (a zstd frame, level 3) come from the ``cramjam`` package when it is installed (the
``compression`` extra, also part of the ``server`` extra). The engine imports only the standard
library: ``cramjam`` is loaded by name (``importlib``) the first time one of these codecs is used,
never before. Without it, using one raises ``CodecUnavailableError`` naming the extra to install:
a topic cannot be configured with such a codec (``config``), and a stored batch written with one is
refused as unreadable here, never taken for a corrupt one (which recovery would cut).

May import: the standard library, ``errors`` and ``config``.
"""

from __future__ import annotations

import importlib
import threading

from ..config import COMPRESSION_INSTALL_HINT, COMPRESSION_MODULE
from ..errors import CodecUnavailableError, CorruptRecordError

COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD = range(5)
CODEC_NAMES = {COMPRESSION_NONE: "none", COMPRESSION_GZIP: "gzip", COMPRESSION_SNAPPY: "snappy",
               COMPRESSION_LZ4: "lz4", COMPRESSION_ZSTD: "zstd"}
"""Codec id -> name, as ``logstore dump`` prints it."""
TOPIC_CODECS = {"uncompressed": COMPRESSION_NONE, "gzip": COMPRESSION_GZIP, "snappy": COMPRESSION_SNAPPY,
                "lz4": COMPRESSION_LZ4, "zstd": COMPRESSION_ZSTD}
"""A topic's ``compression.type`` -> the codec id of its stored batches (``producer``: the producer's)."""
ZSTD_LEVEL = 3  # Kafka's default zstd level

_module = None
_load_lock = threading.Lock()


def _library():
    """``cramjam``, imported on first use; ``CodecUnavailableError`` when it is not installed."""
    global _module
    if _module is None:
        with _load_lock:
            if _module is None:
                try:
                    _module = importlib.import_module(COMPRESSION_MODULE)
                except ImportError:
                    raise CodecUnavailableError(
                        f"snappy, lz4 and zstd batches need the {COMPRESSION_MODULE} package "
                        f"({COMPRESSION_INSTALL_HINT})") from None
    return _module


def check_codec(codec: int) -> None:
    """Raise ``ValueError`` for an id that is no codec, ``CodecUnavailableError`` for one whose
    library is missing."""
    if codec not in CODEC_NAMES:
        raise ValueError(f"unknown compression codec {codec!r}")
    if codec > COMPRESSION_GZIP:
        _library()


def compress(codec: int, data: bytes) -> bytes:
    """``data`` compressed with snappy, lz4 or zstd (gzip and none are the encoder's own)."""
    library = _library()
    if codec == COMPRESSION_SNAPPY:
        return bytes(library.snappy.compress_raw(data))
    if codec == COMPRESSION_LZ4:
        return bytes(library.lz4.compress(data))
    if codec == COMPRESSION_ZSTD:
        return bytes(library.zstd.compress(data, level=ZSTD_LEVEL))
    raise ValueError(f"unknown compression codec {codec!r}")


def decompress(codec: int, body) -> memoryview:
    """The body of a stored batch compressed with snappy, lz4 or zstd. ``CorruptRecordError`` for
    bytes that do not decompress or an unknown codec id (the batch's checksum passed, so either is
    damage), ``CodecUnavailableError`` when the library is missing."""
    if codec not in (COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD):
        raise CorruptRecordError(f"unknown compression codec {codec}")
    library = _library()
    try:
        if codec == COMPRESSION_SNAPPY:
            out = library.snappy.decompress_raw(body)
        elif codec == COMPRESSION_LZ4:
            out = library.lz4.decompress(body)
        else:
            out = library.zstd.decompress(body)
    except library.DecompressionError as exc:
        raise CorruptRecordError(f"undecodable {CODEC_NAMES[codec]} body: {exc}") from None
    return memoryview(bytes(out))
