"""The report as a customer sees it: Debian's Chromium, headless, opens report.html from disk.

Needs the ``playwright`` Python package and the ``chromium`` binary (``apt-get install chromium``); Playwright's
own browser downloads are never used.  Skipped, saying which is missing, when either is absent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from drills.records.evidence.report import SignatureStatus, render_report
from tests.integration.conftest import watched_page
from tests.unit.evidence.test_report import KEYID, gang_deadlock, gang_fits, make_record, node_pull

pytestmark = pytest.mark.integration


def test_report_opens_from_disk_and_reads(browser: Any, tmp_path: Path) -> None:
    record = make_record((gang_fits(), gang_deadlock(), node_pull()))
    report = tmp_path / "report.html"
    report.write_text(render_report(record, SignatureStatus(KEYID, ephemeral=True)), encoding="utf-8")

    watched = watched_page(browser)
    page, requests, problems = watched.page, watched.requests, watched.problems
    page.goto(report.as_uri())

    verdict = page.get_by_test_id("verdict")
    assert verdict.is_visible()
    assert page.get_by_test_id("verdict-word").inner_text() == "FAIL"
    assert "A promise was broken" in verdict.inner_text()
    assert "(ephemeral: integrity only)" in page.get_by_test_id("signature").inner_text()

    rows = page.get_by_test_id("clause-table").get_by_test_id("clause-row")
    assert rows.count() == 3
    texts = [rows.nth(i).inner_text() for i in range(3)]
    assert [t.split()[0] for t in texts] == ["4.1", "4.2", "5.1"]
    assert "FAIL" in texts[1] and "DEADLOCK" in texts[1]
    assert "evidence/node-pull-a-training-job-survives-losing-the-node-of-one-worker.dsse.json" in texts[2]

    chart = page.locator('svg[data-testid="nodepull-chart"]')
    assert chart.count() == 1 and chart.is_visible()
    box = chart.bounding_box()
    assert box is not None and box["width"] > 600 and box["height"] > 150
    labels = chart.locator("text").all_text_contents()
    for phase in ("detect", "evict", "replace", "resume", "total", "t_fault", "t_resume", "2.40 s"):
        assert phase in labels, (phase, labels)
    bars = chart.locator("g.phase rect")
    assert bars.count() >= 10  # harness and platform bar for each of the five phases
    assert page.locator('svg[data-testid="gang-chart"]').count() == 2
    assert page.get_by_test_id("fingerprint").is_visible()

    page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
    chart.screenshot(path=str(tmp_path / "nodepull.png"))
    assert (tmp_path / "report.png").stat().st_size > 50_000
    assert requests == [report.as_uri()], "the report fetched something besides itself"
    assert not problems, problems
    page.close()
