"""The report of a stack file (schema `pinchpoint.stacks/1`): where the samples went below Python and the
hottest leaf functions, typed (`pinchpoint schema stacks`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pinchpoint.report.document import Document, JsonSchema, json_schema
from pinchpoint.report.report_doc import NativeKernel

SCHEMA = "pinchpoint.stacks/1"


@dataclass(frozen=True, slots=True, kw_only=True)
class StackNative:
    """The samples by native cause (page faults, OpenMP, math kernels...) and the math kernels by name."""

    shares: Mapping[str, float]
    threads: int
    busy_threads: int
    kernels: tuple[NativeKernel, ...]
    isa_shares: Mapping[str, float]


@dataclass(frozen=True, slots=True, kw_only=True)
class LeafShare:
    function: str
    share: float


@dataclass(frozen=True, slots=True, kw_only=True)
class StacksDoc(Document):
    """`pinchpoint analyze` of a `perf script`, folded-stacks or VTune file."""

    schema: str
    source: str
    format: str
    weight: int
    weight_unit: str
    """`samples`, or `ns of CPU` where the file weighs its stacks by time."""
    native: StackNative | None
    top: tuple[LeafShare, ...]
    warnings: tuple[str, ...]


def stacks_schema() -> JsonSchema:
    return json_schema(
        StacksDoc,
        title="pinchpoint stack-file report",
        schema_id="https://pinchpoint.dev/schema/stacks-1.json",
    )
