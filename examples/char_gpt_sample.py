"""host.dispatch -- an autoregressive sampler that draws its samples one at a time.

In the style of nanoGPT's sample.py: the char GPT of ``char_gpt_memmap.py`` (freshly initialised: no
weights are downloaded or read) generates ``num_samples`` continuations of a prompt, token by token,
with temperature and top-k sampling under ``torch.no_grad()``; each token is one forward pass over
the context so far (cropped to ``block_size``).

Planted: ``for k in range(num_samples): generate(model, x, ...)`` with ``x`` of batch 1, as sample.py
writes it. A forward pass over a 1 x T context issues ~90 framework ops on tensors too small for
their arithmetic to matter; what a token costs is mostly the fixed cost of issuing them.

Fix (``--fix``): draw all samples in one batch (the prompt repeated ``num_samples`` times): the
same ops, each paid once for every sample.

Second cause (``--cache``, compute.recompute): each token's forward pass runs the whole context again,
as sample.py does; a KV cache keeps every layer's keys and values, so a token's pass runs over that
token alone (still one sample at a time: the cache fix by itself).

``median_step_ms`` is the time per generated token per sample (a forward pass / samples in it);
``steps`` counts forward passes (generated token positions) as the program made them.
"""
import argparse
import statistics
import time

import torch
from torch import nn
from torch.nn import functional as F

from char_gpt_memmap import GPT

PLANTED = ["host.dispatch"]


class CachedGPT(nn.Module):
    """The same GPT's forward pass over new tokens only, the earlier ones' keys and values kept."""

    def __init__(self, gpt):
        super().__init__()
        self.gpt = gpt
        self.cache = []  # per layer: (k, v) of shape (B, heads, T, head_dim)

    def forward(self, idx):
        g, start = self.gpt, self.cache[0][0].size(2) if self.cache else 0
        B, T = idx.shape
        x = g.wte(idx) + g.wpe(torch.arange(start, start + T))
        for i, block in enumerate(g.h):
            a = block.attn
            C = x.size(-1)
            q, k, v = a.c_attn(block.ln_1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, a.n_head, C // a.n_head).transpose(1, 2) for t in (q, k, v))
            if i < len(self.cache):
                k, v = torch.cat((self.cache[i][0], k), 2), torch.cat((self.cache[i][1], v), 2)
                self.cache[i] = (k, v)
            else:
                self.cache.append((k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=start == 0)
            x = x + a.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
            x = x + block.mlp(block.ln_2(x))
        return g.lm_head(g.ln_f(x[:, [-1], :])), None


@torch.no_grad()
def generate(model, idx, max_new_tokens, block_size, times, temperature=0.8, top_k=20, cache=False):
    cached = CachedGPT(model) if cache else None
    for _ in range(max_new_tokens):
        t0 = time.perf_counter()
        if cached is not None and idx.size(1) <= block_size:
            logits, _ = cached(idx[:, -1:] if cached.cache else idx)
        else:
            idx_cond = idx if idx.size(1) <= block_size else idx[:, -block_size:]
            logits, _ = model(idx_cond)
        logits = logits[:, -1, :] / temperature
        v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
        logits[logits < v[:, [-1]]] = -float("inf")
        idx_next = torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)
        idx = torch.cat((idx, idx_next), dim=1)
        times.append((time.perf_counter() - t0) / idx.size(0))
    return idx


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", action="store_true", help="draw all samples in one batch")
    p.add_argument("--cache", action="store_true", help="a KV cache: each token's pass over that token alone")
    p.add_argument("--num-samples", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=40)
    args = p.parse_args()

    torch.manual_seed(1337)
    block_size = 256
    model = GPT(65, block_size, n_layer=4, n_head=4, n_embd=128, flash=True).eval()
    prompt = torch.randint(0, 65, (1, 32))
    times, samples = [], []
    if args.fix:
        out = generate(model, prompt.repeat(args.num_samples, 1), args.max_new_tokens, block_size, times)
        samples.extend(out)
    else:
        for _ in range(args.num_samples):
            samples.append(generate(model, prompt, args.max_new_tokens, block_size, times, cache=args.cache)[0])
    tokens = sum(len(s) - prompt.size(1) for s in samples)
    steady = times[3:] if len(times) > 3 else times
    print(f"steps={len(times)} tokens={tokens} median_step_ms={statistics.median(steady) * 1000:.4f}")


if __name__ == "__main__":
    main()
