"""``firedrill baseline`` and ``firedrill compare``: what the two commands do, apart from parsing their options.

``firedrill baseline`` exit codes:

====  ======================================================================================
0     the baseline was observed, signed and written
2     usage or input error: bad option, bad workload mix file, bad profile, bad signing key
3     the window could not be observed (the source gave no reading, the mix never ran whole)
4     the harness could not run: the platform did not start, the cluster is unreachable
====  ======================================================================================

``firedrill compare`` exit codes:

====  ======================================================================================
0     compared; every clause given PASSed
1     a clause FAILed
2     usage or input error: a file that cannot be read or is not a baseline or run archive, a bad clause
3     no clause FAILed, but one was INCONCLUSIVE (unknown uncertainty, an unmeasured hole)
4     refused: the two were measured with different methods (the message names each field)
5     refused: a signature or digest does not verify
====  ======================================================================================
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import IntEnum
from pathlib import Path
from typing import Any

from rich.console import Console

from drills.errors import FiredrillError
from drills.kinds.baseline.compare import ClauseVerdict, compare, parse_clause
from drills.kinds.baseline.errors import BaselineUsageError, MethodMismatch, NotVerified, ObservationError
from drills.kinds.baseline.method import Method, observed_workload, window_method
from drills.kinds.baseline.mix import DEFAULT_MIX, MixRunner, WorkloadMix, load_mix
from drills.kinds.baseline.observe import Clock, SystemClock, Window, observe, source_method
from drills.kinds.baseline.runarchive import is_run_archive, load_run
from drills.kinds.baseline.slices import HOLES, LAYERS, summary
from drills.kinds.baseline.statement import load, predicate, seal
from drills.kube.flavors import valid_dns_label
from drills.records.evidence.signing import Signer
from drills.target.connect import Target, cluster_target, embedded_target
from drills.target.leakreport.model import Hole
from drills.target.leakreport.source import ApiServerSource, LeakSource, PrometheusSource, UrlSource, rfc3339
from drills.target.profile import TargetProfile, load_profile, reference_profile

__all__ = ["BaselineExit", "BaselineOptions", "CompareExit", "parse_span", "run_compare", "take_baseline"]


class BaselineExit(IntEnum):
    SEALED = 0
    USAGE = 2
    NOT_OBSERVED = 3
    HARNESS = 4


class CompareExit(IntEnum):
    PASSED = 0
    FAILED = 1
    USAGE = 2
    INCONCLUSIVE = 3
    METHOD_MISMATCH = 4
    NOT_VERIFIED = 5


@dataclass(frozen=True)
class BaselineOptions:
    window: float
    """Seconds observed."""
    slices: int = 10
    warmup: float = 5.0
    """Seconds the mix runs before the window opens (a mix only)."""
    out: Path | None = None
    mix: Path | None = None
    workload: str | None = None
    profile: Path | None = None
    kubeconfig: Path | None = None
    context: str | None = None
    start: str | None = None
    """RFC 3339: observe a window that started then (a real cluster whose source keeps history)."""
    sign_key: Path | None = None
    scheduler_profile: str = "gang"
    defects: tuple[str, ...] = ()
    namespace: str | None = None

    @property
    def remote(self) -> bool:
        return self.kubeconfig is not None or self.context is not None or self.profile is not None


SPAN_UNITS = {"ms": 0.001, "s": 1.0, "sec": 1.0, "second": 1.0, "seconds": 1.0, "min": 60.0, "minute": 60.0,
              "minutes": 60.0, "h": 3600.0, "hour": 3600.0, "hours": 3600.0, "d": 86400.0, "day": 86400.0,
              "days": 86400.0}


def parse_span(text: str, option: str, zero: bool = False) -> float:
    """'10 minutes', '24 hours', '90 s', '1.5 h' -> seconds (more than zero, or zero too with ``zero``)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    unit = m.group(2).lower() if m else ""
    if not m or (unit not in SPAN_UNITS and not (unit == "" and float(m.group(1)) == 0)):
        raise BaselineUsageError(f"{option} {text!r}: not a duration; write a number and a unit "
                                 f"({', '.join(SPAN_UNITS)}), e.g. '10 minutes' or '24 hours'")
    seconds = float(m.group(1)) * SPAN_UNITS.get(unit, 1.0)
    if seconds <= 0 and not zero:
        raise BaselineUsageError(f"{option} {text!r}: a duration of zero; write more than zero")
    return seconds


