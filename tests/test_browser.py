"""The HTML report in a real browser: headless Chromium (Debian's `chromium`, driven by Playwright;
Playwright never downloads a browser here), with every network request refused. A report of a
captured run shows its findings and draws every chart with no console error; a report built from a
trace whose kernel names carry `<script>` and an `onerror` handler shows them as text and runs nothing.
CI installs chromium (.ci/run); elsewhere the tests skip when it is missing."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pinchpoint.pipeline.rundir import HTML_NAME, report_run_dir

CHROMIUM = Path("/usr/bin/chromium")
ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "rundirs" / "h200"
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


def _drawn_charts(page: Any) -> set[str]:
    """The charts in the page, each checked to be laid out with a size and to have drawn something."""
    names = set()
    for section in page.query_selector_all("section.chart"):
        svg = section.query_selector("svg")
        assert svg is not None, section.get_attribute("data-chart")
        box = svg.bounding_box()
        assert box is not None and box["width"] > 100 and box["height"] > 40, section.get_attribute(
            "data-chart"
        )
        assert svg.query_selector("rect, polyline, circle") is not None
        names.add(section.get_attribute("data-chart"))
    return names


def test_a_captured_runs_report_shows_its_findings_and_draws_every_chart(
    browser: Any, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    shutil.copytree(DATA / "fp32-planted", run)
    report = report_run_dir(run).to_dict()
    page, errors, _ = _open(browser, run / HTML_NAME)
    cards = page.locator(".finding")
    assert cards.count() == len(report["findings"]) > 0
    for i in range(cards.count()):
        assert cards.nth(i).is_visible()
    assert report["findings"][0]["title"] in page.inner_text("body")
    drawn = _drawn_charts(page)
    assert {"steps", "cores", "memory", "gpu"} <= drawn
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


@pytest.fixture(scope="module")
def stacks_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real capture on this machine: fp32 matmuls on a CPU with bf16 units, Python stacks sampled."""
    run = tmp_path_factory.mktemp("stacks") / "run"
    cmd = [sys.executable, "-m", "pinchpoint", "run", "--stacks", "-q", "-o", str(run),
           str(ROOT / "examples" / "compute_math.py"), "--steps", "30"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return run


def test_a_cpu_run_with_stacks_shows_its_roofline_and_flame_graph(browser: Any, stacks_run: Path) -> None:
    page, errors, _ = _open(browser, stacks_run / HTML_NAME)
    assert {"steps", "cores", "memory", "roofline", "flame"} <= _drawn_charts(page)
    # The roofline has the measured fp32 and bf16 peaks and the fp32 matmuls under the fp32 one.
    roof = page.locator('section[data-chart="roofline"]')
    assert "fp32 peak" in roof.inner_text() and "bf16 peak" in roof.inner_text()
    tips = [t.text_content() or "" for t in roof.locator("circle > title").all()]
    assert any(t.startswith(("mm ", "addmm ")) and " fp32:" in t and "% of attainable" in t for t in tips), (
        tips
    )
    flame = page.locator('section[data-chart="flame"] svg g')
    assert flame.count() > 5
    assert errors == []
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "report-compute-math.png"), full_page=True)


SPEEDSCOPE = "speedscope@1.25.0"
SPEEDSCOPE_DIR = ROOT / ".cache" / "speedscope-1.25.0"


@pytest.fixture(scope="module")
def speedscope_app() -> Path:
    """speedscope's own offline build (index.html + its scripts), from its npm package, cached in .cache/."""
    index = SPEEDSCOPE_DIR / "package" / "dist" / "release" / "index.html"
    if index.exists():
        return index
    npm = shutil.which("npm")
    if npm is None:
        if os.environ.get("CI"):
            pytest.fail("CI needs npm to fetch the speedscope app (see .ci/run)", pytrace=False)
        pytest.skip("no npm to fetch the speedscope app")
    SPEEDSCOPE_DIR.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [npm, "pack", SPEEDSCOPE, "--pack-destination", str(SPEEDSCOPE_DIR)],
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (tgz,) = SPEEDSCOPE_DIR.glob("speedscope-*.tgz")
    with tarfile.open(tgz) as tar:
        tar.extractall(SPEEDSCOPE_DIR, filter="data")
    return index


def test_the_speedscope_export_opens_in_speedscope(
    browser: Any, stacks_run: Path, speedscope_app: Path
) -> None:
    profile = stacks_run / "stacks.speedscope.json"
    page, errors, _ = _open(browser, speedscope_app)
    page.set_input_files("input[type=file]", str(profile))
    page.wait_for_function(
        "document.title.endsWith(' - speedscope') && document.title.includes('Python stacks')"
    )
    name = json.loads(profile.read_text())["profiles"][0]["name"]
    page.get_by_text(name).first.wait_for()  # the profile's process, named by its role, in the toolbar
    assert page.locator("canvas").count() > 0
    assert errors == [], errors
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "speedscope-compute-math.png"))


def test_the_tensorboard_export_shows_in_a_running_tensorboard(
    browser: Any, stacks_run: Path, tmp_path: Path
) -> None:
    """`tensorboard --logdir` on the export (a real TensorBoard server, on localhost): its scalars API lists
    pinchpoint's tags, and its own web app, opened in Chromium, shows them."""
    pytest.importorskip("tensorboard")
    logdir = tmp_path / "tb"
    proc = subprocess.run(
        [sys.executable, "-m", "pinchpoint", "export", str(stacks_run), "--format", "tensorboard", "-o", str(logdir)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    server = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1", "--port", "0",
         "--load_fast", "false"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        url = None
        assert server.stdout is not None
        for line in server.stdout:  # "TensorBoard 2.21.0 at http://127.0.0.1:PORT/ (Press CTRL+C to quit)"
            m = re.search(r"(http://127\.0\.0\.1:\d+/)", line)
            if m:
                url = m.group(1)
                break
        assert url, "tensorboard did not start"
        tags: dict[str, Any] = {}
        for _ in range(60):  # the server loads the event files in the background
            with urllib.request.urlopen(url + "data/plugin/scalars/tags", timeout=10) as r:
                tags = json.loads(r.read())
            if any("pinchpoint/step_time_ms" in t for t in tags.values()):
                break
            time.sleep(0.5)
        (run_tags,) = tags.values()
        assert "pinchpoint/step_time_ms" in run_tags and "pinchpoint/phase/forward" in run_tags
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.route("**/*", lambda r: r.continue_() if r.request.url.startswith(url) else r.abort())
        page.goto(url + "#scalars")
        page.get_by_text("pinchpoint/step_time_ms").first.wait_for(timeout=30_000)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "tensorboard-compute-math.png"))
    finally:
        server.terminate()
        server.wait(timeout=30)
