"""The reference platform's GPU health lifecycle and remediation budget, as a drill reads and drives them
(docs/HEALING.md, "A GPU's way back" and "The remediation budget").

Read from the Node (written by its agent, the device plugin):

- ``firedrill.dev/gpu-health``: each GPU not in service (``failed``, ``burn-in``, ``held``) with since when and
  why, and the last burn-ins with their outcome: :func:`gpu_health`.

Written by a drill (each an injection the target writes down before it stands, removed by the rollback):

- ``firedrill.dev/inject-diag``: ``{"id", "gpu", "result": "fail"}``: every burn-in of that GPU fails while it
  stands;
- ``firedrill.dev/inject-health``: ``{"id", "reason", "message", "until"}``: the node reports a fatal GPU fault
  (its ``GpuFault`` condition) until that epoch second, so a dead harness's fault ends by itself;
- ``firedrill.dev/clear-gpus``: a person's clear of GPUs the platform holds out (the rollback's, not a fault).

The healer's breaker, tripped when a fleet-wide alarm exceeds its budget, is the ConfigMap
:data:`BREAKER_NAME` in :data:`BREAKER_NAMESPACE`; a person resets it by deleting it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from drills.kube.driver import NODE, RESOURCES, KubeDriver

__all__ = ["BREAKER_NAME", "BREAKER_NAMESPACE", "BurnIn", "CLEAR_ANNOTATION", "CONFIG_MAP", "DIAG_ANNOTATION",
           "FLEET_ANNOTATION", "GpuHealthRecord", "GpuState", "HALTED_REASON", "RECORD_ANNOTATION",
           "append_entry", "gpu_health", "remove_annotation"]

RECORD_ANNOTATION = "firedrill.dev/gpu-health"
DIAG_ANNOTATION = "firedrill.dev/inject-diag"
CLEAR_ANNOTATION = "firedrill.dev/clear-gpus"
FLEET_ANNOTATION = "firedrill.dev/inject-health"
BREAKER_NAMESPACE, BREAKER_NAME = "kube-system", "firedrill-remediation"
HALTED_REASON = "RemediationHalted"
"""The Event the healer writes on each node it leaves alone once its budget is spent."""
CONFIG_MAP = RESOURCES[("v1", "ConfigMap")]


@dataclass(frozen=True)
class GpuState:
    """A GPU out of service, as its node's agent says."""

    state: str
    """``failed`` (its fault stands), ``burn-in`` (being proven), ``held`` (out until a person clears it)."""
    since: float
    reason: str


@dataclass(frozen=True)
class BurnIn:
    """One finished burn-in of a GPU (epoch seconds, the agent's clock)."""

    gpu: int
    started: float
    ended: float
    passed: bool
    detail: str


@dataclass(frozen=True)
class GpuHealthRecord:
    """What a node's agent publishes of its GPUs' way back (empty where it publishes nothing)."""

    gpus: dict[int, GpuState]
    burn_ins: tuple[BurnIn, ...]

    def passed_between(self, gpu: int, after: float, before: float) -> BurnIn | None:
        """The first passed burn-in of ``gpu`` that began at or after ``after`` and ended at or before ``before``."""
        return next((b for b in self.burn_ins if b.gpu == gpu and b.passed and b.started >= after
                     and b.ended <= before), None)

    def since(self, gpu: int, after: float) -> list[BurnIn]:
        return [b for b in self.burn_ins if b.gpu == gpu and b.started >= after]


def gpu_health(node: dict[str, Any]) -> GpuHealthRecord:
    """The node's ``firedrill.dev/gpu-health`` record; a missing or malformed one reads as empty (the agent writes
    it, nobody else)."""
    raw = ((node.get("metadata") or {}).get("annotations") or {}).get(RECORD_ANNOTATION)
    try:
        doc = json.loads(raw) if raw else {}
    except json.JSONDecodeError:
        doc = {}
    if not isinstance(doc, dict):
        doc = {}
    gpus: dict[int, GpuState] = {}
    for key, value in (doc.get("gpus") or {}).items():
        if str(key).isdigit() and isinstance(value, dict):
            gpus[int(key)] = GpuState(str(value.get("state") or ""), float(value.get("since") or 0.0),
                                      str(value.get("reason") or ""))
    burn_ins = []
    for item in doc.get("burn_ins") or []:
        try:
            burn_ins.append(BurnIn(int(item["gpu"]), float(item["started"]), float(item["ended"]),
                                   bool(item["passed"]), str(item.get("detail") or "")))
        except (KeyError, TypeError, ValueError):
            continue
    return GpuHealthRecord(gpus, tuple(burn_ins))


def append_entry(driver: KubeDriver, node: str, annotation: str, entry: dict[str, Any]) -> None:
    """Append ``entry`` to the JSON list a Node annotation holds (a malformed one starts afresh)."""
    current = ((driver.get(NODE, node).get("metadata") or {}).get("annotations") or {}).get(annotation)
    try:
        entries = json.loads(current or "[]")
    except json.JSONDecodeError:
        entries = []
    entries = [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
    driver.patch(NODE, node, {"metadata": {"annotations": {
        annotation: json.dumps(entries + [entry], separators=(",", ":"))}}})


def remove_annotation(driver: KubeDriver, node: str, annotation: str) -> None:
    driver.patch(NODE, node, {"metadata": {"annotations": {annotation: None}}})