def _parse_instant(text: str) -> float:
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        value = None
    if value is None or value.tzinfo is None:
        raise BaselineUsageError(f"--start {text!r}: not an RFC 3339 instant with a zone, e.g. 2027-01-15T08:00:00Z")
    return value.timestamp()


def _signer(key: Path | None, err: Console) -> Signer:
    path = key or (Path(os.environ["FIREDRILL_SIGNING_KEY"]) if os.environ.get("FIREDRILL_SIGNING_KEY") else None)
    if path is not None:
        return Signer.from_key_file(path)
    err.print("WARNING: no signing key (--sign-key or FIREDRILL_SIGNING_KEY): this baseline is signed with a "
              "THROWAWAY key. It proves the file was not altered, not who made it; a contract should point to a "
              "baseline signed with a key both sides know (`firedrill keygen`).")
    return Signer.generate_ephemeral()


def _source(profile: TargetProfile, target: Target | None) -> LeakSource:
    settings = profile.leak_report
    if settings.url:
        return UrlSource(settings.url)
    if settings.prometheus_url:
        return PrometheusSource(settings.prometheus_url, scrape_interval=settings.scrape_interval or 1.0)
    if target is None:
        raise BaselineUsageError("the target profile names no leakReport.url or prometheus.url, so the leak report "
                                 "is read from the cluster's API server: pass --kubeconfig (docs/PROFILE.md)")
    return ApiServerSource(target.driver)


def _target_info(target: Target | None, profile: TargetProfile, options: BaselineOptions) -> dict[str, Any]:
    if target is None:
        return {"kind": "cluster", "description": f"cluster {profile.name!r} (metrics only, no API connection)"}
    if target.embedded is not None:
        description = target.description.rsplit(" at ", 1)[0]
    else:
        description = (f"cluster {profile.name!r}" + (f" (context {options.context})" if options.context else "")
                       + f" at {target.driver.host}")
    info: dict[str, Any] = {"kind": "embedded" if target.embedded is not None else "cluster",
                            "description": description}
    fp = target.fingerprint
    if fp is not None:
        info.update({"fingerprintDigest": fp.digest(), "serverVersion": fp.server_version, "nodes": fp.node_count,
                     "gpus": fp.gpu_capacity, "gpuModels": [f"{m.capacity} x {m.product}" for m in fp.gpu_models]})
    if target.defects:
        info["defects"] = list(target.defects)
    return info


def _check(options: BaselineOptions) -> tuple[TargetProfile, WorkloadMix | None, dict[str, Any]]:
    """The profile, the mix (None: observe the cluster's own workload) and the workload's method."""
    if options.kubeconfig is not None and options.profile is None:
        raise BaselineUsageError("a real cluster needs --profile FILE (where its leak report or Prometheus is); see "
                                 "docs/PROFILE.md")
    if options.remote and (options.defects or options.scheduler_profile != "gang"):
        raise BaselineUsageError("--defect and --scheduler-profile shape the embedded reference platform only; drop "
                                 "them, or drop --profile/--kubeconfig to baseline the embedded platform")
    profile = load_profile(options.profile) if options.profile else reference_profile()
    if options.namespace:
        if not valid_dns_label(options.namespace):
            raise BaselineUsageError(f"--namespace {options.namespace!r} is not a namespace name (a-z, 0-9, '-')")
        profile = dataclasses.replace(profile, namespace=options.namespace)
    if options.mix is not None and options.workload is not None:
        raise BaselineUsageError("--mix and --workload both say what runs; give --mix FILE for a mix the harness "
                                 "submits, or --workload TEXT for the cluster's own workload, not both")
    if not options.remote:
        if options.workload is not None:
            raise BaselineUsageError("--workload describes a real cluster's own workload; on the embedded platform "
                                     "the harness runs a workload mix (--mix FILE, or the built-in default)")
        if options.start is not None:
            raise BaselineUsageError("--start observes a past window of a real cluster; the embedded platform is "
                                     "started for this baseline, so its window starts now")
        mix = load_mix(options.mix) if options.mix else DEFAULT_MIX
        return profile, mix, {"kind": "mix", "mix": mix.to_dict()}
    if options.mix is not None:
        if options.kubeconfig is None and options.context is None:
            raise BaselineUsageError("--mix on a real cluster submits pods: pass --kubeconfig too")
        if options.start is not None:
            raise BaselineUsageError("--start observes a past window, but a --mix runs from now; drop one of them")
        mix = load_mix(options.mix)
        return profile, mix, {"kind": "mix", "mix": mix.to_dict()}
    if options.workload is None:
        raise BaselineUsageError("a real cluster's baseline observes its own workload: say what it is with --workload "
                                 "TEXT (e.g. 'production training queues, a normal weekday'); the run compared "
                                 "with it must say the same")
    return profile, None, observed_workload(options.workload)


