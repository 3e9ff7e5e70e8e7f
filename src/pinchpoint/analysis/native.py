"""Where native (perf) samples of a process went: the causes pinchpoint's findings need evidence for.

Input: `Stacks` whose frames are native, root first: `Frame.function` the symbol (`clear_page_erms`,
`mkl_blas_def_sgemm_kernel_0_zen`, `[unknown]`), `Frame.file` the DSO (`[kernel.kallsyms]`,
`.../libgomp.so.1`, `perf-1234.map` for JIT code), `StackSample.thread` the thread id, the count a
sample's weight (a `cpu-clock` sample's period, so shares are shares of CPU time).

Each sample is charged to one cause, the first that matches, walking from the leaf:

  page_faults  the kernel faulting pages in and zeroing them (allocator churn: glibc handing big blocks
               back to the OS and taking them again)
  unmap        munmap/madvise giving memory back
  omp_runtime  the OpenMP runtime itself (libgomp / libiomp: barrier spin and yield, thread wake-ups)
  sched        the kernel's scheduler and futex paths (threads handed between cores)
  memcpy       memcpy / memmove / memset
  python       the interpreter (libpython or the python binary)
  math         BLAS and oneDNN kernels (MKL, OpenBLAS, oneDNN's JIT kernels when symbolized)
  jit_unnamed  JIT code perf could not name (oneDNN's kernels without `ONEDNN_JIT_PROFILE`)
  other        the rest (torch's own CPU kernels, libc, the loader)

Also: how the samples spread over threads (sixteen busy OpenMP threads on two cores is
oversubscription seen directly), and which math kernels ran, with the instruction set their names
carry (`avx512_core_amx`, `avx512_core_bf16`, `avx2`, MKL's `def` / `avx2` / `avx512` code paths): the
hardware-software interaction read from the binary that ran.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass

from pinchpoint.trace.stacks import Frame, Stacks, StackSample

CAUSES = (
    "page_faults",
    "unmap",
    "omp_runtime",
    "sched",
    "memcpy",
    "python",
    "math",
    "jit_unnamed",
    "other",
)
KERNEL_DSO = "[kernel.kallsyms]"
_PAGE_FAULT = re.compile(
    r"clear_page|clear_huge_page|do_anonymous_page|handle_mm_fault|exc_page_fault|do_huge_pmd_anonymous"
)
_UNMAP = re.compile(r"sys_munmap|__vm_munmap|zap_pte_range|unmap_region|sys_madvise|unmap_page_range")
_SCHED = re.compile(r"futex|sched_yield|\bschedule\b|__schedule|finish_task_switch|try_to_wake_up")
_OMP_DSO = re.compile(r"lib(g|i)omp|libomp\.so")
_MEMCPY = re.compile(r"mem(cpy|move|set)")
_PYTHON_DSO = re.compile(r"(^|/)(libpython[\d.]*\.so[\d.]*|python[\d.]*)$")
_MATH = re.compile(r"mkl_|dnnl|onednn|jit_|brgemm|gemm|openblas|blas_thread|libxsmm|cpublas|_dot_with")
_JIT_DSO = re.compile(r"(^|/)perf-\d+\.map$|^//anon$|\[anon")
KERNEL_WINDOW = 16
"""Frames from the leaf searched for the kernel paths (a page fault's stack is a few frames deep)."""
_ISA = (
    (
        "reference (torch's fallback gemm)",
        re.compile(r"cpublas_gemm_impl|gemm_transb_impl|gemm_notrans_|gemm_transa_"),
    ),
    ("avx512_core_amx", re.compile(r"amx")),
    ("avx512_core_bf16", re.compile(r"avx512_core_bf16|avx512_bf16")),
    ("avx512", re.compile(r"avx512")),
    ("avx2", re.compile(r"avx2")),
    ("sse4.1", re.compile(r"sse41|sse4_1")),
    ("MKL's non-Intel path (def, Zen kernels)", re.compile(r"mkl_blas_def_.*_zen")),
    ("MKL's non-Intel path (def)", re.compile(r"mkl_blas_def_")),
    ("portable (oneDNN uni)", re.compile(r"jit_uni_")),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class MathKernel:
    family: str
    """The kernel's name without offsets and template noise (`mkl_blas_def_sgemm_kernel_0_zen`)."""
    isa: str | None
    """The instruction set its name says, when it says one."""
    share: float
    """Of all the process's samples."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NativeBreakdown:
    total: int
    """Sample weight (periods: ns of CPU for `cpu-clock`)."""
    shares: dict[str, float]
    """cause -> share of `total`, every cause in `CAUSES`."""
    threads: int
    """Threads that had samples."""
    busy_threads: int
    """Threads with at least `BUSY_THREAD` of an even share of the samples (total / threads): the
    main thread does the Python and the set-up, so it is no yardstick for the intra-op threads."""
    kernels: tuple[MathKernel, ...]
    """The top math kernels, most samples first."""
    isa_shares: dict[str, float]
    """Instruction set named by the math kernels -> share of the math samples."""


BUSY_THREAD = 0.25
TOP_KERNELS = 5


def cause(frames: tuple[Frame, ...]) -> str:
    """The cause one sample is charged to (frames root first)."""
    leaf_first = frames[::-1]
    kernel = [f.function for f in leaf_first[:KERNEL_WINDOW] if f.file == KERNEL_DSO]
    if any(_PAGE_FAULT.search(s) for s in kernel):
        return "page_faults"
    if any(_UNMAP.search(s) for s in kernel):
        return "unmap"
    user = next((f for f in leaf_first if f.file != KERNEL_DSO), None)
    if user is not None and _OMP_DSO.search(user.file):
        return "omp_runtime"
    if any(_SCHED.search(s) for s in kernel):
        return "sched"
    if user is None:
        return "other"
    if _MEMCPY.search(user.function):
        return "memcpy"
    if _PYTHON_DSO.search(user.file):
        return "python"
    if _MATH.search(user.function.lower()) or _MATH.search(user.file.rsplit("/", 1)[-1].lower()):
        return "math"
    if _JIT_DSO.search(user.file):
        return "jit_unnamed"
    return "other"


def kernel_family(symbol: str) -> str:
    """`mkl_blas_def_sgemm_kernel_0_zen+0x172` -> `mkl_blas_def_sgemm_kernel_0_zen`; C++ names lose their
    argument lists and template arguments."""
    name = re.sub(r"\+0x[0-9a-f]+$", "", symbol).replace("(anonymous namespace)", "{anon}")
    name = re.sub(r"\(.*$", "", name)
    depth, out = 0, []
    for ch in name:
        depth += ch == "<"
        if depth == 0:
            out.append(ch)
        depth -= ch == ">" and depth > 0
    return "".join(out).strip() or symbol


def isa_of(name: str) -> str | None:
    low = name.lower()
    return next((isa for isa, pattern in _ISA if pattern.search(low)), None)


def native_breakdown(stacks: Stacks, pids: set[int] | None = None) -> NativeBreakdown | None:
    """None without samples. `pids`: only these processes' samples (one rank's, of several)."""
    by_cause: Counter[str] = Counter()
    by_thread: Counter[str] = Counter()
    kernels: Counter[str] = Counter()
    for s in stacks.samples:
        if not s.frames or s.count <= 0 or (pids is not None and s.pid not in pids):
            continue
        c = cause(s.frames)
        by_cause[c] += s.count
        by_thread[s.thread or str(s.pid)] += s.count
        if c == "math":
            kernels[_math_leaf(s)] += s.count
    total = sum(by_cause.values())
    if total == 0:
        return None
    even = total / len(by_thread)
    math_total = sum(kernels.values())
    isa: defaultdict[str, int] = defaultdict(int)
    for name, n in kernels.items():
        isa[isa_of(name) or "unnamed"] += n
    return NativeBreakdown(
        total=total,
        shares={c: by_cause[c] / total for c in CAUSES},
        threads=len(by_thread),
        busy_threads=sum(1 for n in by_thread.values() if n >= BUSY_THREAD * even),
        kernels=tuple(
            MathKernel(family=name, isa=isa_of(name), share=n / total)
            for name, n in kernels.most_common(TOP_KERNELS)
        ),
        isa_shares={k: v / math_total for k, v in sorted(isa.items(), key=lambda kv: -kv[1])}
        if math_total
        else {},
    )


def _math_leaf(s: StackSample) -> str:
    user = next((f for f in s.frames[::-1] if f.file != KERNEL_DSO), None)
    return kernel_family(user.function) if user is not None else "?"
