"""A process watched from outside (`pinchpoint attach` without its agent), in the terminal: why, the
main thread's time by phase, the findings, and what could not be judged from outside."""

from __future__ import annotations

from typing import TextIO

from pinchpoint.report.outside_doc import OutsideDoc

PHASE_NAMES = {
    "data_wait": "DataLoader (fetching or waiting for a batch)",
    "forward": "forward (module calls)",
    "backward": "backward",
    "optimizer": "optimizer",
    "checkpoint": "checkpoint (torch.save / load)",
    "loop": "the loop's own code",
    "other": "outside the program's code",
}


def render_outside(doc: OutsideDoc, out: TextIO) -> None:
    run = doc.run
    print(f"pinchpoint  attach {run.attach.pid} from outside ({' '.join(run.command)[:80]})", file=out)
    print(f"  no agent in the process: {run.reason}", file=out)
    cpu = doc.cpu
    facts = [f"{cpu.usable_cores} usable cores"]
    if cpu.process_cores is not None:
        facts.append(f"the process kept {cpu.process_cores:.1f} busy")
    if cpu.main_thread_cores is not None:
        facts.append(f"its main thread on a CPU {cpu.main_thread_cores:.0%} of the time")
    if cpu.busy_threads is not None:
        facts.append(f"{cpu.busy_threads} of its {cpu.threads} threads busy")
    print("  " + ", ".join(facts), file=out)
    for g in doc.gpus:
        print(f"  GPU {g.index}: busy {g.util_percent_median:.0f}% of the time (NVML, median)", file=out)
    main = doc.main_thread
    if main is not None:
        print(file=out)
        print(f"Main thread's time ({main.samples} Python stack samples, waits included)", file=out)
        for phase, share in sorted(main.shares.items(), key=lambda kv: -kv[1]):
            if share >= 0.005:
                print(f"  {PHASE_NAMES.get(phase, phase):46s} {share:6.1%}", file=out)
    print(file=out)
    if not doc.findings:
        print("No finding can be supported from outside.", file=out)
    for i, f in enumerate(doc.findings, 1):
        of_time = "" if f.share is None else f"  {f.share:.0%} of the main thread's time"
        print(f"{i}. {f.title}  [{f.id}]{of_time} · confidence {f.confidence}", file=out)
        for line in f.evidence:
            print(f"   • {line}", file=out)
        print(f"   Fix: {f.fix}", file=out)
    for note in doc.notes:
        print(f"Note: {note}", file=out)
    print(file=out)
    print("Not judged from outside (attach with the agent for these):", file=out)
    for item in doc.not_judged:
        print(f"  {item.what}: needs {item.needs}", file=out)
    for w in doc.warnings:
        print(f"pinchpoint: warning: {w}", file=out)
