"""Linux `perf script` text: its samples, and the folded stacks FlameGraph's `stackcollapse-perf.pl` makes.

`perf script` prints one sample per block, ended by a blank line: a header, then the call chain leaf first:

    java 24636/25607 [000] 4794564.109216:   10101010 cpu-clock:
            7f722d142778 Ljava/io/PrintStream;::print+0x12 (/tmp/perf-19982.map)
        ffffffff8103ce3b native_safe_halt ([kernel.kallsyms])

The header is `comm [pid/]tid [cpu] [time:] [period] event:`, every field but the comm and one id optional,
the comm free text (`V8 WorkerThread`). A frame is `address symbol (dso)`, the symbol `[unknown]` where perf
could not name it and `a->b` where it un-inlined one address into several functions.

`collapse` folds samples into `stack count` lines exactly as `stackcollapse-perf.pl` does (FlameGraph,
commit 41fee1f, CDDL-1.0; this is a reimplementation of its rules, not its code), with its options
`--pid --tid --kernel --jit --all --addrs --event-filter`; `--inline`, `--context` and `--srcline` (which
need addr2line or a different input) are not offered. Its quirks are kept so the results match: only the
first event type seen is kept, a sample no blank line ends (a cut file's last one) is dropped, and Java
signatures are tidied only when the process name is exactly `java`, as the script's recorded test results
have it (a 2023 change to the script tests the prefix instead; those results were not regenerated).
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from pinchpoint.errors import TraceError
from pinchpoint.ingest.stacks import MAX_BYTES as _FOLDED_MAX_BYTES
from pinchpoint.trace.stacks import Frame, Stacks, StackSample

# The script's line patterns are matched by hand below, with the same results in linear time (Python's
# backtracking would take seconds on a hostile line): header `^(\S.+?)\s+(\d+)\/*(\d+)*\s+`, its end
# `:\s*(\d+)*\s+(\S+):\s*$`, frame `^\s*(\w+)\s*(.+) \((.*)\)`. Perl matches bytes: ASCII classes.
_WS = " \t\n\r\x0b\x0c"
_DIGITS = "0123456789"
_WS_RUN = re.compile(r"\s+", re.ASCII)
_WS_RUN0 = re.compile(r"\s*", re.ASCII)
_DIGIT_RUN = re.compile(r"\d*", re.ASCII)
_SLASH_RUN = re.compile(r"/*")
_WORD_RUN = re.compile(r"\w*", re.ASCII)
_MAX_DIGITS = 19
"""Longer numbers are not ids, periods or times (and Python refuses to convert thousands of digits)."""
_DETAIL = re.compile(r"(?:\[(\d+)\]\s+)?(?:(\d+)\.(\d{1,9}):)?", re.ASCII)
"""What follows the ids: `[cpu]` and `seconds.fraction:`, both optional."""
_OFFSET = re.compile(r"\+0x[\da-f]+$")
_ARGUMENTS = re.compile(r"\((?!anonymous namespace\)).*")
_JIT_DSO = re.compile(r"/tmp/perf-\d+\.map")
_HEX_ADDRESS = re.compile(r"^\s*[0-9a-fA-F]+\s")
_EVENT_NAME = re.compile(r"\S:(?:\s|$)")
_PERF_HEADER = b"# ========\n"
_PERF_REPORT_COMMENTS = ("# Samples:", "# Overhead", "# Children")
"""`perf report` output shares `perf script`'s header; these lines are report's own."""

MAX_BYTES = _FOLDED_MAX_BYTES
"""The most `perf script` text read, decompressed (the folded-stack reader's cap)."""
SNIFF_BYTES = 8192
NS_PERIOD_EVENTS = ("cpu-clock", "task-clock")
"""Software clock events, whose period perf prints in nanoseconds of CPU time."""
_GZIP_MAGIC = b"\x1f\x8b"
_PERF_DATA_MAGIC = b"PERFILE2"
_BINARY_PROBE = 65536


@dataclass(frozen=True, slots=True, kw_only=True)
class PerfFrame:
    address: str
    """As perf printed it: hex, no `0x`."""
    symbol: str
    """As perf printed it: `name+0x1d`, `[unknown]`, `outer->inlined`."""
    dso: str
    """`/usr/lib/x86_64-linux-gnu/libc.so.6`, `[kernel.kallsyms]`, `/tmp/perf-1234.map`, `[unknown]`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PerfSample:
    comm: str
    pid: int | None
    """None where perf printed one id (its default): that id is the thread's."""
    tid: int
    cpu: int | None
    time_ns: int | None
    period: int | None
    """None where perf printed none (the script counts such a sample as 1)."""
    event: str | None
    """`cpu-clock`, `cycles:u`; None where the header's end could not be read as `[period] event:`."""
    frames: tuple[PerfFrame, ...]
    """Root first."""
    complete: bool
    """A blank line ended it, as perf ends every sample; False for a cut file's last one."""
    line: int
    """1-based line number of its header."""


def parse(text: str) -> list[PerfSample]:
    """The samples of `perf script` text, in file order."""
    return parse_counted(text)[0]


def parse_counted(text: str) -> tuple[list[PerfSample], int]:
    """The samples of `perf script` text and how many of its lines could not be read."""
    samples: list[PerfSample] = []
    bad = 0
    current: PerfSample | None = None
    frames: list[PerfFrame] = []  # the current sample's, leaf first as the file lists them
    lines = text.split("\n")
    if not lines[-1]:
        lines.pop()  # the newline ending the last line, not a blank line
    for number, raw in enumerate(lines, start=1):
        line = raw[:-1] if raw.endswith("\r") else raw
        if line.startswith("#"):
            continue
        if not line:
            if current is not None:
                samples.append(replace(current, frames=tuple(reversed(frames)), complete=True))
                current = None
            continue
        header = _header(line, number)
        if header is not None:
            if current is not None:
                samples.append(replace(current, frames=tuple(reversed(frames))))
            current, frames = header, []
        elif (frame := _frame(line)) is not None and current is not None:
            frames.append(frame)
        else:
            bad += 1  # neither header nor frame, or a frame outside any sample
    if current is not None:
        samples.append(replace(current, frames=tuple(reversed(frames))))
    return samples, bad


def _header(line: str, number: int) -> PerfSample | None:
    """The sample a header line starts (no frames yet, not complete), or None if it is not one."""
    m = _match_header(line)
    if m is None:
        return None
    comm, first, second, end = m
    cpu = seconds = fraction = None
    if (detail := _DETAIL.match(line, end)) is not None:
        cpu, seconds, fraction = detail.groups()
    time_ns = None
    if (whole := _int(seconds)) is not None and fraction is not None:
        time_ns = whole * 1_000_000_000 + int(fraction.ljust(9, "0"))
    period, event = _match_event(line) or (None, None)
    return PerfSample(
        comm=comm,
        pid=None if second is None else first,
        tid=first if second is None else second,
        cpu=_int(cpu),
        time_ns=time_ns,
        period=_int(period),
        event=event,
        frames=(),
        complete=False,
        line=number,
    )


def _end(run: re.Pattern[str], line: str, pos: int) -> int:
    """Where a run (a pattern that matches the empty string too) starting at `pos` ends."""
    m = run.match(line, pos)
    return pos if m is None else m.end()


def _int(text: str | None) -> int | None:
    return None if text is None or len(text) > _MAX_DIGITS else int(text)


def _match_header(line: str) -> tuple[str, int, int | None, int] | None:
    """(comm, first id, second id, where the ids' whitespace ends), as the script's header pattern.

    The comm is the shortest prefix of at least two bytes (one non-ASCII character is) followed by
    whitespace, then `ID`, `ID/ID` or `ID/`, then whitespace.
    """
    if not line or line[0] in _WS:
        return None
    shortest = 2 if line[0].isascii() else 1
    for run in _WS_RUN.finditer(line, 1):
        comm_end, digits = max(run.start(), shortest), run.end()
        if comm_end >= digits or digits == len(line) or line[digits] not in _DIGITS:
            continue
        first_end = _end(_DIGIT_RUN, line, digits)
        slashes = _end(_SLASH_RUN, line, first_end)
        second_end = _end(_DIGIT_RUN, line, slashes)
        if second_end < len(line) and line[second_end] in _WS:
            first, second = _int(line[digits:first_end]), _int(line[slashes:second_end] or None)
            if first is None or (second is None and second_end > slashes):
                return None
            end = _end(_WS_RUN0, line, second_end)
            return line[:comm_end], first, second, end
    return None


def _match_event(line: str) -> tuple[str | None, str] | None:
    """(period, event) from a header's end, `...: [PERIOD] EVENT:`, as the script's pattern reads it."""
    body = line.rstrip(_WS)
    colon = len(body) - 1
    if colon < 1 or body[colon] != ":":
        return None
    name = max(body.rfind(c, 0, colon) for c in _WS) + 1
    gap = len(body[:name].rstrip(_WS))
    if name == colon or gap == name:
        return None
    digits = len(body[:gap].rstrip(_DIGITS))
    before = len(body[:digits].rstrip(_WS)) if digits < gap else gap
    if before == 0 or body[before - 1] != ":":
        return None
    return body[digits:gap] or None, body[name:colon]


def _frame(line: str) -> PerfFrame | None:
    """`address symbol (dso)`, as the script's frame pattern reads it: the dso is between the last ` (`
    that a `)` follows and the last `)`; the address a word, which gives up characters to a symbol."""
    start = _end(_WS_RUN0, line, 0)
    word_end = _end(_WORD_RUN, line, start)
    close = line.rfind(")")
    paren = line.rfind(" (", 0, close) if close > 0 else -1
    if word_end == start or paren < 0:
        return None
    symbol = min(_end(_WS_RUN0, line, word_end), paren - 1)
    address_end = min(word_end, symbol)
    if address_end <= start:
        return None
    return PerfFrame(address=line[start:address_end], symbol=line[symbol:paren], dso=line[paren + 2 : close])


@dataclass(frozen=True, slots=True, kw_only=True)
class _Options:
    pid: bool = False
    tid: bool = False
    kernel: bool = False
    jit: bool = False
    addrs: bool = False
    event_filter: str = ""


@dataclass(frozen=True, slots=True)
class _Folded:
    """One stack the script prints: the header that names it, its frames root first, its weight."""

    head: PerfSample
    name: str
    frames: tuple[tuple[str, PerfFrame], ...]
    weight: int


def collapse(
    samples: Iterable[PerfSample],
    *,
    pid: bool = False,
    tid: bool = False,
    kernel: bool = False,
    jit: bool = False,
    all: bool = False,
    addrs: bool = False,
    event_filter: str = "",
) -> dict[str, int]:
    """`stackcollapse-perf.pl`'s output as {`comm;root;...;leaf`: summed period}, its options by name.

    `pid`/`tid`: name the process `comm-PID` / `comm-PID/TID` (`?` for an id perf did not print);
    `kernel`/`jit`: mark kernel frames `_[k]` and JIT-map frames `_[j]`; `all`: both; `addrs`: keep the
    address of a frame perf could not name; `event_filter`: the event kept (default: the first seen).
    """
    options = _Options(
        pid=pid, tid=tid, kernel=kernel or all, jit=jit or all, addrs=addrs, event_filter=event_filter
    )
    out: dict[str, int] = {}
    for folded in _fold(samples, options):
        key = ";".join([folded.name, *(name for name, _ in folded.frames)])
        out[key] = out.get(key, 0) + folded.weight
    return out


def format_collapsed(collapsed: dict[str, int]) -> str:
    """The script's output text: one `stack count` line per stack, sorted."""
    return "".join(f"{stack} {count}\n" for stack, count in sorted(collapsed.items()))


def _fold(samples: Iterable[PerfSample], options: _Options) -> Iterator[_Folded]:
    """The script's reading of the samples, in order.

    A header of another event than the one kept is skipped, but its frames still join a sample still
    open (one no blank line ended); such a sample's frames also join the next header's sample.
    """
    wanted = options.event_filter
    head: PerfSample | None = None
    name = ""
    stack: list[tuple[str, PerfFrame]] = []
    for sample in samples:
        if sample.event is not None and not wanted:
            wanted = sample.event
        if sample.event is None or sample.event == wanted:
            head, name = sample, _process_name(sample, options)
        if head is None or name in ("", "0"):  # no sample open, or a name Perl reads as false
            continue
        stack[:0] = [(f, frame) for frame in sample.frames for f in _functions(frame, name, options)]
        if sample.complete:
            yield _Folded(head, name, tuple(stack), head.period or 1)
            head, name, stack = None, "", []


def _process_name(sample: PerfSample, options: _Options) -> str:
    if sample.pid is None:
        pid, tid = "?", str(sample.tid)
    elif sample.tid == 0:  # the script reads a thread id of 0 as no thread id
        pid, tid = "?", str(sample.pid)
    else:
        pid, tid = str(sample.pid), str(sample.tid)
    if options.tid:
        name = f"{sample.comm}-{pid}/{tid}"
    elif options.pid:
        name = f"{sample.comm}-{pid}"
    else:
        name = sample.comm
    return name.replace(" ", "_")


def _functions(frame: PerfFrame, process: str, options: _Options) -> list[str]:
    """The folded names of one frame line, outermost first: several where perf wrote `outer->inlined`."""
    symbol = _OFFSET.sub("", frame.symbol)
    if symbol.startswith("("):
        return []
    parts = symbol.split("->")
    while parts and not parts[-1]:
        parts.pop()  # Perl's split drops trailing empty fields
    names: list[str] = []
    for part in parts:
        name = _tidy(part, frame, process, options)
        if names:
            name += "" if "_[i]" in name else "_[i]"
        elif options.kernel and _is_kernel(frame.dso):
            name += "_[k]"
        elif options.jit and _JIT_DSO.search(frame.dso):
            name += "" if "_[j]" in name else "_[j]"
        names.append(name)
    return names


def _is_kernel(dso: str) -> bool:
    return (dso.startswith("[") or dso.endswith("vmlinux")) and "unknown" not in dso


def _tidy(name: str, frame: PerfFrame, process: str, options: _Options) -> str:
    if name == "[unknown]":
        known = frame.dso != "[unknown]"
        module = frame.dso.rsplit("/", 1)[-1] if known else "unknown"
        name = f"[{module} <{frame.address}>]" if options.addrs else f"[{module}]"
    name = name.replace(";", ":")
    go = name.find(".(")
    if go < 0 or name.find(").", go + 2) < 0:  # `net/http.(*Client).Do` keeps its parentheses
        name = _ARGUMENTS.sub("", name, count=1)
    name = name.replace('"', "").replace("'", "")
    if process == "java" and "/" in name and name.startswith("L"):
        name = name[1:]  # `Ljava/io/PrintStream:` -> `java/io/PrintStream:`
    return name


def looks_like_perf_script(head: bytes) -> bool:
    """Whether a file's first bytes read as `perf script` text (gzip-compressed or not).

    Sample headers (ids, then an `event:`) and frame lines (a hex address, a symbol, `(dso)`) make up most
    of it; or, when the sniff sees only comments, they are the header `perf script --header` writes.
    """
    head = head[:SNIFF_BYTES]
    if head.startswith(_GZIP_MAGIC):
        try:
            head = zlib.decompressobj(wbits=31).decompress(head, SNIFF_BYTES)
        except zlib.error:
            return False
    if not head or b"\0" in head:
        return False
    lines = head.decode("utf-8", errors="replace").split("\n")
    if len(lines) > 1 and len(head) >= SNIFF_BYTES:
        lines.pop()  # cut short by the sniff
    headers = frames = other = 0
    for raw in lines:
        line = raw.rstrip("\r")
        if not line or line.startswith("#"):
            other += line.startswith(_PERF_REPORT_COMMENTS)
            continue
        if (m := _match_header(line)) and _EVENT_NAME.search(line, m[3]):
            headers += 1
        elif _frame(line) is not None and _HEX_ADDRESS.match(line):
            frames += 1
        else:
            other += 1
    if headers == frames == other == 0:
        return head.startswith(_PERF_HEADER) and b"\n# captured on" in head
    return headers > 0 and frames > 0 and other <= headers + frames


def read_perf_script(path: Path) -> tuple[Stacks, int]:
    """The stacks of a `perf script` file (gzip-compressed or not) and how many lines could not be read.

    Samples fold as the script folds them by default, less the process-name frame: the process is the
    sample's `pid` and `thread` (its tid). `Frame.function` is the tidied symbol, `Frame.file` the DSO;
    the count is the summed period (nanoseconds of CPU time for `cpu-clock`, whence `rate_hz` 1e9).
    """
    samples, bad = parse_counted(_read_text(path))
    if samples and not samples[-1].complete and samples[-1].frames:
        # A file whose last sample lacks its closing blank line (an editor, a copy): speedscope reads
        # the sample, so does pinchpoint; only `collapse` drops it, as the script does.
        samples[-1] = replace(samples[-1], complete=True)
    if not samples:
        raise TraceError(
            f"{path}: no perf samples in it; expected `perf script` text "
            "(perf record -g ..., then perf script -i perf.data > FILE)"
        )
    merged: dict[tuple[int | None, str, tuple[Frame, ...]], int] = {}
    ns = True
    for folded in _fold(samples, _Options()):
        frames = tuple(Frame(function, frame.dso) for function, frame in folded.frames)
        key = (folded.head.pid, str(folded.head.tid), frames)
        merged[key] = merged.get(key, 0) + folded.weight
        event = (folded.head.event or "").split(":")[0]
        ns = ns and folded.head.period is not None and event in NS_PERIOD_EVENTS
    if not any(frames for _, _, frames in merged):
        raise TraceError(
            f"{path}: {len(samples)} perf samples but no call stacks in them; record with `perf record -g`"
        )
    stacks = tuple(
        StackSample(frames=frames, count=count, pid=pid, thread=thread)
        for (pid, thread, frames), count in merged.items()
    )
    return Stacks(samples=stacks, rate_hz=1e9 if ns else None, source=path.name, idle_included=False), bad


def _read_text(path: Path) -> str:
    """The file's text, refused with a TraceError when missing, too big, or binary."""
    try:
        with path.open("rb") as f:
            magic = f.read(len(_PERF_DATA_MAGIC))
        if magic.startswith(_GZIP_MAGIC):
            with gzip.open(path, "rb") as gz:
                data = gz.read(MAX_BYTES + 1)
        else:
            size = path.stat().st_size
            if size > MAX_BYTES:
                raise TraceError(
                    f"{path}: {size >> 20} MiB of perf script text is more than pinchpoint reads "
                    f"({MAX_BYTES >> 20} MiB); record fewer samples (perf record -F 99) or a shorter run"
                )
            data = path.read_bytes()
    except OSError as exc:  # gzip's BadGzipFile is one
        raise TraceError(f"{path}: cannot read the perf samples ({exc.strerror or exc})") from exc
    except (EOFError, zlib.error) as exc:
        raise TraceError(f"{path}: the gzip-compressed perf samples are cut or corrupt ({exc})") from exc
    if len(data) > MAX_BYTES:
        raise TraceError(
            f"{path}: more than {MAX_BYTES >> 20} MiB of perf script text, more than pinchpoint reads"
        )
    if magic == _PERF_DATA_MAGIC:
        raise TraceError(
            f"{path}: is perf's binary perf.data; convert it with `perf script -i {path} > FILE`"
        )
    if b"\0" in data[:_BINARY_PROBE]:
        raise TraceError(f"{path}: is binary, not `perf script` text")
    return data.decode("utf-8", errors="replace")
