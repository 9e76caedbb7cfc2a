"""What a run tells its live page, and the log that keeps it.

Each event is a typed payload (a frozen dataclass below) with an id from :class:`EventLog`, in the order the run
published it.  The page builds its whole state from the events in order, so replaying the log from its start (a
page opened late, or reloaded) reaches the same state as following it live; a reconnecting stream that names the
last id it saw (``Last-Event-ID``) gets only what came after.

A payload whose ``replaces`` is true stands for the whole of something (a scenario's chart cards): only the latest
of one ``key`` is sent when a batch of events is replayed, so a reload does not redraw every intermediate chart.
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar


class EventKind(Enum):
    """The ``event:`` name of each server-sent event; the page has one handler per kind."""

    RUN = "run"
    """The run started: its id and where it runs (before the target is up)."""
    TARGET = "target"
    """The target answered: what it is."""
    SCENARIO = "scenario"
    """A scenario started: its feature, name, tags and every step it will take."""
    STEP = "step"
    """A step of a scenario started, passed, failed or was skipped."""
    ACT = "act"
    """The act (a When step) was done: its instant from the scenario's start, and on the wall clock."""
    PHASE = "phase"
    """A measured value, with the threshold it is judged against and the judgement once made (a row per name)."""
    FINDING = "finding"
    """A plain-language fact of a scenario: a broken promise, or why the evidence could not be established."""
    CHART = "chart"
    """A scenario's chart cards as report.html draws them, whole: each replaces the scenario's previous ones."""
    VERDICT = "verdict"
    """A scenario ended with its verdict (a row of the verdict table)."""
    FINISHED = "finished"
    """The run ended: its exit code, and the sealed archive with the command that verifies it."""


@dataclass(frozen=True)
class Published:
    """What every event's payload has: its kind, and whether it stands for the whole of something (a scenario's
    charts), so that a later one of the same kind and scenario replaces it."""

    kind: ClassVar[EventKind]
    replaces: ClassVar[bool] = False


@dataclass(frozen=True)
class RunStarted(Published):
    kind: ClassVar[EventKind] = EventKind.RUN
    run_id: str
    where: str
    """The target as the console names it (``embedded reference platform (4 nodes + 1 spare, ...)``)."""
    started: str
    """RFC 3339 UTC."""
    archive: str
    """Where the run's archive will be sealed (``reports/<run-id>``)."""


@dataclass(frozen=True)
class TargetReady(Published):
    kind: ClassVar[EventKind] = EventKind.TARGET
    description: str


@dataclass(frozen=True)
class StepLine:
    keyword: str
    """As written: ``Given``, ``When``, ``Then``, ``And``."""
    text: str


@dataclass(frozen=True)
class ScenarioStarted(Published):
    kind: ClassVar[EventKind] = EventKind.SCENARIO
    scenario: str
    """The scenario's key in this run (``s1``, ``s2``, ... in the order they started)."""
    feature: str
    name: str
    tags: tuple[str, ...]
    steps: tuple[StepLine, ...]
    repeat: int = 1


class StepState(Enum):
    """Where a step stands."""

    PENDING = "pending"
    """Not started yet."""
    RUNNING = "running"
    """Started, not yet done."""
    PASSED = "passed"
    """Done without error (a Then step's judgement is in its phase rows, not here)."""
    FAILED = "failed"
    """Raised: a harness error, a halted scenario, or a step that could not run."""
    SKIPPED = "skipped"
    """Never ran: the scenario ended before it."""


@dataclass(frozen=True)
class StepChanged(Published):
    kind: ClassVar[EventKind] = EventKind.STEP
    scenario: str
    index: int
    """0-based, into :attr:`ScenarioStarted.steps`."""
    state: StepState
    seconds: float | None = None
    """How long the step took, once done."""


@dataclass(frozen=True)
class ActInstant(Published):
    kind: ClassVar[EventKind] = EventKind.ACT
    scenario: str
    step: str
    """The When sentence."""
    at_s: float
    """Seconds from the scenario's start (harness monotonic clock) until the act's step returned."""
    wall: str
    """The same instant, RFC 3339 UTC."""


@dataclass(frozen=True)
class PhaseMeasured(Published):
    kind: ClassVar[EventKind] = EventKind.PHASE
    scenario: str
    name: str
    """The measurement's name (``detect``, ``p99 time to first token``, ``lost steps``)."""
    measured: float | None
    unit: str
    platform: float | None = None
    """The same quantity from the platform's own stamps, when it has them."""
    threshold: str = ""
    """``<= 5 s``; empty while (or if) no threshold judges it."""
    verdict: str = ""
    """PASS or FAIL once judged; empty before."""
    message: str = ""
    """The judgement's words (``detect: measured 2.314 s, threshold <= 5 s``), or the measurement's note."""


@dataclass(frozen=True)
class FindingMade(Published):
    kind: ClassVar[EventKind] = EventKind.FINDING
    scenario: str
    text: str


