"""Measure the ground truth of the pinchpoint example programs.

For every example (or those named on the command line) run the planted version and
each fixed version alternately, R times, take the median of the reported
``median_step_ms`` per variant (``mean_step_ms`` where the example prints it: one whose
cost falls on some steps only, such as a save every few steps), and print a table with speedup = before/after and
measured share = 1 - after/before.  ``--markdown`` also writes examples/TRUTH.md.

The machine may be shared.  Around every run we measure CPU time burnt by processes
other than the example (system busy time from /proc/stat minus the CPU time of the
example's process tree); a run during which that "foreign" load exceeded
``--max-foreign`` of the machine is repeated (up to ``--retries`` times; the least
disturbed attempt is kept).

    python examples/measure_truth.py                 # all examples, R=3
    python examples/measure_truth.py host_python -r 5
    python examples/measure_truth.py --markdown      # merges into TRUTH.md's section for this machine kind
    python examples/measure_truth.py --missing --markdown   # only the rows this machine kind lacks

A truth measured beside another job is not a truth: with ``--markdown`` the machine must be idle when the
measurement starts (other processes under ``--max-foreign`` of it), else this refuses (exit 2); a row
whose every attempt ran beside such load is printed but not written.
"""
import argparse
import datetime
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import time

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
# name -> (planted, [(fix label, extra argv)]); baseline is always the bare script. An argv word
# "env:NAME=VALUE" sets NAME in the program's environment instead (a fix outside the code); a label
# ending in "(category)" measured that cause, not the planted one (tests/truth.py reads it so). A word
# "preload:NAME" preloads that malloc (jemalloc, tcmalloc) where installed, as `pinchpoint try` does;
# where it is not installed, the variant is skipped.
GLIBC_KEEPS = ("glibc env (memory.pressure)",
               ["env:MALLOC_MMAP_THRESHOLD_=33554432", "env:MALLOC_TRIM_THRESHOLD_=1073741824"])
EXAMPLES = {
    "input_fetch": ("input.fetch", [("--fix", ["--fix"])]),
    "input_preprocess": ("input.preprocess", [("--fix", ["--fix"]), ("--workers 2", ["--workers", "2"]), GLIBC_KEEPS]),
    "input_tiny_batches": ("input.preprocess", [("--fix", ["--fix"]), ("--workers 1", ["--workers", "1"]),
                                                ("--workers 2", ["--workers", "2"])]),
    "host_python": ("host.python", [("--fix", ["--fix"])]),
    "host_dispatch": ("host.dispatch", [("--fix", ["--fix"])]),
    "serving_batch1": ("host.dispatch", [("--fix", ["--fix"])]),
    "compute_math": ("compute.math", [("--fix", ["--fix"])]),
    "compute_conv": ("compute.math", [("--fix", ["--fix"])]),
    "compute_memory": ("compute.memory", [("--fix", ["--fix"]), ("bf16 autocast (compute.math)", ["--bf16"])]),
    "ddp_straggler": ("imbalance.straggler", [("--fix", ["--fix"])]),
    "comm_exposed": ("comm.exposed", [("--fix", ["--fix"])]),
    "fsdp_reshard": ("comm.exposed", [("--fix", ["--fix"])]),
    "pipeline_bubble": ("pipeline.bubble", [("--fix", ["--fix"])]),
    "tp_oversplit": ("comm.tensor_parallel", [("--fix", ["--fix"])]),
    "compile_recompiles": ("compile.recompiles", [("--fix", ["--fix"])]),
    "compile_graph_break": ("compile.graph_breaks", [("--fix", ["--fix"]),
                                                     ("capture_scalar_outputs", ["env:TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS=1"])]),
    "cpu_oversubscription": ("cpu.oversubscription", [("--fix", ["--fix"])]),
    "cpu_underuse": ("cpu.underuse", [("--fix", ["--fix"])]),
    "io_checkpoint": ("io.checkpoint", [("--fix", ["--fix"]), GLIBC_KEEPS]),
    "checkpoint_periodic": ("io.checkpoint", [("--fix", ["--fix"]), GLIBC_KEEPS]),
    "rollout_sequential": ("run.rollouts", [("--fix", ["--fix"])]),
    "eval_every_epoch": ("run.evaluation", [("--fix", ["--fix"])]),
    "epoch_workers": ("input.worker_restart", [("--fix", ["--fix"])]),
    "startup_build": ("run.startup", [("--fix", ["--fix"])]),
    "compile_cold_cache": ("compile.time", [("--fix", ["--fix"])]),
    "compile_value_guard": ("compile.recompiles", [("--fix", ["--fix"])]),
    "generate_no_cache": ("compute.recompute", [("--fix", ["--fix"])]),
    "serve_one_at_a_time": ("serve.batching", [("--fix", ["--fix"])]),
    "gc_epoch_collect": ("host.gc", [("--fix", ["--fix"]), ("--freeze", ["--freeze"])]),
    "memory_leak": ("memory.leak", [("--fix", ["--fix"])]),
    "allocator_churn": ("memory.pressure", [("--fix", ["--fix"]), ("jemalloc preload", ["preload:jemalloc"]),
                                            ("tcmalloc preload", ["preload:tcmalloc"])]),
    "healthy": ("(none)", [("--fix (no-op)", ["--fix"])]),
    "lightning_fit": ("input.fetch", [("--fix", ["--fix"]), GLIBC_KEEPS, ("bf16 mixed (compute.math)", ["--bf16"])]),
    "hf_trainer": ("input.fetch", [("--fix", ["--fix"]), GLIBC_KEEPS, ("bf16 mixed (compute.math)", ["--bf16"])]),
    "hf_clm": ("compute.memory", [("--fix", ["--fix"]), GLIBC_KEEPS, ("bf16 mixed (compute.math)", ["--bf16"])]),
    "lbfgs_sequence": ("host.dispatch", [("--fix", ["--fix"]), GLIBC_KEEPS,
                                         ("bf16 autocast (compute.math)", ["--bf16"])]),
    "lstm_manual_sgd": ("host.python", [("--fix", ["--fix"]), GLIBC_KEEPS]),
    "char_gpt_memmap": ("compute.memory", [("--fix", ["--fix"]), GLIBC_KEEPS]),
    "serve_generate": ("compute.recompute", [("--fix", ["--fix"]), ("batched streams (host.dispatch)", ["--batch"])]),
    "char_gpt_sample": ("host.dispatch", [("--fix", ["--fix"]), GLIBC_KEEPS,
                                          ("kv cache (compute.recompute)", ["--cache"])]),
    "hf_generate": ("host.dispatch", [("--fix", ["--fix"])]),
    "stacked_fixes": ("input.fetch + io.checkpoint", [("--fix input", ["--fix", "input"]),
                                                     ("--fix checkpoint", ["--fix", "checkpoint"]),
                                                     ("--fix all", ["--fix", "all"])]),
    "two_causes": ("input.fetch + host.python", [("--fix input", ["--fix", "input"]),
                                                ("--fix python", ["--fix", "python"]),
                                                ("--fix all", ["--fix", "all"])]),
}


