"""host.dispatch -- an inference loop that serves one request per forward call.

Planted: a 12-block MLP (Linear 128x128, LayerNorm, ReLU) answers 4,000 requests one at a time
(batch 1) under ``torch.inference_mode()``. Each call issues 37 framework ops whose arithmetic is tiny
(16K multiply-adds for a linear); what a call costs is the fixed price of issuing them: the module
call, Python, the dispatcher. The same loop with 16-wide blocks runs at ~80% of this one's time.

Fix (``--fix``): batch the requests, 32 per forward call (``torch.cat`` of the queued inputs, then the
rows are split back per request), so every op's fixed cost is paid once for 32 requests.

``median_step_ms`` is the time per request (per call / requests in it), the serving throughput.
"""
import argparse
import statistics
import time

import torch
from torch import nn

PLANTED = ["host.dispatch"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", action="store_true", help="serve 32 requests per forward call")
    p.add_argument("--requests", type=int, default=4000)
    p.add_argument("--dim", type=int, default=128)
    args = p.parse_args()

    torch.manual_seed(0)
    d = args.dim
    model = nn.Sequential(*[nn.Sequential(nn.Linear(d, d), nn.LayerNorm(d), nn.ReLU()) for _ in range(12)]).eval()
    requests = [torch.randn(1, d) for _ in range(args.requests)]
    per_call = 32 if args.fix else 1
    answers, times = [], []
    with torch.inference_mode():
        for i in range(0, len(requests), per_call):
            t0 = time.perf_counter()
            batch = requests[i : i + per_call]
            out = model(torch.cat(batch) if per_call > 1 else batch[0])
            answers.extend(out.argmax(-1).tolist())
            times.append((time.perf_counter() - t0) / len(batch))

    steady = times[3:] if len(times) > 3 else times
    print(f"requests={len(answers)} median_step_ms={statistics.median(steady) * 1000:.4f}")


if __name__ == "__main__":
    main()