def _default_out(now: datetime) -> Path:
    return Path("reports") / "baselines" / f"baseline-{now.strftime('%Y%m%dT%H%M%SZ')}.dsse.json"


def _write_new(path: Path, data: bytes) -> None:
    if path.exists():
        raise BaselineUsageError(f"--out {path} already exists; a sealed baseline is never overwritten (choose "
                                 "another --out)")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _summary_lines(slices: list[Any], unmeasured: dict[str, str]) -> list[str]:
    s = summary(slices)
    out = [f"  capacity {s['capacityGpuHours']:.4g} GPU-h over {s['slices']} slices"]
    for name in LAYERS:
        layer = s["layers"][name]
        out.append(f"  {name:10} {100 * layer['share']:6.2f} % ± {100 * (layer['standardError'] or 0):.2g} "
                   f"(standard error) of healthy capacity, {layer['gpuHours']:.4g} GPU-h")
    for name in HOLES:
        hole = s["holes"][name]
        words = Hole(name).words
        if hole["gpuHours"] is None:
            out.append(f"  {words:16} unmeasured: {unmeasured.get(name, 'the source cannot measure it')}")
        else:
            out.append(f"  {words:16} {hole['gpuHours']:.4g} GPU-h ± {hole['standardError'] or 0:.2g} (standard error)")
    return out


def take_baseline(options: BaselineOptions, console: Console, err: Console, *, clock: Clock | None = None,
                  sleep: Callable[[float], None] = time.sleep) -> int:
    """Observe, sign and write a baseline (see the module docstring for the exit codes)."""
    clock = clock or SystemClock()
    try:
        profile, mix, workload = _check(options)
        method = Method(source={}, workload=workload,
                        window=window_method(options.window, options.slices, options.warmup if mix else 0.0))
        start_at = _parse_instant(options.start) if options.start else None
        signer = _signer(options.sign_key, err)
        out = options.out or _default_out(datetime.now(timezone.utc))
        if out.exists():
            raise BaselineUsageError(f"--out {out} already exists; a sealed baseline is never overwritten")
    except (BaselineUsageError, FiredrillError) as exc:
        err.print(f"error: {exc}")
        return BaselineExit.USAGE
    target: Target | None = None
    runner: MixRunner | None = None
    try:
        try:
            if not options.remote:
                console.print(f"Starting the embedded reference platform ({options.scheduler_profile} scheduler"
                              + (f", with defect(s) {', '.join(options.defects)}" if options.defects else "") + ")")
                target = embedded_target(options.scheduler_profile, profile=profile, defects=options.defects)
            elif options.kubeconfig is not None or options.context is not None:
                target = cluster_target(options.kubeconfig, options.context, profile)
            source = _source(profile, target)
        except BaselineUsageError as exc:
            err.print(f"error: {exc}")
            return BaselineExit.USAGE
        except FiredrillError as exc:
            err.print(f"error: {exc}")
            return BaselineExit.HARNESS
        method = dataclasses.replace(method, source=source_method(source))
        info = _target_info(target, profile, options)
        console.print(f"Target: {info['description']}")
        console.print(f"Source: {source.description}")
        if mix is not None and target is not None:
            console.print(f"Workload: {mix.describe()}; starting it")
            runner = MixRunner(target, mix, "bl" + secrets.token_hex(3))
            runner.start()
            ready = clock.wall()
            console.print(f"  the mix runs whole; warming up for {options.warmup:g} s before the window opens")
            while (left := ready + options.warmup - clock.wall()) > 0:
                sleep(min(left, 1.0))
        else:
            console.print(f"Workload: observed, {workload.get('description')!r}")
        window = Window(start_at if start_at is not None else clock.wall(), options.window, options.slices)
        console.print(f"Observing {options.window:g} s in {options.slices} slices of {options.window / options.slices:g} s "
                      f"from {rfc3339(window.start)} (each slice is read about {source.settle:g} s after it ends)")
        slices, unmeasured = observe(source, window, clock=clock, sleep=sleep, progress=console.print)
        notes = runner.not_running() if runner is not None else []
        for note in notes:
            err.print(f"  warning: by the end of the window the mix had changed: {note}")
    except ObservationError as exc:
        err.print(f"error: no baseline: {exc}")
        return BaselineExit.NOT_OBSERVED
    except KeyboardInterrupt:
        err.print("interrupted: no baseline written; the mix is being deleted")
        return BaselineExit.HARNESS
    except FiredrillError as exc:
        err.print(f"error: {exc}")
        return BaselineExit.HARNESS
    finally:
        if runner is not None:
            runner.stop()
        if target is not None:
            target.close()
    pred = predicate(method, slices, start=rfc3339(window.start), end=rfc3339(window.end), source_kind=source.kind,
                     source_where=source.description, unmeasured=unmeasured, target=info,
                     notes=[f"the mix changed during the window: {n}" for n in notes], signer=signer,
                     created=rfc3339(clock.wall()))
    try:
        _write_new(out, seal(pred, signer, info.get("fingerprintDigest")))
    except (BaselineUsageError, OSError) as exc:
        err.print(f"error: the baseline could not be written: {exc}")
        return BaselineExit.USAGE
    console.print("Baseline:")
    for line in _summary_lines(slices, unmeasured):
        console.print(line)
    console.print(f"Sealed: {out} (in-toto statement in a DSSE envelope, Ed25519 keyid {signer.keyid[:16]}"
                  + (", a THROWAWAY key" if signer.ephemeral else "") + ")")
    console.print(f"Compare a later run with it: firedrill compare {out} <run-or-baseline>")
    return BaselineExit.SEALED


