"""compute.memory -- a character-level GPT trained from a np.memmap, attention written by hand.

In the style of nanoGPT's train.py: the training tokens live in a ``uint16`` file read through
``np.memmap`` (re-opened every batch, as nanoGPT does), ``get_batch`` slices random windows of
``block_size`` + 1 tokens, and a small GPT (pre-LayerNorm blocks, causal self-attention, GELU MLP,
tied embeddings) trains with AdamW and gradient clipping; ``estimate_loss()`` runs a few evaluation
batches under ``torch.no_grad()`` every ``eval_interval`` steps.

Planted: attention as nanoGPT writes it when flash attention is unavailable: ``q @ k.T`` scaled,
``masked_fill`` with the causal mask, ``softmax``, then ``@ v``. Between the two matmuls the
(batch, heads, T, T) score tensor is written and read by several elementwise passes, and again in
the backward: memory traffic, not math.

Fix (``--fix``): ``F.scaled_dot_product_attention(q, k, v, is_causal=True)``, a fused kernel that never
materialises the score tensor for those passes (nanoGPT's ``self.flash`` path).

The final line carries the program's own clocks: ``steps`` (optimizer steps), ``eval_batches``,
``forward_ms``/``backward_ms``/``update_ms`` (medians per training step).
"""
import argparse
import math
import os
import shutil
import statistics
import tempfile
import time

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from _test_clocks import write_test_clocks  # the test suite's per-step clocks

PLANTED = ["compute.memory"]


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size, flash):
        super().__init__()
        self.n_head, self.flash = n_head, flash
        self.c_attn, self.c_proj = nn.Linear(n_embd, 3 * n_embd), nn.Linear(n_embd, n_embd)
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if self.flash:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size, flash):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size, flash)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd, flash):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab_size, n_embd), nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList(Block(n_embd, n_head, block_size, flash) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying

    def forward(self, idx, targets=None):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        if targets is None:  # sampling: only the last position's logits are needed
            return self.lm_head(x[:, [-1], :]), None
        logits = self.lm_head(x)
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def write_tokens(path, n, vocab_size, seed=0):
    """A stand-in for nanoGPT's prepare.py output: `n` character ids as uint16 (nothing downloaded)."""
    rng = np.random.default_rng(seed)
    text = rng.integers(0, vocab_size, size=n, dtype=np.uint16)
    text[1::2] = (text[::2] + 1) % vocab_size  # something to learn: every other char follows the last
    text.tofile(path)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", action="store_true", help="fused scaled_dot_product_attention")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--block-size", type=int, default=256)
    p.add_argument("--eval-interval", type=int, default=25)
    args = p.parse_args()

    torch.manual_seed(1337)
    vocab_size, block_size, batch_size = 65, args.block_size, args.batch_size
    data_dir = tempfile.mkdtemp(prefix="char_gpt_")
    for split, n in (("train", 400_000), ("val", 40_000)):
        write_tokens(os.path.join(data_dir, f"{split}.bin"), n, vocab_size, seed=len(split))

    def get_batch(split):
        # nanoGPT re-creates the memmap every batch to avoid a memory leak
        data = np.memmap(os.path.join(data_dir, f"{split}.bin"), dtype=np.uint16, mode="r")
        ix = torch.randint(len(data) - block_size, (batch_size,))
        x = torch.stack([torch.from_numpy(data[i : i + block_size].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(data[i + 1 : i + 1 + block_size].astype(np.int64)) for i in ix])
        return x, y

    model = GPT(vocab_size, block_size, n_layer=4, n_head=4, n_embd=128, flash=args.fix)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95))
    eval_batches = 0

    @torch.no_grad()
    def estimate_loss(eval_iters=2):
        nonlocal eval_batches
        model.eval()
        losses = []
        for _ in range(eval_iters):
            _, loss = model(*get_batch("val"))
            losses.append(loss.item())
            eval_batches += 1
        model.train()
        return sum(losses) / len(losses)

    try:
        train(args, model, optimizer, get_batch, estimate_loss, lambda: eval_batches)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def train(args, model, optimizer, get_batch, estimate_loss, eval_batches):
    times, fwd, bwd, upd = [], [], [], []
    t_prev = time.perf_counter()
    for it in range(args.steps):
        if it > 0 and it % args.eval_interval == 0:
            print(f"step {it}: val loss {estimate_loss():.4f}", file=__import__("sys").stderr)
            t_prev = time.perf_counter()  # the evaluation is not a training step
        X, Y = get_batch("train")
        t0 = time.perf_counter()
        _, loss = model(X, Y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        t3 = time.perf_counter()
        fwd.append(t1 - t0)
        bwd.append(t2 - t1)
        upd.append(t3 - t2)
        times.append(t3 - t_prev)
        t_prev = t3

    write_test_clocks(forward=fwd, backward=bwd, update=upd)

    def med(v):
        steady = v[3:] if len(v) > 3 else v
        return statistics.median(steady) * 1000

    print(
        f"steps={len(times)} eval_batches={eval_batches()} median_step_ms={med(times):.3f} "
        f"forward_ms={med(fwd):.3f} backward_ms={med(bwd):.3f} update_ms={med(upd):.3f}"
    )


if __name__ == "__main__":
    main()
