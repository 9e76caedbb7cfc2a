"""``firedrill trend`` on ledgers of sealed archives (real format, signed, verified as ``firedrill verify`` does):
recorded honest runs are not flagged, a flaky scenario is, a regression names its phase and size, evidence that
does not verify is left out with its own exit code, and the HTML page draws it all without loading anything.

The honest runs are ``honest_runs.json``: the measured values of 8 real runs of the embedded platform, recorded
with ``record_honest_runs.py`` (how: the fixture's ``recorded`` field).
"""

from __future__ import annotations

import re
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rich.console import Console

from drills.records.evidence.signing import Signer, generate_keypair
from drills.records.trend import TrendExit, TrendOptions, run_trend
from drills.records.trend.archives import load_runs, parse_since
from drills.records.trend.errors import TrendUsageError
from drills.records.trend.rules import RegressionRule
from drills.records.trend.series import build_trend
from tests.unit.trend.synthetic import (
    from_fixture, honest_fixture, node_pull, run_id, scenario, seal_nights, seal_run, night,
)

HONEST = {"detect": 2.3, "evict": 0.15, "replace": 0.4, "resume": 0.4, "total": 3.3, "lost steps": 0.0}


def trend(reports: Path, **kw: object) -> tuple[int, str, str]:
    out = Console(record=True, width=300, highlight=False, markup=False, soft_wrap=True)
    err = Console(record=True, width=300, highlight=False, markup=False, soft_wrap=True, stderr=True)
    code = run_trend(TrendOptions(reports, **kw), out, err)  # type: ignore[arg-type]
    return code, out.export_text(), err.export_text()


def findings(out: str, kind: str) -> list[str]:
    """The finding lines (``REGRESSION ...``, ``FLAKY ...``) of the text output."""
    return [line for line in out.splitlines() if line.startswith(f"{kind} ")]


def honest_nights(reports: Path) -> list[Path]:
    fixture = honest_fixture()
    signer = Signer.generate_ephemeral()
    return [seal_run(reports, r["run_id"], datetime.fromisoformat(r["time"].replace("Z", "+00:00")),
                     [from_fixture(s) for s in r["scenarios"]], signer=signer) for r in fixture["runs"]]


def test_recorded_honest_runs_are_neither_regressed_nor_flaky(tmp_path: Path) -> None:
    honest_nights(tmp_path)
    code, out, err = trend(tmp_path)
    assert code == TrendExit.OK, out + err
    assert not findings(out, "REGRESSION") and not findings(out, "FLAKY")
    assert "Trend of 8 runs" in out and "verified: 8 archives" in out and "chain of 8 lines intact" in out
    assert "trend: no regression, nothing flaky; exit 0" in out
    # judged, not skipped: every thresholded phase of the node pull got a status of ok
    for phase in ("detect", "evict", "replace", "resume", "total", "lost steps"):
        assert re.search(rf"^  {phase} +≤ .* ok$", out, re.M), phase


@pytest.mark.parametrize("last", [1, 2, 3])
def test_every_window_of_the_recorded_honest_runs_is_unflagged(tmp_path: Path, last: int) -> None:
    """The rule on every prefix of the recorded runs (3 to 7 baseline runs, the last 1 to 3 judged)."""
    honest_nights(tmp_path)
    runs = load_runs(tmp_path).runs
    for end in range(3 + last, len(runs) + 1):
        result = build_trend(runs[:end], RegressionRule(last=last))
        assert not result.regressions, [m.assessment.words for _, m in result.regressions]
        assert not result.flaky


def test_a_flaky_scenario_is_flagged_and_a_steady_one_is_not(tmp_path: Path) -> None:
    verdicts = ["PASS", "PASS", "FAIL", "PASS", "PASS", "FAIL", "PASS", "PASS"]
    nights = []
    for i, v in enumerate(verdicts):
        gang = scenario("Gang submission", "gang_submission.feature", "Two gangs that each need more than half",
                        [("partial-hold GPU-seconds", 0.0, "GPU-s")],
                        {"partial-hold GPU-seconds": 16.0 if v == "FAIL" else 0.0}, drill="gang-submission")
        nights.append([gang, node_pull({**HONEST, "detect": 2.2 + 0.05 * (i % 3)})])
    seal_nights(tmp_path, nights)
    code, out, _ = trend(tmp_path)
    assert code == TrendExit.FLAKY, out
    assert "FLAKY Gang submission > Two gangs that each need more than half: the verdict changed 4 times at one " \
           "platform" in out
    assert "PASS PASS FAIL PASS PASS FAIL PASS PASS" in out
    assert len(findings(out, "FLAKY")) == 1 and not findings(out, "REGRESSION")


