"""What ``firedrill run --live`` publishes: the plugin's view of each scenario, turned into live events.

The plugin (:mod:`drills.bdd.plugin`) tells a :class:`LivePublisher` when a scenario starts, when each step starts
and ends, and the outcome; the publisher reads the scenario's result as it fills (after each step, and about once a
second while a step runs) and publishes only what changed: each measured value with its threshold and judgement,
each finding, and the scenario's chart cards drawn by the report's own code from the same record the archive will
hold (:func:`drills.records.evidence.collect.scenario_record`). A load drill adds its per-second series while the
load runs (:meth:`drills.scenario.drill.Drill.live_details`).

The live view never changes the run: whatever it fails on is logged and skipped, never raised into a step.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from drills.records.evidence.collect import Outcome, rfc3339, scenario_record
from drills.records.evidence.report import scenario_charts
from drills.records.live.events import (
    ActInstant, ChartsDrawn, EventLog, FindingMade, PhaseMeasured, ScenarioStarted, StepChanged, StepLine, StepState,
    VerdictGiven,
)
from drills.records.verdict import DrillResult
from drills.scenario.context import ScenarioContext
from drills.target.connect import Target

log = logging.getLogger(__name__)

TICK_S = 1.0
"""How often a running scenario's result is read for what changed while a step runs (a load's seconds, a phase
measured by a watch)."""


def _finite(value: float | None) -> float | None:
    return value if value is None or math.isfinite(value) else None


def phase_rows(scenario: str, result: DrillResult) -> list[PhaseMeasured]:
    """Each measured value of ``result`` with its threshold and judgement, in the order they were first recorded; a
    value not measured (yet) is left out until a threshold judges it (then it is a row that says why)."""
    measurements = dict(list(result.measurements.items()))
    judged = {j.threshold.name: j for j in list(result.judgements)}
    rows = []
    for name in [*measurements, *(n for n in judged if n not in measurements)]:
        m, j = measurements.get(name), judged.get(name)
        value = m.value if m is not None else (j.measurement.value if j is not None and j.measurement else None)
        if value is None and j is None:
            continue
        rows.append(PhaseMeasured(
            scenario, name, _finite(value), m.unit if m is not None else j.threshold.unit if j else "",
            _finite(m.platform) if m is not None else None, j.threshold.describe() if j is not None else "",
            j.verdict.value if j is not None else "", j.message if j is not None else (m.note if m else "")))
    return rows


@dataclass
class _Scenario:
    """What the publisher knows of one scenario, and what it already published of it."""

    key: str
    started: float
    steps: list[StepState]
    ctx: ScenarioContext | None = None
    outcome: Callable[[], Outcome] | None = None
    """The scenario's outcome so far (the verdict not yet given), to draw its charts from."""
    timeline_start: int = 0
    timeline: list[dict[str, Any]] = field(default_factory=list)
    """The run timeline's observations since the scenario started, as the record holds them (gang charts only)."""
    phases: dict[str, PhaseMeasured] = field(default_factory=dict)
    findings: int = 0
    chart: str = ""
    done: bool = False


