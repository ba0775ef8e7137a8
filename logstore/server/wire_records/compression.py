"""Kafka's record batch codecs: ``compress(codec, data)`` and ``decompress(codec, data, max_bytes)``.

Codec ids are the low three bits of a v2 batch's attributes
(https://kafka.apache.org/documentation/#recordbatch): 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd. A
compressed batch's records (everything after ``record_count``) are one compressed blob.

- **gzip**: ``zlib`` with the gzip wrapper (RFC 1952), always available. Several concatenated gzip
  members are accepted, as Java's ``GZIPInputStream`` does.
- **snappy**: two framings exist. Java, kafka-python and aiokafka write xerial's block framing
  (``\\x82SNAPPY\\x00``, two big-endian int32s (version, compatible version), then blocks, each an
  int32 big-endian length and a raw snappy block); librdkafka writes raw snappy. ``decompress``
  detects the xerial magic and otherwise reads raw snappy; ``compress`` writes the xerial framing
  with 32 KiB blocks, as Java does, so every client can read it.
- **lz4**: the LZ4 *frame* format with independent blocks (Java's reader refuses linked blocks).
- **zstd**: a zstd frame (level 3, Kafka's default).

snappy, lz4 and zstd come from ``cramjam`` (the ``kafka-logstore[server]`` extra). Without it those codecs
raise ``UnsupportedCompressionError`` (76); ``AVAILABLE_CODECS`` says what this process can do.

**Decompression bombs.** A few kilobytes of zstd can expand to gigabytes. ``max_bytes`` bounds the
decompressed size: going past it raises ``MessageTooLargeError`` (10) after decompressing at most
``max_bytes + 1`` bytes, never more. gzip streams through ``zlib`` with ``max_length``; snappy states
its decompressed length up front (checked before decompressing); lz4 and zstd decompress into a
bounded, per-thread scratch buffer (``cramjam``'s ``decompress_into`` stops when it is full). Any
other decompression failure raises ``CorruptMessageError`` (2).
"""

from __future__ import annotations

import importlib.util
import struct
import threading
import zlib

from .batch import CorruptMessageError, MessageTooLargeError, UnsupportedCompressionError


class _CramjamOnFirstUse:
    """Stands for the cramjam module until a batch needs it: importing it costs `logstore serve`'s
    start-up several milliseconds, and most stores never see a snappy, lz4 or zstd batch."""

    def __getattr__(self, name: str):
        global cramjam
        import cramjam as module

        cramjam = module
        return getattr(module, name)


# The server still works without cramjam, with gzip only.
cramjam = _CramjamOnFirstUse() if importlib.util.find_spec("cramjam") is not None else None

CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD = range(5)
CODEC_NAMES = {CODEC_NONE: "none", CODEC_GZIP: "gzip", CODEC_SNAPPY: "snappy", CODEC_LZ4: "lz4",
               CODEC_ZSTD: "zstd"}
AVAILABLE_CODECS = frozenset(CODEC_NAMES) if cramjam is not None else frozenset((CODEC_NONE, CODEC_GZIP))
"""Codec ids this process can compress and decompress."""

DEFAULT_MAX_DECOMPRESSED_BYTES = 64 << 20
"""The default bound on one batch's decompressed records (64 MiB)."""

GZIP_LEVEL = 6  # Java's GZIPOutputStream default
LZ4_LEVEL = 4  # what lz4-java's fast compressor amounts to; the level is not on the wire
ZSTD_LEVEL = 3  # Kafka's default zstd level (KIP-390)
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)  # version 1, compatible with version 1
XERIAL_BLOCK_BYTES = 32 * 1024  # xerial's (and so Java's) default block size
_BLOCK_LENGTH = struct.Struct(">i")

_SCRATCH_START_BYTES = 1 << 20
_SCRATCH_KEEP_BYTES = 8 << 20  # a scratch buffer grown past this is dropped after use
_scratch = threading.local()


def _check_codec(codec: int) -> None:
    if codec not in CODEC_NAMES:
        raise UnsupportedCompressionError(f"unknown compression codec {codec}")
    if codec not in AVAILABLE_CODECS:
        raise UnsupportedCompressionError(
            f"{CODEC_NAMES[codec]} compression needs the cramjam package (pip install 'kafka-logstore[server]')")


def compress(codec: int, data, level: int | None = None) -> bytes:
    """``data`` compressed with ``codec`` as Kafka producers do (gzip member, xerial-framed
    snappy, LZ4 frame with independent blocks, zstd frame). ``level`` overrides the codec's default
    where the codec has levels."""
    _check_codec(codec)
    if codec == CODEC_NONE:
        return bytes(data)
    if codec == CODEC_GZIP:
        return zlib.compress(data, GZIP_LEVEL if level is None else level, wbits=31)
    if codec == CODEC_SNAPPY:
        view = memoryview(data)
        parts = [XERIAL_HEADER]
        for start in range(0, len(view), XERIAL_BLOCK_BYTES):
            block = bytes(cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_BYTES]))
            parts += (_BLOCK_LENGTH.pack(len(block)), block)
        return b"".join(parts)
    if codec == CODEC_LZ4:
        compressor = cramjam.lz4.Compressor(level=LZ4_LEVEL if level is None else level,
                                            content_checksum=False, block_linked=False)
        compressor.compress(data)
        return bytes(compressor.finish())
    return bytes(cramjam.zstd.compress(data, level=ZSTD_LEVEL if level is None else level))


