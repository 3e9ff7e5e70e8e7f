"""allocator_churn -- glibc hands the step's big buffers back to the OS, and page-faults them in again.

The same bf16 sequence classifier as healthy.py (its code, imported: feed-forward blocks, d=256, 64 tokens, batch 32,
in-memory data), with one difference: glibc's malloc hands big blocks back to the OS. The step's
activations and gradients are 2-8 MiB each; glibc serves such blocks from fresh mmaps and unmaps them
when they are freed, so every step the kernel maps and zeroes them again, one 4 KiB page fault at a
time, on the threads that should be computing. Nothing in the Python code looks wrong, and no framework
profiler shows it: the time hides inside the ops that first touch the memory.

With glibc's defaults this program churns too, but by how much depends on its allocation history
(glibc moves its mmap and trim thresholds up as big blocks are freed): 1,800-6,000 faults a step were
seen between runs, and anything else that allocates in the process -- a profiler -- moves it. So the
plant pins the mmap threshold at 4 MiB (what ``MALLOC_MMAP_THRESHOLD_=4194304`` does; a fixed
threshold also stops glibc moving it), and every run churns the same way.

Planted: memory.pressure (allocator churn).  ``--fix`` raises glibc's mmap and trim thresholds at
start-up (mallopt, the in-process equivalent of ``MALLOC_MMAP_THRESHOLD_=33554432
MALLOC_TRIM_THRESHOLD_=1073741824`` in the environment, or of preloading jemalloc/tcmalloc), so freed
memory stays in the process and is reused without faults -- exactly what healthy.py does.
"""
import ctypes

from healthy import M_MMAP_THRESHOLD, keep_freed_memory, parse_args, train

PLANTED = ["memory.pressure"]
LOADED = "shrinks: its faults cost the same per step while a contended step stretches"


def churn_big_blocks():
    """Blocks of 4 MiB and up are mapped fresh when allocated and unmapped when freed, every time."""
    ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, 4 << 20)


def main():
    args = parse_args(__doc__.splitlines()[0], "keep freed memory in the process (mallopt)")
    if args.fix:
        keep_freed_memory()
    else:
        churn_big_blocks()
    train(args)


if __name__ == "__main__":
    main()
