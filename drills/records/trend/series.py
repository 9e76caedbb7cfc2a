"""From verified runs to series: for every scenario and every measure it carries, one point per run, judged.

A run that repeated a scenario (``--repeat``) gives one point per measure: the median of its repeats, where a
repeat with no value ranks worst (:func:`drills.records.trend.rules.combine`), and the worst judgement of the repeats.
The regression rule judges each measure on the last K runs; the flakiness rule each scenario on the last N + K.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from drills.records.trend.model import Run, ScenarioKey, ScenarioRun, Threshold
from drills.records.trend.rules import (
    Assessment, Flakiness, RegressionRule, Status, assess, combine, find_flaky, worse_direction,
)

__all__ = ["MeasureSeries", "Point", "ScenarioTrend", "Trend", "build_trend"]

VERDICT_ORDER = ("PASS", "INCONCLUSIVE", "FAIL", "ERROR", "ABORTED")


def worst_verdict(verdicts: Sequence[str | None]) -> str | None:
    known = [v for v in verdicts if v in VERDICT_ORDER]
    return max(known, key=VERDICT_ORDER.index) if known else None


@dataclass(frozen=True)
class Point:
    run: int
    """Index of the run in :attr:`Trend.runs`."""
    value: float | None
    verdict: str | None
    """The worst judgement of this measure over the run's repeats (None: not judged)."""
    repeats: int = 1


@dataclass(frozen=True)
class MeasureSeries:
    name: str
    unit: str
    threshold: Threshold | None
    points: tuple[Point, ...]
    assessment: Assessment


@dataclass(frozen=True)
class ScenarioTrend:
    key: ScenarioKey
    feature: str
    verdicts: tuple[tuple[int, str], ...]
    """(run index, the run's verdict of this scenario: the worst of its repeats)."""
    measures: tuple[MeasureSeries, ...]
    flaky: Flakiness | None = None
    change: str = ""
    """Says when the verdict changed once at one platform in the window (not flaky, but worth a line)."""

    @property
    def title(self) -> str:
        return f"{self.feature or self.key.feature_file} > {self.key.name}"

    @property
    def regressions(self) -> list[MeasureSeries]:
        return [m for m in self.measures if m.assessment.regressed]


@dataclass
class Trend:
    runs: list[Run]
    scenarios: list[ScenarioTrend]
    rule: RegressionRule
    scores: list[float | None] = field(default_factory=list)

    @property
    def regressions(self) -> list[tuple[ScenarioTrend, MeasureSeries]]:
        return [(s, m) for s in self.scenarios for m in s.regressions]

    @property
    def flaky(self) -> list[ScenarioTrend]:
        return [s for s in self.scenarios if s.flaky is not None]


def _measure_names(runs: Sequence[ScenarioRun]) -> list[str]:
    """Judged measures first, in the order the scenario lists its thresholds, then the others as measured."""
    names: dict[str, None] = {}
    for r in runs:
        for name in r.thresholds:
            names.setdefault(name, None)
    for r in runs:
        for name in r.samples:
            names.setdefault(name, None)
    return list(names)


def build_trend(runs: list[Run], rule: RegressionRule) -> Trend:
    """Series and judgements for every scenario of ``runs`` (ledger order)."""
    by_key: dict[ScenarioKey, dict[int, list[ScenarioRun]]] = {}
    for i, run in enumerate(runs):
        for s in run.scenarios:
            by_key.setdefault(s.key, {}).setdefault(i, []).append(s)
    last_runs = set(range(max(0, len(runs) - rule.last), len(runs)))
    window = set(range(max(0, len(runs) - rule.last - rule.baseline_nights), len(runs)))
    scenarios: list[ScenarioTrend] = []
    for key in sorted(by_key):
        per_run = by_key[key]
        all_runs = [s for i in sorted(per_run) for s in per_run[i]]
        feature = next((s.feature for s in all_runs if s.feature), "")
        indices = sorted(per_run)
        in_last = last_runs <= set(indices) and bool(last_runs)
        baseline_idx = [i for i in indices if i not in last_runs][-rule.baseline_nights:]
        measures: list[MeasureSeries] = []
        for name in _measure_names(all_runs):
            threshold = next((s.thresholds[name] for s in reversed(all_runs) if name in s.thresholds), None)
            unit = next((s.samples[name].unit for s in reversed(all_runs) if name in s.samples),
                        threshold.unit if threshold else "")
            direction = worse_direction(threshold)
            points: list[Point] = []
            for i in indices:
                reps = per_run[i]
                values = [s.samples[name].value if name in s.samples else None for s in reps]
                verdict = worst_verdict([s.samples[name].verdict for s in reps if name in s.samples])
                points.append(Point(i, combine(values, direction), verdict, len(reps)))
            value_of = {p.run: p.value for p in points}
            if not in_last:
                assessment = Assessment(Status.NOT_IN_LAST, words=f"{name}: the scenario did not run in each of "
                                                                  f"the last {rule.last} run(s); not judged")
            else:
                assessment = assess([value_of[i] for i in baseline_idx], [value_of[i] for i in sorted(last_runs)],
                                    threshold, rule, name, unit)
            measures.append(MeasureSeries(name, unit, threshold, tuple(points), assessment))
        verdicts = tuple((i, worst_verdict([s.verdict for s in per_run[i]]) or "ERROR") for i in indices)
        history = [(s.platform, s.verdict) for i in indices if i in window for s in per_run[i]]
        flaky = find_flaky(history)
        change = ""
        if flaky is None:
            once = find_flaky(history, min_flips=1)
            if once is not None:
                change = (f"verdict changed once at one platform in the last {len(window)} runs: "
                          f"{' '.join(once.verdicts)}")
        scenarios.append(ScenarioTrend(key, feature, verdicts, tuple(measures), flaky, change))
    return Trend(runs, scenarios, rule, [r.score for r in runs])
