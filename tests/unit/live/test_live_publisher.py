"""What the runner publishes to the live view as a scenario fills its result: steps, the act, each phase with its
threshold as it is judged, the report's own charts, and the verdict."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any, cast

from drills.bdd.live import LivePublisher, phase_rows
from drills.bdd.plugin import ScenarioOutcome
from drills.kinds.controlplane.drill import ControlPlaneDrill
from drills.kinds.serving.drill import ServingDrill
from drills.kube.timeline import Timeline
from drills.load.run import LoadRun, Outcome, Sample
from drills.records.evidence.collect import scenario_record
from drills.records.evidence.report import SignatureStatus, render_report, scenario_charts
from drills.records.live import EventKind, EventLog, LiveEvent, StepLine, StepState
from drills.records.live.events import without_inline_style
from drills.records.verdict import DrillResult, Measurement, Threshold, Verdict
from drills.scenario.context import ScenarioContext
from drills.target.connect import Target
from tests.unit.evidence.test_report import make_record

NODE = "tests::node-pull"
STEPS = [StepLine("Given", "a canary training job"), StepLine("When", "I pull the node of worker 0 with kill"),
         StepLine("Then", "the platform detects the failure within 5 seconds"),
         StepLine("And", "the whole recovery takes at most 20 seconds")]


def fake_target() -> Target:
    return cast(Target, SimpleNamespace(timeline=Timeline()))


def outcome(result: DrillResult, verdict: Verdict | None = None) -> ScenarioOutcome:
    return ScenarioOutcome(NODE, "Node pull", "node_pull.feature", "A training job survives", ["clause:5.1"],
                           verdict=verdict, result=result, seconds=12.5)


def events(log: EventLog, kind: EventKind) -> list[dict[str, Any]]:
    return [e.data() for e in log.since(0) if e.kind is kind]


def test_a_node_pull_publishes_its_steps_act_phases_charts_and_verdict_as_they_come() -> None:
    log, target = EventLog(), fake_target()
    live = LivePublisher(log, target)
    result = DrillResult("node-pull")
    ctx = ScenarioContext(target, result)
    live.scenario(NODE, "Node pull", "A training job survives", ["clause:5.1"], STEPS)
    live.attach(NODE, ctx, lambda: outcome(result, result.verdict))
    live.step(NODE, 0, StepState.RUNNING)
    live.step(NODE, 0, StepState.PASSED, 3.2)
    live.step(NODE, 1, StepState.RUNNING)
    result.details["fault"] = {"node": "gpu-node-1", "method": "kill", "rank": 0, "confirmed": True}
    live.step(NODE, 1, StepState.PASSED, 0.4)
    live.act(NODE, "When I pull the node of worker 0 with kill")
    assert events(log, EventKind.PHASE) == []  # nothing measured yet
    live.step(NODE, 2, StepState.RUNNING)
    result.details["instants"] = {"fault": {"mono": 100.0, "wall": 1e9, "server": None},
                                  "detect": {"mono": 102.3, "wall": 1e9 + 2.3, "server": 1e9 + 2.29}}
    result.measure(Measurement("detect", 2.3, "s", 2.29))
    result.measure(Measurement("total", None, "s", note="t_resume never observed"))  # not yet: no row
    result.check(Threshold("detect", 5.0, "s"))
    live.step(NODE, 2, StepState.PASSED, 2.4)

    phases = events(log, EventKind.PHASE)
    assert [(p["name"], p["measured"], p["threshold"], p["verdict"]) for p in phases] == [
        ("detect", 2.3, "<= 5 s", "PASS")]
    charts = events(log, EventKind.CHART)
    assert charts and 'data-testid="nodepull-chart"' in charts[-1]["html"]
    assert 'data-phase="detect"' in charts[-1]["html"] and "style=" not in charts[-1]["html"]
    act = events(log, EventKind.ACT)
    assert [(a["scenario"], a["step"]) for a in act] == [("s1", "When I pull the node of worker 0 with kill")]
    assert act[0]["at_s"] >= 0 and act[0]["wall"].endswith("Z")

    live.step(NODE, 3, StepState.RUNNING)
    result.check(Threshold("total", 20.0, "s"))  # never measured: a FAIL row that says why
    live.step(NODE, 3, StepState.FAILED, 0.1)
    final = outcome(result, Verdict.FAIL)
    final.error = "detect never came"
    live.verdict(NODE, final)
    live.verdict(NODE, final)  # said once

    rows = {p["name"]: p for p in events(log, EventKind.PHASE)}
    assert rows["total"]["verdict"] == "FAIL" and rows["total"]["measured"] is None
    assert "never measured" in rows["total"]["message"]
    verdicts = events(log, EventKind.VERDICT)
    assert len(verdicts) == 1 and verdicts[0]["verdict"] == "FAIL" and verdicts[0]["drill"] == "node-pull"
    assert any("total: never measured" in w for w in verdicts[0]["why"])
    states = [(s["index"], s["state"]) for s in events(log, EventKind.STEP)]
    assert states[-2:] == [(3, "running"), (3, "failed")]
    # the live page's last chart is the report's card of the same record
    card = events(log, EventKind.CHART)[-1]["html"]
    record = scenario_record(final)
    assert card == without_inline_style(scenario_charts(record))
    assert scenario_charts(record) in render_report(make_record((record,)), SignatureStatus(None))


def test_a_step_that_never_ran_is_skipped_when_the_scenario_ends_before_it() -> None:
    log = EventLog()
    live = LivePublisher(log, fake_target())
    result = DrillResult("scenario")
    result.inconclusive("cannot run on this target: no stand-in for kubelet-stop")
    live.scenario(NODE, "Node pull", "A training job survives", [], STEPS)
    live.verdict(NODE, outcome(result, Verdict.INCONCLUSIVE))
    assert [(s["index"], s["state"]) for s in events(log, EventKind.STEP)] == [(i, "skipped") for i in range(4)]
    assert [f["text"] for f in events(log, EventKind.FINDING)] == [result.findings[0]]
    assert events(log, EventKind.VERDICT)[0]["verdict"] == "INCONCLUSIVE"


class LoadSoFar:
    """A load drill while its load runs: the series so far, growing by a second each time it is asked."""

    def __init__(self) -> None:
        self.seconds = 0

    def live_details(self) -> dict[str, Any]:
        self.seconds += 1
        return {"series": [{"t": float(t), "sent": 10, "answered": 10, "failed": 0, "lost": 0, "p99_ttft_s": 0.05}
                           for t in range(-2, self.seconds)]}


def wait_for_event(log: EventLog, after: int, predicate: Any, timeout: float = 10.0) -> LiveEvent:
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        batch, _ = log.wait(after, left)
        for event in batch:
            if predicate(event):
                return event
        after = batch[-1].id if batch else after
    raise AssertionError("no such live event")


def test_a_load_drill_s_per_second_series_fills_its_chart_while_the_step_runs() -> None:
    log, target = EventLog(), fake_target()
    live = LivePublisher(log, target, tick_s=0.02)
    result = DrillResult("serving")
    result.details["act"] = {"kind": "drain", "node": "gpu-node-1"}
    ctx = ScenarioContext(target, result)
    ctx.drills.append(cast(Any, LoadSoFar()))
    live.scenario(NODE, "Inference under chaos", "Draining a node", [], STEPS)
    live.attach(NODE, ctx, lambda: outcome(result, result.verdict))
    live.start()
    try:
        def seconds_drawn(event: LiveEvent) -> int:
            return event.data()["html"].count('class="second"') if event.kind is EventKind.CHART else 0
        first = wait_for_event(log, 0, lambda e: seconds_drawn(e) >= 1)
        later = wait_for_event(log, first.id, lambda e: seconds_drawn(e) > seconds_drawn(first))
        assert 'data-testid="load-chart"' in later.data()["html"]
    finally:
        live.close()
    assert "firedrill-live-ticker" not in [t.name for t in threading.enumerate()]  # joined


def sample(n: int, kind: str, start: float, latency: float = 0.05) -> Sample:
    return Sample(f"r{n}", kind, 1e9 + start, start, start + latency, latency, Outcome.ANSWERED, 200,
                  ttft_s=latency if kind == "inference" else None)


def test_the_load_drills_show_their_seconds_so_far_until_they_record_their_own() -> None:
    written = (sample(1, "inference", 99.2), sample(2, "inference", 100.4), sample(3, "inference", 101.1),
               sample(4, "k8s-create", 100.5), sample(5, "k8s-list", 100.6))
    load = cast(LoadRun, SimpleNamespace(samples=lambda: written))
    serving = ServingDrill(fake_target(), DrillResult("serving"), "fd0001")
    control = ControlPlaneDrill(fake_target(), DrillResult("control-plane"), "fd0002")
    for drill in (serving, control):
        assert drill.live_details() == {}  # no load yet
        drill.load, drill.load_started, drill.act_mono = load, 99.0, 100.0
    serving.ready_series = [(99.0, 2), (101.5, 1)]
    shown = serving.live_details()
    assert [(b["t"], b["sent"]) for b in shown["series"]] == [(-1.0, 1), (0.0, 1), (1.0, 1)]  # from the act
    assert shown["replicas_ready"] == [{"t": -1.0, "ready": 2}, {"t": 1.5, "ready": 1}]
    assert [(b["t"], b["sent"]) for b in control.live_details()["series"]] == [(0.0, 1)]  # mutating calls only
    for drill in (serving, control):
        drill.samples = written  # the load ended: its result holds the series now
        assert drill.live_details() == {}