SWATCH = re.compile(r' style="background: (#[0-9a-fA-F]{3,8})"')
INLINE_STYLE = re.compile(r' style="[^"]*"')


def without_inline_style(html: str) -> str:
    """The report's chart markup for a page whose policy forbids inline style: a legend swatch's
    ``style="background: #hex"`` becomes ``data-swatch="#hex"`` (the page's script sets it through the CSSOM, which
    the policy allows); any other ``style`` attribute is dropped. The markup is the report template's, with every
    name escaped (a ``"`` in text is ``&#34;``), so the pattern meets attributes only."""
    return INLINE_STYLE.sub("", SWATCH.sub(r' data-swatch="\1"', html))


@dataclass(frozen=True)
class ChartsDrawn(Published):
    kind: ClassVar[EventKind] = EventKind.CHART
    replaces: ClassVar[bool] = True
    scenario: str
    html: str
    """The report's chart cards of the scenario (:func:`drills.records.evidence.report.scenario_charts`), with
    every name escaped; no script, and no inline style (:func:`without_inline_style`)."""

    @classmethod
    def of(cls, scenario: str, html: str) -> "ChartsDrawn":
        return cls(scenario, without_inline_style(html))


@dataclass(frozen=True)
class VerdictGiven(Published):
    kind: ClassVar[EventKind] = EventKind.VERDICT
    scenario: str
    verdict: str
    """PASS, FAIL, INCONCLUSIVE, or ERROR (the harness failed: no claim about the platform)."""
    seconds: float
    drill: str
    why: tuple[str, ...] = ()
    """Each judgement and finding, as the console's final table words them."""


@dataclass(frozen=True)
class RunFinished(Published):
    kind: ClassVar[EventKind] = EventKind.FINISHED
    exit_code: int
    summary: str
    """``1 passed, 0 failed, 0 inconclusive, 0 harness errors``, or why the run ended early."""
    archive: str | None = None
    """The sealed archive's folder; None when nothing was sealed."""
    report: str | None = None
    verify: str | None = None
    """The command that checks the archive (``firedrill verify reports/<run-id>``)."""


Payload = (RunStarted | TargetReady | ScenarioStarted | StepChanged | ActInstant | PhaseMeasured | FindingMade
           | ChartsDrawn | VerdictGiven | RunFinished)


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True)
class LiveEvent:
    id: int
    """1, 2, ... in publishing order: the SSE ``id:`` a reconnecting stream names in ``Last-Event-ID``."""
    payload: Payload

    @property
    def kind(self) -> EventKind:
        return self.payload.kind

    @property
    def key(self) -> str | None:
        """What a replacing payload stands for (its kind and scenario); None for the others."""
        return f"{self.kind.value}:{getattr(self.payload, 'scenario', '')}" if self.payload.replaces else None

    def data(self) -> dict[str, Any]:
        return _plain(dataclasses.asdict(self.payload))

    def sse(self) -> bytes:
        """The event in the ``text/event-stream`` format (one ``data:`` line: JSON holds no raw newline)."""
        body = json.dumps(self.data(), separators=(",", ":"), allow_nan=False)
        return f"id: {self.id}\nevent: {self.kind.value}\ndata: {body}\n\n".encode()


class EventLog:
    """Every event of one run, in order, kept in memory for the run's life; thread-safe (the runner publishes from
    its threads, each page's stream reads from its own)."""

    def __init__(self) -> None:
        self._events: list[LiveEvent] = []
        self._cond = threading.Condition()
        self._closed = False

    def publish(self, payload: Payload) -> LiveEvent:
        """Append an event and wake every stream waiting for one; ignored (None-like, never raised) once closed."""
        with self._cond:
            event = LiveEvent(len(self._events) + 1, payload)
            if self._closed:
                return event
            self._events.append(event)
            self._cond.notify_all()
            return event

    def close(self) -> None:
        """No more events: each stream sends what it has not sent yet, then ends."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        with self._cond:
            return self._closed

    def since(self, last_id: int) -> list[LiveEvent]:
        """The events after ``last_id``, without a replacing event that a later one of the same key replaces."""
        with self._cond:
            batch = self._events[max(0, last_id):]
        latest = {e.key: e.id for e in batch if e.key is not None}
        return [e for e in batch if e.key is None or latest[e.key] == e.id]

    def wait(self, last_id: int, timeout: float) -> tuple[list[LiveEvent], bool]:
        """The events after ``last_id``, waiting up to ``timeout`` seconds for one; and whether the log is closed
        (then there will be no more: an empty list with True ends a stream)."""
        with self._cond:
            self._cond.wait_for(lambda: len(self._events) > last_id or self._closed, timeout)
            closed = self._closed
        return self.since(last_id), closed

    def __len__(self) -> int:
        with self._cond:
            return len(self._events)
