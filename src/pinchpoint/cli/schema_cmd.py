"""pinchpoint schema DOCUMENT: the JSON Schema a document pinchpoint writes validates against."""

from __future__ import annotations

import argparse
import json
import sys


class SchemaCommand:
    NAME = "schema"
    HELP = "print the JSON Schema of a document pinchpoint writes (report: report.json)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("document", choices=("report",), help="report: report.json")

    def execute(self, args: argparse.Namespace) -> int:
        from pinchpoint.report.report_doc import report_schema

        json.dump(report_schema(), sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