def step_ms(tokens):
    """The step time a row compares: the mean where the example prints one (its cost falls on some
    steps only, which the median never holds), else the median. An example whose fix is judged on the
    whole run (rollouts between updates) prints its iteration's mean instead: that is its row; a server
    (`TRUTH_LOAD`) is timed by the load sent to it: ms per answered request (1 / throughput); one whose
    fix changes start-up, not its steps, prints its whole run (`run_ms`); one whose fix changes what the
    program's own clock cannot see (its exit too) declares `TRUTH_CLOCK = "process"`: the whole process's
    wall clock (`process_ms`)."""
    for key in ("request_ms", "process_ms", "run_ms", "mean_iteration_ms", "mean_step_ms", "median_step_ms"):
        if key in tokens:
            return tokens[key]
    return float("nan")


def busy_seconds():
    t = psutil.cpu_times()
    return sum(getattr(t, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq", "steal"))


def wait_for_quiet(max_wait=120.0, threshold=10.0):
    """Until this machine's own processes use under `threshold`% of it (steal -- the hypervisor's
    other guests -- is not a process here and waiting does not end it)."""
    deadline = time.time() + max_wait
    while time.time() < deadline:
        t = psutil.cpu_times_percent(interval=1.0)
        if t.user + t.nice + t.system + getattr(t, "irq", 0) + getattr(t, "softirq", 0) <= threshold:
            break


def _launch(script):
    """argv of the launcher an example declares (`LAUNCH = "torchrun --nproc_per_node=2"`), else []."""
    m = re.search(r'^LAUNCH = "([^"]+)"', open(script).read(), re.M)
    if m is None:
        return []
    words = m.group(1).split()
    return [os.path.join(os.path.dirname(sys.executable), words[0]), *words[1:]]


def preloaded(name):
    """The installed library of malloc `name`, found as `pinchpoint try` finds it (None: not here)."""
    from pinchpoint.pipeline import preload

    return preload.find(name)


def run_once(name, argv, timeout):
    """One run: returns (tokens dict, wall s, foreign fraction of machine)."""
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    b0, w0 = busy_seconds(), time.perf_counter()
    script = os.path.join(HERE, name + ".py")
    launch = _launch(script)  # e.g. torchrun for the DDP examples
    env = dict(os.environ, **dict(a[4:].split("=", 1) for a in argv if a.startswith("env:")))
    for a in argv:
        if a.startswith("preload:"):
            env["LD_PRELOAD"] = str(preloaded(a.removeprefix("preload:")))
    argv = [a for a in argv if not a.startswith(("env:", "preload:"))]
    load = re.search(r'^TRUTH_LOAD = "([^"]+)"', open(script).read(), re.M)
    if load is not None:
        proc = serve_once(script, argv, dict(w.split("=", 1) for w in load.group(1).split()), timeout, env)
    else:
        proc = subprocess.run([*launch, script, *argv] if launch else [sys.executable, script, *argv],
                              capture_output=True, text=True, timeout=timeout, env=env)
    wall, b1 = time.perf_counter() - w0, busy_seconds()
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{name} {argv} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    own = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    foreign = max(0.0, (b1 - b0) - own) / (wall * psutil.cpu_count())
    last = proc.stdout.strip().splitlines()[-1]
    tokens = {k: float(v) for k, v in re.findall(r"(\w+)=([-\d.eE+]+)", last)}
    if re.search(r'^TRUTH_CLOCK = "process"', open(script).read(), re.M):
        tokens["process_ms"] = round(wall * 1000, 1)
    return tokens, wall, foreign


def serve_once(script, argv, plan, timeout, env):
    """A server example (`TRUTH_LOAD = "path=/predict rate=150 duration=10 body=request.json"`): started on a
    free port, loaded once it answers with `pinchpoint load` (open loop, loopback), then stopped with
    SIGINT. Returns a CompletedProcess whose last stdout line holds request_ms (1000 / answered a second;
    with `metric=drain`, the load's wall clock / answered), p90_ms and throughput_rps."""
    import json
    import signal
    import socket
    import tempfile

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, script, *argv, "--port", str(port)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and server.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                time.sleep(0.05)
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "load.json")
            body = os.path.join(HERE, plan["body"]) if "body" in plan else None
            load = subprocess.run(
                [sys.executable, "-m", "pinchpoint", "load", f"http://127.0.0.1:{port}{plan.get('path', '/')}",
                 "--rate", plan["rate"], "--duration", plan["duration"], "--json", out,
                 *(["--body", body] if body else [])],
                capture_output=True, text=True, timeout=timeout)
            doc = json.load(open(out)) if os.path.exists(out) else None
    finally:
        server.send_signal(signal.SIGINT)
        try:
            _, err = server.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            _, err = server.communicate()
    if doc is None or not doc.get("ok"):
        return subprocess.CompletedProcess(server.args, 1, "", f"{load.stderr[-1000:]}\n{err[-1000:]}")
    # metric=drain: the server's time per answered request over the whole load, first arrival to last
    # answer (a server whose streams take turns answers few while the load still arrives: its capacity
    # shows only once it has drained)
    per = doc["wall_s"] * 1000 / doc["ok"] if plan.get("metric") == "drain" else 1000 / doc["throughput_rps"]
    line = (f"requests={doc['ok']} request_ms={per:.4f} "
            f"p90_ms={doc['latency']['p90_ms']:.1f} throughput_rps={doc['throughput_rps']:.2f}")
    return subprocess.CompletedProcess(server.args, 0, line + "\n", err)


def measured(name, argv, args):
    best = None
    for _ in range(args.retries + 1):
        wait_for_quiet()
        tokens, wall, foreign = run_once(name, argv, args.timeout)
        if best is None or foreign < best[2]:
            best = (tokens, wall, foreign)
        if foreign <= args.max_foreign:
            break
        print(f"    (retrying {name} {' '.join(argv)}: foreign load {foreign:.0%})", file=sys.stderr)
    return best


def truth_rows(kind, path=None):
    """{example: {fix label}} in TRUTH.md's section for `kind`."""
    path = path or os.path.join(HERE, "TRUTH.md")
    rows, section = {}, ""
    for line in open(path).read().splitlines() if os.path.exists(path) else []:
        if line.startswith("## Machine: "):
            section = line.removeprefix("## Machine: ").strip()
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if section == kind and len(cells) >= 7 and cells[6].endswith("%") and cells[2].startswith("`"):
            rows.setdefault(cells[0], set()).add(cells[2].strip("`"))
    return rows


def missing_variants(names, kind):
    """name -> the fix labels this kind's section lacks (examples with none missing are left out)."""
    have = truth_rows(kind)
    out = {}
    for name in names:
        lacking = [label for label, _ in EXAMPLES[name][1] if label not in have.get(name, set())]
        if lacking:
            out[name] = lacking
    return out


def foreign_now(seconds=3.0):
    """Fraction of the machine other processes keep busy now (this script is idle while it looks)."""
    t = psutil.cpu_times_percent(interval=seconds)
    busy = t.user + t.nice + t.system + getattr(t, "irq", 0) + getattr(t, "softirq", 0)
    return busy / 100


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help="examples to measure (default: all)")
    p.add_argument("-r", "--reps", type=int, default=3)
    p.add_argument("--retries", type=int, default=4)
    p.add_argument("--max-foreign", type=float, default=0.10)
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--markdown", action="store_true", help="write examples/TRUTH.md")
    p.add_argument("--missing", action="store_true", help="only the rows this machine kind's section lacks")
    args = p.parse_args()
    names = args.names or list(EXAMPLES)
    only = None
    if args.missing:
        only = missing_variants(names, machine_kind())
        names = list(only)
        print(f"{machine_kind()} lacks: " + ("; ".join(f"{n} {only[n]}" for n in names) or "nothing"),
              file=sys.stderr)
    busy = foreign_now()
    if busy > args.max_foreign:
        msg = (f"other processes keep {busy:.0%} of this machine busy (over --max-foreign {args.max_foreign:.0%}): "
               "a truth measured beside another job is not a truth")
        if args.markdown:
            sys.exit(f"measure_truth: {msg}; refusing to write TRUTH.md (stop the other work and run again)")
        print(f"WARNING: {msg}; these numbers are for the loaded machine only", file=sys.stderr)

    rows, raw = [], []
    for name in names:
        planted, fixes = EXAMPLES[name]
        fixes = [(label, argv) for label, argv in fixes
                 if all(preloaded(a.removeprefix("preload:")) for a in argv if a.startswith("preload:"))
                 and (only is None or label in only[name])]
        variants = [("", []), *fixes]
        res = {label: [] for label, _ in variants}
        for rep in range(args.reps):
            for label, argv in variants:
                tokens, wall, foreign = measured(name, argv, args)
                res[label].append(tokens)
                raw.append((name, label or "(planted)", rep, tokens, wall, foreign))
                print(f"  {name:22s} {label or '(planted)':14s} rep {rep}: "
                      f"{step_ms(tokens):8.2f} ms  wall {wall:5.1f}s  "
                      f"foreign {foreign:4.0%}  {tokens}", file=sys.stderr)
        loaded = {lbl for n, lbl, _, _, _, foreign in raw if n == name and foreign > args.max_foreign}
        if loaded and args.markdown:
            print(f"  {name}: {sorted(loaded)} ran beside other load in every attempt: not written", file=sys.stderr)
            continue
        med = {label: {k: statistics.median(t[k] for t in ts) for k in ts[0]} for label, ts in res.items()}
        before = step_ms(med[""])
        for label, _ in fixes:
            after = step_ms(med[label])
            extra = ""
            if "rss_growth_mb" in med[label]:
                extra = f"rss growth {med['']['rss_growth_mb']:.0f} MB -> {med[label]['rss_growth_mb']:.0f} MB"
            rows.append((name, planted, label, before, after, before / after, 1 - after / before, extra))

    hdr = ("example", "planted", "fix", "before ms", "after ms", "speedup", "share", "notes")
    fmt = "{:22s} {:26s} {:14s} {:>9s} {:>9s} {:>8s} {:>6s}  {}"
    print(fmt.format(*hdr))
    for n, pl, fx, b, a, s, sh, ex in rows:
        print(fmt.format(n, pl, fx, f"{b:.1f}", f"{a:.1f}", f"{s:.2f}x", f"{sh:.0%}", ex))

    if args.markdown:
        write_section(rows, raw, args)


