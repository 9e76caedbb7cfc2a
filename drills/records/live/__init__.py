"""The live view of a run: ``firedrill run --live`` serves a page on loopback that follows the run as it happens.

- :mod:`drills.records.live.events`: what a run tells the page (typed events) and the in-process log that keeps
  them, so a page opened (or reloaded) mid-run replays the log from its start and reaches the same state.
- :mod:`drills.records.live.server`: the loopback HTTP server: the page, its script and style sheets (the
  report's own, so its charts look the same), and ``/events``, a server-sent event stream of the log.

The runner (:mod:`drills.bdd`) publishes into the log; nothing here knows about drills or pytest.
"""

from drills.records.live.events import (
    ActInstant, ChartsDrawn, EventKind, EventLog, FindingMade, LiveEvent, PhaseMeasured, RunFinished, RunStarted,
    ScenarioStarted, StepChanged, StepLine, StepState, TargetReady, VerdictGiven,
)
from drills.records.live.server import LiveServer, LiveServerError

__all__ = ["ActInstant", "ChartsDrawn", "EventKind", "EventLog", "FindingMade", "LiveEvent", "LiveServer",
           "LiveServerError", "PhaseMeasured", "RunFinished", "RunStarted", "ScenarioStarted", "StepChanged",
           "StepLine", "StepState", "TargetReady", "VerdictGiven"]