def test_a_verdict_that_changed_once_is_not_flaky(tmp_path: Path) -> None:
    nights = [[node_pull(HONEST)]] * 4 + [[node_pull({**HONEST, "lost steps": 12.0})]] * 2
    seal_nights(tmp_path, nights)
    code, out, _ = trend(tmp_path, last=2)
    assert not findings(out, "FLAKY")
    assert "note: verdict changed once at one platform in the last 6 runs: PASS PASS PASS PASS FAIL FAIL" in out
    assert code == TrendExit.REGRESSED  # 12 steps lost against 0: beyond the 1-step floor
    assert "lost steps: 12 steps in each of the last 2 runs (median)" in out


def test_flips_across_a_changed_platform_are_not_flaky(tmp_path: Path) -> None:
    """Honest and defective runs alternate: each platform is steady, so nothing is flaky."""
    signer = Signer.generate_ephemeral()
    for i in range(6):
        slow = i % 2 == 1
        seal_run(tmp_path, run_id(i), night(i), [node_pull({**HONEST, "detect": 30.0 if slow else 2.3})],
                 signer=signer, defects=("slow-detect",) if slow else ())
    code, out, _ = trend(tmp_path)
    assert not findings(out, "FLAKY"), out


def test_a_regression_names_the_phase_and_its_size_and_draws_it(tmp_path: Path) -> None:
    nights = [[node_pull({**HONEST, "detect": d, "total": t})] for d, t in
              [(2.2, 3.2), (2.4, 3.4), (2.3, 3.3), (2.25, 3.25), (2.35, 3.35)]]
    nights.append([node_pull({**HONEST, "detect": None, "total": 30.24})])
    seal_nights(tmp_path, nights)
    html = tmp_path / "page.html"
    code, out, _ = trend(tmp_path, html=html)
    assert code == TrendExit.REGRESSED, out
    assert findings(out, "REGRESSION") == [
        "REGRESSION Node pull > A training job survives losing the node of one worker: detect: not measured in the "
        "last run; the median of the 5 runs before was 2.30 s (noise margin 1.15 s); a measure with no data counts "
        "as worse",
        "REGRESSION Node pull > A training job survives losing the node of one worker: total: 30.24 s in the last "
        "run; the median of the 5 runs before was 3.30 s (noise margin 2.00 s): 26.94 s worse (x9.2)"]
    assert "trend: REGRESSED (2 measure(s)); exit 6" in out
    page = html.read_text()
    assert page.count('data-testid="regression-mark"') == 2
    assert re.search(r'data-measure="total" data-status="REGRESSION"', page)
    assert re.search(r'data-measure="evict" data-status="ok"', page)
    assert 'data-testid="missing-point"' in page and 'data-testid="failed-point"' in page
    # every judged phase has its threshold drawn: a line, or a label when it is far above the values
    assert page.count('data-testid="threshold"') + page.count('data-testid="threshold-above"') == 6
    assert "threshold ≤ 5 s, above this axis (33 x the highest value)" in page  # evict: 150 ms
    assert "REGRESSION +26.94 s (x9.2)" in page and "REGRESSION no data" in page


def test_the_page_is_self_contained(tmp_path: Path) -> None:
    seal_nights(tmp_path, [[node_pull(HONEST)]] * 4)
    code, _, _ = trend(tmp_path)
    page = (tmp_path / "trend.html").read_text()
    assert code == TrendExit.OK
    assert "default-src 'none'" in page
    assert not re.search(r"<script|<link|<img|@import|url\(|https?://", page, re.I)


def test_names_from_the_evidence_are_escaped_in_the_page(tmp_path: Path) -> None:
    evil = scenario("F <b>", "x.feature", "<script>alert(1)</script>", [("t<i>", 1.0, "s")], {"t<i>": 0.5})
    seal_nights(tmp_path, [[evil]] * 4)
    trend(tmp_path)
    page = (tmp_path / "trend.html").read_text()
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_the_score_is_shown_per_run(tmp_path: Path) -> None:
    nights = [[node_pull(HONEST)]] * 3 + [[node_pull({**HONEST, "detect": None, "total": 30.0})]]
    seal_nights(tmp_path, nights)
    _, out, _ = trend(tmp_path)
    # 6 thresholds: 4 held, detect unmeasured, total missed; verdict FAIL: (4 + 0) / 7
    assert "Resilience score by run, oldest first: 100.0 100.0 100.0 57.1" in out
    assert 'id="resilience-score"' in (tmp_path / "trend.html").read_text()


def test_a_tampered_archive_is_left_out_with_its_own_exit_code(tmp_path: Path) -> None:
    dirs = seal_nights(tmp_path, [[node_pull(HONEST)]] * 5)
    report = dirs[2] / "record.json"
    report.write_bytes(report.read_bytes().replace(b'"PASS"', b'"FAIL"', 1))
    code, out, _ = trend(tmp_path)
    assert code == TrendExit.NOT_VERIFIED, out
    assert f"NOT VERIFIED run {dirs[2].name} (left out): record.json:" in out
    assert "Trend of 4 runs" in out


