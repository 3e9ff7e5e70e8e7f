"""host.python -- a word-level LSTM language model with a hand-written SGD update and a lazy tokenizer.

In the style of PyTorch's word-language-model example: an embedding, a two-layer ``nn.LSTM`` and a
decoder over a 2,000-word vocabulary, truncated back-propagation through time (``bptt`` tokens,
hidden state detached between batches), gradient clipping and the update written by hand::

    for p in model.parameters():
        p.data.add_(p.grad, alpha=-lr)

No ``torch.optim`` anywhere: pinchpoint must find the steps from the loop itself.

Planted: ``get_batch`` tokenizes its slice of the raw text when it is asked for it, with a
WordPiece-style tokenizer written in Python (greedy longest-match over a piece vocabulary, as the
"slow" tokenizers do), per batch, on the main thread; the upstream example tokenizes the corpus
once, up front, into one id tensor.

Fix (``--fix``): tokenize the whole corpus once before training and slice the id tensor per batch.

The final line carries the program's own clocks: ``steps`` (updates), ``forward_ms``,
``backward_ms`` and ``update_ms`` (clipping and the manual update), medians per step.
"""
import argparse
import random
import statistics
import time
import unicodedata

import torch
from torch import nn
from _test_clocks import write_test_clocks  # the test suite's per-step clocks

PLANTED = ["host.python"]


LETTERS = "etaoinshrdlucmfwypvbgkqjxz"


def synthetic_text(lines, words_per_line, seed=0):
    """Lines of text from a Zipf-distributed lexicon of made-up words (a stand-in for WikiText: nothing
    is downloaded), and the piece vocabulary a WordPiece tokenizer would have learnt for it."""
    rng = random.Random(seed)
    lexicon = ["".join(rng.choices(LETTERS[:16], k=rng.randint(4, 11))) for _ in range(3000)]
    weights = [1.0 / (i + 1) for i in range(len(lexicon))]
    text = [" ".join(rng.choices(lexicon, weights, k=words_per_line)) + "." for _ in range(lines)]
    pieces = {"[UNK]", "<eos>", ".", *LETTERS, *(f"##{c}" for c in LETTERS)}
    for w in lexicon[:1500]:  # word starts, and continuations of two or three letters
        pieces.add(w[:4])
        pieces.update(f"##{w[i:i + 3]}" for i in range(1, len(w) - 2, 3))
    return text, sorted(pieces)


def basic_tokens(text):
    """BERT's basic tokenization, char by char: lower-case, strip accents (NFD, drop combining marks),
    split off punctuation."""
    out = []
    for word in text.lower().split():
        word = "".join(c for c in unicodedata.normalize("NFD", word) if unicodedata.category(c) != "Mn")
        current = []
        for c in word:
            if unicodedata.category(c).startswith("P"):
                if current:
                    out.append("".join(current))
                    current = []
                out.append(c)
            else:
                current.append(c)
        if current:
            out.append("".join(current))
    return out


def wordpiece(word, pieces):
    """Greedy longest-match-first split of one word into pieces (BERT's WordPiece, in Python)."""
    out, start = [], 0
    while start < len(word):
        end, piece = len(word), None
        while start < end:
            sub = word[start:end] if start == 0 else "##" + word[start:end]
            if sub in pieces:
                piece = sub
                break
            end -= 1
        if piece is None:
            return ["[UNK]"]
        out.append(piece)
        start = end
    return out


class RNNModel(nn.Module):
    def __init__(self, ntoken, ninp, nhid, nlayers):
        super().__init__()
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers)
        self.decoder = nn.Linear(nhid, ntoken)

    def forward(self, x, hidden):
        out, hidden = self.rnn(self.encoder(x), hidden)
        return self.decoder(out), hidden


def repackage_hidden(h):
    return tuple(v.detach() for v in h)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", action="store_true", help="tokenize the corpus once, before training")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--bptt", type=int, default=35)
    p.add_argument("--batch-size", type=int, default=20)
    args = p.parse_args()

    torch.manual_seed(0)
    per_batch = args.bptt * args.batch_size
    lines_per_batch = per_batch // 40 + 2  # lines of 24 words give ~40 pieces each: enough for a batch
    corpus, vocab = synthetic_text(lines_per_batch * (args.steps + 1), 24)
    piece_id = {piece: i for i, piece in enumerate(vocab)}

    def tokenize(lines):
        ids = [piece_id[pc] for line in lines for w in basic_tokens(line) for pc in wordpiece(w, piece_id)]
        ids.append(piece_id["<eos>"])
        return torch.tensor(ids, dtype=torch.long)

    if args.fix:
        ids = tokenize(corpus)

    def get_batch(i):
        """Inputs (bptt x batch) and next-word targets for batch `i`."""
        if args.fix:
            chunk = ids[i * per_batch : (i + 1) * per_batch + 1]
        else:  # planted: tokenize this batch's lines now (and one more for the last target)
            chunk = tokenize(corpus[i * lines_per_batch : (i + 1) * lines_per_batch + 1])[: per_batch + 1]
        data = chunk[:per_batch].view(args.batch_size, args.bptt).t().contiguous()
        target = chunk[1 : per_batch + 1].view(args.batch_size, args.bptt).t().contiguous()
        return data, target.view(-1)

    ntokens = len(vocab)
    model = RNNModel(ntokens, 64, 64, 2)
    criterion = nn.CrossEntropyLoss()
    lr, clip = 20.0, 0.25
    hidden = tuple(torch.zeros(2, args.batch_size, 64) for _ in range(2))

    times, fwd, bwd, upd = [], [], [], []
    t_prev = time.perf_counter()
    for i in range(args.steps):
        data, targets = get_batch(i)
        hidden = repackage_hidden(hidden)
        model.zero_grad()
        t0 = time.perf_counter()
        output, hidden = model(data, hidden)
        loss = criterion(output.view(-1, ntokens), targets)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        for prm in model.parameters():
            prm.data.add_(prm.grad, alpha=-lr)
        t3 = time.perf_counter()
        fwd.append(t1 - t0)
        bwd.append(t2 - t1)
        upd.append(t3 - t2)
        times.append(t3 - t_prev)
        t_prev = t3
    print(f"final loss {loss.item():.3f}", file=__import__("sys").stderr)

    write_test_clocks(forward=fwd, backward=bwd, update=upd)

    def med(v):
        steady = v[3:] if len(v) > 3 else v
        return statistics.median(steady) * 1000

    print(
        f"steps={len(times)} median_step_ms={med(times):.3f} forward_ms={med(fwd):.3f} "
        f"backward_ms={med(bwd):.3f} update_ms={med(upd):.3f}"
    )


if __name__ == "__main__":
    main()
