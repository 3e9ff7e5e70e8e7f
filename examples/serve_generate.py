"""compute.recompute -- a text-generation server that runs its model over the whole context for every token.

A FastAPI app served by uvicorn streams continuations (server-sent events, one token an event, then
``data: [DONE]``, as OpenAI-style endpoints do) from the small char GPT of ``char_gpt_memmap.py``
(4 layers, width 128, freshly initialised: nothing is downloaded). Each request asks for
``max_new_tokens`` tokens after its prompt; the endpoint yields to the event loop after every token, so
the streams of requests in flight take turns, one token of one request a model call.
Run it under a load with
``pinchpoint run --load http://127.0.0.1:8000/generate --load-rate 40 --load-duration 6
--load-body examples/generate.json -- python examples/serve_generate.py --port 8000``.

Planted: no KV cache, as nanoGPT's sampler: each token's model call takes the whole sequence so far
(the prompt and every token generated), so a call's work grows with the context and every earlier
token's keys and values are computed again in every layer.

Fix (``--fix``): a KV cache per request (``char_gpt_sample.CachedGPT``): the prompt runs once and fills
each layer's keys and values; each later call feeds only the new token.

Other fix (``--batch``, still no cache): continuous batching. The streams in flight hand their contexts
to one batcher, which runs a single model call for all of them each turn (right-padded to the longest;
causal attention keeps a stream's positions blind to the padding after them) and gives each stream its
next token from its own last position. What host.dispatch's "served N a call" prices.

Its truth is the load's (``TRUTH_LOAD``, measured by ``examples/measure_truth.py``): the server's ms per
answered request over the whole load, first arrival to last answer (``metric=drain``), with more arriving
than either server answers. Not 1 / throughput while the load arrives: streams that take turns all finish
late, so few answers come before the arrivals stop. Not run by the examples'
generic end-to-end test (a server runs until stopped): tests/test_serving_e2e.py loads it.
"""

import argparse
import asyncio

import torch
import uvicorn
from fastapi import FastAPI
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from char_gpt_memmap import GPT
from char_gpt_sample import CachedGPT

VOCAB, BLOCK = 65, 256

PLANTED = ["compute.recompute"]
E2E = False
TRUTH_LOAD = "path=/generate rate=40 duration=6 body=generate.json metric=drain"


class Ask(BaseModel):
    tokens: list[int]
    max_new_tokens: int = 32


class StreamBatcher:
    """One model call a turn for every stream waiting on its next token (`--batch`)."""

    def __init__(self, model):
        self.model, self.waiting, self.wake = model, [], asyncio.Event()

    async def next_token(self, idx):
        done = asyncio.get_running_loop().create_future()
        self.waiting.append((idx, done))
        self.wake.set()
        return await done

    async def run(self):
        while True:
            await self.wake.wait()
            self.wake.clear()
            await asyncio.sleep(0)  # the other streams join this turn
            batch, self.waiting = self.waiting, []
            if not batch:
                continue
            lengths = [idx.size(1) for idx, _ in batch]
            ids = torch.zeros(len(batch), max(lengths), dtype=torch.long)
            for row, (idx, _) in enumerate(batch):
                ids[row, : lengths[row]] = idx[0]
            with torch.no_grad():  # (targets: every position's logits, not only the padded last)
                logits, _ = self.model(ids, torch.zeros_like(ids))
            for row, (_, done) in enumerate(batch):
                done.set_result(torch.argmax(logits[row, lengths[row] - 1]).view(1, 1))


def build_app(fix, batch=False):
    torch.manual_seed(0)
    model = GPT(VOCAB, BLOCK, n_layer=4, n_head=4, n_embd=128, flash=True).eval()
    app = FastAPI()
    batcher = StreamBatcher(model) if batch else None

    @app.on_event("startup")
    async def start_batcher():
        if batcher is not None:
            app.state.batching = asyncio.create_task(batcher.run())

    async def tokens(prompt, n):
        idx = torch.tensor([[t % VOCAB for t in prompt]], dtype=torch.long)
        cached = CachedGPT(model) if fix else None
        for _ in range(min(n, BLOCK - idx.size(1))):
            if batcher is not None:  # the other fix: one call for every stream in flight
                nxt = await batcher.next_token(idx)
            else:
                with torch.no_grad():
                    if cached is not None:  # the fix: the prompt once, then the new token alone
                        logits, _ = cached(idx[:, -1:] if cached.cache else idx)
                    else:  # planted: the whole context again, every token
                        logits, _ = model(idx)
                nxt = torch.argmax(logits[:, -1, :], dim=-1, keepdim=True)
            idx = torch.cat((idx, nxt), dim=1)
            yield f"data: {int(nxt)}\n\n"
            await asyncio.sleep(0)  # the other streams' turn
        yield "data: [DONE]\n\n"

    @app.post("/generate")
    async def generate(ask: Ask):
        return StreamingResponse(tokens(ask.tokens, ask.max_new_tokens), media_type="text/event-stream")

    return app


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", action="store_true", help="a KV cache per request")
    p.add_argument("--batch", action="store_true", help="one model call a turn for every stream (no cache)")
    p.add_argument("--port", type=int, default=8000)
    args = p.parse_args()
    uvicorn.run(build_app(args.fix, args.batch), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
