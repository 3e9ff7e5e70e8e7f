"""Attention written out in tensor ops: `softmax(q @ k.T * scale + mask) @ v` in the op window.

Written by hand, attention materialises its (batch, heads, T, S) score tensor and sends it through
memory once per elementwise op (scale, mask, softmax, dropout) and again for each of their backwards;
a fused kernel (`F.scaled_dot_product_attention`) computes the same result in tiles that never leave
the cache. What the fused kernel saves is, to first order, the time of those passes: the non-matmul
ops on score-shaped tensors.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from pinchpoint.trace.run import OpEvent, OpWindow

SOFTMAX_OPS = frozenset({"aten::softmax", "aten::_softmax", "aten::_safe_softmax", "aten::log_softmax"})
SDPA_MATH_SOFTMAX = "aten::_safe_softmax"
"""The softmax of `F.scaled_dot_product_attention`'s math path (torch ≥ 2.5): hand-written attention
calls `softmax`. Seen, the program already calls the fused API and it fell back to op-by-op math."""
DROPOUT_OPS = frozenset({"aten::bernoulli_", "aten::bernoulli", "aten::native_dropout", "aten::dropout"})
BATCHED_MATMUL_OPS = frozenset({"aten::bmm", "aten::matmul", "aten::baddbmm"})
"""Ops that compute q @ k.T (and, in the backward, its gradients): the fused kernel does this math too."""
VIEW_OPS = frozenset(
    f"aten::{n}"
    for n in ("view", "reshape", "detach", "expand", "alias", "transpose", "as_strided", "t", "unsqueeze")
)
"""Ops that move no memory (a new view of the same storage)."""
MIN_SEQUENCE = 32
"""A score tensor's last two dimensions (query and key positions) are at least this long: shorter
attention is a few kilobytes, as cheap unfused as fused."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HandAttention:
    shape: tuple[int, ...]
    """The largest score tensor (batch, heads, T, S)."""
    ns_per_step: float
    """Non-matmul ops on score-shaped tensors per step, forward and backward."""
    softmax_per_step: float
    """Softmax calls on score tensors per step (attention layers × forward passes)."""
    top_ops: tuple[tuple[str, float], ...]
    """(op name, ns per step), most time first."""
    via_sdpa: bool = False
    """The score tensor's softmax is `scaled_dot_product_attention`'s math path, not one written by hand."""
    dropout: bool = False
    """Dropout runs on the score tensor (attention dropout)."""


def _bmm_out_numel(o: OpEvent) -> int:
    """Elements of a batched matmul's result ((..., t, d) @ (..., d, s) -> (..., t, s)); 0 if unknown."""
    if len(o.input_dims) < 2:
        return 0
    a, b = (
        (o.input_dims[0], o.input_dims[1])
        if o.name != "aten::baddbmm"
        else (o.input_dims[1], o.input_dims[2])
    )
    if len(a) < 3 or len(b) < 3:
        return 0
    return math.prod(a[:-1]) * b[-1]


def _score_shapes(top: Iterable[OpEvent], products: set[int]) -> set[tuple[int, ...]]:
    out = set()
    for o in top:
        if o.name not in SOFTMAX_OPS or not o.input_dims:
            continue
        dims = tuple(o.input_dims[0])
        if len(dims) >= 3 and min(dims[-2:]) >= MIN_SEQUENCE and math.prod(dims) in products:
            out.add(dims)
    return out


def hand_attention(window: OpWindow) -> HandAttention | None:
    """The window's hand-written attention, if a softmax ran over the product of a batched matmul."""
    top = [o for o in window.ops if o.depth == 0]
    products = {n for o in top if o.name in BATCHED_MATMUL_OPS and (n := _bmm_out_numel(o))}
    shapes = _score_shapes(top, products)
    if not shapes:
        return None
    steps = max(1, window.steps)
    by_name: dict[str, float] = {}
    softmax = 0
    for o in top:
        if o.name in BATCHED_MATMUL_OPS or o.name in VIEW_OPS:
            continue
        if not any(tuple(d) in shapes for d in o.input_dims):
            continue
        by_name[o.name] = by_name.get(o.name, 0.0) + o.dur_ns / steps
        softmax += o.name in SOFTMAX_OPS
    return HandAttention(
        shape=max(shapes, key=math.prod),
        ns_per_step=sum(by_name.values()),
        softmax_per_step=softmax / steps,
        top_ops=tuple(sorted(by_name.items(), key=lambda kv: -kv[1])[:4]),
        via_sdpa=SDPA_MATH_SOFTMAX in by_name,
        dropout=bool(DROPOUT_OPS & by_name.keys()),
    )
