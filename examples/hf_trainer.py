"""input.fetch under transformers' ``Trainer`` -- fine-tuning a tiny BERT on documents read one by one.

Planted: the training set fetches each document from an object store
(``time.sleep(--latency-ms)`` per sample) and tokenizes it in ``__getitem__``, with the
``Trainer``'s default ``dataloader_num_workers=0``: every step idles ~batch_size x latency in
the loader.

Fix (``--fix``): ``TrainingArguments(dataloader_num_workers=4, dataloader_persistent_workers=True)``.
``--bf16`` trains with ``TrainingArguments(bf16=True)`` (mixed precision: what a compute.math finding
proposes where the CPU multiplies bf16 natively; its truth is measured beside the planted fix's).

Written as the transformers docs write a fine-tune, offline: a ``BertForSequenceClassification``
built from a small ``BertConfig`` (random weights, nothing downloaded), a word-level tokenizer
built in code, ``DataCollatorWithPadding``, evaluation every 50 steps on a held-out ``datasets.Dataset``
tokenized up front with ``.map(..., batched=True)``, and ``Trainer.train()``. The ``Trainer`` subclass times its own ``compute_loss`` (forward + loss) and
``training_step`` (+ backward); a callback times the optimizer step. The script prints
``steps=N median_step_ms=... forward_ms=... backward_ms=... update_ms=... eval_batches=...``.
"""
import argparse
import os
import random
import statistics
import tempfile
import time
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

import torch  # noqa: E402
from datasets import Dataset as HFDataset  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: E402
from torch.utils.data import Dataset  # noqa: E402
from transformers import (  # noqa: E402
    BertConfig,
    BertForSequenceClassification,
    DataCollatorWithPadding,
    PreTrainedTokenizerFast,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)
from transformers.utils import logging as hf_logging  # noqa: E402
from _test_clocks import write_test_clocks  # the test suite's per-step clocks

PLANTED = ["input.fetch"]
WORDS = [f"w{i}" for i in range(2000)]


def build_tokenizer():
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, **{w: i + 4 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]",
                                   cls_token="[CLS]", sep_token="[SEP]")


class RemoteDocuments(Dataset):
    """Short documents with a label; each read pays an object-store round-trip, then tokenization."""

    def __init__(self, n, tokenizer, latency_s, seed):
        rng = random.Random(seed)
        self.docs = [(" ".join(rng.choice(WORDS) for _ in range(rng.randint(16, 48))), rng.randint(0, 1))
                     for _ in range(n)]
        self.tokenizer, self.latency_s = tokenizer, latency_s

    def __len__(self):
        return len(self.docs)

    def __getitem__(self, i):
        time.sleep(self.latency_s)  # emulated object-store round-trip
        text, label = self.docs[i]
        enc = self.tokenizer(text, truncation=True, max_length=64)
        enc["labels"] = label
        return enc


class TimedTrainer(Trainer):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.fwd, self.fwd_bwd = [], []

    def compute_loss(self, model, inputs, *a, **kw):
        t0 = time.perf_counter()
        out = super().compute_loss(model, inputs, *a, **kw)
        if model.training:
            self.fwd.append(time.perf_counter() - t0)
        return out

    def training_step(self, *a, **kw):
        t0 = time.perf_counter()
        out = super().training_step(*a, **kw)
        self.fwd_bwd.append(time.perf_counter() - t0)
        return out


class StepTimes(TrainerCallback):
    def __init__(self):
        self.ends, self.updates, self.eval_batches, self._t = [], [], 0, 0.0

    def on_pre_optimizer_step(self, args, state, control, **kw):
        self._t = time.perf_counter()

    def on_optimizer_step(self, args, state, control, **kw):
        self.updates.append(time.perf_counter() - self._t)

    def on_step_end(self, args, state, control, **kw):
        self.ends.append(time.perf_counter())

    def on_prediction_step(self, args, state, control, **kw):
        self.eval_batches += 1


def report_times(trainer, times):
    """The test clocks, and the `steps=... median_step_ms=...` line, from the trainer's own timings."""
    backward = [fb - f for f, fb in zip(trainer.fwd, trainer.fwd_bwd)]
    write_test_clocks(forward=trainer.fwd, backward=backward, update=times.updates)
    steps = [b - a for a, b in zip(times.ends, times.ends[1:])]
    # Steps that also evaluated are not typical steps: the median leaves them out.
    fwd = statistics.median(trainer.fwd[3:])
    print(f"steps={len(times.ends)} median_step_ms={statistics.median(steps[3:]) * 1000:.3f} "
          f"forward_ms={fwd * 1000:.3f} "
          f"backward_ms={(statistics.median(trainer.fwd_bwd[3:]) - fwd) * 1000:.3f} "
          f"update_ms={statistics.median(times.updates[3:]) * 1000:.3f} eval_batches={times.eval_batches}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", action="store_true", help="4 persistent DataLoader workers")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--latency-ms", type=float, default=2.0)
    p.add_argument("--callback", action="store_true", help="add pinchpoint's transformers callback")
    p.add_argument("--bf16", action="store_true", help="TrainingArguments(bf16=True): mixed precision")
    args = p.parse_args()
    warnings.filterwarnings("ignore")
    hf_logging.set_verbosity_error()

    torch.manual_seed(0)
    tokenizer = build_tokenizer()
    config = BertConfig(vocab_size=len(WORDS) + 4, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=512, max_position_embeddings=128, num_labels=2)
    model = BertForSequenceClassification(config)
    train = RemoteDocuments(args.steps * args.batch_size, tokenizer, args.latency_ms / 1000, 0)
    rng = random.Random(1)
    held_out = HFDataset.from_dict(
        {"text": [" ".join(rng.choice(WORDS) for _ in range(rng.randint(16, 48))) for _ in range(64)],
         "label": [rng.randint(0, 1) for _ in range(64)]}
    ).map(lambda b: tokenizer(b["text"], truncation=True, max_length=64), batched=True, remove_columns=["text"])
    times = StepTimes()
    callbacks = [times]
    if args.callback:
        from pinchpoint.integrations import TransformersCallback
        callbacks.append(TransformersCallback())
    with tempfile.TemporaryDirectory() as out:
        training_args = TrainingArguments(
            output_dir=out, max_steps=args.steps, per_device_train_batch_size=args.batch_size,
            per_device_eval_batch_size=32, learning_rate=5e-4, eval_strategy="steps", eval_steps=50,
            logging_steps=50, save_strategy="no", report_to="none", use_cpu=True, disable_tqdm=True,
            dataloader_num_workers=4 if args.fix else 0, dataloader_persistent_workers=args.fix,
            bf16=args.bf16,
        )
        trainer = TimedTrainer(model=model, args=training_args, train_dataset=train, eval_dataset=held_out,
                               data_collator=DataCollatorWithPadding(tokenizer), callbacks=callbacks)
        trainer.train()

    report_times(trainer, times)


if __name__ == "__main__":
    main()
