"""allocator_churn -- glibc hands the step's big buffers back to the OS, and page-faults them in again.

The same bf16 sequence classifier as healthy.py (its code, imported: feed-forward blocks, d=256, 64 tokens, batch 32,
in-memory data), with one difference: glibc's malloc runs with its default settings. The step's
activations and gradients are 2-8 MiB each; glibc serves such blocks from fresh mmaps or trims them off
the top of its heap when they are freed, so every step the kernel maps and zeroes ~12-24 MiB again, one
4 KiB page fault at a time, on the threads that should be computing. Nothing in the Python code looks
wrong, and no framework profiler shows it: the time hides inside the ops that first touch the memory.

Planted: memory.pressure (allocator churn).  ``--fix`` raises glibc's mmap and trim thresholds at
start-up (mallopt, the in-process equivalent of ``MALLOC_MMAP_THRESHOLD_=33554432
MALLOC_TRIM_THRESHOLD_=1073741824`` in the environment, or of preloading jemalloc/tcmalloc), so freed
memory stays in the process and is reused without faults -- exactly what healthy.py does.
"""
from healthy import keep_freed_memory, parse_args, train

PLANTED = ["memory.pressure"]


def main():
    args = parse_args(__doc__.splitlines()[0], "keep freed memory in the process (mallopt)")
    if args.fix:
        keep_freed_memory()
    train(args)


if __name__ == "__main__":
    main()
