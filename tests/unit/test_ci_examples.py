"""examples/ci: the nightly GitHub Actions workflow and GitLab CI job are valid for their CI (the JSON schemas
SchemaStore publishes for both, shipped offline by check-jsonschema), have the shape the nightly needs, and every
``firedrill`` command line in them parses with Firedrill's own command line."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

from drills.cli import app

REPO = Path(__file__).resolve().parents[2]
GITHUB = REPO / "examples" / "ci" / "github" / "nightly.yml"
GITLAB = REPO / "examples" / "ci" / "gitlab" / "nightly.gitlab-ci.yml"


def _schema_check(path: Path, schema: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema, str(path)],
                          capture_output=True, text=True, timeout=120)


def _load(path: Path) -> dict[Any, Any]:
    doc = yaml.safe_load(path.read_text())
    assert isinstance(doc, dict)
    return doc


def _steps(doc: dict[Any, Any]) -> list[dict[str, Any]]:
    (job,) = doc["jobs"].values()
    return job["steps"]


OPERATORS = frozenset({";", "&&", "||", "|", "(", ")", "{", "}", "&"})


def _firedrill_commands(scripts: list[str]) -> list[list[str]]:
    """Every ``firedrill ...`` command of shell scripts (in command position: at the start of a line or after a
    shell operator), as argv after 'firedrill', up to the next operator. A quoted 'firedrill ...' (an echo's
    text) is one word, not a command."""
    found: list[list[str]] = []
    for script in scripts:
        for line in script.splitlines():
            lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            words = list(lexer)
            for i, word in enumerate(words):
                if word == "firedrill" and (i == 0 or words[i - 1] in OPERATORS or words[i - 1] == "then"):
                    argv = []
                    for w in words[i + 1:]:
                        if w in OPERATORS:
                            break
                        argv.append(w)
                    found.append(argv)
    return found


def _parse(argv: list[str]) -> Any:
    """Parse argv as the `firedrill` command line would, without running anything (no --help involved): typer's
    click group makes the contexts, so every option, type and range is checked as on a real command line."""
    group = typer.main.get_command(app)
    with group.make_context("firedrill", list(argv), resilient_parsing=False) as parent:
        name, command, rest = group.resolve_command(parent, list(argv))
        assert command is not None, f"firedrill {argv[0]}: no such command"
        return command.make_context(name or argv[0], rest, parent=parent, resilient_parsing=False)


@pytest.mark.parametrize(("path", "schema"), [(GITHUB, "vendor.github-workflows"), (GITLAB, "vendor.gitlab-ci")])
def test_the_examples_validate_against_their_ci_schema(path: Path, schema: str) -> None:
    result = _schema_check(path, schema)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_schema_check_is_not_vacuous(tmp_path: Path) -> None:
    broken = tmp_path / "workflow.yml"
    broken.write_text(GITHUB.read_text().replace("    runs-on: ubuntu-latest\n", ""))
    result = _schema_check(broken, "vendor.github-workflows")
    assert result.returncode != 0 and "'runs-on' is a required property" in result.stdout
    job = tmp_path / "gitlab.yml"
    job.write_text(GITLAB.read_text().replace("  script:\n", "  scripts:\n"))
    assert _schema_check(job, "vendor.gitlab-ci").returncode != 0


def test_the_github_workflow_runs_nightly_keeps_the_nights_and_fails_on_fail_or_regression() -> None:
    doc = _load(GITHUB)
    on = doc.get("on", doc.get(True))  # YAML 1.1 reads a bare `on` as true
    assert on["schedule"][0]["cron"] and "workflow_dispatch" in on
    (job,) = doc["jobs"].values()
    assert job["runs-on"]
    steps = _steps(doc)
    assert all(("uses" in s) != ("run" in s) for s in steps), "each step either uses an action or runs a script"
    uses = [s["uses"].split("@")[0] for s in steps if "uses" in s]
    assert uses.index("actions/cache/restore") < [s.get("id") for s in steps].index("run"), \
        "earlier nights are restored before tonight's run"
    assert "actions/cache/save" in uses and "actions/upload-artifact" in uses
    assert "mikepenz/action-junit-report" in uses
    run = next(s for s in steps if s.get("id") == "run")
    assert "--repeat" in run["run"] and "continue-on-error" not in run, "a FAIL must fail the job"
    assert run["timeout-minutes"] < job["timeout-minutes"], "the run stops in time for the recover step"
    after = steps[steps.index(run) + 1:]
    recover = next(s for s in after if "firedrill recover" in s.get("run", ""))
    assert recover["if"] == "${{ always() }}", "a run cancelled or timed out is recovered too"
    assert all("!cancelled()" in s.get("if", "") for s in after[1:] if s is not recover), \
        "trend, JUnit and archives are kept even on a night that FAILed"
    trend = next(s for s in after if s.get("run", "").startswith("firedrill trend"))
    assert "continue-on-error" not in trend and "||" not in trend["run"], "a regression must fail the job"
    campaign = next(s for s in after if s.get("id") == "campaign")
    lines = campaign["run"].splitlines()
    assert "continue-on-error" not in campaign and "firedrill verify" in campaign["run"]
    assert lines[-1] == 'test "$run_code" -eq 0 && test "$trend_code" -eq 0', \
        "a campaign below its thresholds, or its trend regressing, fails the job"
    assert any("campaign.outputs.run_id" in s.get("if", "") for s in after if s.get("uses", "").startswith(
        "actions/upload-artifact")), "tonight's campaign archive is kept"
    saved = next(s for s in steps if s.get("uses", "").startswith("actions/cache/save"))
    restored = next(s for s in steps if s.get("uses", "").startswith("actions/cache/restore"))
    assert saved["with"]["path"] == restored["with"]["path"] == "reports"
    assert restored["with"]["restore-keys"] and saved["with"]["key"].startswith(restored["with"]["restore-keys"])


def test_the_gitlab_job_runs_nightly_keeps_the_nights_and_fails_on_fail_or_regression() -> None:
    doc = _load(GITLAB)
    jobs = {k: v for k, v in doc.items() if isinstance(v, dict) and "script" in v}
    assert list(jobs) == ["firedrill-nightly"]
    job = jobs["firedrill-nightly"]
    assert job["stage"] in doc["stages"]
    assert {"if": '$CI_PIPELINE_SOURCE == "schedule"'} in job["rules"]
    assert job["cache"]["paths"] == ["reports/"] and job["cache"]["when"] == "always"
    assert job["artifacts"]["when"] == "always" and "reports/" in job["artifacts"]["paths"]
    junit = job["artifacts"]["reports"]["junit"]
    script = job["script"]
    assert any(f"cp \"$REPORTS/$run_id/junit.xml\" {junit}" in line for line in script), \
        "the JUnit published is tonight's, not every night's in the cache"
    run = next(line for line in script if line.startswith("firedrill run"))
    assert "--repeat" in run and run.endswith("|| run_code=$?")
    assert any(line.startswith("firedrill trend") and line.endswith("|| trend_code=$?") for line in script)
    assert script[-1] == ('test "$run_code" -eq 0 && test "$trend_code" -eq 0 && test "$campaign_code" -eq 0 '
                          '&& test "$campaign_trend" -eq 0'), \
        "the job fails when the run or the campaign FAILed or a trend found a regression, after all ran"
    assert any(line.startswith('firedrill verify "$campaigns/') for line in script)
    assert any(line.startswith('firedrill trend "$campaigns"') for line in script)
    assert any("firedrill recover" in line for line in job["after_script"]), \
        "after_script, which runs on a timeout or a cancel too, undoes what a killed run left"


def _scripts() -> list[tuple[str, str]]:
    github = [("github", s["run"]) for s in _steps(_load(GITHUB)) if "run" in s]
    job = _load(GITLAB)["firedrill-nightly"]
    gitlab = [("gitlab", line) for line in [*job.get("before_script", []), *job["script"], *job.get("after_script", [])]]
    return github + gitlab


def test_every_firedrill_command_line_parses_with_firedrill_itself() -> None:
    commands = {ci: _firedrill_commands([s for c, s in _scripts() if c == ci]) for ci in ("github", "gitlab")}
    for ci, argvs in commands.items():
        assert {a[0] for a in argvs} == {"run", "verify", "trend", "recover"}, (ci, argvs)
        for argv in argvs:
            ctx = _parse(argv)
            if argv[0] == "run" and ctx.params["features"] == Path("features"):
                assert ctx.params["repeat"] == 3 and ctx.params["reports"] == Path("$REPORTS")
            elif argv[0] == "run":  # the nightly campaign: one scenario of examples/campaigns, in its own ledger
                assert ctx.params["features"] == Path("examples/campaigns") and ctx.params["keyword"]
                assert ctx.params["reports"] in (Path("$CAMPAIGNS"), Path("$campaigns"))
                titles = [line for path in (REPO / "examples" / "campaigns").glob("*.feature")
                          for line in path.read_text().splitlines() if line.strip().startswith("Scenario")]
                assert sum(ctx.params["keyword"] in t for t in titles) == 1, "-k picks the one short campaign"
        runs = [argv for argv in argvs if argv[0] == "run"]
        assert len(runs) == 2, (ci, runs)


@pytest.mark.parametrize(("argv", "error"), [(["run", "--repeats", "3"], "NoSuchOption"),
                                             (["run", "--repeat", "0"], "BadParameter"),
                                             (["trend"], None), (["verify"], "MissingParameter")])
def test_a_wrong_firedrill_command_line_does_not_parse(argv: list[str], error: str | None) -> None:
    if error is None:  # a command line that is right parses
        _parse(argv)
        return
    with pytest.raises(Exception) as caught:  # typer's own (vendored) click exceptions
        _parse(argv)
    assert type(caught.value).__name__ == error
