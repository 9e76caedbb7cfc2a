"""Verdicts, measurements and thresholds: how a drill's numbers are judged against the contract.

A threshold comes from the feature file ("within 5 seconds", "at most 10
steps"); a measurement is what the drill observed (harness clock, and the
platform's own stamp when it has one).  A measurement that could not be made
(the fault was never confirmed, the platform never got there) is never a
PASS: the scenario is INCONCLUSIVE or FAIL, and says which.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class DrillInconclusive(Exception):
    """The drill cannot establish the facts on this target (not enough capacity, fault not confirmed)."""


class ScenarioHalted(Exception):
    """The scenario ends here, FAIL: a promise it cannot recover from is already broken (an invariant, or a
    phase the later ones need never came); what it waited for next is not waited out. Rollback runs as usual.
    Also raised for an ABORTED scenario (:meth:`DrillResult.abort`), whose run then stops after its rollback."""


class Verdict(Enum):
    """The outcome of one scenario, most severe last."""

    PASS = "PASS"
    """Every threshold held, measured on a confirmed fault."""
    INCONCLUSIVE = "INCONCLUSIVE"
    """The drill could not establish the facts (e.g. the fault was never confirmed): no claim either way."""
    FAIL = "FAIL"
    """The platform broke a promise: a measured value missed its threshold, or a required state never came."""
    ABORTED = "ABORTED"
    """A guard the customer set was breached (the profile's ``safety.abort_when``: a node outside the drill's
    blast radius went NotReady): the scenario stopped, every fault was undone, nothing after it ran; no promise
    was judged."""

    @staticmethod
    def worst(verdicts: list["Verdict"]) -> "Verdict":
        order = [Verdict.PASS, Verdict.INCONCLUSIVE, Verdict.FAIL, Verdict.ABORTED]
        return max(verdicts, key=order.index, default=Verdict.PASS)


class Comparison(Enum):
    """How a measured value is compared with its threshold."""

    AT_MOST = "<="
    """The value must not exceed the threshold (durations, lost work)."""
    AT_LEAST = ">="
    """The value must reach the threshold (throughput, counts)."""


@dataclass(frozen=True)
class Threshold:
    """One promise from the feature file, e.g. detect <= 5 s."""

    name: str
    limit: float
    unit: str
    comparison: Comparison = Comparison.AT_MOST

    def holds(self, value: float) -> bool:
        return value <= self.limit if self.comparison is Comparison.AT_MOST else value >= self.limit

    def describe(self) -> str:
        return f"{self.comparison.value} {self.limit:g} {self.unit}"


@dataclass(frozen=True)
class Measurement:
    """A measured value; ``platform`` is the same quantity from the platform's own stamps, when it has them."""

    name: str
    value: float | None
    unit: str
    platform: float | None = None
    note: str = ""

    @property
    def error(self) -> float | None:
        """Harness-observed minus platform-stamped: the measurement error."""
        if self.value is None or self.platform is None:
            return None
        return self.value - self.platform


@dataclass(frozen=True)
class Judgement:
    threshold: Threshold
    measurement: Measurement | None
    verdict: Verdict
    message: str


def judge(threshold: Threshold, measurement: Measurement | None) -> Judgement:
    """Compare one measurement with its threshold; a missing measurement fails, naming why."""
    if measurement is None or measurement.value is None:
        note = f" ({measurement.note})" if measurement is not None and measurement.note else ""
        return Judgement(threshold, measurement, Verdict.FAIL,
                         f"{threshold.name}: never measured{note}; the promise is {threshold.describe()}")
    ok = threshold.holds(measurement.value)
    return Judgement(threshold, measurement, Verdict.PASS if ok else Verdict.FAIL,
                     f"{threshold.name}: measured {measurement.value:.3f} {measurement.unit}, "
                     f"threshold {threshold.describe()}{'' if ok else ' -- MISSED'}")


@dataclass
class DrillResult:
    """What a drill established; the evidence and the run summary are built from it."""

    drill: str
    verdict: Verdict = Verdict.PASS
    measurements: dict[str, Measurement] = field(default_factory=dict)
    judgements: list[Judgement] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    """Plain-language facts a customer should read (e.g. "deadlock: gang a holds 16 GPUs with 2/3 workers")."""
    details: dict[str, Any] = field(default_factory=dict)
    halted: str = ""
    """Why the scenario was ended early (:meth:`halt`); empty while it runs its course."""

    def measure(self, m: Measurement) -> Measurement:
        """Record a measurement. A threshold already judged on this name without a value (its instant came after
        the judgement's window) is judged again on it, so the verdict's words never contradict the record: a value
        that came too late still misses, and says by how much."""
        self.measurements[m.name] = m
        if m.value is not None:
            for i, j in enumerate(self.judgements):
                if j.threshold.name == m.name and (j.measurement is None or j.measurement.value is None):
                    again = judge(j.threshold, m)
                    verdict = Verdict.worst([j.verdict, again.verdict])
                    self.judgements[i] = Judgement(j.threshold, m, verdict, again.message if verdict is again.verdict
                                                   else f"{again.message}, measured only after its window closed")
        return m

    def check(self, threshold: Threshold) -> Judgement:
        j = judge(threshold, self.measurements.get(threshold.name))
        self.judgements.append(j)
        self.verdict = Verdict.worst([self.verdict, j.verdict])
        return j

    def fail(self, finding: str) -> None:
        self.findings.append(finding)
        self.verdict = Verdict.worst([self.verdict, Verdict.FAIL])  # an ABORTED scenario stays ABORTED

    def halt(self, reason: str) -> None:
        """FAIL with ``reason`` and end the scenario: the next wait or step raises :class:`ScenarioHalted`.
        Safe from another thread (a watch)."""
        if not self.halted:
            self.halted = reason
        self.fail(reason)

    def abort(self, reason: str) -> None:
        """ABORTED with ``reason``: a guard was breached; the next wait or step raises :class:`ScenarioHalted`
        and the run stops after this scenario's rollback.  Safe from another thread (a watch)."""
        if not self.halted:
            self.halted = reason
        self.findings.append(reason)
        self.verdict = Verdict.ABORTED

    def raise_if_halted(self) -> None:
        if self.halted:
            raise ScenarioHalted(self.halted)

    def inconclusive(self, finding: str) -> None:
        self.findings.append(finding)
        self.verdict = Verdict.worst([self.verdict, Verdict.INCONCLUSIVE])
