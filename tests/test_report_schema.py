"""report.json is a typed document: every report written validates against the JSON Schema that
`pinchpoint schema report` prints, and reads back into the same `ReportDoc`."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from pinchpoint.cli.main import main
from pinchpoint.errors import TraceError
from pinchpoint.report.report_doc import ReportDoc, report_schema

GOLDEN = Path(__file__).parent / "golden"
REPORTS = sorted(p for p in GOLDEN.glob("*.json") if json.loads(p.read_text()).get("schema"))


def assert_valid(report: dict[str, Any]) -> None:
    """`report` validates against report.json's schema (every e2e run's report is checked with this)."""
    jsonschema.Draft202012Validator(report_schema()).validate(report)


def test_every_golden_is_a_report() -> None:
    assert {p.stem for p in REPORTS} >= {"fetch_bound", "two_causes", "crashed", "analyze_bert_small_h100"}


@pytest.mark.parametrize("path", REPORTS, ids=lambda p: p.stem)
def test_every_golden_validates_and_reads_back_whole(path: Path) -> None:
    report = json.loads(path.read_text())
    assert_valid(report)
    assert ReportDoc.from_dict(report).to_dict() == report


def test_the_schema_refuses_what_the_type_does_not_hold() -> None:
    report = json.loads((GOLDEN / "fetch_bound.json").read_text())
    for broken in (
        {**report, "findings": [{**report["findings"][0], "share": "40%"}]},
        {k: v for k, v in report.items() if k != "steps"},
        {**report, "run": {**report["run"], "command": "python train.py"}},
    ):
        with pytest.raises(jsonschema.ValidationError):
            assert_valid(broken)
        with pytest.raises(TraceError):  # (one line on the command line: `pinchpoint show` of a bad file)
            ReportDoc.from_dict(broken)


def test_an_older_report_without_a_nullable_key_reads() -> None:
    """A report written before a nullable key existed reads with it null (the history keeps old ones)."""
    report = json.loads((GOLDEN / "analyze_resnet50_nw0.json").read_text())
    del report["environment"]["dataloader"]
    assert ReportDoc.from_dict(report).environment.dataloader is None


def test_schema_command_prints_the_schema() -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["schema", "report"]) == 0
    schema = json.loads(out.getvalue())
    assert schema == report_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert set(schema["required"]) >= {"schema", "run", "environment", "steps", "findings"}
    assert "gpu" not in schema["required"]  # an optional section: only where a device timeline was read


@pytest.mark.parametrize("document", ["outside", "try", "diff"])
def test_every_document_has_its_schema(document: str) -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["schema", document]) == 0
    schema = json.loads(out.getvalue())
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["properties"]["schema"] == {"type": "string"} and "schema" in schema["required"]
