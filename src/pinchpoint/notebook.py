"""`pinchpoint.profile()`: the same capture and report from inside a program.

    with pinchpoint.profile(out="runs/exp1") as prof:
        for x, y in loader:
            ...
            prof.step()

Inside `pinchpoint run` it joins the launcher's capture (prof.step() marks steps) instead of starting
a second one. It sits above capture/, pipeline/ and report/ (it drives all three), as the command line
does.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from pinchpoint.capture import agent as agent_mod
from pinchpoint.capture.envnames import RUN_DIR_ENV
from pinchpoint.capture.roles import Role

if TYPE_CHECKING:
    from pinchpoint.report.report_doc import ReportDoc


class Profile:
    def __init__(
        self,
        out: str | os.PathLike[str] | None = None,
        *,
        opwindow: str = "10:3",
        sample_interval_s: float | None = None,
        stacks: bool = False,
        stacks_rate_hz: int | None = None,
        print_report: bool = True,
    ) -> None:
        self.out = Path(out) if out is not None else None
        self.opwindow = opwindow
        self.sample_interval_s = sample_interval_s
        self.print_report = print_report
        self.stacks = stacks or stacks_rate_hz is not None
        """Sample Python stacks with py-spy (as `pinchpoint run --stacks`)."""
        self.stacks_rate_hz = stacks_rate_hz
        self._stack_sampler: Any = None
        self.report: ReportDoc | None = None
        """The report once the block ends (`.to_dict()` for report.json's dict)."""
        self.run_dir: Path | None = None
        self._agent: agent_mod.Agent | None = None
        self._meta: dict[str, Any] | None = None
        self._sampler: Any = None
        self._joined = False

    def __enter__(self) -> Profile:
        existing = agent_mod.current()
        if existing is not None and os.environ.get(RUN_DIR_ENV):
            self._agent, self._joined, self.run_dir = existing, True, existing.run_dir
            return self
        from pinchpoint.capture.launcher import start_run_dir
        from pinchpoint.capture.sampler import DEFAULT_INTERVAL_S, spawn_sampler

        self.run_dir = self.out or _default_dir()
        self._meta = start_run_dir(self.run_dir, [sys.executable, *sys.argv], "api")
        self._agent = agent_mod.start(self.run_dir, window=self.opwindow)
        self._sampler = spawn_sampler(self.run_dir, os.getpid(), self.sample_interval_s or DEFAULT_INTERVAL_S)
        if self.stacks:
            from pinchpoint.capture.stacks import DEFAULT_RATE_HZ, spawn_stack_sampler

            self._stack_sampler = spawn_stack_sampler(
                self.run_dir, os.getpid(), self.stacks_rate_hz or DEFAULT_RATE_HZ
            )
        return self

    def step(self) -> None:
        """Mark the end of a step (then steps are exactly the code between calls)."""
        if self._agent is not None:
            self._agent.explicit_step()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._joined or self._agent is None or self.run_dir is None or self._meta is None:
            return
        from pinchpoint.capture.launcher import finish_run_dir
        from pinchpoint.capture.sampler import stop_sampler
        from pinchpoint.pipeline.rundir import report_run_dir

        self._agent.close()
        self._agent.role = Role.OFF  # the hooks stay installed but record nothing more
        agent_mod.AGENT = None
        stop_sampler(self._sampler)
        if self._stack_sampler is not None:
            from pinchpoint.capture.stacks import stop_stack_sampler

            stop_stack_sampler(self._stack_sampler, program_ended=False)
        finish_run_dir(self.run_dir, self._meta, 0 if exc_type is None else 1, None)
        try:
            self.report = report_run_dir(self.run_dir)
        except Exception as error:  # never mask the user's own exception or result
            print(f"pinchpoint: no report: {error}", file=sys.stderr)
            return
        if self.print_report:
            from pinchpoint.report.model import Report
            from pinchpoint.report.terminal import render

            render(Report(doc=self.report), sys.stderr)

    def _repr_html_(self) -> str:
        """In a notebook, the profile shows its report (the same HTML as the run directory's)."""
        if self.report is None:
            return "<p>pinchpoint: no report yet (it is written when the <code>with</code> block ends)</p>"
        from pinchpoint.pipeline.rundir import HTML_NAME
        from pinchpoint.report.html import render_html

        page = self.run_dir / HTML_NAME if self.run_dir is not None else None
        if page is not None and page.is_file():
            return page.read_text()  # the run directory's own page: charts, rooflines and all
        return render_html(self.report)


def _default_dir() -> Path:
    import datetime as dt

    stem = Path(sys.argv[0]).stem if sys.argv and sys.argv[0] else "api"
    return Path("pinchpoint-runs") / f"{stem or 'api'}-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
