"""Whatever the bytes, `read_trace` returns a KinetoTrace or raises TraceError: nothing else escapes."""

from __future__ import annotations

import gzip
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pinchpoint.errors import TraceError
from pinchpoint.ingest.kineto import read_trace
from pinchpoint.trace.kineto import KinetoTrace

REAL = (
    Path(__file__).parent
    / "data"
    / "traces"
    / "hta"
    / "amd_trace"
    / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
)
TEXT = gzip.decompress(REAL.read_bytes())[:20_000]  # the head: metadata and ~60 events (cut mid-event)
SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def check(tmp_path: Path, data: bytes, gz: bool, block: int) -> None:
    p = tmp_path / ("f.json.gz" if gz else "f.json")
    p.write_bytes(gzip.compress(data) if gz else data)
    try:
        t = read_trace(p, block_bytes=block)
    except TraceError as e:
        assert "\n" not in str(e)
        return
    assert isinstance(t, KinetoTrace)
    assert len(t.events.start_ns) == len(t.events.dur_ns) == len(t.events.kind)
    assert (t.events.dur_ns >= 0).all()


@SETTINGS
@given(data=st.binary(max_size=400), gz=st.booleans())
def test_random_bytes(tmp_path: Path, data: bytes, gz: bool) -> None:
    check(tmp_path, data, gz, 64)


@SETTINGS
@given(
    edits=st.lists(st.tuples(st.integers(0, len(TEXT) - 1), st.binary(min_size=0, max_size=3)), max_size=6),
    cut=st.integers(0, len(TEXT)),
    gz=st.booleans(),
    block=st.sampled_from([97, 1000, 1 << 20]),
)
def test_mutated_real_trace(
    tmp_path: Path, edits: list[tuple[int, bytes]], cut: int, gz: bool, block: int
) -> None:
    data = bytearray(TEXT[:cut])
    for pos, repl in edits:
        if pos < len(data):
            data[pos : pos + 1] = repl
    check(tmp_path, bytes(data), gz, block)


@SETTINGS
@given(cut=st.integers(1, len(REAL.read_bytes()) - 1))
def test_truncated_gzip_of_real_trace(tmp_path: Path, cut: int) -> None:
    p = tmp_path / "t.json.gz"
    p.write_bytes(REAL.read_bytes()[:cut])
    try:
        t = read_trace(p, block_bytes=4096)
    except TraceError:
        return
    assert any("truncated" in w for w in t.warnings)
