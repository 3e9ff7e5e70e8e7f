"""Protocol Buffers' wire format, read by hand: enough to walk a message's fields without generated code
(XProf's XSpace, `ingest/xplane.py`). No dependency on `protobuf`.

A message is a run of (tag, value) pairs; the tag is a varint `field << 3 | wire type`. Wire types:
0 varint, 1 fixed 64 bits, 2 length-delimited (bytes, strings, nested messages, packed repeats),
5 fixed 32 bits; 3 and 4 (groups) are obsolete and refused. Every length is checked against the end
of the enclosing message, so a hostile file ends in `WireError`, never an index past the buffer.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5
_U64 = 1 << 64
_I64_MAX = (1 << 63) - 1
MAX_VARINT_BYTES = 10


class WireError(ValueError):
    """The bytes are not a well-formed protobuf message (where, in bytes from the buffer's start)."""


def varint(buf: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    """The unsigned varint at `pos` and the position after it."""
    result = shift = 0
    stop = min(end, pos + MAX_VARINT_BYTES)
    while pos < stop:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
    raise WireError(f"a varint runs past its message at byte {pos}")


def encode_varint(value: int) -> bytes:
    """`value` as a varint (negative int64s as their 64-bit two's complement): for the tests and
    benchmarks that write XSpace files, the reader's inverse."""
    value &= _U64 - 1
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def signed(value: int) -> int:
    """An int64 field's value: varints carry negative numbers as their 64-bit two's complement."""
    value &= _U64 - 1
    return value - _U64 if value > _I64_MAX else value


def fields(
    buf: bytes | memoryview, start: int = 0, end: int | None = None
) -> Iterator[tuple[int, int, int, int]]:
    """Each field of the message in `buf[start:end]` as (field number, wire type, a, b): for a varint
    a is its value (b unused, 0); for a length-delimited field `buf[a:b]` is its payload; for the fixed
    types `buf[a:b]` is its 8 or 4 bytes."""
    end = len(buf) if end is None else end
    pos = start
    while pos < end:
        tag, pos = varint(buf, pos, end)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise WireError(f"field number 0 at byte {pos}")
        if wire == VARINT:
            value, pos = varint(buf, pos, end)
            yield number, wire, value, 0
        elif wire == LENGTH:
            size, pos = varint(buf, pos, end)
            if size > end - pos:
                raise WireError(f"a field of {size} bytes runs past its message at byte {pos}")
            yield number, wire, pos, pos + size
            pos += size
        elif wire in (FIXED64, FIXED32):
            width = 8 if wire == FIXED64 else 4
            if pos + width > end:
                raise WireError(f"a fixed field runs past its message at byte {pos}")
            yield number, wire, pos, pos + width
            pos += width
        else:
            raise WireError(f"wire type {wire} (a group, or not a protobuf) at byte {pos}")


def double(buf: bytes | memoryview, a: int) -> float:
    """The little-endian IEEE double at `buf[a:a+8]`."""
    return float(struct.unpack_from("<d", buf, a)[0])


def text(buf: bytes | memoryview, a: int, b: int) -> str:
    """A string field's payload (invalid UTF-8 replaced, as a reader must not fail on a name)."""
    return bytes(buf[a:b]).decode("utf-8", errors="replace")
