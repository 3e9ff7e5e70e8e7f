"""The agent's per-thread counters and its line writer."""

from __future__ import annotations

import json
import os
import time

import pytest

from pinchpoint.capture import procfs
from pinchpoint.capture.writer import JsonlWriter


def _burn(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


@pytest.mark.skipif(not os.path.exists("/proc/thread-self/schedstat"), reason="Linux schedstat")
def test_thread_schedstat_follows_the_calling_thread_and_a_forked_child() -> None:
    first = procfs.thread_schedstat()
    assert first is not None
    _burn(0.05)
    later = procfs.thread_schedstat()
    assert later is not None and later[0] - first[0] >= 40_000_000  # the open file is re-read
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child must read its own thread, not the parent's (blocked in waitpid)
        try:
            procfs.forget_thread_files()
            a = procfs.thread_schedstat()
            _burn(0.05)
            b = procfs.thread_schedstat()
            os.write(w, json.dumps([a, b]).encode())
        finally:
            os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    a, b = json.loads(os.read(r, 1000))
    os.close(r)
    assert b[0] - a[0] >= 40_000_000


def test_jsonl_writer_writes_compact_json_lines(tmp_path) -> None:
    w = JsonlWriter(tmp_path / "x.jsonl")
    rec = {"step": 3, "kind": "train", "intervals": [["forward", 1, 2]], "runq_ns": None, "profiled": False}
    w.add(rec)
    w.add({"s": 'quote " and ünïcode'})
    w.flush()
    w.close()
    lines = (tmp_path / "x.jsonl").read_bytes().splitlines()
    assert [json.loads(x) for x in lines] == [rec, {"s": 'quote " and ünïcode'}]
    assert lines[0] == json.dumps(rec, separators=(",", ":")).encode()
