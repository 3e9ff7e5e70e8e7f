"""compute.recompute -- a generation loop without a KV cache: every new token runs the model over the whole
sequence so far.

Run with ``python examples/generate_no_cache.py``. A small decoder-only transformer (4 layers, width 128,
freshly initialised: nothing is downloaded) continues a 16-token prompt by 240 tokens, 4 times, batch 1,
sampling each token (temperature and top-k) as nanoGPT's ``sample.py`` does.

Planted: ``logits = model(idx)`` over the whole context for each new token: the keys and values of every
earlier token are computed again in every layer, so a call's time grows with the context (16 to 255
tokens) and a generation does O(n²) work.

Fix (``--fix``): a KV cache. The prompt runs once and fills each layer's keys and values; each later call
feeds only the new token and attends to the cache. Same model, same samples (the same random stream).

It prints ``run_ms`` (the generation loop) beside the mean time per generated token.
"""

import argparse
import math
import statistics
import time

import torch
from torch import nn
from torch.nn import functional as F

PLANTED = ["compute.recompute"]
VOCAB, WIDTH, LAYERS, HEADS, BLOCK = 96, 128, 4, 4, 256


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv, self.out = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)

    def forward(self, x, cache=None):
        b, t, _ = x.shape
        q, k, v = (
            z.view(b, t, HEADS, WIDTH // HEADS).transpose(1, 2) for z in self.qkv(x).split(WIDTH, dim=2)
        )
        if cache is not None:
            if cache[0] is not None:
                k, v = torch.cat((cache[0], k), dim=2), torch.cat((cache[1], v), dim=2)
            cache[0], cache[1] = k, v
        y = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1)
        return self.out(y.transpose(1, 2).reshape(b, t, WIDTH))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.attn = Attention()
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x, cache=None):
        x = x + self.attn(self.ln1(x), cache)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, WIDTH), nn.Embedding(BLOCK, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln, self.head = nn.LayerNorm(WIDTH), nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, idx, caches=None, start=0):
        """Logits of the last position; `caches` (one [k, v] per layer) holds the tokens before `start`."""
        pos = torch.arange(start, start + idx.size(1))
        x = self.tok(idx) + self.pos(pos)
        for i, block in enumerate(self.blocks):
            x = block(x, caches[i] if caches is not None else None)
        return self.head(self.ln(x[:, -1, :]))


def sample(logits, g, temperature=0.8, top_k=20):
    logits = logits / temperature
    v, _ = torch.topk(logits, top_k)
    logits[logits < v[:, [-1]]] = -math.inf
    return torch.multinomial(F.softmax(logits, dim=-1), 1, generator=g)


@torch.no_grad()
def generate(model, prompt, new_tokens, g, cached):
    idx = prompt
    if not cached:
        for _ in range(new_tokens):
            idx = torch.cat((idx, sample(model(idx), g)), dim=1)  # planted: the whole context every call
        return idx
    caches = [[None, None] for _ in range(LAYERS)]
    logits = model(idx, caches)  # the prompt once
    for _ in range(new_tokens):
        nxt = sample(logits, g)
        idx = torch.cat((idx, nxt), dim=1)
        if idx.size(1) < BLOCK:
            logits = model(nxt, caches, start=idx.size(1) - 1)
    return idx


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", action="store_true", help="generate with a KV cache")
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--tokens", type=int, default=240)
    args = p.parse_args()

    torch.manual_seed(0)
    model = GPT().eval()
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, VOCAB, (1, 16), generator=g)
    per_token = []
    start = time.perf_counter()
    for _ in range(args.samples):
        t0 = time.perf_counter()
        generate(model, prompt, args.tokens, g, cached=args.fix)
        per_token.append((time.perf_counter() - t0) / args.tokens)
    run_ms = (time.perf_counter() - start) * 1000
    print(
        f"samples={args.samples} tokens={args.tokens} mean_token_ms={statistics.mean(per_token) * 1000:.3f} "
        f"run_ms={run_ms:.1f}"
    )


if __name__ == "__main__":
    main()
