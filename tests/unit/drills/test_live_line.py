"""The live line printed as each scenario ends: a FAIL or INCONCLUSIVE names the promise and what was measured
(or the evidence that is missing), so the person watching does not wait for the table at the end (issue 18)."""

from __future__ import annotations

import pytest

from drills.bdd.plugin import ScenarioFailed, ScenarioOutcome, live_line, scenario_verdict, summarize
from drills.records.verdict import (Comparison, DrillInconclusive, DrillResult, Measurement, ScenarioHalted, Threshold,
                                    Verdict)


def outcome(result: DrillResult | None, verdict: Verdict | None, error: str = "") -> ScenarioOutcome:
    return ScenarioOutcome("features/x.feature::test_x", "Feature", "x.feature", "Scenario", verdict=verdict,
                           result=result, error=error, seconds=3.94)


def test_a_fail_names_each_missed_promise_with_its_measured_value() -> None:
    result = DrillResult("node-pull")
    result.measure(Measurement("detect", 6.2, "s"))
    result.measure(Measurement("evict", 1.0, "s"))
    result.check(Threshold("detect", 5.0, "s"))
    result.check(Threshold("evict", 5.0, "s"))  # held: not repeated on the line
    result.check(Threshold("resume", 10.0, "s"))  # never measured
    line = live_line(outcome(result, Verdict.FAIL, summarize(result)))
    assert line.startswith("  FAIL (3.9 s): node-pull: ")
    assert "detect: measured 6.200 s, threshold <= 5 s -- MISSED" in line
    assert "resume: never measured; the promise is <= 10 s" in line
    assert "evict" not in line
    assert "\n" not in line


def test_a_fail_on_a_finding_names_the_promise_the_platform_broke() -> None:
    result = DrillResult("partition-isolation")
    result.fail("ISOLATION ESCAPED: contained fault (Xid 94) on its slice on tenant tenant-1: tenants tenant-2 "
                "(GPUXid94), tenant-3 (GPUXid94)\nshould have survived on a node in mig-single, which promises only "
                "that tenant fails, but failed")
    line = live_line(outcome(result, Verdict.FAIL, summarize(result)))
    assert line == ("  FAIL (3.9 s): partition-isolation: ISOLATION ESCAPED: contained fault (Xid 94) on its slice on "
                    "tenant tenant-1: tenants tenant-2 (GPUXid94), tenant-3 (GPUXid94) should have survived on a node "
                    "in mig-single, which promises only that tenant fails, but failed")
    assert "partition-isolation: FAIL" not in line  # the old line said only this


def test_an_inconclusive_names_the_missing_evidence() -> None:
    result = DrillResult("gang-submission")
    result.measure(Measurement("tenants running", 3.0, "tenants"))
    result.check(Threshold("tenants running", 2.0, "tenants", Comparison.AT_LEAST))
    result.inconclusive("only 2 of 4 nodes have 8 free GPUs: the drill would prove nothing")
    line = live_line(outcome(result, Verdict.INCONCLUSIVE, "INCONCLUSIVE: only 2 of 4 nodes"))
    assert line == ("  INCONCLUSIVE (3.9 s): gang-submission: only 2 of 4 nodes have 8 free GPUs: the drill would "
                    "prove nothing")


def test_a_pass_stays_short_and_a_harness_error_keeps_its_exception() -> None:
    result = DrillResult("gang-submission")
    result.measure(Measurement("time to run whole", 1.5, "s"))
    result.check(Threshold("time to run whole", 30.0, "s"))
    assert live_line(outcome(result, Verdict.PASS)) == "  PASS (3.9 s)"
    assert live_line(outcome(None, None, "RuntimeError: boom\ntraceback")) == \
        "  HARNESS ERROR (3.9 s): RuntimeError: boom"


def test_an_inconclusive_without_a_result_says_what_pytest_recorded() -> None:
    assert live_line(outcome(None, Verdict.INCONCLUSIVE, "INCONCLUSIVE: the embedded platform only")) == \
        "  INCONCLUSIVE (3.9 s): INCONCLUSIVE: the embedded platform only"


def test_a_phase_measured_after_its_judgement_is_reported_with_its_value() -> None:
    """Issue 32: node pull under upstream default timers judged detect 'never measured' at the end of its window,
    while the record measured it 49.45 s later. A late value now replaces the 'never' in the same judgement: still
    a FAIL, with the measured value; 'never measured' stays only where no instant ever came."""
    result = DrillResult("node-pull")
    for phase, limit in (("detect", 8.0), ("evict", 8.0), ("resume", 10.0)):
        result.measure(Measurement(phase, None, "s", note=f"t_{phase} never observed"))
        result.check(Threshold(phase, limit, "s"))
    result.measure(Measurement("detect", 49.45, "s"))
    result.measure(Measurement("evict", 3.0, "s"))
    messages = [j.message for j in result.judgements]
    assert messages[0] == "detect: measured 49.450 s, threshold <= 8 s -- MISSED"
    assert messages[1] == "evict: measured 3.000 s, threshold <= 8 s, measured only after its window closed"
    assert messages[2] == "resume: never measured (t_resume never observed); the promise is <= 10 s"
    assert [j.verdict for j in result.judgements] == [Verdict.FAIL] * 3 and result.verdict is Verdict.FAIL


@pytest.mark.parametrize(("passed", "skipped", "raised", "found", "verdict"), [
    (True, False, None, None, Verdict.PASS),
    (False, False, ScenarioFailed("x"), Verdict.FAIL, Verdict.FAIL),
    (False, False, ScenarioHalted("x"), Verdict.FAIL, Verdict.FAIL),
    (False, True, DrillInconclusive("x"), Verdict.INCONCLUSIVE, Verdict.INCONCLUSIVE),
    # a later step could not go on after a FAIL was found: the FAIL stands, never softened to INCONCLUSIVE
    (False, False, DrillInconclusive("x"), Verdict.FAIL, Verdict.FAIL),
    (False, True, None, None, Verdict.INCONCLUSIVE),
    (False, False, KeyError("x"), None, None),
    (False, False, KeyError("x"), Verdict.FAIL, None),  # a harness error stays one
])
def test_a_scenarios_verdict_from_how_its_test_ended(passed: bool, skipped: bool, raised: BaseException | None,
                                                     found: Verdict | None, verdict: Verdict | None) -> None:
    result = None
    if found is not None:
        result = DrillResult("d")
        (result.fail if found is Verdict.FAIL else result.inconclusive)("why")
    assert scenario_verdict(passed, skipped, raised, result) is verdict
