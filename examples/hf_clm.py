"""compute.memory under transformers' ``Trainer`` -- a GPT-2 causal-LM fine-tune with the config's defaults.

Planted, by doing nothing: ``GPT2Config``'s defaults. ``attn_pdrop=0.1`` puts dropout on the attention
scores, which a CPU's fused ``scaled_dot_product_attention`` kernel does not take, so every call runs
SDPA's math path (the scores written to memory, softmaxed, dropped out, read back); and
``activation_function="gelu_new"`` spells the tanh GELU out in eight elementwise ops over the MLP's
widest tensor. Both are memory traffic, not math.

Fix (``--fix``): ``GPT2Config(attn_pdrop=0.0, activation_function="gelu_pytorch_tanh")``: the fused
attention kernel, and the same GELU in one op. ``--bf16`` trains with ``TrainingArguments(bf16=True)``
(what a compute.math finding proposes where the CPU multiplies bf16 natively; measured beside the fix).

Written as the transformers docs write a causal-LM fine-tune, offline: ``GPT2LMHeadModel`` from a small
``GPT2Config`` (random weights, nothing downloaded), a word-level tokenizer built in code, a
``datasets.Dataset`` tokenized and chunked with ``.map(..., batched=True)``,
``DataCollatorForLanguageModeling(mlm=False)``, evaluation every 50 steps, and ``Trainer.train()``. The
script prints ``steps=N median_step_ms=... forward_ms=... backward_ms=... update_ms=... eval_batches=...``.
"""
import argparse
import random
import tempfile
import warnings

from hf_trainer import WORDS, StepTimes, TimedTrainer, build_tokenizer, report_times  # the same tokenizer and clocks

import torch
from datasets import Dataset as HFDataset
from transformers import DataCollatorForLanguageModeling, GPT2Config, GPT2LMHeadModel, TrainingArguments
from transformers.utils import logging as hf_logging

PLANTED = ["compute.memory"]
BLOCK = 128


def corpus(n_docs, seed):
    """Documents of a few hundred words, tokenized and cut into BLOCK-token chunks, as the docs'
    `group_texts` does."""
    rng = random.Random(seed)
    return HFDataset.from_dict(
        {"text": [" ".join(rng.choice(WORDS) for _ in range(rng.randint(200, 400))) for _ in range(n_docs)]}
    )


def chunked(ds, tokenizer):
    ids = ds.map(lambda b: tokenizer(b["text"]), batched=True, remove_columns=["text"])

    def group(batch):
        flat = [t for seq in batch["input_ids"] for t in seq]
        n = len(flat) // BLOCK * BLOCK
        return {"input_ids": [flat[i:i + BLOCK] for i in range(0, n, BLOCK)]}

    return ids.map(group, batched=True, remove_columns=ids.column_names)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", action="store_true", help="attn_pdrop=0.0, activation_function='gelu_pytorch_tanh'")
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--bf16", action="store_true", help="TrainingArguments(bf16=True): mixed precision")
    args = p.parse_args()
    warnings.filterwarnings("ignore")
    hf_logging.set_verbosity_error()

    torch.manual_seed(0)
    tokenizer = build_tokenizer()
    fix = {"attn_pdrop": 0.0, "activation_function": "gelu_pytorch_tanh"} if args.fix else {}
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=BLOCK, n_embd=256, n_layer=4, n_head=4,
                        pad_token_id=tokenizer.pad_token_id, **fix)
    model = GPT2LMHeadModel(config)
    # enough chunks for the steps without a second epoch (~2.3 chunks a document)
    train = chunked(corpus(args.steps * args.batch_size // 2 + 8, 0), tokenizer)
    held_out = chunked(corpus(16, 1), tokenizer)
    times = StepTimes()
    with tempfile.TemporaryDirectory() as out:
        training_args = TrainingArguments(
            output_dir=out, max_steps=args.steps, per_device_train_batch_size=args.batch_size,
            per_device_eval_batch_size=16, learning_rate=5e-4, eval_strategy="steps", eval_steps=50,
            logging_steps=50, save_strategy="no", report_to="none", use_cpu=True, disable_tqdm=True,
            bf16=args.bf16,
        )
        trainer = TimedTrainer(model=model, args=training_args, train_dataset=train, eval_dataset=held_out,
                               data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
                               callbacks=[times])
        trainer.train()

    report_times(trainer, times)


if __name__ == "__main__":
    main()
