"""A measured fix for allocator churn: a few steps with glibc's mmap and trim thresholds raised.

Faults × a probed cost per fault priced churn ×2.5–3.6 too high on one machine and missed it on
another (the probe's fresh pages fault dearer than memory the kernel just took back; steps before the
op window faulted less than the ones after). So when the program's steps keep faulting pages in
(`MIN_FAULTS` a step, median of the last `MIN_SEEN` steps), pinchpoint runs the next steps the way the fix
would: `mallopt(M_MMAP_THRESHOLD, 32 MiB)` and `mallopt(M_TRIM_THRESHOLD, 1 GiB)` — what
`MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824` does from the environment — one
warm-up step (the heap grows to hold the step's blocks), then three measured, sets the thresholds
back for a step (the heap is faulted in again) and three reference steps, and does it once more
(`SCHEDULE`). Those steps are marked `trial` in steps.jsonl and `alloc_trial.json` says which were
measured and which were the reference.

Setting them back is approximate, and the file says how: glibc moves its thresholds itself until a
program sets one, and no call turns that back on. The values set back are the environment's when the
program was started with them, else the mmap threshold found by asking malloc for growing blocks and
seeing which size it maps (`malloc_usable_size`: a mapped block has a page's slack) — asked on a new
thread, whose arena holds few free blocks (the main arena's between two steps serve big sizes from the
heap and make the threshold look higher) — and a trim threshold by glibc's rules: twice the mmap
threshold while glibc still adjusts them (asking twice finds a higher threshold), its 128 KiB default
once the program pinned one (`restore_values`). Once set, glibc
keeps them fixed, where before it could still raise them. Then `malloc_trim(0)` hands back what the
trial kept (up to the 1 GiB trim threshold, and the holes it left), so the heap starts over as the
program's own settings grow it, not with the trial's reserve. The steps after the trial may still
fault less than the ones before; the analysis compares them and says so.

Only glibc's malloc (no jemalloc/tcmalloc/mimalloc mapped) and only one rank per machine: ranks wait
for each other, so one rank's faster steps price nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from pathlib import Path
from typing import Any

from pinchpoint.capture.writer import write_json_atomic
from pinchpoint.trace.trials import GLIBC_MMAP_THRESHOLD, GLIBC_TRIM_THRESHOLD

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
TRIAL_MMAP, TRIAL_TRIM = GLIBC_MMAP_THRESHOLD, GLIBC_TRIM_THRESHOLD
GLIBC_DEFAULT = 128 << 10
"""glibc's initial mmap and trim thresholds."""
MIN_FAULTS = 256
"""Minor faults per step (1 MiB of fresh pages) before churn is worth a trial (the rule's threshold)."""
MIN_SEEN = 4
"""Steps seen at the program's own settings before deciding; the last this many decide (glibc raises
its mmap threshold itself after the first big block is freed: a program whose first steps faulted
5-20k pages may have stopped by the time the window is over, and a trial then costs ~10% of 13 steps
for nothing)."""
SCHEDULE = ("warm", "on", "on", "on", "back", "ref", "ref", "ref", "warm", "on", "on", "on", "back")
"""The trial's steps: thresholds raised (a warm-up step while the heap grows, then measured), set back
(a step while the heap is faulted in again, then reference steps at the program's settings), raised
again, set back. This VM's steps drift by ×1.6 over seconds: one block of five measured steps took a
drift for a gain (×1.24 where the glibc-tuned run measured ×1.09); two blocks with the program's own
settings between them must both be faster."""
FILE = "alloc_trial.json"
OTHER_ALLOCATORS = ("jemalloc", "tcmalloc", "mimalloc", "hoard", "tbbmalloc")