def machine_kind(cpuinfo=None):
    """This machine's kind for TRUTH.md: vendor, vector width, native bf16 (e.g. `amd-avx2`,
    `intel-avx512-amx`, `amd-avx512-bf16`)."""
    if cpuinfo is None:
        with open("/proc/cpuinfo") as f:
            cpuinfo = f.read()
    flags = set(next((ln.split(":", 1)[1].split() for ln in cpuinfo.splitlines() if ln.startswith("flags")), []))
    vendor = "intel" if "GenuineIntel" in cpuinfo else "amd" if "AuthenticAMD" in cpuinfo else "cpu"
    width = "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "other"
    bf16 = "-amx" if "amx_bf16" in flags else "-bf16" if "avx512_bf16" in flags else ""
    return f"{vendor}-{width}{bf16}"


def write_section(rows, raw, args):
    """Merge this measurement into TRUTH.md's section for this machine kind (rows of the same example
    and fix are replaced; the others, and other machines' sections, are kept)."""
    import torch
    with open("/proc/cpuinfo") as f:
        cpuinfo = f.read()
    kind = machine_kind(cpuinfo)
    cpu = next((ln.split(":", 1)[1].strip() for ln in cpuinfo.splitlines() if ln.startswith("model name")), "?")
    path = os.path.join(HERE, "TRUTH.md")
    text = open(path).read() if os.path.exists(path) else "# Measured truth for the example programs\n"
    marker = f"## Machine: {kind}\n"
    before, _, rest = text.partition(marker)
    old, nxt, after = rest.partition("\n## Machine: ") if rest else ("", "", "")
    kept = [ln for ln in old.splitlines() if ln.startswith("| ") and ln.count("`") >= 2
            and not any(ln.startswith(f"| {n} |") and f"`{fx}`" in ln for n, _, fx, *_ in rows)]
    runs_head = "| all tokens |\n|---|---|---:|---:|---:|---:|---|\n"
    old_runs = old.split(runs_head, 1)[1].split("\n\n</details>")[0].splitlines() if runs_head in old else []
    today = datetime.date.today().isoformat()
    lines = [
        f"Measured with `python examples/measure_truth.py -r {args.reps} --markdown` (R alternating "
        "repetitions per variant; each cell is the median over the reps of the program's own median step time, "
        f"first 3 steps excluded; a run during which other processes used more than {args.max_foreign:.0%} of "
        "the CPUs was repeated). Rows carry the date they were measured.", "",
        f"Machine: {cpu}, {psutil.cpu_count()} logical CPUs, {psutil.virtual_memory().total / 2**30:.0f} GiB RAM, "
        f"no GPU; {platform.platform()}; Python {platform.python_version()}, torch {torch.__version__}.", "",
        "| example | planted | fix | before ms | after ms | speedup | share | notes |",
        "|---|---|---|---:|---:|---:|---:|---|",
        *kept,
        *(f"| {n} | {pl} | `{fx}` | {b:.1f} | {a:.1f} | {s:.2f}x | {sh:.0%} | {(ex + '; ') if ex else ''}"
          f"measured {today} (R={args.reps}) |" for n, pl, fx, b, a, s, sh, ex in rows),
        "", "<details><summary>All runs (median step ms; foreign = CPU load from other processes during the "
        "run, as a fraction of the machine)</summary>", "",
        "| example | variant | rep | median step ms | wall s | foreign | all tokens |",
        "|---|---|---:|---:|---:|---:|---|",
        *old_runs,
        *(f"| {n} | {lbl} | {rep} | {step_ms(tok):.2f} | {wall:.1f} | {foreign:.0%} | "
          f"{' '.join(f'{k}={v:g}' for k, v in tok.items())} |" for n, lbl, rep, tok, wall, foreign in raw),
        "", "</details>", "",
    ]
    section = marker + "\n" + "\n".join(lines)
    with open(path, "w") as f:
        f.write(kinds_table(before + section + (("\n## Machine: " + after) if nxt else "")))
    print(f"wrote the {kind} section of {path}", file=sys.stderr)