def run_compare(baseline: Path, run: Path, clauses: list[str], key: Path | None, as_json: bool,
                console: Console, err: Console) -> int:
    """Verify both, refuse different methods, print the change per layer and hole and judge the clauses."""
    try:
        parsed = [parse_clause(c) for c in clauses]
        before = load(baseline, key)
        after = load_run(run, key) if is_run_archive(run) else load(run, key, name=f"RUN ({run})")
        comparison = compare(before, after)
    except BaselineUsageError as exc:
        err.print(f"error: {exc}")
        return CompareExit.USAGE
    except NotVerified as exc:
        err.print(f"error: {exc}")
        return CompareExit.NOT_VERIFIED
    except MethodMismatch as exc:
        err.print(f"error: {exc}")
        return CompareExit.METHOD_MISMATCH
    judgements = [c.judge(comparison) for c in parsed]
    if as_json:
        doc = {**comparison.to_dict(), "clauses": [j.to_dict() for j in judgements]}
        console.print(json.dumps(doc, indent=2, sort_keys=True))
    else:
        for side in (before, after):
            console.print(f"{side.name}: window {side.window[0]} .. {side.window[1]}; signed by keyid "
                          f"{side.keyid[:16] or '?'} ({side.identity}); target: "
                          f"{side.target.get('description', 'unknown')}")
            for note in side.notes:
                console.print(f"  note: {note}")
        if before.keyid and after.keyid and before.keyid != after.keyid:
            console.print("  note: the two were signed by different keys")
        w = before.method.window
        console.print(f"Same method: {before.method.source.get('kind')} source, workload "
                      f"{before.method.workload.get('kind')}, window {w.get('seconds'):g} s in {w.get('slices')} "
                      "slices")
        for line in comparison.lines():
            console.print(line)
        for j in judgements:
            console.print(f"{j.verdict.value}: {j.clause.text}: {j.message}")
    verdicts = {j.verdict for j in judgements}
    if ClauseVerdict.FAIL in verdicts:
        return CompareExit.FAILED
    if ClauseVerdict.INCONCLUSIVE in verdicts:
        return CompareExit.INCONCLUSIVE
    return CompareExit.PASSED
