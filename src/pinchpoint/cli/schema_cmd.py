"""pinchpoint schema DOCUMENT: the JSON Schema a document pinchpoint writes validates against."""

from __future__ import annotations

import argparse
import json
import sys

DOCUMENTS = ("report", "outside", "try", "diff", "stacks", "load")
"""report: report.json; outside: outside.json (`pinchpoint attach --outside`); try: try.json; diff:
`pinchpoint diff --json`; stacks: `pinchpoint analyze --json` of a stack file."""


class SchemaCommand:
    NAME = "schema"
    HELP = (
        "print the JSON Schema of a document pinchpoint writes (report.json, outside.json, try.json, a diff)"
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "document", choices=DOCUMENTS, help="report.json, outside.json, try.json, a diff or a stack file's report"
        )

    def execute(self, args: argparse.Namespace) -> int:
        if args.document == "outside":
            from pinchpoint.report.outside_doc import outside_schema as schema
        elif args.document == "diff":
            from pinchpoint.report.diff_doc import diff_schema as schema
        elif args.document == "stacks":
            from pinchpoint.report.stacks_doc import stacks_schema as schema
        elif args.document == "load":
            from pinchpoint.report.load_doc import load_schema as schema
        elif args.document == "try":
            from pinchpoint.report.try_doc import try_schema as schema
        else:
            from pinchpoint.report.report_doc import report_schema as schema

        json.dump(schema(), sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
