"""The resilience score: one number per run, 0 to 100, that a missing measurement cannot flatter.

The formula (docs/TRENDS.md, "The resilience score"):

* every scenario run is weighed by the **severity** of its contract clause, from its ``@severity:<level>`` tag:
  ``critical`` 3, ``major`` 2 (also every scenario without the tag), ``minor`` 1;
* a scenario's **credit** is ``(held + verdict) / (measures + 1)``: ``measures`` is the number of its judged
  thresholds, ``held`` those with a measured value that met the threshold, and ``verdict`` is 1 when the
  scenario PASSed, else 0 (its own verdict is one more measure, so a finding such as split brain or an escaped
  fault costs credit even when every threshold held). A threshold **with no measured value counts as missed**,
  whatever the reason (never observed, the drill stopped early, the harness failed): scores that skip such a
  measure reward a platform for hiding what it cannot do. A scenario with no threshold has credit 1 when it
  PASSed, else 0; INCONCLUSIVE and ERROR are not PASS;
* the run's score is ``100 x sum(weight x credit) / sum(weight)`` over its scenario runs (each repeat counts
  once), rounded to one decimal; a run with no scenario has no score (None).

The inputs are the verdicts and judgements a run records (:class:`~drills.records.evidence.record.ScenarioRecord`) or
its signed scenario statements carry (their ``predicate``), so the report and ``firedrill trend`` compute the
same number from the same evidence.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from drills.errors import FiredrillError

__all__ = ["DEFAULT_SEVERITY", "SEVERITY_TAG", "ScoredScenario", "Severity", "SeverityError", "explain",
           "parse_severity", "run_score", "scored_from_predicate", "scored_from_record"]

SEVERITY_TAG = "severity:"
"""The tag prefix that names a scenario's severity: ``@severity:critical``."""


class Severity(Enum):
    """How much breaking a clause costs, as the contract says it (a scenario's ``@severity:`` tag)."""

    CRITICAL = "critical"
    """Breaking it stops the customer's work (lost training, a job that never runs again): weight 3."""
    MAJOR = "major"
    """Breaking it costs the customer time or money but work goes on: weight 2; also every untagged scenario."""
    MINOR = "minor"
    """A nuisance: weight 1."""

    @property
    def weight(self) -> int:
        return {"critical": 3, "major": 2, "minor": 1}[self.value]


DEFAULT_SEVERITY = Severity.MAJOR


class SeverityError(FiredrillError, ValueError):
    """A ``@severity:`` tag names no level (the feature check reports it at its line)."""


def parse_severity(tags: Iterable[str], where: str = "") -> Severity:
    """The severity a scenario's tags (without '@') name; :data:`DEFAULT_SEVERITY` without one.  Raises
    :class:`SeverityError` for an unknown level or two different levels."""
    found = {t[len(SEVERITY_TAG):].strip().lower() for t in tags if t.lower().startswith(SEVERITY_TAG)}
    if not found:
        return DEFAULT_SEVERITY
    levels = ", ".join(s.value for s in Severity)
    prefix = f"{where}: " if where else ""
    unknown = sorted(found - {s.value for s in Severity})
    if unknown:
        raise SeverityError(f"{prefix}@severity:{unknown[0]} is not a severity; write @severity:<level> with "
                            f"one of {levels} (docs/TRENDS.md)")
    if len(found) > 1:
        raise SeverityError(f"{prefix}the scenario has {len(found)} severities ({', '.join(sorted(found))}); "
                            "keep one @severity: tag")
    return Severity(found.pop())


@dataclass(frozen=True)
class ScoredScenario:
    """What the score reads of one scenario run."""

    name: str
    severity: Severity
    verdict: str
    """PASS, FAIL, INCONCLUSIVE or ERROR."""
    held: int
    """Judged thresholds with a measured value that met them."""
    measures: int
    """Judged thresholds, met or not, measured or not."""

    @property
    def credit(self) -> float:
        return (self.held + (1 if self.verdict == "PASS" else 0)) / (self.measures + 1)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _severity_or_default(tags: Iterable[str], where: str) -> Severity:
    try:
        return parse_severity(tags, where)
    except SeverityError:
        return DEFAULT_SEVERITY  # the feature check refuses such a tag before a run; old evidence still scores


def scored_from_record(scenario: Any) -> ScoredScenario:
    """From a :class:`~drills.records.evidence.record.ScenarioRecord` (the run's own record)."""
    held = sum(1 for j in scenario.judgements if j.verdict == "PASS" and _finite(j.measured))
    return ScoredScenario(f"{scenario.feature} > {scenario.scenario}",
                          _severity_or_default(scenario.tags, scenario.scenario), scenario.verdict, held,
                          len(scenario.judgements))


def scored_from_predicate(predicate: Mapping[str, Any]) -> ScoredScenario:
    """From a signed scenario statement's predicate (``https://firedrill.dev/attestation/scenario/v0.1``)."""
    scenario = predicate.get("scenario") if isinstance(predicate.get("scenario"), Mapping) else {}
    judgements = [j for j in predicate.get("judgements") or [] if isinstance(j, Mapping)]
    held = sum(1 for j in judgements if j.get("verdict") == "PASS" and _finite(j.get("measured")))
    tags = [str(t) for t in scenario.get("tags") or []]
    name = f"{scenario.get('feature', '?')} > {scenario.get('name', '?')}"
    return ScoredScenario(name, _severity_or_default(tags, name), str(predicate.get("verdict", "ERROR")), held,
                          len(judgements))


def run_score(scenarios: Iterable[ScoredScenario]) -> float | None:
    """``100 x sum(weight x credit) / sum(weight)``, one decimal; None when there is no scenario."""
    items = list(scenarios)
    total = sum(s.severity.weight for s in items)
    if not total:
        return None
    return round(100.0 * sum(s.severity.weight * s.credit for s in items) / total, 1)


def explain(scenarios: Iterable[ScoredScenario]) -> str:
    """One line saying how the score was made, for reports: ``3 scenarios, weights 3+2+2; 1 threshold unmet``."""
    items = list(scenarios)
    missed = sum(s.measures - s.held for s in items)
    failed = sum(1 for s in items if s.verdict != "PASS")
    return (f"{len(items)} scenario run{'s' if len(items) != 1 else ''} weighted by severity "
            f"({'+'.join(str(s.severity.weight) for s in items) or '0'}); {missed} threshold"
            f"{'s' if missed != 1 else ''} missed or not measured, {failed} scenario{'s' if failed != 1 else ''} "
            "not PASS")
