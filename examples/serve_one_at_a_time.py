"""serve.batching -- a model server that answers requests one model call each while others wait.

A FastAPI app served by uvicorn classifies sequences of 16 token ids with a small transformer encoder
(4 layers, width 512, freshly initialised: nothing is downloaded), under ``torch.inference_mode()``.
Run it under a load with
``pinchpoint run --load http://127.0.0.1:8000/predict --load-rate 200 --load-duration 10
--load-body examples/request.json -- python examples/serve_one_at_a_time.py --port 8000``.

Planted: the endpoint runs the model on each request as it arrives, batch 1. Requests that arrive
meanwhile wait in the event loop's queue; each model call pays its fixed cost (dispatch, every weight
read from memory) for one row, and at 200 requests a second the queue grows for the whole load.

Fix (``--fix``): a batching queue. Requests wait up to ``MAX_WAIT_MS`` for others (at most ``MAX_BATCH``),
then one forward answers them all: the same work, one call's fixed cost shared.

``--sync`` serves the planted endpoint as a plain ``def``: FastAPI runs it in its thread pool, several
batch-1 calls at once on different threads (the same shape; pinchpoint sees those calls off the main
thread under ``--load``).

Its truth is the load's (``TRUTH_LOAD``, measured by ``examples/measure_truth.py``): ms per answered
request (1 / throughput) and the p90 latency, before and after the fix. Not run by the examples' generic
end-to-end test (a server runs until stopped): tests/test_serving_e2e.py loads it.

The server stops on SIGINT or SIGTERM (uvicorn's own handling).
"""

import argparse
import asyncio

import torch
import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel
from torch import nn

VOCAB, WIDTH, LAYERS, TOKENS, CLASSES = 1000, 512, 4, 16, 4
MAX_BATCH, MAX_WAIT_MS = 32, 5

PLANTED = ["serve.batching"]
E2E = False
TRUTH_LOAD = "path=/predict rate=200 duration=10 body=request.json"


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        layer = nn.TransformerEncoderLayer(WIDTH, 4, 4 * WIDTH, batch_first=True, dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.head = nn.Linear(WIDTH, CLASSES)

    def forward(self, tokens):
        return self.head(self.encoder(self.embed(tokens)).mean(dim=1))


class Request(BaseModel):
    tokens: list[int]


class Batcher:
    """Requests queued for up to MAX_WAIT_MS (at most MAX_BATCH), answered by one forward."""

    def __init__(self, model):
        self.model, self.queue = model, asyncio.Queue()

    async def submit(self, tokens):
        done = asyncio.get_running_loop().create_future()
        await self.queue.put((tokens, done))
        return await done

    async def run(self):
        while True:
            batch = [await self.queue.get()]
            deadline = asyncio.get_running_loop().time() + MAX_WAIT_MS / 1000
            while len(batch) < MAX_BATCH:
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(self.queue.get(), left))
                except TimeoutError:
                    break
            with torch.inference_mode():
                logits = self.model(torch.stack([t for t, _ in batch]))
            for (_, done), row in zip(batch, logits.argmax(dim=1).tolist(), strict=True):
                done.set_result(row)


def build_app(fix, sync=False):
    torch.manual_seed(0)
    model = Classifier().eval()
    app = FastAPI()
    batcher = Batcher(model)

    @app.on_event("startup")
    async def start_batcher():
        if fix:
            app.state.batching = asyncio.create_task(batcher.run())

    @app.post("/predict")
    async def predict(req: Request):
        tokens = torch.tensor(req.tokens[:TOKENS], dtype=torch.long)
        if fix:
            return {"label": await batcher.submit(tokens)}
        with torch.inference_mode():  # planted: one request a call, the others wait
            label = int(model(tokens.unsqueeze(0)).argmax(dim=1))
        return {"label": label}

    if sync:  # a plain `def` endpoint: FastAPI runs it in its thread pool, batch 1 a call on each thread

        @app.post("/predict")
        def predict_in_a_thread(req: Request):
            with torch.inference_mode():
                tokens = torch.tensor(req.tokens[:TOKENS], dtype=torch.long)
                return {"label": int(model(tokens.unsqueeze(0)).argmax(dim=1))}

        app.router.routes = [r for r in app.router.routes if getattr(r, "endpoint", None) is not predict]
    return app


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", action="store_true", help="batch queued requests into one forward")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--sync", action="store_true", help="the planted endpoint as a plain def (a thread pool)")
    args = p.parse_args()
    uvicorn.run(build_app(args.fix, args.sync and not args.fix), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