class Glibc:
    """glibc's mallopt and malloc_usable_size through ctypes; `load()` is None on another allocator."""

    def __init__(self, libc: Any) -> None:
        self.libc = libc
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.malloc.restype = ctypes.c_void_p
        libc.malloc.argtypes = [ctypes.c_size_t]
        libc.free.argtypes = [ctypes.c_void_p]
        libc.malloc_usable_size.restype = ctypes.c_size_t
        libc.malloc_usable_size.argtypes = [ctypes.c_void_p]

    @classmethod
    def load(cls) -> Glibc | None:
        if other_allocator():
            return None
        try:
            libc = ctypes.CDLL(None)
            libc.gnu_get_libc_version  # noqa: B018  (glibc, not musl)
            return cls(libc)
        except (OSError, AttributeError):
            return None

    def set(self, mmap: int, trim: int) -> bool:
        return bool(self.libc.mallopt(M_MMAP_THRESHOLD, mmap)) and bool(
            self.libc.mallopt(M_TRIM_THRESHOLD, trim)
        )

    def mapped_from_thread(self) -> int:
        """`mapped_from` on a new thread: its arena (new, or a finished thread's) holds few free blocks
        that could serve the sizes from the heap, unlike the main arena between two steps."""
        return self.thresholds_from_thread()[0]

    def thresholds_from_thread(self) -> tuple[int, bool]:
        """(`mapped_from`, whether glibc still adjusts its thresholds) on one new thread. `mapped_from`
        frees a mapped block above the threshold it found last; glibc, while it adjusts, raises its
        threshold to that block's size, so asking again finds more. After any `mallopt` of a threshold
        (or the environment's) it keeps them fixed and asking again finds the same."""
        found: list[tuple[int, bool]] = []

        def probe() -> None:
            first = self.mapped_from()
            found.append((first, self.mapped_from() >= first + 4096))

        t = threading.Thread(target=probe, name="pinchpoint-malloc-probe")
        t.start()
        t.join(timeout=1.0)
        return found[0] if found else (TRIAL_MMAP, False)

    def mapped_from(self) -> int:
        """The smallest block size (to a page) that malloc serves with its own mmap: a mapped block's
        usable size has a page's slack, a heap block's 8 bytes. Every block asked for is held until the
        end: a freed one would go back to the heap's free space and serve the next, larger size from
        there (the threshold applies only when the heap must grow), and a freed mapped one would move
        glibc's adjustable threshold. Sizes climb 2^(1/16) apart, then halve the gap to a page."""
        held: list[int] = []

        def mapped(size: int) -> bool | None:
            p = self.libc.malloc(size)
            if not p:
                return None
            held.append(p)
            return int(self.libc.malloc_usable_size(p)) - size > 2048

        try:
            low, size = 0, GLIBC_DEFAULT
            while size <= TRIAL_MMAP:
                found = mapped(size)
                if found is None:
                    return TRIAL_MMAP
                if found:
                    break
                low, size = size, _pages(size * 2 ** (1 / 16))
            else:
                return TRIAL_MMAP
            high = size
            while high - low > 4096 and low:
                mid = _pages((low + high) / 2)
                if mid in (low, high):
                    break
                found = mapped(mid)
                if found is None:
                    break
                low, high = (low, mid) if found else (mid, high)
            return high
        finally:
            for p in reversed(held):
                self.libc.free(p)


def _pages(n: float) -> int:
    return (int(n) + 4095) // 4096 * 4096


def other_allocator() -> bool:
    """Another malloc is preloaded or mapped (its mallopt is a no-op or absent)."""
    if any(a in os.environ.get("LD_PRELOAD", "") for a in OTHER_ALLOCATORS):
        return True
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            maps = f.read()
    except OSError:
        return False
    return any(f"lib{a}" in maps for a in OTHER_ALLOCATORS)


def env_thresholds() -> tuple[int | None, int | None]:
    """(mmap, trim) thresholds the environment set (MALLOC_*_ or GLIBC_TUNABLES), None where unset."""
    values: dict[str, int | None] = {"mmap": None, "trim": None}
    for key, name in (("mmap", "MALLOC_MMAP_THRESHOLD_"), ("trim", "MALLOC_TRIM_THRESHOLD_")):
        values[key] = _int(os.environ.get(name))
    for item in os.environ.get("GLIBC_TUNABLES", "").split(":"):
        tunable, _, value = item.partition("=")
        which = {"glibc.malloc.mmap_threshold": "mmap", "glibc.malloc.trim_threshold": "trim"}.get(tunable)
        if which is not None and _int(value) is not None:
            values[which] = _int(value)
    return values["mmap"], values["trim"]


def _int(s: str | None) -> int | None:
    try:
        return int(s, 0) if s else None
    except ValueError:
        return None


