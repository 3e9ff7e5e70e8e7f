"""The HTML report in a real browser: headless Chromium (Debian's `chromium`, driven by Playwright;
Playwright never downloads a browser here), with every network request refused. A report of a
captured run shows its findings and draws every chart with no console error; a report built from a
trace whose kernel names carry `<script>` and an `onerror` handler shows them as text and runs nothing.
CI installs chromium (.ci/run); elsewhere the tests skip when it is missing."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pinchpoint.pipeline import HTML_NAME, report_run_dir

CHROMIUM = Path("/usr/bin/chromium")
DATA = Path(__file__).parent / "data" / "rundirs" / "h200"
ARTIFACTS = Path(os.environ.get("PINCHPOINT_ARTIFACTS", Path(__file__).parent.parent / ".artifacts"))
HOSTILE = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'

if not CHROMIUM.exists():
    if os.environ.get("CI"):
        pytest.fail("CI must install Debian's chromium (see .ci/run)", pytrace=False)
    pytest.skip("no /usr/bin/chromium (apt install chromium)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"])
        try:
            yield b
        finally:
            b.close()


def _open(browser: Any, html: Path) -> tuple[Any, list[str], list[str]]:
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    errors: list[str] = []
    dialogs: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file:") else r.abort())
    page.goto(html.as_uri())
    page.wait_for_load_state("load")
    return page, errors, dialogs


def test_a_captured_runs_report_shows_its_findings_and_draws_every_chart(
    browser: Any, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    shutil.copytree(DATA / "fp32-planted", run)
    report = report_run_dir(run)
    page, errors, _ = _open(browser, run / HTML_NAME)
    cards = page.locator(".finding")
    assert cards.count() == len(report["findings"]) > 0
    for i in range(cards.count()):
        assert cards.nth(i).is_visible()
    assert report["findings"][0]["title"] in page.inner_text("body")
    charts = page.query_selector_all("svg")
    assert len(charts) == 3
    for svg in charts:
        box = svg.bounding_box()
        assert box is not None and box["width"] > 100 and box["height"] > 100
        assert svg.query_selector("rect, polyline") is not None
    assert errors == []
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "report-fp32-planted.png"), full_page=True)


def test_script_in_kernel_names_is_shown_never_run(browser: Any, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(DATA / "fp32-planted", run)
    window = run / "ranks" / "rank0" / "opwindow.json.gz"
    doc = json.loads(gzip.decompress(window.read_bytes()))
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "cpu_op"):
            e["name"] = HOSTILE + str(e.get("name"))
    window.write_bytes(gzip.compress(json.dumps(doc).encode()))
    report_run_dir(run)
    page, errors, dialogs = _open(browser, run / HTML_NAME)
    assert HOSTILE in page.inner_text("body")  # shown as text...
    assert page.evaluate("window.__pwned") is None  # ...and never run
    assert dialogs == [] and page.query_selector_all("script") == []
    assert not [e for e in errors if "pwned" in e]
