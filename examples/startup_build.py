"""run.startup -- every run tokenises its whole corpus in Python before the first step.

Planted: a character-level language model's data is built at start-up, each run again: a synthetic
corpus of ~2.6 M words is split, a vocabulary counted and every word encoded one by one in Python
(~4 s here), then 40 training steps take ~1.5 s. Most of the run is start-up; no step is slow.

Fix (``--fix``): build the encoded corpus once, save it (``torch.save``) and load it on later runs
(~30 ms). The first ``--fix`` run on a machine builds and saves the cache, then runs itself again
(``os.execv``): a cached run is what the fix makes of every run after it.

The run's own clock starts before ``import torch`` (the interpreter's start-up aside) and it prints
``run_ms``, the whole run, which is what the fix changes: its steps are the same either way.
"""
import time

T0 = time.perf_counter()

import argparse  # noqa: E402
import collections  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

import torch  # noqa: E402
from torch import nn  # noqa: E402

PLANTED = ["run.startup"]
E2E_STEPS = 40
"""The steps the end-to-end tests run: as many as the truth's runs (start-up's share depends on it)."""

# Mixed precision where the CPU multiplies bf16 natively (AVX512-BF16, AMX), as careful programs do:
# elsewhere autocast emulates bf16 and its matmuls run far slower than fp32.
BF16 = torch.ops.mkldnn._is_mkldnn_bf16_supported()
SYLLABLES = ["ka", "to", "ri", "men", "sa", "lo", "vi", "dun", "pe", "ra", "no", "shi", "tar", "bel", "qu"]


def corpus(words: int, seed: int = 0) -> str:
    """A deterministic text of made-up words (no download)."""
    rng = random.Random(seed)
    vocab = ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(5000)]
    return " ".join(rng.choice(vocab) for _ in range(words))


def build(words: int) -> tuple[torch.Tensor, int]:
    """The corpus encoded one word at a time, as a tokeniser written in Python does: word ids by
    frequency, each word's characters appended after it."""
    text = corpus(words)
    counts = collections.Counter(text.split())
    ids = {w: i for i, (w, _) in enumerate(counts.most_common())}
    chars = sorted(set(text))
    cid = {c: i for i, c in enumerate(chars)}
    out: list[int] = []
    for w in text.split():
        out.append(ids[w] % 256)
        out.extend(cid[c] for c in w)
    return torch.tensor(out, dtype=torch.long), 256


class TinyLM(nn.Module):
    def __init__(self, vocab: int, dim: int, ctx: int):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.mlp = nn.Sequential(nn.Linear(dim * ctx, 4 * dim), nn.GELU(), nn.Linear(4 * dim, vocab))

    def forward(self, x):
        return self.mlp(self.emb(x).flatten(1))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", action="store_true", help="load the encoded corpus from a cache built once")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--words", type=int, default=2_600_000)
    args = p.parse_args()

    cache = os.path.join(tempfile.gettempdir(), f"pinchpoint_startup_build_{args.words}.pt")
    if args.fix and not os.path.exists(cache):
        tokens, vocab = build(args.words)
        torch.save({"tokens": tokens, "vocab": vocab}, cache + ".part")
        os.replace(cache + ".part", cache)
        # the cache is built once; the runs after it are what the fix makes: run again, as one of them
        os.execv(sys.executable, [sys.executable, *sys.argv])
    if args.fix:
        saved = torch.load(cache)
        tokens, vocab = saved["tokens"], saved["vocab"]
    else:
        tokens, vocab = build(args.words)

    torch.manual_seed(0)
    ctx, batch = 64, 256
    model = TinyLM(vocab, 128, ctx)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    times = []
    t0 = time.perf_counter()
    for _ in range(args.steps):
        at = torch.randint(0, len(tokens) - ctx - 1, (batch,))
        x = torch.stack([tokens[i : i + ctx] for i in at.tolist()])
        y = tokens[at + ctx]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=BF16):
            loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        t1 = time.perf_counter()
        times.append(t1 - t0)
        t0 = t1
    steady = times[3:] if len(times) > 3 else times
    print(
        f"steps={len(times)} median_step_ms={statistics.median(steady) * 1000:.3f} "
        f"run_ms={(time.perf_counter() - T0) * 1000:.1f}"
    )


if __name__ == "__main__":
    main()
