"""Streams the `traceEvents` array of a (possibly gzipped) Chrome-trace JSON file, one block at a time.

The whole text is never held: blocks of `BLOCK_BYTES` are cut at event boundaries and each piece is handed
to a typed msgspec decoder. A cut after `}` that is followed by `,` and `{` is valid iff `[` + piece + `]`
decodes: a cut inside a string or a nested object cannot balance, and msgspec then fails at the very end
of the piece, which tells a bad cut apart from a genuinely malformed file (which fails earlier).

Keys outside the array (`deviceProperties`, `distributedInfo`, ...) may come before or after it; both
the prefix and the suffix are decoded into one metadata dict.
"""

from __future__ import annotations

import contextlib
import queue
import re
import threading
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

import msgspec

from pinchpoint.errors import TraceError

T = TypeVar("T")

BLOCK_BYTES = 2 << 20
"""Decompressed bytes read per block (decision 10: 1–2 MB blocks were fastest and leanest; 16 MB +70% time)."""
DEFAULT_MAX_JSON_BYTES = 16 << 30
"""Refuse to decompress more than this much JSON (a gzip bomb, or a trace too large to be sensible)."""
BOMB_RATIO = 200
"""...or more than this many times the compressed bytes read, once past `BOMB_FLOOR` (real Kineto: 15–40×)."""
BOMB_FLOOR = 1 << 30
MAX_HEAD_BYTES = 256 << 20
"""Metadata before `traceEvents` larger than this is refused (Kineto writes a few KB)."""
MAX_EVENT_BYTES = 256 << 20
"""One event (or a stretch without a valid cut) larger than this is refused."""
_READ_CHUNK = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b"
_WS = b" \t\r\n"
_KEY = re.compile(rb'"traceEvents"')
_BYTE_POS = re.compile(r"\(byte (\d+)\)")
_dict_decoder = msgspec.json.Decoder(dict[str, Any])
_raw_list_decoder = msgspec.json.Decoder(list[msgspec.Raw])


