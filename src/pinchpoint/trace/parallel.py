"""How a rank's model is split across ranks beyond DDP (`distributed.jsonl`'s `fsdp`, `pipeline` and
`tensor_parallel` lines)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class FsdpConfig:
    """FSDP2 as the program set it up, read from its sharded modules after a step trained."""

    modules: int
    """Modules `fully_shard`-ed (the root included)."""
    resharding: int
    """Of them, those that free their gathered parameters after forward (`reshard_after_forward=True`)."""
    mesh: tuple[int, ...]
    mesh_dims: tuple[str, ...] = ()
    param_dtype: str | None = None
    """Mixed precision: the dtype parameters are gathered in (None: their own)."""
    reduce_dtype: str | None = None
    param_bytes: int = 0
    """The sharded modules' parameters at full size."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineConfig:
    """A `torch.distributed.pipelining` schedule as the program built it, read at its first step."""

    schedule: str
    """Its class (`ScheduleGPipe`, `Schedule1F1B`, `ScheduleInterleaved1F1B`, ...)."""
    microbatches: int
    stages: int
    """Stages in the whole pipeline."""
    stage_indices: tuple[int, ...] = ()
    """This rank's stages (several under an interleaved schedule)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TensorParallelConfig:
    """Tensor parallelism as the program set it up, read from its parameters after a step trained."""

    degree: int
    """Ranks each sharded parameter is split over (the tensor-parallel mesh's size)."""
    mesh_dims: tuple[str, ...] = ()
    placements: tuple[tuple[str, int], ...] = ()
    """Placement (`Shard(0)`, `Shard(1)`, `Replicate()`) -> parameters placed so."""
    sharded_params: int = 0
    param_bytes: int = 0
    """The model's parameters at full size: what data parallelism's gradient all-reduce would move."""
    sharded_bytes: int = 0