class LivePublisher:
    """Publishes one run's scenarios into ``log``; :meth:`start` its ticker, :meth:`close` it (joined) at the end."""

    def __init__(self, log: EventLog, target: Target, *, repeats: int = 1, tick_s: float = TICK_S) -> None:
        self.log = log
        self.target = target
        self.tick_s = tick_s
        self.repeats = repeats
        self._scenarios: dict[str, _Scenario] = {}
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    # ------------------------------------------------------------- lifecycle
    def start(self) -> "LivePublisher":
        if self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, name="firedrill-live-ticker", daemon=True)
            self._ticker.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None

    def _tick(self) -> None:
        """While a step runs, only a drill with something of its own to show (a load's seconds) is read again: the
        others change their result within steps, and each step's end reads it."""
        while not self._stop.wait(self.tick_s):
            with self._lock:
                running = [s for s in self._scenarios.values() if not s.done and s.ctx is not None]
            for s in running:
                extra = _live_details(s)
                if extra:
                    self._refresh(s, extra=extra)

    # --------------------------------------------------------- what the plugin tells
    def scenario(self, nodeid: str, feature: str, name: str, tags: list[str], steps: list[StepLine],
                 repeat: int = 1) -> None:
        with self._lock:
            key = f"s{len(self._scenarios) + 1}"
            self._scenarios[nodeid] = _Scenario(key, time.monotonic(), [StepState.PENDING] * len(steps),
                                                timeline_start=len(self.target.timeline))
            self.log.publish(ScenarioStarted(key, feature, name, tuple(tags), tuple(steps), repeat))

    def attach(self, nodeid: str, ctx: ScenarioContext, outcome: Callable[[], Outcome]) -> None:
        """The scenario's context now exists: its result is read from here on."""
        with self._lock:
            s = self._scenarios.get(nodeid)
            if s is not None:
                s.ctx, s.outcome = ctx, outcome

    def step(self, nodeid: str, index: int, state: StepState, seconds: float | None = None) -> None:
        with self._lock:
            s = self._scenarios.get(nodeid)
            if s is None or not 0 <= index < len(s.steps):
                return
            s.steps[index] = state
            self.log.publish(StepChanged(s.key, index, state, None if seconds is None else round(seconds, 3)))
        if state is not StepState.RUNNING:
            self._refresh(s)

    def act(self, nodeid: str, text: str) -> None:
        """A When step returned: the act's instant."""
        with self._lock:
            s = self._scenarios.get(nodeid)
            if s is not None:
                self.log.publish(ActInstant(s.key, text, round(time.monotonic() - s.started, 3),
                                            rfc3339(datetime.now(timezone.utc))))

    def verdict(self, nodeid: str, outcome: Outcome) -> None:
        """The scenario ended: what it measured last, its charts from its final record, the steps it never ran,
        and its verdict."""
        with self._lock:
            s = self._scenarios.get(nodeid)
            if s is None or s.done:
                return
            s.outcome = lambda: outcome
            self._refresh(s, final=True)
            s.done = True
            for i, state in enumerate(s.steps):
                if state is StepState.PENDING:
                    self.log.publish(StepChanged(s.key, i, StepState.SKIPPED))
            result = outcome.result
            why = [j.message for j in result.judgements] + list(result.findings) if result is not None else []
            if outcome.error and (outcome.verdict is None or not why):
                why.append(outcome.error.splitlines()[0])
            self.log.publish(VerdictGiven(s.key, outcome.verdict.value if outcome.verdict is not None else "ERROR",
                                          round(outcome.seconds, 3), result.drill if result is not None else "scenario",
                                          tuple(why)))

    # ------------------------------------------------------------- reading the result
    def _refresh(self, s: _Scenario, *, final: bool = False, extra: dict[str, Any] | None = None) -> None:
        """Publish what changed in the scenario's result since last time (with ``extra``, what its drills show of
        their own: read now if not given). Never raises: the run goes on."""
        with self._lock:
            if s.done or s.outcome is None:
                return
            try:
                self._publish_changes(s, {} if final else _live_details(s) if extra is None else extra)
            except Exception:  # noqa: BLE001 - a half-filled result may not draw yet; the next read will
                log.debug("live view: scenario %s not refreshed", s.key, exc_info=True)

    def _publish_changes(self, s: _Scenario, extra: dict[str, Any]) -> None:
        assert s.outcome is not None
        outcome = s.outcome()
        result = outcome.result
        if result is None:
            return
        for row in phase_rows(s.key, result):
            if s.phases.get(row.name) != row:
                s.phases[row.name] = row
                self.log.publish(row)
        findings = list(result.findings)
        for text in findings[s.findings:]:
            self.log.publish(FindingMade(s.key, text))
        s.findings = max(s.findings, len(findings))
        record = scenario_record(outcome)
        if extra:
            record = dataclasses.replace(record, details={**extra, **record.details})
        if record.drill == "gang-submission":  # its chart places pods from the timeline: converted once each
            seen = s.timeline_start + len(s.timeline)
            s.timeline += [ob.to_json() for ob in list(self.target.timeline)[seen:]]
        html = scenario_charts(record, tuple(s.timeline), repeats=self.repeats)
        if html != s.chart:
            s.chart = html
            self.log.publish(ChartsDrawn.of(s.key, html))


def _live_details(s: _Scenario) -> dict[str, Any]:
    """What the scenario's drills show of their own before their result holds it (a load's seconds so far)."""
    extra: dict[str, Any] = {}
    try:
        for drill in list(s.ctx.drills) if s.ctx is not None else ():
            extra.update(drill.live_details())
    except Exception:  # noqa: BLE001 - a load's file half written, a drill tearing down: next second
        log.debug("live view: scenario %s: no live details this time", s.key, exc_info=True)
        return {}
    return extra