def test_a_broken_chain_is_reported(tmp_path: Path) -> None:
    seal_nights(tmp_path, [[node_pull(HONEST)]] * 4)
    ledger = tmp_path / "ledger.jsonl"
    lines = ledger.read_bytes().splitlines(keepends=True)
    ledger.write_bytes(b"".join([lines[0], lines[2], lines[1], lines[3]]))
    code, out, _ = trend(tmp_path)
    assert code == TrendExit.NOT_VERIFIED
    assert "ledger chain of 4 lines BROKEN" in out and "ledger.jsonl line 2: prev" in out


def test_archives_signed_by_another_key_are_refused_with_key(tmp_path: Path) -> None:
    private, public = generate_keypair(tmp_path / "keys")
    reports = tmp_path / "reports"
    seal_nights(reports, [[node_pull(HONEST)]] * 3, signer=Signer.from_key_file(private))
    seal_run(reports, run_id(3), night(3), [node_pull(HONEST)])  # a throwaway key
    code, out, _ = trend(reports, key=public)
    assert code == TrendExit.NOT_VERIFIED
    assert f"NOT VERIFIED run {run_id(3)} (left out): public-key.pem: keyid" in out
    assert "each signed by the given --key" in out


def test_tarballs_and_missing_archives(tmp_path: Path) -> None:
    from drills.records.evidence.archive import make_tarball

    dirs = seal_nights(tmp_path, [[node_pull(HONEST)]] * 5)
    make_tarball(dirs[0])
    shutil.rmtree(dirs[0])
    shutil.rmtree(dirs[1])
    code, out, _ = trend(tmp_path)
    assert code == TrendExit.OK, out
    assert "Trend of 4 runs" in out and f"1 run(s) of the ledger have no archive here (left out): {dirs[1].name}" in out


def test_since_leaves_earlier_runs_out(tmp_path: Path) -> None:
    seal_nights(tmp_path, [[node_pull(HONEST)]] * 6)
    code, out, _ = trend(tmp_path, since=night(2).strftime("%Y-%m-%d"))
    assert "Trend of 4 runs" in out and "2 earlier run(s) before --since left out" in out
    _, out, _ = trend(tmp_path, since="3 days", now=night(5))
    assert "Trend of 4 runs" in out


def test_too_little_history_is_said_and_not_flagged(tmp_path: Path) -> None:
    seal_nights(tmp_path, [[node_pull(HONEST)]] * 2 + [[node_pull({**HONEST, "total": 40.0})]])
    code, out, _ = trend(tmp_path)
    assert code == TrendExit.OK
    assert re.search(r"^  total .* short history$", out, re.M)


def test_repeats_are_one_point_per_run(tmp_path: Path) -> None:
    nights = [[node_pull({**HONEST, "total": t}, repeat=r) for r, t in enumerate((3.0, 3.5, 9.0), 1)]] * 3
    nights.append([node_pull({**HONEST, "total": t}, repeat=r) for r, t in enumerate((30.0, 31.0, 3.1), 1)])
    seal_nights(tmp_path, nights)
    code, out, _ = trend(tmp_path)
    assert code == TrendExit.REGRESSED
    assert "total: 30.00 s in the last run; the median of the 3 runs before was 3.50 s" in out


@pytest.mark.parametrize("reports,kw,message", [
    ("missing", {}, "no such folder"),
    ("empty", {}, "no ledger, so there are no runs to follow"),
    ("empty", {"since": "last tuesday"}, "--since 'last tuesday': not a date, a time or a span"),
])
def test_bad_input_is_exit_2_naming_what_and_how(tmp_path: Path, reports: str, kw: dict, message: str) -> None:
    (tmp_path / "empty").mkdir()
    code, _, err = trend(tmp_path / reports, **kw)
    assert code == TrendExit.USAGE
    assert message in err


def test_parse_since() -> None:
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    assert parse_since("2026-11-01") == datetime(2026, 11, 1, tzinfo=UTC)
    assert parse_since("2026-11-01T03:00:00Z") == datetime(2026, 11, 1, 3, tzinfo=UTC)
    assert parse_since("14 days", now) == datetime(2026, 11, 17, 12, 0, tzinfo=UTC)
    assert parse_since("36h", now) == datetime(2026, 11, 30, 0, 0, tzinfo=UTC)
    assert parse_since("2 weeks", now) == datetime(2026, 11, 17, 12, 0, tzinfo=UTC)
    with pytest.raises(TrendUsageError):
        parse_since("yesterday", now)
