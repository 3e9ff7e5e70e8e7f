"""host.dispatch -- transformers ``model.generate`` answering prompts one at a time.

A serving loop in the style of the transformers docs: a small GPT-2 (``GPT2LMHeadModel`` built from a
``GPT2Config``: random weights, nothing downloaded), a word-level tokenizer built in code, and a
queue of prompts answered with ``model.generate(**inputs, max_new_tokens=...)``, greedy, with the
KV cache. Each generated token is one forward pass of the model over one new position.

Planted: the prompts are answered one by one (batch 1), as a first serving script does. A forward
pass over one position issues a few hundred framework ops on tensors far too small for their
arithmetic to matter (d=128): what a token costs is mostly the fixed cost of issuing them, plus
``generate``'s own per-token Python (logits processors, stopping criteria, cache bookkeeping).

Fix (``--fix``): answer all prompts in one ``generate`` call (left padding, attention mask): the
same ops, each paid once for every prompt.

The final line carries the program's own clocks: ``steps`` (forward passes, as the program made
them), ``tokens`` (generated, all prompts), ``median_step_ms`` (time per generated token per
prompt: a forward pass and its share of generate's loop, over the prompts in it) and ``forward_ms``
(the model's forward alone, timed by forward hooks, per pass).
"""

import argparse
import os
import random
import statistics
import time
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast
from transformers.utils import logging as hf_logging
from _test_clocks import write_test_clocks  # the test suite's per-step clocks

PLANTED = ["host.dispatch"]
WORDS = [f"w{i}" for i in range(1000)]


def build_tokenizer():
    vocab = {"[PAD]": 0, "[UNK]": 1, "[EOS]": 2, **{w: i + 3 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", eos_token="[EOS]", padding_side="left"
    )


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", action="store_true", help="answer all prompts in one batched generate call")
    p.add_argument("--prompts", type=int, default=12)
    p.add_argument("--new-tokens", type=int, default=24)
    args = p.parse_args()
    hf_logging.set_verbosity_error()
    warnings.filterwarnings("ignore")

    torch.manual_seed(0)
    rng = random.Random(0)
    tokenizer = build_tokenizer()
    config = GPT2Config(
        vocab_size=len(WORDS) + 3,
        n_positions=128,
        n_embd=128,
        n_layer=4,
        n_head=4,
        pad_token_id=0,
        eos_token_id=2,
        bos_token_id=2,
    )
    model = GPT2LMHeadModel(config).eval()
    prompts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 20))) for _ in range(args.prompts)]

    passes = []  # (forward seconds, prompts in the pass)
    started = {}

    def before(module, inputs, kwargs):
        started["t"] = time.perf_counter()

    def after(module, inputs, kwargs, output):
        ids = kwargs.get("input_ids", inputs[0] if inputs else None)
        passes.append((time.perf_counter() - started["t"], ids.shape[0]))

    model.register_forward_pre_hook(before, with_kwargs=True)
    model.register_forward_hook(after, with_kwargs=True)

    gen = dict(max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, do_sample=False)
    token_times, tokens = [], 0
    t0 = time.perf_counter()
    batches = [prompts] if args.fix else [[q] for q in prompts]
    for batch in batches:
        inputs = tokenizer(batch, return_tensors="pt", padding=True, return_token_type_ids=False)
        first = len(passes)
        t_call = time.perf_counter()
        out = model.generate(**inputs, **gen)
        elapsed = time.perf_counter() - t_call
        new = out.shape[1] - inputs["input_ids"].shape[1]
        tokens += new * len(batch)
        calls = len(passes) - first
        token_times += [elapsed / calls / len(batch)] * calls
    wall = time.perf_counter() - t0

    write_test_clocks(forward=[s for s, _ in passes])
    steady = token_times[2:] if len(token_times) > 2 else token_times
    fwd = [s / n for s, n in passes]
    print(f"generated {tokens} tokens in {wall:.2f} s", file=__import__("sys").stderr)
    print(
        f"steps={len(passes)} tokens={tokens} median_step_ms={statistics.median(steady) * 1000:.3f} "
        f"forward_ms={statistics.median(s for s, _ in passes) * 1000:.3f} "
        f"forward_per_prompt_ms={statistics.median(fwd) * 1000:.3f}"
    )


if __name__ == "__main__":
    main()
