"""The resilience score (drills.records.score, docs/TRENDS.md): the formula as a table, severities, and where it shows."""

from __future__ import annotations

import pytest

from drills.records.evidence.record import JudgementRecord, ScenarioRecord, ThresholdRecord
from drills.records.evidence.report import SignatureStatus, render_report
from drills.records.evidence.statements import scenario_predicate
from drills.records.score import (
    ScoredScenario, Severity, SeverityError, parse_severity, run_score, scored_from_predicate, scored_from_record,
)
from tests.unit.evidence.conftest import make_record

CRIT, MAJ, MIN = Severity.CRITICAL, Severity.MAJOR, Severity.MINOR


def s(severity: Severity, verdict: str, held: int, measures: int) -> ScoredScenario:
    return ScoredScenario("x", severity, verdict, held, measures)


# (case, scenarios, score)
SCORES = [
    ("every promise held", [s(MAJ, "PASS", 6, 6)], 100.0),
    ("no scenario, no score", [], None),
    # slow-detect: 4 of 6 thresholds held (detect not measured, total missed), the scenario FAILed: 4 / 7
    ("a failed node pull", [s(MAJ, "FAIL", 4, 6)], 57.1),
    ("a finding fails a scenario whose thresholds all held", [s(MAJ, "FAIL", 2, 2)], 66.7),
    ("nothing measured is nothing held", [s(MAJ, "INCONCLUSIVE", 0, 6)], 0.0),
    ("a harness error scores nothing", [s(MAJ, "ERROR", 0, 3)], 0.0),
    ("no threshold: the verdict alone", [s(MAJ, "PASS", 0, 0), s(MAJ, "FAIL", 0, 0)], 50.0),
    # weights: critical 3, major 2, minor 1
    ("a broken critical clause weighs three times a minor one",
     [s(CRIT, "FAIL", 0, 1), s(MIN, "PASS", 1, 1)], 25.0),
    ("a broken minor clause barely dents", [s(CRIT, "PASS", 1, 1), s(MIN, "FAIL", 0, 1)], 75.0),
    ("repeats count once each", [s(MAJ, "PASS", 1, 1), s(MAJ, "PASS", 1, 1), s(MAJ, "FAIL", 0, 1)], 66.7),
]


@pytest.mark.parametrize("case,scenarios,score", SCORES, ids=[c[0] for c in SCORES])
def test_run_score(case: str, scenarios: list[ScoredScenario], score: float | None) -> None:
    assert run_score(scenarios) == score


@pytest.mark.parametrize("tags,severity", [
    ((), MAJ), (("clause:5.1",), MAJ), (("severity:critical",), CRIT), (("clause:1", "severity:Minor"), MIN),
])
def test_parse_severity(tags: tuple[str, ...], severity: Severity) -> None:
    assert parse_severity(tags) is severity


def test_a_bad_severity_says_what_and_how() -> None:
    with pytest.raises(SeverityError, match=r"f.feature:3: @severity:urgent is not a severity; write "
                                            r"@severity:<level> with one of critical, major, minor"):
        parse_severity(["severity:urgent"], "f.feature:3")
    with pytest.raises(SeverityError, match="2 severities"):
        parse_severity(["severity:minor", "severity:major"])


def test_an_unmeasured_threshold_counts_as_missed_even_when_the_judgement_passed() -> None:
    """A judgement marked PASS without a value (no drill does that today) still holds nothing."""
    t = ThresholdRecord("detect", 5.0, "s", "<=")
    odd = ScenarioRecord("F", "f.feature", "s", (), "node-pull", "PASS",
                         judgements=(JudgementRecord(t, None, "PASS", ""), JudgementRecord(t, 1.0, "PASS", "")))
    assert scored_from_record(odd).held == 1
    assert run_score([scored_from_record(odd)]) == pytest.approx(66.7)


def test_record_and_signed_predicate_give_the_same_score() -> None:
    record = make_record()
    from_record = [scored_from_record(sc) for sc in record.scenarios]
    from_statements = [scored_from_predicate(scenario_predicate(record, sc, timeline_sha256="0" * 64))
                       for sc in record.scenarios]
    assert from_record == from_statements
    assert run_score(from_record) == run_score(from_statements)


def test_the_report_shows_the_score() -> None:
    record = make_record()  # PASS gang (no threshold), INCONCLUSIVE gang, FAIL node pull (1 of 2 held): 1, 0, 1/3
    html = render_report(record, SignatureStatus(None, False, None))
    assert run_score(scored_from_record(sc) for sc in record.scenarios) == 44.4
    assert 'data-testid="resilience-score"><b>44.4</b> / 100' in html


FEATURE = """{feature_tag}
Feature: Node pull
  {scenario_tag}
  Scenario: A training job survives losing the node of one worker
    Given a canary training job of 2 workers with 4 GPUs each, checkpointing every 5 steps
    And the job has written a checkpoint within 60 seconds
    When I pull the node of worker 0 with kill
    Then the platform detects the failure within 5 seconds
"""


@pytest.mark.parametrize("feature_tag,scenario_tag,message", [
    ("", "@clause:5.1 @severity:urgent", "node_pull.feature:4: @severity:urgent is not a severity"),
    ("@severity:critical", "@clause:5.1", "node_pull.feature:2: @severity on the Feature line is not read"),
])
def test_the_feature_check_refuses_a_severity_it_cannot_read(tmp_path, feature_tag: str, scenario_tag: str,
                                                              message: str) -> None:
    from drills.bdd.features import FeatureError, load_features

    (tmp_path / "node_pull.feature").write_text(FEATURE.format(feature_tag=feature_tag, scenario_tag=scenario_tag))
    with pytest.raises(FeatureError) as caught:
        load_features(tmp_path)
    assert any(message in p for p in caught.value.problems), caught.value.problems
    (tmp_path / "node_pull.feature").write_text(FEATURE.format(feature_tag="", scenario_tag="@severity:minor"))
    assert load_features(tmp_path)[0].scenarios[0].tags == ("severity:minor",)


def test_the_run_summary_prints_the_score() -> None:
    from rich.console import Console

    from drills.bdd.plugin import ScenarioOutcome
    from drills.bdd.run import summary
    from drills.records.verdict import DrillResult, Measurement, Threshold, Verdict

    result = DrillResult("node-pull")
    result.measure(Measurement("detect", None, "s"))
    result.measure(Measurement("total", 4.0, "s"))
    result.check(Threshold("detect", 5.0, "s"))
    result.check(Threshold("total", 20.0, "s"))
    outcome = ScenarioOutcome("n", "Node pull", "n.feature", "pull", ["severity:critical"], result.verdict, result)
    console = Console(record=True, width=300)
    summary(console, [outcome], 1)
    # detect never measured: 1 of 2 thresholds held, not PASS: (1 + 0) / 3
    assert result.verdict is not Verdict.PASS
    assert "resilience score: 33.3 / 100 (1 scenario run weighted by severity (3); 1 threshold missed or not " \
           "measured, 1 scenario not PASS;" in console.export_text()
