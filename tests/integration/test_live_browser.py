"""The live view as someone watching a run sees it: Debian's Chromium, headless, on the page a real
``firedrill run --live`` serves on loopback while it drills the embedded reference platform.

The run is held after its last verdict and before it seals its archive (``FIREDRILL_LIVE_TEST_HOLD``: it waits for a
line on its stdin, which the test sends), so what the page shows by then it surely showed before the run ended, and
the reload surely happens mid-run: a wait on an event the test sends, not a sleep.

Needs the ``playwright`` Python package and the ``chromium`` binary (``apt-get install chromium``); Playwright's
own browser downloads are never used.  Skipped, saying which is missing, when either is absent.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from drills.bdd.run import LIVE_TEST_HOLD
from tests.integration.conftest import watched_page
from tests.integration.test_run import FIREDRILL, REPO, features_copy

pytestmark = pytest.mark.integration

RUN_DEADLINE_S = 240.0
"""From the start of the run to its hold: the platform's start, a canary's checkpoint, a pull and its recovery on a
busy two-core machine."""
PAGE_MS = 15_000


class Run:
    """A ``firedrill run`` this test started, its output read line by line as it comes."""

    def __init__(self, args: list[str]) -> None:
        self.proc = subprocess.Popen([*FIREDRILL, *args], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env={**os.environ, LIVE_TEST_HOLD: "1"})
        self.lines: list[str] = []
        self.url = ""
        self.serving = threading.Event()
        self.held = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            found = re.search(r"Live view: (http://127\.0\.0\.1:\d+/)", line)
            if found:
                self.url = found.group(1)
                self.serving.set()
            if LIVE_TEST_HOLD in line:
                self.held.set()

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def release(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()

    def end(self) -> None:
        """Only this test's own process: killed if a failed assertion left it running, then reaped."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(60)
        self.reader.join(10)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


def shown(page: Any) -> dict[str, Any]:
    """What the page shows of the run: every text, each step's state, each phase and verdict row."""
    return {"text": page.locator("main").inner_text(),
            "steps": page.get_by_test_id("step-row").evaluate_all("rows => rows.map(r => r.dataset.state)"),
            "phases": page.get_by_test_id("phase-row").all_inner_texts(),
            "verdicts": page.get_by_test_id("verdict-row").all_inner_texts(),
            "chart phases": page.locator('svg[data-testid="nodepull-chart"] g.phase').evaluate_all(
                "gs => gs.map(g => g.textContent.replace(/\\s+/g, ' ').trim())")}


def test_the_live_page_follows_a_run_and_a_reload_mid_run_shows_the_same(browser: Any, tmp_path: Path) -> None:
    features = features_copy(tmp_path, "node_pull.feature")
    run = Run(["run", "--features", str(features), "-k", "survives", "--live", "--reports", str(tmp_path / "reports")])
    watched = watched_page(browser)
    page = watched.page
    try:
        assert run.serving.wait(60), run.output
        page.goto(run.url)  # while the reference platform is still starting
        page.get_by_test_id("live-status").filter(has_text="Running").wait_for(timeout=PAGE_MS)

        deadline_ms = int(RUN_DEADLINE_S * 1000)
        phase = page.locator('[data-testid="phase-row"][data-phase="detect"]')
        phase.wait_for(timeout=deadline_ms)
        assert "<= 5 s" in phase.inner_text() and phase.get_attribute("data-verdict") in ("PASS", "FAIL")
        verdict = page.get_by_test_id("verdict-row")
        verdict.wait_for(timeout=deadline_ms)
        assert run.held.wait(RUN_DEADLINE_S), run.output
        assert run.proc.poll() is None and not page.get_by_test_id("run-finished").is_visible()  # mid-run
        assert verdict.get_attribute("data-verdict") in ("PASS", "FAIL", "INCONCLUSIVE")
        assert "A training job survives losing the node of one worker" in verdict.inner_text()
        act = page.get_by_test_id("act")
        assert "I pull the node of worker 0" in act.inner_text() and act.is_visible()
        chart = page.locator('svg[data-testid="nodepull-chart"]')  # report.html's own chart, drawn live
        assert chart.count() == 1 and chart.is_visible()
        assert "detect" in chart.locator("text").all_text_contents()
        before = shown(page)
        assert before["steps"][:3] == ["passed", "passed", "passed"], before["steps"]

        page.reload()
        page.get_by_test_id("verdict-row").wait_for(timeout=PAGE_MS)
        page.wait_for_function("n => document.querySelectorAll('[data-testid=\"phase-row\"]').length === n",
                               arg=len(before["phases"]), timeout=PAGE_MS)
        assert shown(page) == before

        run.release()
        finished = page.get_by_test_id("run-finished")
        finished.wait_for(timeout=deadline_ms)
        archive = page.get_by_test_id("archive").inner_text()
        assert archive.startswith(str(tmp_path / "reports")), archive
        assert page.get_by_test_id("verify-command").inner_text() == f"firedrill verify {archive}"
        assert run.proc.wait(120) in (0, 1, 3), run.output  # the verdict is the platform's; the harness ran
        assert (Path(archive) / "manifest.json").is_file() and (Path(archive) / "report.html").is_file()
        page.screenshot(path=str(tmp_path / "live.png"), full_page=True)
    finally:
        page.close()
        run.end()
    origin = run.url.rstrip("/")
    assert [u for u in watched.requests if not u.startswith(origin + "/")] == [], "the page fetched elsewhere"
    assert not watched.problems, watched.problems
