"""CRC-32C and the record batch codecs (logstore.server.wire_records.crc32c, logstore.server.wire_records.compression).

- Both CRC-32C implementations give the standard check value and agree with each other on any
  bytes, in one call or chained over parts, for bytes, bytearray and memoryview inputs.
- Every codec round-trips any bytes; snappy reads both the xerial framing and raw snappy; our
  output is read by the codecs of aiokafka (and kafka-python's gzip), and theirs by ours.
- ``max_bytes`` bounds the decompressed size for every codec, also for a decompression bomb;
  damaged or random compressed bytes only raise ``CorruptMessageError`` (or, for snappy's
  stated lengths, ``MessageTooLargeError``); codecs this process lacks raise
  ``UnsupportedCompressionError`` with Kafka's code 76.
"""

from __future__ import annotations

import zlib

import cramjam  # the server extra: CI installs it, a missing one fails
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logstore.server.wire_records import compression
from logstore.server.wire_records import (CorruptMessageError, MessageTooLargeError, UnsupportedCompressionError,
                                          WireRecordError)
from logstore.server.wire_records.compression import (AVAILABLE_CODECS, CODEC_GZIP, CODEC_LZ4, CODEC_NONE,
                                                      CODEC_SNAPPY, CODEC_ZSTD, XERIAL_MAGIC, compress, decompress)
from logstore.server.wire_records.crc32c import CHECK_VALUE, HARDWARE, IMPLEMENTATION, crc32c, crc32c_python

CODECS = [CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD]
COMPRESSED = CODECS[1:]


def test_check_value_and_implementation():
    assert crc32c(b"123456789") == CHECK_VALUE == 0xE3069283
    assert crc32c_python(b"123456789") == CHECK_VALUE
    assert crc32c(b"") == crc32c_python(b"") == 0
    assert HARDWARE and IMPLEMENTATION == "google_crc32c"  # the [server] extra is installed for the tests


@given(st.binary(max_size=5000), st.integers(0, 5000))
def test_implementations_agree_also_chained(data, cut):
    cut = min(cut, len(data))
    expected = crc32c_python(data)
    assert crc32c(data) == expected
    assert crc32c(data[cut:], crc32c(data[:cut])) == expected
    assert crc32c_python(data[cut:], crc32c_python(data[:cut])) == expected
    for kind in (bytearray, memoryview):
        assert crc32c(kind(data)) == expected == crc32c_python(kind(data))
    assert crc32c(memoryview(b"xx" + data)[2:]) == expected


def test_crc_detects_every_single_bit_flip():
    data = bytes(range(256)) * 4
    good = crc32c(data)
    for position in range(0, len(data), 7):
        for bit in range(8):
            flipped = bytearray(data)
            flipped[position] ^= 1 << bit
            assert crc32c(bytes(flipped)) != good


@settings(max_examples=60)
@given(st.sampled_from(CODECS), st.one_of(st.binary(max_size=3000),
                                          st.binary(max_size=50).map(lambda chunk: chunk * 2000)))
def test_every_codec_round_trips(codec, data):
    packed = compress(codec, data)
    assert decompress(codec, packed) == data
    assert decompress(codec, memoryview(packed)) == data
    assert decompress(codec, packed, max_bytes=len(data)) == data
    if data:
        with pytest.raises(MessageTooLargeError) as raised:
            decompress(codec, packed, max_bytes=len(data) - 1)
        assert raised.value.error_code == 10