def restore_values(glibc: Glibc) -> dict[str, Any]:
    """The thresholds to set back after the trial, and where each came from. No getter gives glibc's
    trim threshold. While glibc adjusts its thresholds it keeps trim at twice the mmap threshold; once a
    program pins one with `mallopt`, trim stays where it was, glibc's 128 KiB unless it had moved or
    the program set it too (not seen: such a program is set back to 128 KiB). Twice the mmap threshold
    set back for a program that had pinned only its mmap threshold at 4 MiB kept 8 MiB at the heap's
    top, and its reference steps faulted half as often as its own."""
    env_mmap, env_trim = env_thresholds()
    # (thresholds from the environment are pinned ones: nothing to probe)
    probed, adjusting = glibc.thresholds_from_thread() if env_mmap is None else (env_mmap, False)
    mmap = min(probed, TRIAL_MMAP)
    if env_trim is not None:
        trim, trim_from = env_trim, "environment"
    elif adjusting:
        trim, trim_from = (2 * mmap if mmap > GLIBC_DEFAULT else GLIBC_DEFAULT), "glibc's rule"
    else:
        trim, trim_from = GLIBC_DEFAULT, "glibc's default (the program pinned its thresholds)"
    return {
        "mmap_threshold": mmap,
        "trim_threshold": trim,
        "from": "environment" if env_mmap is not None else "probed",
        "trim_from": trim_from,
    }


class AllocTrialRunner:
    def __init__(self, rank_dir: Path) -> None:
        self.rank_dir = rank_dir
        self.state = "idle"  # idle -> running -> done
        self.seen: list[int] = []
        """Minor faults of the steps run at the program's own settings (after the first)."""
        self.first = 0
        self.glibc: Glibc | None = None
        self.raised = False
        self.restore_to: dict[str, Any] = {}

    def observe(self, index: int, faults: int, own_settings: bool) -> None:
        """A finished step's faults; only steps untouched by the window and trials count."""
        if self.state == "idle" and own_settings and index > 0:
            self.seen.append(faults)

    def on_step_end(self, next_step: int, ready: bool) -> bool:
        """At the boundary before step `next_step`; `ready`: the window and the thread trial are over.
        Returns whether `next_step` is a trial step (including the one after setting back)."""
        if self.state == "done":
            return False
        if self.state == "idle":
            if not ready or len(self.seen) < MIN_SEEN:
                return False
            self.state = "done"
            if _median(self.seen[-MIN_SEEN:]) < MIN_FAULTS or ranks() > 1:
                return False
            glibc = Glibc.load()
            if glibc is None:
                return False
            try:
                restore_to = restore_values(glibc)
                if not glibc.set(TRIAL_MMAP, TRIAL_TRIM):
                    glibc.set(restore_to["mmap_threshold"], restore_to["trim_threshold"])
                    return False
            except Exception:
                return False
            self.glibc, self.restore_to, self.raised = glibc, restore_to, True
            self.first, self.state = next_step, "running"
            return True
        offset = next_step - self.first
        if offset < len(SCHEDULE):
            wanted = SCHEDULE[offset] in ("warm", "on")
            if wanted != self.raised:
                self._raise() if wanted else self._set_back()
            return True
        self.restore()
        on = [self.first + i for i, what in enumerate(SCHEDULE) if what == "on"]
        off = [self.first + i for i, what in enumerate(SCHEDULE) if what == "ref"]
        with contextlib.suppress(OSError):
            write_json_atomic(
                self.rank_dir / FILE,
                {
                    "mmap_threshold": TRIAL_MMAP,
                    "trim_threshold": TRIAL_TRIM,
                    "steps": on,
                    "reference_steps": off,
                    "faults_before": _median(self.seen),
                    "restored": self.restore_to,
                },
            )
        return False

    def _raise(self) -> None:
        if self.glibc is not None:
            with contextlib.suppress(Exception):
                self.raised = self.glibc.set(TRIAL_MMAP, TRIAL_TRIM)

    def _set_back(self) -> None:
        self.raised = False
        if self.glibc is not None:
            with contextlib.suppress(Exception):
                self.glibc.set(self.restore_to["mmap_threshold"], self.restore_to["trim_threshold"])
                self.glibc.libc.malloc_trim(0)  # hand back what the trial kept: the heap starts over

    def restore(self) -> None:
        """The program's thresholds back (also when the program ends mid-trial)."""
        if self.state != "running" or self.glibc is None:
            return
        self.state = "done"
        if self.raised:
            self._set_back()


def _median(xs: list[int]) -> int:
    s = sorted(xs)
    return s[len(s) // 2] if s else 0


def ranks() -> int:
    """The run's ranks (torchrun's WORLD_SIZE, LOCAL_WORLD_SIZE): a trial on one rank of several prices
    nothing (the ranks wait for each other)."""
    try:
        return max(
            int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1), int(os.environ.get("WORLD_SIZE", "1") or 1)
        )
    except ValueError:
        return 1