def decompress(codec: int, data, max_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES) -> bytes:
    """The bytes that ``data`` decompresses to with ``codec``. Raises ``MessageTooLargeError`` when
    they would exceed ``max_bytes`` (nothing beyond ``max_bytes + 1`` bytes is ever produced),
    ``CorruptMessageError`` when ``data`` does not decompress, ``UnsupportedCompressionError`` for
    a codec this process lacks."""
    _check_codec(codec)
    if codec == CODEC_NONE:
        if len(data) > max_bytes:
            raise _too_large(max_bytes)
        return bytes(data)
    if codec == CODEC_GZIP:
        return _gunzip(data, max_bytes)
    if codec == CODEC_SNAPPY:
        return _unsnappy(data, max_bytes)
    return _decompress_bounded(cramjam.lz4 if codec == CODEC_LZ4 else cramjam.zstd, CODEC_NAMES[codec],
                               data, max_bytes)


def _too_large(max_bytes: int) -> MessageTooLargeError:
    return MessageTooLargeError(f"compressed records expand to more than {max_bytes} bytes")


def _gunzip(data, max_bytes: int) -> bytes:
    """One or more gzip members, streamed: ``zlib`` never produces more than ``max_bytes + 1``."""
    parts = []
    room = max_bytes + 1
    pending = data
    try:
        while True:
            stream = zlib.decompressobj(wbits=31)
            out = stream.decompress(pending, room)
            room -= len(out)
            parts.append(out)
            if room <= 0:
                raise _too_large(max_bytes)
            if not stream.eof:
                # max_length was not the limit (room is left): the member is cut short
                raise CorruptMessageError("gzip data ends inside a member")
            pending = stream.unused_data
            if not pending:
                break
    except zlib.error as exc:
        raise CorruptMessageError(f"undecodable gzip data: {exc}") from None
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _unsnappy(data, max_bytes: int) -> bytes:
    """xerial-framed or raw snappy. Every raw snappy block starts with its decompressed length, so
    the total is known (and checked against ``max_bytes``) before anything is decompressed."""
    view = memoryview(data)
    try:
        if bytes(view[:8]) != XERIAL_MAGIC or len(view) < 16:
            if cramjam.snappy.decompress_raw_len(view) > max_bytes:
                raise _too_large(max_bytes)
            return bytes(cramjam.snappy.decompress_raw(view))
        blocks = []
        position = 16  # the magic, the version and the compatible version
        total = 0
        while position < len(view):
            if position + 4 > len(view):
                raise CorruptMessageError("xerial snappy data ends inside a block length")
            (length,) = _BLOCK_LENGTH.unpack_from(view, position)
            position += 4
            if length < 0 or position + length > len(view):
                raise CorruptMessageError(f"xerial snappy block of {length} bytes overruns the data")
            block = view[position : position + length]
            position += length
            total += cramjam.snappy.decompress_raw_len(block)
            if total > max_bytes:
                raise _too_large(max_bytes)
            blocks.append(block)
        return b"".join([bytes(cramjam.snappy.decompress_raw(block)) for block in blocks])
    except cramjam.DecompressionError as exc:
        raise CorruptMessageError(f"undecodable snappy data: {exc}") from None


def _is_overflow(exc: Exception) -> bool:
    """Whether cramjam's ``decompress_into`` failed because the output buffer was full."""
    message = str(exc)
    return "failed to write whole buffer" in message or "smaller than required" in message


def _decompress_bounded(module, name: str, data, max_bytes: int) -> bytes:
    """lz4 or zstd into this thread's scratch buffer, which grows on demand (x8) up to
    ``max_bytes + 1`` bytes: output that fills that much is too large. A frame does not always
    state its decompressed size (Java's streaming zstd leaves it out), hence the buffer."""
    limit = max_bytes + 1
    scratch = getattr(_scratch, "buffer", None)
    if scratch is None:
        scratch = bytearray(min(_SCRATCH_START_BYTES, limit))
    try:
        while True:
            window = scratch if len(scratch) <= limit else memoryview(scratch)[:limit]
            try:
                size = module.decompress_into(data, window)
                break
            except cramjam.DecompressionError as exc:
                if not _is_overflow(exc):
                    raise CorruptMessageError(f"undecodable {name} data: {exc}") from None
                if len(window) >= limit:
                    raise _too_large(max_bytes) from None
                scratch = bytearray(min(len(scratch) * 8, limit))
            finally:
                if isinstance(window, memoryview):
                    window.release()
        if size >= limit:
            raise _too_large(max_bytes)
        return bytes(memoryview(scratch)[:size])
    finally:
        _scratch.buffer = scratch if len(scratch) <= _SCRATCH_KEEP_BYTES else None