KINDS_HEAD = "| example |"


def kinds_table(text):
    """`text` (TRUTH.md) with its table of which kinds have rows for which examples made anew from the
    sections (the first table whose header starts with `KINDS_HEAD` and names kinds, before them)."""
    head, sep, sections = text.partition("\n## Machine: ")
    kinds = sorted(ln.split("\n", 1)[0].strip() for ln in ("## Machine: " + sections).split("## Machine: ")[1:])
    have = {}
    for kind in kinds:
        for name in _rows_in(text, kind):
            have.setdefault(name, set()).add(kind)
    table = [f"{KINDS_HEAD} {' | '.join(kinds)} |", "|---|" + "---|" * len(kinds),
             *(f"| {n} | " + " | ".join("✓" if k in have[n] else "—" for k in kinds) + " |" for n in sorted(have))]
    lines = head.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith(KINDS_HEAD)), None)
    if start is None or not sep:
        return text
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return "\n".join(lines[:start] + table + lines[end:]) + ("\n" if head.endswith("\n") else "") + sep + sections


def _rows_in(text, kind):
    rows, section = set(), ""
    for line in text.splitlines():
        if line.startswith("## Machine: "):
            section = line.removeprefix("## Machine: ").strip()
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if section == kind and len(cells) >= 7 and cells[6].endswith("%") and cells[2].startswith("`"):
            rows.add(cells[0])
    return rows

if __name__ == "__main__":
    main()
