"""The run record: what one ``firedrill run`` established, as JSON-ready typed data.

Built by :mod:`drills.bdd.run` from the scenario outcomes, the timeline, the target fingerprint and the
inputs (feature files, target profile); consumed by the statement builder, the signer, the archive
writer and the HTML report.  Nothing here may hold a secret: the record is built from allow-listed
fields only (the timeline keeps summaries, never whole objects; the fingerprint keeps allow-listed labels).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any


@dataclass(frozen=True)
class ThresholdRecord:
    name: str
    limit: float
    unit: str
    comparison: str
    """"<=" or ">="."""


@dataclass(frozen=True)
class MeasurementRecord:
    name: str
    value: float | None
    unit: str
    platform: float | None = None
    """The same quantity from the platform's own stamps, when it has them."""
    error: float | None = None
    """value - platform: the measurement error."""
    note: str = ""


@dataclass(frozen=True)
class JudgementRecord:
    threshold: ThresholdRecord
    measured: float | None
    verdict: str
    message: str


@dataclass(frozen=True)
class ScenarioRecord:
    feature: str
    feature_file: str
    """Path relative to the features directory."""
    scenario: str
    tags: tuple[str, ...]
    """Without '@', e.g. ``clause:4.2``, ``conformance:gang_scheduling``."""
    drill: str
    """``gang-submission``, ``node-pull`` or ``scenario`` when no drill ran."""
    verdict: str
    """PASS, FAIL, INCONCLUSIVE, or ERROR (the harness failed, no claim about the platform)."""
    judgements: tuple[JudgementRecord, ...] = ()
    measurements: tuple[MeasurementRecord, ...] = ()
    findings: tuple[str, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)
    """Drill specifics, JSON-safe: ``bind_report``, ``partial_hold``, ``fault``, ``instants``, ..."""
    seconds: float = 0.0
    error: str = ""
    repeat: int = 1
    placement: dict[str, Any] | None = None
    """``firedrill run --parallel`` only: the wave, the pool and its nodes the scenario ran on, whether it ran
    alone and why, and the wall-clock instants it began and ended (RFC 3339); None in a serial run."""

    @property
    def clauses(self) -> tuple[str, ...]:
        return tuple(t.split(":", 1)[1] for t in self.tags if t.startswith("clause:"))

    @property
    def slug(self) -> str:
        """A file-name-safe identity: feature file stem + scenario + repeat."""
        stem = self.feature_file.rsplit("/", 1)[-1].removesuffix(".feature")
        base = re.sub(r"[^a-z0-9]+", "-", f"{stem}-{self.scenario}".lower()).strip("-")[:80]
        return f"{base}-run{self.repeat}" if self.repeat > 1 else base


@dataclass(frozen=True)
class TargetRecord:
    kind: str
    """``embedded`` (the reference platform) or ``cluster``."""
    description: str
    fingerprint: dict[str, Any]
    fingerprint_digest: str
    defects: tuple[str, ...] = ()
    """Defects from the zoo (docs/DEFECTS.md) the embedded reference platform ran with: a run with any
    tests the harness, not a platform, and is never an acceptance. Empty for an honest platform and for
    every real cluster."""


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    started: str
    """RFC 3339 UTC."""
    finished: str
    harness_version: str
    harness_commit: str | None
    target: TargetRecord
    features: dict[str, str]
    """Feature file (relative path) -> SHA-256 of its bytes."""
    profile: dict[str, Any]
    profile_digest: str
    options: dict[str, Any]
    scenarios: tuple[ScenarioRecord, ...]
    verdict: str
    """The worst scenario verdict (ERROR counts as worst of all)."""
    timeline: tuple[dict[str, Any], ...] = ()
    """Observation summaries in order (see drills.kube.timeline.Observation.to_json)."""
    leak_report: dict[str, Any] | None = None
    """The run window's leak report (docs/LEAK_REPORT.md) when the target serves one: ``source`` (kind, where),
    ``report`` (the JSON as served) or ``error`` (why it could not be read); None when not asked."""
    signers: tuple[dict[str, str], ...] = ()
    """The parties whose signatures the contract requires (``name``, ``keyid``), from the features folder's
    ``signers.yaml`` (drills.records.evidence.contract); empty when it pins none."""

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-ready data, as :func:`dataclasses.asdict` makes it, but sharing the values that are
        JSON already instead of copying them: every dict it holds (details, the timeline, the fingerprint, the
        options) was made JSON-safe when the record was built (:mod:`drills.records.evidence.collect`).  A run of
        every shipped feature holds hundreds of thousands of such values, and asdict's deep copy of them was
        about half a second of its sealing."""
        return _plain(self)  # type: ignore[no-any-return]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunRecord":
        """The inverse of :meth:`to_dict` (e.g. ``record.json`` read back from an archive)."""
        def scenario(s: dict[str, Any]) -> ScenarioRecord:
            return ScenarioRecord(
                **{**s, "tags": tuple(s.get("tags") or ()), "findings": tuple(s.get("findings") or ()),
                   "measurements": tuple(MeasurementRecord(**m) for m in s.get("measurements") or ()),
                   "judgements": tuple(JudgementRecord(**{**j, "threshold": ThresholdRecord(**j["threshold"])})
                                       for j in s.get("judgements") or ())})
        target = d["target"]
        return cls(**{**d, "target": TargetRecord(**{**target, "defects": tuple(target.get("defects") or ())}),
                      "scenarios": tuple(scenario(s) for s in d.get("scenarios") or ()),
                      "timeline": tuple(d.get("timeline") or ()), "signers": tuple(d.get("signers") or ())})


def _plain(value: Any) -> Any:
    """Dataclasses (in tuples and lists too) as dicts of their fields; any other value as it is."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, (tuple, list)):
        return type(value)(_plain(v) for v in value)
    return value
