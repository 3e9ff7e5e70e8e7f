"""The fixes `pinchpoint try` applies through the agent from nothing but the finding's fix kind."""

from __future__ import annotations

from typing import Any

AGENT_ONLY: dict[str, tuple[str, str, dict[str, Any]]] = {
    "load_in_process": (
        "num_workers=0",
        "every DataLoader built with num_workers=0",
        {"loader": {"num_workers": 0}},
    ),
    "bf16_autocast": (
        "bf16 autocast",
        "each top-level module with parameters run under torch.autocast(its device, bfloat16), its "
        "outputs cast back to float32 for the loss (fp32 weights and optimizer)",
        {"autocast": "bfloat16"},
    ),
    "fp32": ("autocast off", "every torch.autocast region entered with enabled=False", {"autocast": "off"}),
    "fused_optimizer": (
        "fused optimizer",
        "Adam, AdamW, SGD and Adagrad built with fused=True (foreach=True where fused refuses), unless "
        "the program chose",
        {"fused_optimizer": True},
    ),
    "tf32": (
        "TF32",
        "torch.backends.cuda.matmul.allow_tf32 and cudnn.allow_tf32 set at start-up",
        {"tf32": True},
    ),
    "pin_memory": (
        "pin_memory=True",
        "every DataLoader built with pin_memory=True",
        {"loader": {"pin_memory": True}},
    ),
}
"""Fixes the agent applies with nothing from the finding but its kind: (fix, how, the agent's part)."""


GC_PLANS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    (
        "gc.collect() made young",
        "each gc.collect() the program calls collects the youngest generation only (gc.collect(0))",
        {"gc": {"collect": "young"}},
    ),
    (
        "gc.freeze() after start-up",
        "gc.freeze() at the end of the first step: what start-up built (imports, model, data) is left "
        "out of every later collection",
        {"gc": {"freeze": True}},
    ),
)
"""host.gc's two fixes (`fix_kind` gc_less), each tried: explicit collections made cheap, and the
objects start-up made frozen."""
