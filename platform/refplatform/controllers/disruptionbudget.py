"""The disruption controller: each PodDisruptionBudget's status from the pods it selects
(:mod:`refplatform.core.disruptionbudget`): ``expectedPods``, ``desiredHealthy``, ``currentHealthy``,
``disruptionsAllowed``, ``disruptedPods`` (evictions the API server recorded, dropped once the pod is gone or
after the deletion timeout), ``observedGeneration`` and the ``DisruptionAllowed`` condition."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from refplatform.client import ApiStatusError, ApiUnreachable, MERGE_PATCH, RestClient, resource_path
from refplatform.controllers.manager import Cache
from refplatform.core.disruptionbudget import BudgetError, BudgetPod, counts, still_disrupted
from refplatform.resources import PDBS, PODS, REPLICASETS
from refplatform.selectors import LabelSelector, SelectorError

log = logging.getLogger(__name__)
Obj = dict[str, Any]


def _seconds(text: Any) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def budget_pod(pod: Obj) -> BudgetPod:
    meta, status = pod["metadata"], pod.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    owner = next(((o.get("kind", ""), o.get("name", "")) for o in meta.get("ownerReferences") or []
                  if o.get("controller")), None)
    return BudgetPod(meta["name"], ready and not meta.get("deletionTimestamp"), owner)


def selected_pods(pdb: Obj, pods: list[Obj]) -> list[Obj] | None:
    """The running pods of the budget's namespace its selector picks (a null selector picks none, an empty one
    every pod, as policy/v1 says); None when the selector is malformed."""
    meta = pdb["metadata"]
    ns, raw = meta.get("namespace", "default"), (pdb.get("spec") or {}).get("selector")
    if raw is None:
        return []
    try:
        selector = LabelSelector.from_dict(raw)
    except SelectorError as exc:
        log.info("pdb %s/%s: %s", ns, meta["name"], exc)
        return None
    return [p for p in pods if p["metadata"].get("namespace", "default") == ns
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            and selector.matches(p["metadata"].get("labels") or {})]


class DisruptionController:
    name = "disruption"
    watches = (PDBS, PODS, REPLICASETS)
    resync = 5.0
    """Also forgets evictions whose pod never went within the deletion timeout."""

    def __init__(self, client: RestClient, clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.clock = clock

    def reconcile(self, cache: Cache) -> None:
        budgets = cache.list(PDBS)
        if not budgets:
            return
        now = self.clock()
        pods = cache.list(PODS)
        scales = {("ReplicaSet", rs["metadata"]["name"], rs["metadata"].get("namespace", "default")):
                  int((rs.get("spec") or {}).get("replicas", 1)) for rs in cache.list(REPLICASETS)}
        for pdb in budgets:
            meta = pdb["metadata"]
            ns = meta.get("namespace", "default")
            selected = selected_pods(pdb, pods)
            if selected is None:
                continue
            names = {p["metadata"]["name"] for p in selected}
            old = pdb.get("status") or {}
            disrupted_at = {k: v for k, v in (old.get("disruptedPods") or {}).items() if k in names}
            disrupted = still_disrupted(disrupted_at, now, _seconds)
            in_ns = {(k, n): v for (k, n, s), v in scales.items() if s == ns}
            try:
                c = counts(pdb.get("spec") or {}, [budget_pod(p) for p in selected], in_ns, disrupted)
            except BudgetError as exc:
                status = {**old, "observedGeneration": meta.get("generation", 1), "disruptionsAllowed": 0,
                          "conditions": [self._condition(False, "SyncFailed", str(exc), old, now)]}
            else:
                status = {"observedGeneration": meta.get("generation", 1), "disruptionsAllowed": c.allowed,
                          "currentHealthy": c.healthy, "desiredHealthy": c.desired, "expectedPods": c.expected,
                          "disruptedPods": {k: v for k, v in disrupted_at.items() if k in disrupted} or None,
                          "conditions": [self._condition(c.allowed > 0, "SufficientPods" if c.allowed > 0
                                                         else "InsufficientPods", "", old, now)]}
            if {k: v for k, v in status.items() if v is not None} == old:
                continue
            try:
                self.client.patch(resource_path("policy", "v1", "poddisruptionbudgets", ns, meta["name"], "status"),
                                  {"status": status}, MERGE_PATCH)
            except (ApiStatusError, ApiUnreachable) as exc:
                log.info("pdb %s/%s: %s", ns, meta["name"], exc)

    @staticmethod
    def _condition(allowed: bool, reason: str, message: str, old: Obj, now: float) -> Obj:
        status = "True" if allowed else "False"
        before = next((c for c in old.get("conditions") or [] if c.get("type") == "DisruptionAllowed"), None)
        since = before["lastTransitionTime"] if before and before.get("status") == status else \
            datetime.fromtimestamp(now, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {"type": "DisruptionAllowed", "status": status, "reason": reason, "message": message,
                "lastTransitionTime": since}
