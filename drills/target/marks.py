"""What a Firedrill run leaves on a cluster, read from the cluster itself.

The fault journal (:mod:`drills.target.journal`) lives on the machine that ran the drill; a CI runner that was
lost took its journal with it.  The cluster keeps its own record of what a dead run left, because everything a
drill makes or marks is named as Firedrill's:

- objects the drills create carry the label ``firedrill.dev/drill-run`` (each scenario's run id): a pod left by a
  dead run may hold GPUs the next verdict counts as the platform's;
- the reference platform's injections are Node annotations (``firedrill.dev/inject-xid``: a GPU withdrawn for as
  long as it stands; ``firedrill.dev/inject-throttle``: a GPU or the input slowed);
- the remediation drills' injections: ``firedrill.dev/inject-diag`` (every burn-in of a GPU fails) and
  ``firedrill.dev/inject-health`` (a node reports a fatal GPU fault), and a GPU the platform holds out after
  them (its ``firedrill.dev/gpu-health`` says ``held``), which a person's clear (``firedrill.dev/clear-gpus``)
  returns through its burn-in;
- the straggler drills' naming taint (``firedrill.dev/straggler``) stays on a node until the drill removes it.

Objects being deleted already are not listed (the pre-flight judges those stuck in deletion); a pod a Job made is
removed with its Job.  Pods are read in every namespace, which every run may (its pre-flight reads them); Jobs and
Deployments are not listed (a least-privilege identity may not), their pods are.  Each mark comes with the step
that removes it; :func:`drills.target.recover.sweep` takes them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from drills.kube.driver import NODE, POD, RESOURCES, KubeDriver
from drills.kube.flavors import RUN_LABEL
from drills.target.journal import Undo, UndoKind
from drills.target.gpuhealth import CLEAR_ANNOTATION, DIAG_ANNOTATION, FLEET_ANNOTATION, gpu_health
from drills.target.throttle import STRAGGLER_TAINT, THROTTLE_ANNOTATION
from drills.target.xid import INJECT_ANNOTATION

__all__ = ["DRILL_ANNOTATIONS", "DRILL_TAINTS", "Mark", "annotation_removed", "cluster_marks"]

DRILL_ANNOTATIONS = (INJECT_ANNOTATION, THROTTLE_ANNOTATION, DIAG_ANNOTATION, FLEET_ANNOTATION)
"""Node annotations only a drill writes: the reference platform's injections."""
DRILL_TAINTS = (STRAGGLER_TAINT,)
"""Node taint keys only a drill's fault leads to."""


@dataclass(frozen=True)
class Mark:
    """One thing on the cluster that only a Firedrill run leaves there, and the step that removes it."""

    what: str
    undo: Undo


def cluster_marks(driver: KubeDriver) -> list[Mark]:
    """Every mark a run left on the cluster (none while no run left one), pods first, then nodes by name."""
    marks = []
    for pod in driver.list(POD, label_selector=RUN_LABEL):
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        where = f"{meta.get('namespace')}/{meta.get('name')}"
        phase = (pod.get("status") or {}).get("phase", "Pending")
        node = (pod.get("spec") or {}).get("nodeName")
        owner = _owner(meta)
        what = (f"pod {where} of drill run {(meta.get('labels') or {}).get(RUN_LABEL)} ({phase}"
                + (f" on {node}" if node else "") + (f"; made by {owner.object_kind} {owner.name}" if owner else "")
                + ")")
        marks.append(Mark(what, owner or Undo(UndoKind.DELETE, api_version="v1", object_kind="Pod",
                                              name=str(meta.get("name")), namespace=meta.get("namespace"))))
    for node in sorted(driver.list(NODE), key=lambda n: n["metadata"]["name"]):
        marks += _node_marks(node)
    return marks


def annotation_removed(node: str, key: str) -> Undo:
    """The step that takes annotation ``key`` off Node ``node`` (a merge patch setting it to null)."""
    return Undo(UndoKind.PATCH, api_version="v1", object_kind="Node", name=node,
                manifest={"metadata": {"annotations": {key: None}}})


def _owner(meta: dict[str, Any]) -> Undo | None:
    """Deleting the pod's controller (a Job), when the harness knows its kind: deleting the pod alone would only
    have it made again."""
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller") and (ref.get("apiVersion"), ref.get("kind")) in RESOURCES:
            return Undo(UndoKind.DELETE, api_version=str(ref["apiVersion"]), object_kind=str(ref["kind"]),
                        name=str(ref.get("name")), namespace=meta.get("namespace"))
    return None


def _node_marks(node: dict[str, Any]) -> list[Mark]:
    name = node["metadata"]["name"]
    annotations = node["metadata"].get("annotations") or {}
    out = []
    for key in DRILL_ANNOTATIONS:
        if _entries(annotations.get(key)):
            out.append(Mark(f"node {name} carries {key} ({annotations[key][:120]})", annotation_removed(name, key)))
    held = sorted(g for g, state in gpu_health(node).gpus.items() if state.state == "held")
    if held:
        out.append(Mark(f"node {name} holds GPU(s) {', '.join(map(str, held))} out of service until a person clears "
                        "them (firedrill.dev/gpu-health: held)",
                        Undo(UndoKind.PATCH, api_version="v1", object_kind="Node", name=name,
                             manifest={"metadata": {"annotations": {CLEAR_ANNOTATION: ",".join(map(str, held))}}})))
    taints = (node.get("spec") or {}).get("taints") or []
    drill = [t for t in taints if t.get("key") in DRILL_TAINTS]
    if drill:
        kept = [t for t in taints if t.get("key") not in DRILL_TAINTS]
        out.append(Mark(f"node {name} is tainted " + ", ".join(f"{t.get('key')}:{t.get('effect')}" for t in drill),
                        Undo(UndoKind.PATCH, api_version="v1", object_kind="Node", name=name,
                             manifest={"spec": {"taints": kept}})))
    return out


def _entries(raw: str | None) -> bool:
    """Whether an injection annotation holds any entry (an empty list is none)."""
    if not raw:
        return False
    try:
        return bool(json.loads(raw))
    except json.JSONDecodeError:
        return True  # not ours to judge: a person should look
