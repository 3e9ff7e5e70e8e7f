#!/bin/sh
# GPU check: exercise pinchpoint's CUDA paths on a machine with a CUDA GPU, in under 8 minutes.
#
#   sh scripts/gpu_check.sh [OUTDIR]
#
# 1. `pinchpoint calibrate` (matmul FLOP/s per dtype, HBM, host<->device copies, launch cost);
# 2. for each planted GPU bottleneck in examples/cuda_train.py: the truth (plain runs, planted and
#    fixed), then both under `pinchpoint run` (op window on: kernels and copies recorded), then
#    `pinchpoint analyze` on the captured op-window trace.
# Writes OUTDIR/gpu_check.log and OUTDIR/gpu_check_PLANT.tar.gz (the run directories, for building
# and testing the GPU paths on a machine without a GPU). Uses the checkout's src/ (no install);
# needs torch with CUDA, psutil, rich, numpy and msgspec in $PYTHON (default python3).
# DEVICE=cpu STEPS=12 runs the same script on a CPU, as a dry run. Record results in docs/gpu-checks.md.
set -u
cd "$(dirname "$0")/.."
OUTDIR=${1:-${OUT:-/tmp/pinchpoint-gpu-check}}
PY=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
STEPS=${STEPS:-40}
PLANTS=${PLANTS:-launch sync h2d fp32}
VARIANTS=${VARIANTS:-planted fixed}
OVERHEAD_ROUNDS=${OVERHEAD_ROUNDS:-3}   # plain / --opwindow off / default, interleaved, on the launch plant
W=$(mktemp -d /tmp/pinchpoint-gpu-check.XXXXXX)
mkdir -p "$OUTDIR" "$W/runs"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 PINCHPOINT_HOME="$W/home"
PP="$PY -m pinchpoint"

check() {
    echo "== environment  $(date -u +%FT%TZ)"
    nvidia-smi -L 2>/dev/null || echo "(no nvidia-smi)"
    $PY -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "device", torch.cuda.get_device_name() if torch.cuda.is_available() else None)'
    $PY -c 'import pynvml; pynvml.nvmlInit(); print("nvml ok, driver", pynvml.nvmlSystemGetDriverVersion())' 2>&1 | tail -1

    echo "== pinchpoint calibrate"
    if [ "$DEVICE" = cpu ]; then dev_args="--device cpu"; else dev_args=""; fi
    timeout 150 $PP calibrate $dev_args --json "$W/ceilings.json"; echo "rc=$?"

    for plant in $PLANTS; do
        for variant in $VARIANTS; do
            if [ $variant = fixed ]; then fix=--fix; else fix=; fi
            prog="examples/cuda_train.py --plant $plant --device $DEVICE --steps $STEPS $fix"
            echo "== truth $plant $variant: $(timeout 90 $PY $prog 2>&1 | tail -1)"
            run="$W/runs/$plant-$variant"
            echo "== pinchpoint run $plant $variant"
            timeout 150 $PP run --no-color --force -o "$run" -- $PY $prog; echo "rc=$?"
            # the GPU roofline in report.html: each op kind's kernel-timed FLOP/s against the ceilings
            $PY -c 'import re, sys; d = open(sys.argv[1]).read(); [print("   roofline:", t) for t in re.findall(r"<circle [^>]*><title>([^<]*)</title>", d)[:4]]' "$run/report.html" 2>&1 | tail -4
            # the CUDA allocator's counters at step ends (device_steps.jsonl -> ranks[].memory)
            $PY -c 'import json, sys; r = json.load(open(sys.argv[1])); print("   memory:", json.dumps(r["ranks"][0].get("memory")))' "$run/report.json" 2>&1 | tail -1
            echo "== pinchpoint analyze $plant $variant (op window)"
            ls -la "$run/ranks/rank0/" 2>&1 | grep -v '^total'
            timeout 90 $PP analyze "$run/ranks/rank0/opwindow.json" --no-color --json "$run/analyze.json"
            echo "rc=$?"
        done
    done
    # --annotate nvtx: the phases pushed as NVTX ranges (nsys, when installed, shows them)
    prog="examples/cuda_train.py --plant h2d --device $DEVICE --steps 40"
    echo "== pinchpoint run --annotate nvtx"
    if command -v nsys >/dev/null 2>&1; then
        timeout 150 nsys profile -o "$W/nvtx" --force-overwrite true -t nvtx,cuda \
            $PP run -q --annotate nvtx --force -o "$W/runs/nvtx" -- $PY $prog; echo "rc=$?"
        timeout 60 nsys stats -r nvtx_sum "$W/nvtx.nsys-rep" 2>&1 | head -20
    else
        timeout 150 $PP run -q --annotate nvtx --force -o "$W/runs/nvtx" -- $PY $prog 2>&1 | tail -3; echo "rc=$? (no nsys here)"
    fi
    overhead
    echo "== done  $(date -u +%FT%TZ)"
}

# Overhead on the most host-sensitive plant (launch-bound: every microsecond added per op shows).
# Prints the program's own median host step (robust to the 3 op-window steps) per arm and, for the
# default arm, the steady steps before and after the op window (CUPTI left subscribed slows the latter).
overhead() {
    prog="examples/cuda_train.py --plant launch --device $DEVICE --steps $STEPS"
    i=0
    while [ $i -lt "$OVERHEAD_ROUNDS" ]; do
        i=$((i + 1))
        echo "== overhead round $i plain: $($PY $prog 2>&1 | tail -1)"
        echo "== overhead round $i opwindow-off: $($PP run -q --force --opwindow off -o "$W/ovh-off" -- $PY $prog 2>&1 | grep steps= | tail -1)"
        echo "== overhead round $i default: $($PP run -q --force -o "$W/ovh-def" -- $PY $prog 2>&1 | grep steps= | tail -1)"
        $PY - "$W/ovh-def/ranks/rank0/steps.jsonl" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
d = {r["step"]: (r["end_ns"] - r["start_ns"]) / 1e6 for r in rows if "end_ns" in r and "step" in r}
def med(a, b):
    xs = [d[i] for i in range(a, b) if i in d]
    return statistics.median(xs) if xs else float("nan")
print(f"   steps.jsonl median ms: before window (3-9) {med(3, 10):.2f}, after window (14+) {med(14, 10**6):.2f}")
PYEOF
    done
}

check 2>&1 | tee "$OUTDIR/gpu_check.log"
# One archive per plant (each stays small enough to bring back from a lent machine).
tar czf "$OUTDIR/gpu_check_home.tar.gz" -C "$W" home ceilings.json 2>/dev/null
for plant in $PLANTS; do
    tar czf "$OUTDIR/gpu_check_$plant.tar.gz" -C "$W/runs" "$plant-planted" "$plant-fixed"
done
ls -la "$OUTDIR"