class Source:
    """Decompressed bytes of a file, with a bound on how many (gzip-bomb guard).

    Gzip is inflated by a helper thread one block ahead (zlib releases the GIL), so inflating overlaps
    decoding; `read` always returns whole blocks in order.
    """

    def __init__(self, path: Path, max_json_bytes: int, block_bytes: int = BLOCK_BYTES) -> None:
        self.path = path
        self.max_json_bytes = max_json_bytes
        try:
            self._raw = open(path, "rb")  # noqa: SIM115 (closed by close())
        except OSError as e:
            raise TraceError(f"{path}: cannot open trace ({e.strerror or e})") from None
        self.total_bytes = max(1, _size(self._raw))
        self.gzip = self._raw.read(2) == _GZIP_MAGIC
        self._raw.seek(0)
        self._z: Any = zlib.decompressobj(wbits=31) if self.gzip else None
        self._pending = b""
        self._gz_eof = False
        self.json_bytes = 0
        self.eof = False
        self.truncated_gzip = False
        self.trailing_garbage = False
        self._inflated = 0
        self._block = block_bytes
        self._q: queue.Queue[bytes | BaseException | None] = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self.gzip:
            self._thread = threading.Thread(target=self._pump, name="pinchpoint-gunzip", daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            while self._thread.is_alive():
                with contextlib.suppress(queue.Empty):
                    self._q.get(timeout=0.05)
        self._raw.close()

    def _pump(self) -> None:
        """Helper thread: inflate block after block into the queue; None at the end, or the error."""
        item: bytes | BaseException | None
        done = False
        while not done and not self._stop.is_set():
            try:
                item = self._read_gzip(self._block)
                self._inflated += len(item)
                if self._inflated > self.max_json_bytes + self._block:
                    done = True  # the consumer raises the size error
                done = done or self._gz_eof
            except BaseException as e:  # handed to the reading thread
                item, done = e, True
            while not self._stop.is_set():
                try:
                    self._q.put(item, timeout=0.05)
                    break
                except queue.Full:
                    pass
        if done:
            self._q.put(None)

    @property
    def done_bytes(self) -> int:
        return min(self._raw.tell(), self.total_bytes)

    def read(self, want: int) -> bytes:
        """Up to `want` decompressed bytes; b'' only at the end."""
        if self.eof:
            return b""
        if self.gzip:
            got = self._q.get()
            if isinstance(got, BaseException):
                raise got
            if got is None:
                self.eof = True
                return b""
            out = got
        else:
            out = self._raw.read(want)
            self.eof = not out
        self.json_bytes += len(out)
        self._check_size()
        return out

    def _read_gzip(self, want: int) -> bytes:
        parts: list[bytes] = []
        n = 0
        while n < want and not self._gz_eof:
            if self._z.eof:
                rest = self._z.unused_data or self._raw.read(_READ_CHUNK)
                if not rest:
                    self._gz_eof = True
                    break
                if rest[:2] != _GZIP_MAGIC:  # bytes after the gzip stream that are not another member
                    self.trailing_garbage = True
                    self._gz_eof = True
                    break
                self._z = zlib.decompressobj(wbits=31)
                self._pending = rest
            if not self._pending:
                self._pending = self._raw.read(_READ_CHUNK)
                if not self._pending:
                    self.truncated_gzip = True
                    self._gz_eof = True
                    break
            try:
                chunk = self._z.decompress(self._pending, want - n)
            except zlib.error as e:
                at = self._inflated + n
                if at == 0:
                    raise TraceError(f"{self.path}: not a valid gzip file ({e})") from None
                raise TraceError(f"{self.path}: corrupt gzip data after {at} bytes ({e})") from None
            self._pending = self._z.unconsumed_tail
            parts.append(chunk)
            n += len(chunk)
        return b"".join(parts)

    def _check_size(self) -> None:
        if self.json_bytes > self.max_json_bytes:
            raise TraceError(
                f"{self.path}: more than {self.max_json_bytes} bytes of JSON; refusing to read further "
                "(raise max_json_bytes if this trace is genuine)"
            )
        if (
            self.gzip
            and self.json_bytes > BOMB_FLOOR
            and self.json_bytes > BOMB_RATIO * max(1, self.done_bytes)
        ):
            raise TraceError(
                f"{self.path}: decompresses to over {BOMB_RATIO}x its compressed size "
                f"({self.json_bytes} bytes from {self.done_bytes}); refusing a likely gzip bomb"
            )


def _size(f: Any) -> int:
    import os

    return os.fstat(f.fileno()).st_size


class EventStream(Generic[T]):
    """Yields decoded event lists; afterwards `meta`, `n_events`, `skipped`, `truncated` are set."""

    def __init__(
        self,
        source: Source,
        decoder: msgspec.json.Decoder[list[T]],
        one_decoder: msgspec.json.Decoder[T],
        progress: Callable[[int, int], None] | None = None,
        block_bytes: int = BLOCK_BYTES,
    ) -> None:
        self.src = source
        self.path = source.path
        self._decoder = decoder
        self._one = one_decoder
        self._progress = progress
        self._block = block_bytes
        self.meta: dict[str, Any] = {}
        self.n_events = 0
        self.skipped = 0
        """Array elements that were not event objects of the expected shape."""
        self.truncated = False
        self._offset = 0
        """Offset in the JSON text of buf[1] (for error messages)."""

    # -- phase 1: find the array -------------------------------------------------------------------------
    def _open_array(self) -> bytearray:
        head = bytearray()
        searched = 0
        while True:
            chunk = self.src.read(self._block)
            head += chunk
            if not head.strip(_WS):
                if self.src.eof:
                    raise TraceError(f"{self.path}: empty file (no JSON)")
                continue
            start = len(head) - len(head.lstrip(_WS + b"\xef\xbb\xbf"))
            first = head[start : start + 1]
            if first == b"[":  # the bare-array form of the Chrome trace format
                self._offset = start + 1
                return bytearray(b"[") + head[start + 1 :]
            if first != b"{":
                raise TraceError(
                    f"{self.path}: not a JSON trace (starts with {bytes(head[start : start + 16])!r})"
                )
            found = self._find_key(head, max(start, searched - 16))
            if found is not None:
                return found
            searched = len(head)
            if self.src.eof:
                raise TraceError(
                    f"{self.path}: no traceEvents array in this JSON (not a Chrome/Kineto trace?)"
                )
            if len(head) > MAX_HEAD_BYTES:
                raise TraceError(f"{self.path}: no traceEvents array in the first {MAX_HEAD_BYTES} bytes")

    def _find_key(self, head: bytearray, begin: int) -> bytearray | None:
        for m in _KEY.finditer(head, begin):
            before = bytes(head[: m.start()]).rstrip(_WS)
            if before.endswith(b","):
                prefix = before[:-1] + b"}"
            elif before.endswith(b"{"):
                prefix = before + b"}"
            else:
                continue
            try:
                meta = _dict_decoder.decode(prefix)
            except (msgspec.DecodeError, RecursionError):
                continue  # the match was inside a string or a nested value
            i = _skip_ws(head, m.end())
            if i >= len(head):
                return None  # need more text to see the value
            if head[i : i + 1] != b":":
                continue
            i = _skip_ws(head, i + 1)
            if i >= len(head):
                return None
            if head[i : i + 1] != b"[":
                raise TraceError(
                    f"{self.path}: traceEvents is not a list (starts with {bytes(head[i : i + 12])!r})"
                )
            self.meta.update(meta)
            self._offset = i + 1
            return bytearray(b"[") + head[i + 1 :]
        return None

    # -- phase 2: the events ------------------------------------------------------------------------------
    def __iter__(self) -> Any:
        buf = self._open_array()
        stuck = True
        while not self.src.eof:
            if stuck or len(buf) < self._block:
                buf += self.src.read(self._block)
                if not self.src.eof and len(buf) < self._block:
                    continue
            if self.src.eof:
                break
            before = self._offset
            events, buf = self._cut_and_decode(buf)
            stuck = self._offset == before  # no boundary in the buffer yet: read on
            if events:
                self.n_events += len(events)
                yield events
            if self._progress is not None:
                self._progress(self.src.done_bytes, self.src.total_bytes)
            if len(buf) > MAX_EVENT_BYTES:
                raise TraceError(
                    f"{self.path}: no event boundary in {len(buf)} bytes after byte {self._offset} "
                    "(one event larger than the limit, or not a trace)"
                )
        for events in self._finish(buf):
            self.n_events += len(events)
            yield events
        if self._progress is not None:
            self._progress(self.src.total_bytes, self.src.total_bytes)

    def _cut_and_decode(self, buf: bytearray) -> tuple[list[T], bytearray]:
        """Decode every complete event up to the last valid cut; return them and the rest of `buf`."""
        hi = len(buf)
        for _ in range(16):
            cut = _last_cut(buf, hi)
            if cut is None:
                return [], buf
            close, nxt = cut
            events = self._decode_piece(buf, close)
            if events is not None:
                self._offset += nxt - 1
                buf[nxt - 1] = ord("[")
                del buf[: nxt - 1]
                return events, buf
            hi = close
        return [], buf

    def _decode_piece(self, buf: bytearray, close: int) -> list[T] | None:
        """Events of buf[0:close+1] + ']' (buf[0] is '['); None when the cut is not an event boundary."""
        saved = buf[close + 1]
        buf[close + 1] = ord("]")
        piece = bytes(buf[: close + 2])  # a copy: decoded Raw values keep their source buffer alive
        buf[close + 1] = saved
        try:
            return self._decode(piece)
        except msgspec.DecodeError as e:
            self._bad_json_or_bad_cut(e, close + 1)
            return None

    def _decode(self, piece: bytes) -> list[T]:
        """Typed decode; after a type error, event by event (the bad ones skipped and counted)."""
        try:
            try:
                return self._decoder.decode(piece)
            except msgspec.ValidationError:
                return self._one_by_one(_raw_list_decoder.decode(piece))
        except RecursionError:
            raise TraceError(
                f"{self.path}: JSON nested too deeply near byte {self._offset} (not a profiler trace)"
            ) from None

    def _one_by_one(self, raws: list[msgspec.Raw]) -> list[T]:
        out: list[T] = []
        for raw in raws:
            try:
                out.append(self._one.decode(raw))
            except msgspec.DecodeError:
                self.skipped += 1
        return out

    def _bad_json_or_bad_cut(self, e: msgspec.DecodeError, end: int) -> None:
        m = _BYTE_POS.search(str(e))
        if m is None or int(m.group(1)) >= end or "trailing characters" in str(e):
            return  # failed at the end of the piece: the cut was inside a string or an object
        pos = self._offset + int(m.group(1)) - 1
        raise TraceError(f"{self.path}: invalid JSON at byte {pos} ({str(e).split(' (byte')[0]})")

    def _finish(self, buf: bytearray) -> list[list[T]]:
        """At the end of the text: the last events, then `]` and the keys after the array."""
        r = len(buf)
        for _ in range(256):
            r = buf.rfind(b"]", 0, r)
            if r < 0:
                break
            meta = _suffix_meta(bytes(buf[r + 1 :]).strip(_WS))
            if meta is None:
                continue
            try:
                events = self._decode(bytes(buf[: r + 1]))
            except msgspec.DecodeError:
                continue
            self.meta.update(meta)
            return [events]
        # The text ended inside the array: keep the whole events before the cut.
        self.truncated = True
        events, buf = self._cut_and_decode(buf)
        return [events, self._salvage(buf)]

    def _salvage(self, buf: bytearray) -> list[T]:
        """The text ended inside the array: keep whole events before the cut."""
        hi = len(buf)
        for _ in range(16):
            close = buf.rfind(b"}", 0, hi)
            if close < 0:
                return []
            try:
                return self._decode(bytes(buf[: close + 1]) + b"]")
            except msgspec.DecodeError:
                pass
            hi = close
        return []


def _skip_ws(b: bytearray, i: int) -> int:
    n = len(b)
    while i < n and b[i] in _WS:
        i += 1
    return i


def _last_cut(buf: bytearray, hi: int) -> tuple[int, int] | None:
    """(index of '}', index of the next event's '{') of the last `}` `,` `{` before `hi`, skipping blanks."""
    n = len(buf)
    close = buf.rfind(b"}", 1, hi)
    while close > 0:
        i = _skip_ws(buf, close + 1)
        if i < n and buf[i] == 0x2C:  # ','
            j = _skip_ws(buf, i + 1)
            if j < n and buf[j] == 0x7B:  # '{'
                return close, j
        close = buf.rfind(b"}", 1, close)
    return None


def _suffix_meta(suffix: bytes) -> dict[str, Any] | None:
    """The keys after the array: '' (bare-array form), '}' or ', "k": v ... }'; None if not that shape."""
    if suffix in (b"", b"}"):
        return {}
    if not suffix.startswith(b","):
        return None
    try:
        return _dict_decoder.decode(b"{" + suffix[1:])
    except (msgspec.DecodeError, RecursionError):
        return None
