"""The baseline steps of a feature file: load a signed baseline, re-measure the target with its method, and
judge contract clauses against the comparison (docs/CONTRACTS.md, "In a feature file").

The re-measurement runs the baseline's own method on the run's target: the same source kind (the target
profile's must give it, or the scenario is INCONCLUSIVE), the same workload mix (run again; an observed
workload is the cluster's own, as the baseline's words describe it), the same window and slices.  Its method
and slices go into the scenario's ``details["baseline"]`` exactly as a baseline statement holds them, so the
run archive can be compared with the baseline again later (``firedrill compare BASELINE reports/<run-id>``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from drills.kinds.baseline.compare import ClauseVerdict, Comparison, compare, parse_clause
from drills.kinds.baseline.errors import BaselineError, MethodMismatch
from drills.kinds.baseline.method import differences
from drills.kinds.baseline.mix import MixRunner, parse_mix
from drills.kinds.baseline.observe import SystemClock, Window, observe, source_method
from drills.kinds.baseline.runarchive import DETAILS_KEY
from drills.kinds.baseline.statement import Observed, load
from drills.records.evidence.canonical import sha256_hex
from drills.records.verdict import Comparison as Direction
from drills.records.verdict import DrillInconclusive, Measurement, Threshold
from drills.scenario.drill import Drill, register
from drills.kube.flavors import GangFlavor
from drills.target.access import CLUSTER, Permission, grant
from drills.target.leakreport.source import rfc3339, source_for
from drills.target.profile import TargetProfile

log = logging.getLogger(__name__)

__all__ = ["BaselineDrill", "resolve"]


def resolve(text: str) -> Path:
    """A baseline path as a feature writes it: absolute, or relative to the features directory (where the
    contract lives), else to the working directory."""
    path = Path(text)
    if path.is_absolute():
        return path
    features = os.environ.get("FIREDRILL_FEATURES")
    if features and (Path(features) / path).exists():
        return Path(features) / path
    return path


@register
@dataclass
class BaselineDrill(Drill):
    kind: ClassVar[str] = "baseline-comparison"

    @classmethod
    def permissions(cls, profile: TargetProfile) -> list[Permission]:
        ns, why = profile.namespace, "baseline comparison: the workload mix"
        group = "batch.volcano.sh" if profile.flavor is GangFlavor.VOLCANO else "batch"
        out = grant(ns, group, "jobs", ("create", "delete"), why)
        out += grant(ns, "", "pods", ("list", "create", "delete"), why)
        if profile.leak_report.url is None and profile.leak_report.prometheus_url is None:
            out += grant(CLUSTER, "firedrill.dev", "leakreport", ("list",), "baseline comparison: the leak report")
        return out

    baseline: Observed | None = None
    comparison: Comparison | None = None
    runner: MixRunner | None = None

    def load(self, text: str) -> None:
        """Read and verify the baseline; one that cannot be read or does not verify leaves nothing to judge."""
        path = resolve(text)
        try:
            self.baseline = load(path)
        except BaselineError as exc:
            raise DrillInconclusive(f"the signed baseline {text!r} cannot be used: {exc}") from None
        self.result.details["baselineFile"] = {"path": text, "sha256": sha256_hex(path.read_bytes()),
                                               "keyid": self.baseline.keyid, "identity": self.baseline.identity}

    def observe(self) -> None:
        """Measure the target with the baseline's method, then compare (refused methods: INCONCLUSIVE)."""
        if self.baseline is None:
            raise ValueError("no baseline was loaded; start the scenario with 'Given the signed baseline \"FILE\"'")
        method = self.baseline.method
        source = source_for(self.target.profile, self.target.driver)
        mine = dataclasses.replace(method, source=source_method(source))
        if differences(method, mine):
            raise DrillInconclusive(f"the target profile's source ({source.description}, {source.kind}) is not the "
                                    f"baseline's ({method.source.get('kind')}); set the same source in the profile")
        clock = SystemClock()
        if method.workload.get("kind") == "mix":
            try:
                mix = parse_mix(method.workload.get("mix"), "the baseline's workload mix")
                self.runner = MixRunner(self.target, mix, self.run_id)
                self.runner.start()
            except BaselineError as exc:
                raise DrillInconclusive(str(exc)) from None
            warm_until = clock.wall() + float(method.window.get("warmupSeconds") or 0)
            while (left := warm_until - clock.wall()) > 0:
                self.pause(min(left, 1.0))
        elif method.workload.get("kind") != "observed":
            raise DrillInconclusive(f"the baseline's workload is {method.workload.get('kind')!r}; only a mix or the "
                                    "cluster's own observed workload can be measured again")
        window = Window(clock.wall(), float(method.window["seconds"]), int(method.window["slices"]))
        try:
            slices, unmeasured = observe(source, window, clock=clock, sleep=time.sleep, progress=log.info)
        except BaselineError as exc:
            raise DrillInconclusive(str(exc)) from None
        notes = self.runner.not_running() if self.runner is not None else []
        self.result.details[DETAILS_KEY] = {
            "method": mine.to_dict(),
            "observation": {"window": {"start": rfc3339(window.start), "end": rfc3339(window.end)},
                            "source": {"kind": source.kind, "where": source.description},
                            "slices": [s.to_dict() for s in slices], "unmeasured": dict(unmeasured),
                            "notes": [f"the mix changed during the window: {n}" for n in notes]}}
        observed = Observed(name="this run", method=mine, slices=tuple(slices),
                            window=(rfc3339(window.start), rfc3339(window.end)), unmeasured=unmeasured)
        try:
            self.comparison = compare(self.baseline, observed)
        except MethodMismatch as exc:
            raise DrillInconclusive(str(exc)) from None
        for row in self.comparison.rows:
            if row.improvement is not None:
                u = "unknown" if row.uncertainty is None else f"{row.uncertainty:.3g}"
                self.result.measure(Measurement(f"{row.words} improvement", row.improvement, row.unit,
                                                note=f"± {u} {row.unit} (95 % uncertainty)"))

    def judge(self, sentence: str) -> None:
        """Judge one clause: PASS only when the improvement minus its uncertainty clears the figure."""
        if self.comparison is None:
            raise ValueError("nothing was measured; put 'When the cluster is observed with the baseline's method' "
                             "before this step")
        clause = parse_clause(sentence)
        judgement = clause.judge(self.comparison)
        row = self.comparison.row(clause.quantity)
        name = f"{row.words} improvement minus uncertainty"
        if judgement.verdict is ClauseVerdict.INCONCLUSIVE:
            self.result.inconclusive(judgement.message)
            return
        assert judgement.improvement is not None and judgement.uncertainty is not None
        self.result.measure(Measurement(name, judgement.improvement - judgement.uncertainty, row.unit,
                                        note=judgement.message))
        self.result.check(Threshold(name, clause.minimum, row.unit, Direction.AT_LEAST))

    def rollback(self) -> None:
        if self.runner is not None:
            self.runner.stop()
