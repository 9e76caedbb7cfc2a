"""`firedrill trend` as a user runs it: its exit codes in --help, a usage error, a regression's code."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from drills.cli import app
from tests.unit.trend.synthetic import node_pull, seal_nights

runner = CliRunner()
HONEST = {"detect": 2.3, "evict": 0.15, "replace": 0.4, "resume": 0.4, "total": 3.3, "lost steps": 0.0}


def test_help_documents_every_exit_code() -> None:
    result = runner.invoke(app, ["trend", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    for words in ("0 no regression and nothing flaky", "2 bad input", "5 an archive or the ledger does not verify",
                  "6 REGRESSED", "7 FLAKY", "docs/TRENDS.md", "--baseline-nights", "--last", "--since"):
        assert words in text, words


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["trend", str(tmp_path)])
    assert result.exit_code == 2 and "no ledger" in result.stderr
    result = runner.invoke(app, ["trend", str(tmp_path), "--baseline-nights", "2"])
    assert result.exit_code == 2


def test_a_regression_exits_6_and_writes_the_page(tmp_path: Path) -> None:
    seal_nights(tmp_path, [[node_pull(HONEST)]] * 3 + [[node_pull({**HONEST, "total": 30.0})]])
    result = runner.invoke(app, ["trend", str(tmp_path), "--html", str(tmp_path / "out" / "t.html")])
    assert result.exit_code == 6, result.output
    assert "REGRESSION Node pull > A training job survives losing the node of one worker: total: 30.00 s" in result.stdout
    assert (tmp_path / "out" / "t.html").is_file()
