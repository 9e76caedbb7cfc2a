"""What ``firedrill trend`` reads from each verified archive: runs, the scenario runs in them, their measures.

Everything here comes from the signed statements of a run that verified (``evidence/*.dsse.json``), never from a
file the signatures do not cover: the measured values, the thresholds, the judgements and the verdict of each
scenario (the Firedrill scenario predicate, docs/EVIDENCE.md), and the target fingerprint it ran against.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from drills.records.score import ScoredScenario

__all__ = ["Run", "Sample", "ScenarioKey", "ScenarioRun", "Threshold"]


@dataclass(frozen=True, order=True)
class ScenarioKey:
    """A scenario across runs: its feature file (relative to the features folder) and its name."""

    feature_file: str
    name: str


@dataclass(frozen=True)
class Threshold:
    limit: float
    comparison: str
    """``<=`` (lower is better) or ``>=`` (higher is better)."""
    unit: str


@dataclass(frozen=True)
class Sample:
    """One measure of one scenario run."""

    value: float | None
    """The harness's measured value; None when the drill measured nothing (never observed, stopped early)."""
    unit: str
    verdict: str | None = None
    """The judgement of this measure against its threshold (PASS, FAIL, INCONCLUSIVE), None when not judged."""
    note: str = ""


@dataclass(frozen=True)
class ScenarioRun:
    key: ScenarioKey
    feature: str
    verdict: str
    repeat: int
    platform: str
    """The platform as the evidence identifies it: the target fingerprint's digest, plus the defects of the
    zoo the reference platform ran with (``<digest>+slow-detect``), so a run with a defect is never the same
    platform as an honest one."""
    samples: dict[str, Sample]
    thresholds: dict[str, Threshold]
    scored: ScoredScenario


@dataclass(frozen=True)
class Run:
    run_id: str
    time: str
    """When it was sealed (the ledger line's ``time``, RFC 3339 UTC)."""
    line: int
    """Its line in the ledger (1-based)."""
    verdict: str
    scenarios: tuple[ScenarioRun, ...] = ()
    score: float | None = None
    """The resilience score (drills.records.score) of its scenario statements."""
    defects: tuple[str, ...] = field(default=())
