"""A run archive (``reports/<run-id>/``, docs/EVIDENCE.md) as the other side of a comparison.

The archive is verified first (``drills.records.evidence.verify``: manifest signature, every file's digest, every
statement); only then is ``record.json`` read.  Two things in it can be compared with a baseline:

1. a scenario that re-measured the cluster with a baseline's method (the steps "Given the signed baseline ..."
   and "When the cluster is observed with the baseline's method", docs/STEPS.md): its ``details.baseline``
   holds the method and the slices, exactly as a baseline statement does;
2. otherwise the leak report of the whole run window that every run records.  Its method is that of the run:
   the workload is the features that ran (the contract's digest), the window the run's length, in one slice.
   That is never the method of a baseline taken on its own, so such a comparison is refused, naming the fields;
   the archive is still useful to see what the run's window looked like.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from drills.kinds.baseline.errors import BaselineUsageError, NotVerified
from drills.kinds.baseline.method import Method, leak_report_source, prometheus_source
from drills.kinds.baseline.slices import slice_from_reading
from drills.kinds.baseline.statement import Observed, observed_from_predicate
from drills.records.evidence.archive import read_tree
from drills.records.evidence.errors import ArchiveError, VerifyReadError
from drills.records.evidence.statements import contract_digest
from drills.records.evidence.verify import verify
from drills.target.leakreport.model import LeakReading, ReportMalformed

__all__ = ["is_run_archive", "load_run"]

DETAILS_KEY = "baseline"
"""Where a scenario that re-measured with a baseline's method keeps it, in its ``details``."""


def is_run_archive(path: Path) -> bool:
    return path.is_dir() and (path / "manifest.json").exists()


def _seconds(start: str, end: str) -> float:
    try:
        a = datetime.fromisoformat(start.replace("Z", "+00:00"))
        b = datetime.fromisoformat(end.replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    return round((b - a).total_seconds(), 6)


def _run_window(record: Mapping[str, Any], path: Path, name: str) -> Observed:
    leak = record.get("leak_report")
    if not isinstance(leak, Mapping):
        raise BaselineUsageError(f"{path}: the run recorded no leak report (record.json leak_report), so it has "
                                 "nothing to compare with a baseline")
    if "report" not in leak:
        raise BaselineUsageError(f"{path}: the run could not read its leak report: {leak.get('error', 'unknown')}")
    raw = leak["report"]
    try:
        reading = LeakReading.parse(raw, f"{path}/record.json leak_report")
    except ReportMalformed as exc:
        raise BaselineUsageError(str(exc)) from None
    computed = raw.get("computedFrom") if isinstance(raw, Mapping) else None
    if isinstance(computed, Mapping) and computed.get("source") == "prometheus":
        unmeasured = [h["name"] for h in raw.get("holes") or [] if isinstance(h, Mapping) and h.get("unmeasured")]
        source = prometheus_source(computed.get("queries") or {}, computed.get("stepSeconds") or 0, unmeasured)
        reading = LeakReading(**{**reading.__dict__, "unmeasured": {
            h["name"]: str(h["unmeasured"]) for h in raw.get("holes") or []
            if isinstance(h, Mapping) and h.get("unmeasured")}})
    else:
        source = leak_report_source()
    seconds = _seconds(reading.start, reading.end)
    features = record.get("features") if isinstance(record.get("features"), Mapping) else {}
    method = Method(source=source,
                    workload={"kind": "features", "contract": contract_digest(dict(features))},
                    window={"seconds": seconds, "slices": 1, "sliceSeconds": seconds, "warmupSeconds": 0})
    target = record.get("target") if isinstance(record.get("target"), Mapping) else {}
    return Observed(name=name, method=method, slices=(slice_from_reading(reading),),
                    window=(reading.start, reading.end), unmeasured=dict(reading.unmeasured),
                    target={"kind": target.get("kind"), "description": target.get("description")},
                    notes=("the whole run's window, as the run recorded it",))


def load_run(path: Path, key: Path | None = None) -> Observed:
    """Verify a run archive directory and read what it holds for a comparison (see the module docstring)."""
    name = f"RUN ({path})"
    if path.is_file():
        raise BaselineUsageError(f"{path}: give a run archive directory (reports/<run-id>) or a baseline "
                                 "statement; unpack a .tar.gz first (`tar xzf`)")
    try:
        report = verify(path, key)
    except VerifyReadError as exc:
        raise BaselineUsageError(f"{path}: {exc}") from None
    if not report.ok:
        problems = "; ".join(str(p) for p in report.problems[:5]) or report.summary()
        raise NotVerified(f"refused: the run archive {path} does not verify ({problems}); `firedrill verify "
                          f"{path}` says everything that does not match")
    try:
        files, _ = read_tree(path)
    except ArchiveError as exc:
        raise BaselineUsageError(f"{path}: {exc}") from None
    try:
        record = json.loads(files["record.json"].decode("utf-8"))
    except (KeyError, UnicodeDecodeError, ValueError) as exc:
        raise BaselineUsageError(f"{path}: no readable record.json ({exc})") from None
    for scenario in record.get("scenarios") or []:
        details = scenario.get("details") if isinstance(scenario, Mapping) else None
        if isinstance(details, Mapping) and isinstance(details.get(DETAILS_KEY), Mapping):
            where = f"{path}: scenario {scenario.get('scenario', '?')!r}"
            observed = observed_from_predicate(details[DETAILS_KEY], f"RUN ({path}, scenario "
                                               f"{scenario.get('scenario', '?')!r})", where)
            target = record.get("target") if isinstance(record.get("target"), Mapping) else {}
            return Observed(**{**observed.__dict__, "keyid": report.keyid or "",
                               "identity": "the run archive's signature",
                               "target": {"kind": target.get("kind"), "description": target.get("description")}})
    observed = _run_window(record, path, name)
    return Observed(**{**observed.__dict__, "keyid": report.keyid or "", "identity": "the run archive's signature"})
