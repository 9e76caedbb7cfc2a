"""The method of an observation: everything that changes what its numbers mean (pure).

Two observations are comparable only when their methods are equal, field by field; :func:`differences` names
every field that is not, and :func:`require_same` refuses with those names.  The fields:

- ``definitions``: what the layers and holes are (the leak report contract's version and the metric each layer
  reads; the effective layer is tensor-pipe activity, the MFU proxy, never nvidia-smi's utilization);
- ``source``: how the numbers were obtained: a leak report that follows the contract (the platform's own
  accounting, any platform that serves it), or computed from Prometheus (DCGM exporter and kube-state-metrics:
  other queries, two holes unmeasurable, two bounds: a different method);
- ``workload``: what ran: a workload mix the harness submitted (its whole definition), or the cluster's own
  workload, observed, in the operator's words;
- ``window``: its length, how many equal slices it was cut into (their length follows) and, for a mix, how
  long the mix ran before the window opened (warm-up);
- ``estimator``: how the uncertainty is computed (batch means, the confidence level).

Where and when are not method: the target (before and after delivery it is a different platform by design),
the window's instants, the harness version and the signer are recorded beside the method and shown, never
compared.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from drills.kinds.baseline.errors import BaselineUsageError, MethodMismatch
from drills.kinds.baseline.stats import CONFIDENCE
from drills.target.leakreport.model import API_VERSION

__all__ = ["DEFINITIONS", "ESTIMATOR", "Method", "differences", "leak_report_source", "observed_workload",
           "prometheus_source", "require_same", "window_method"]

DEFINITIONS: Mapping[str, str] = MappingProxyType({
    "contract": f"{API_VERSION} LeakReport (docs/LEAK_REPORT.md)",
    "capacity": "whole GPUs of healthy nodes, integrated over the window",
    "allocated": "GPUs bound to running pods on healthy nodes, as a share of capacity",
    "active": "DCGM_FI_PROF_GR_ENGINE_ACTIVE (a kernel runs), as a share of capacity",
    "effective": "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE (tensor-pipe activity, the MFU proxy), as a share of capacity; "
                 "never nvidia-smi utilization",
    "holes": "dataPipeline, communication, fragmentation, faultTolerance in GPU-hours over the window, as the "
             "contract defines them",
})
"""The layers and holes as this harness reads them (the same for every observation of this version)."""

ESTIMATOR: Mapping[str, Any] = MappingProxyType({
    "name": "batch means over equal slices of the window",
    "layers": "ratio estimator sum(layer)/sum(capacity), first-order standard error",
    "holes": "total over the slices, standard error sqrt(n) x the slices' standard deviation",
    "change": "difference of independent windows, Welch-Satterthwaite degrees of freedom, Student t interval",
    "confidence": CONFIDENCE,
})


def leak_report_source() -> dict[str, Any]:
    """A source that serves the leak report contract (the target's API server path, or a configured URL)."""
    return {"kind": "leak-report", "apiVersion": API_VERSION}


def prometheus_source(queries: Mapping[str, str], step_seconds: float, unmeasured: list[str]) -> dict[str, Any]:
    """Layers and holes computed from Prometheus: the queries, the evaluation step and the holes it cannot see."""
    return {"kind": "prometheus", "queries": dict(sorted(queries.items())), "stepSeconds": step_seconds,
            "unmeasured": sorted(unmeasured)}


def observed_workload(description: str) -> dict[str, Any]:
    """The cluster's own workload, not submitted by the harness: only the operator's words say what it was."""
    text = " ".join(description.split())
    if not text:
        raise BaselineUsageError("--workload is empty: describe what runs on the cluster during the window (e.g. "
                                 "'production training queues, weekday'); the same words must describe the run it "
                                 "is compared with")
    return {"kind": "observed", "description": text}


def window_method(seconds: float, slices: int, warmup_seconds: float) -> dict[str, Any]:
    if not seconds > 0:
        raise BaselineUsageError(f"--window {seconds:g} s: a window must be longer than 0 s")
    if slices < 2:
        raise BaselineUsageError(f"--slices {slices}: at least 2 slices, or the window's uncertainty is unknown "
                                 "(10 or more is better)")
    if warmup_seconds < 0:
        raise BaselineUsageError(f"--warmup {warmup_seconds:g} s: the warm-up cannot be negative")
    return {"seconds": round(seconds, 6), "slices": slices, "sliceSeconds": round(seconds / slices, 6),
            "warmupSeconds": round(warmup_seconds, 6)}


@dataclass(frozen=True)
class Method:
    """How an observation was made (see the module docstring for each field)."""

    source: Mapping[str, Any]
    workload: Mapping[str, Any]
    window: Mapping[str, Any]
    definitions: Mapping[str, str] = field(default_factory=lambda: dict(DEFINITIONS))
    estimator: Mapping[str, Any] = field(default_factory=lambda: dict(ESTIMATOR))

    def to_dict(self) -> dict[str, Any]:
        return {"definitions": dict(self.definitions), "source": dict(self.source),
                "workload": dict(self.workload), "window": dict(self.window), "estimator": dict(self.estimator)}

    @classmethod
    def from_dict(cls, d: Any, where: str) -> "Method":
        if not isinstance(d, Mapping):
            raise BaselineUsageError(f"{where}: method is not an object")
        missing = [k for k in ("definitions", "source", "workload", "window", "estimator")
                   if not isinstance(d.get(k), Mapping)]
        if missing:
            raise BaselineUsageError(f"{where}: method lacks {', '.join(missing)} (each an object)")
        window = d["window"]
        if not isinstance(window.get("seconds"), (int, float)) or not isinstance(window.get("slices"), int):
            raise BaselineUsageError(f"{where}: method.window needs a number seconds and a whole number slices")
        return cls(source=dict(d["source"]), workload=dict(d["workload"]), window=dict(window),
                   definitions=dict(d["definitions"]), estimator=dict(d["estimator"]))


def _flatten(value: Any, path: str, out: dict[str, Any]) -> None:
    if isinstance(value, Mapping) and value:
        for key in sorted(value):
            _flatten(value[key], f"{path}.{key}" if path else str(key), out)
    elif isinstance(value, (list, tuple)) and value:
        for i, item in enumerate(value):
            _flatten(item, f"{path}[{i}]", out)
        out[f"{path}.length"] = len(value)
    else:
        out[path] = value


_ABSENT = object()


def differences(a: Method, b: Method) -> list[tuple[str, Any, Any]]:
    """Every field (dotted path) whose value differs, with its value in ``a`` and in ``b`` (absent: None)."""
    fa: dict[str, Any] = {}
    fb: dict[str, Any] = {}
    _flatten(a.to_dict(), "", fa)
    _flatten(b.to_dict(), "", fb)
    out = []
    for path in sorted(set(fa) | set(fb)):
        va, vb = fa.get(path, _ABSENT), fb.get(path, _ABSENT)
        if va != vb or type(va) is not type(vb) and not (isinstance(va, (int, float)) and isinstance(vb, (int, float))):
            out.append((path, None if va is _ABSENT else va, None if vb is _ABSENT else vb))
    # When a section's kind differs (a Prometheus source against a leak report, a mix against an observed
    # workload), its other fields differ as a matter of course: the kind says it all.
    kinds = {path[: -len("kind")] for path, _, _ in out if path.endswith(".kind")}
    return [d for d in out if d[0].endswith(".kind") or not any(d[0].startswith(k) for k in kinds)]


def _show(value: Any) -> str:
    if value is None:
        return "absent"
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 80 else text[:77] + "..."


def require_same(a: Method, b: Method, name_a: str, name_b: str) -> None:
    """Refuse (:class:`MethodMismatch`) unless the methods are equal; the message names every differing field."""
    diff = differences(a, b)
    if not diff:
        return
    shown = "; ".join(f"{path}: {_show(va)} in {name_a}, {_show(vb)} in {name_b}" for path, va, vb in diff[:8])
    more = f"; and {len(diff) - 8} more" if len(diff) > 8 else ""
    fields = tuple(path for path, _, _ in diff)
    top = sorted({p.split(".")[0].split("[")[0] for p in fields})
    raise MethodMismatch(
        f"refused: {name_a} and {name_b} were measured with different methods ({', '.join(top)} "
        f"differ{'s' if len(top) == 1 else ''}), so "
        f"their numbers do not mean the same thing. Differing fields: {shown}{more}. Measure again with the "
        f"baseline's method (same source, workload, window and slices; docs/CONTRACTS.md)", fields)
