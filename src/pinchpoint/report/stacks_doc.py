"""The report of a stack file (schema `pinchpoint.stacks/1`): where the samples went below Python and the
hottest leaf functions, typed (`pinchpoint schema stacks`)."""

from __future__ import annotations

from dataclasses import dataclass

from pinchpoint.report.document import Document, JsonSchema, json_schema
from pinchpoint.report.report_doc import NativeInfo

SCHEMA = "pinchpoint.stacks/1"


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
    native: NativeInfo | None
    """The samples by native cause (page faults, OpenMP, math kernels...) and the math kernels by name,
    as report.json's `native`."""
    top: tuple[LeafShare, ...]
    warnings: tuple[str, ...]


def stacks_schema() -> JsonSchema:
    return json_schema(
        StacksDoc,
        title="pinchpoint stack-file report",
        schema_id="https://pinchpoint.dev/schema/stacks-1.json",
    )