def test_snappy_reads_xerial_and_raw_and_writes_xerial_blocks():
    data = bytes(range(256)) * 600  # 150 KiB: five 32 KiB xerial blocks
    framed = compress(CODEC_SNAPPY, data)
    assert framed.startswith(XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01")
    assert decompress(CODEC_SNAPPY, framed) == data
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert decompress(CODEC_SNAPPY, raw) == data
    with pytest.raises(MessageTooLargeError):
        decompress(CODEC_SNAPPY, raw, max_bytes=len(data) - 1)


def test_gzip_reads_concatenated_members():
    first, second = b"a" * 1000, b"b" * 500
    assert decompress(CODEC_GZIP, compress(CODEC_GZIP, first) + compress(CODEC_GZIP, second)) == first + second
    with pytest.raises(CorruptMessageError):
        decompress(CODEC_GZIP, compress(CODEC_GZIP, first) + b"trailing garbage")


def test_lz4_frames_have_independent_blocks_as_java_requires():
    frame = compress(CODEC_LZ4, b"x" * 200_000)
    assert frame[:4] == b"\x04\x22\x4d\x18"  # the LZ4 frame magic
    assert frame[4] & 0x20  # FLG: block independence


@pytest.mark.parametrize("codec", COMPRESSED)
def test_decompression_bombs_stop_at_max_bytes(codec):
    bomb = compress(codec, bytes(32 << 20))  # 32 MiB of zeros: a few KiB compressed (xerial: ~1.5 MiB)
    assert len(bomb) < 2 << 20
    with pytest.raises(MessageTooLargeError):
        decompress(codec, bomb, max_bytes=1 << 20)
    with pytest.raises(MessageTooLargeError):
        decompress(codec, bomb, max_bytes=(32 << 20) - 1)
    assert len(decompress(codec, bomb, max_bytes=32 << 20)) == 32 << 20


@pytest.mark.parametrize("codec", COMPRESSED)
def test_damaged_compressed_data_is_corrupt(codec):
    data = b"".join(b"record %d with some text; " % i for i in range(2000))
    packed = compress(codec, data)
    with pytest.raises(CorruptMessageError) as raised:
        decompress(codec, packed[: len(packed) // 2])
    assert raised.value.error_code == 2
    for position in range(0, len(packed), max(1, len(packed) // 40)):
        damaged = bytearray(packed)
        damaged[position] ^= 0x5A
        try:
            result = decompress(codec, bytes(damaged))
        except WireRecordError:
            continue
        assert isinstance(result, bytes)  # a codec without a checksum may decode damage into other bytes


@settings(max_examples=200)
@given(st.sampled_from(COMPRESSED), st.binary(max_size=400))
def test_random_bytes_only_raise_wire_record_errors(codec, data):
    for candidate in (data, XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01" + data,
                      b"\x1f\x8b" + data, b"\x04\x22\x4d\x18" + data, b"\x28\xb5\x2f\xfd" + data):
        try:
            result = decompress(codec, candidate, max_bytes=1 << 20)
        except (CorruptMessageError, MessageTooLargeError):
            continue
        assert isinstance(result, bytes) and len(result) <= 1 << 20


def test_codecs_without_cramjam_and_unknown_codecs_are_unsupported(monkeypatch):
    monkeypatch.setattr(compression, "AVAILABLE_CODECS", frozenset((CODEC_NONE, CODEC_GZIP)))
    for codec in (CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD):
        with pytest.raises(UnsupportedCompressionError, match="cramjam") as raised:
            decompress(codec, b"anything")
        assert raised.value.error_code == 76
        with pytest.raises(UnsupportedCompressionError):
            compress(codec, b"anything")
    assert decompress(CODEC_GZIP, compress(CODEC_GZIP, b"still works")) == b"still works"
    for codec in (5, 6, 7):
        with pytest.raises(UnsupportedCompressionError):
            decompress(codec, b"anything")


def test_our_output_reads_with_the_clients_codecs_and_theirs_with_ours():
    import aiokafka.codec as aiocodec  # the clients extra: installed by CI
    data = b"".join(b"value %d " % i for i in range(10_000))
    ours = {CODEC_GZIP: aiocodec.gzip_decode, CODEC_SNAPPY: aiocodec.snappy_decode, CODEC_LZ4: aiocodec.lz4_decode,
            CODEC_ZSTD: aiocodec.zstd_decode}
    theirs = {CODEC_GZIP: aiocodec.gzip_encode, CODEC_SNAPPY: aiocodec.snappy_encode, CODEC_LZ4: aiocodec.lz4_encode,
              CODEC_ZSTD: aiocodec.zstd_encode}
    for codec in COMPRESSED:
        assert bytes(ours[codec](compress(codec, data))) == data
        assert decompress(codec, bytes(theirs[codec](data))) == data
    raw_snappy = bytes(aiocodec.snappy_encode(data, xerial_compatible=False))  # as librdkafka writes it
    assert decompress(CODEC_SNAPPY, raw_snappy) == data
    assert zlib.decompress(compress(CODEC_GZIP, data), wbits=31) == data
    assert set(AVAILABLE_CODECS) == set(CODECS)
