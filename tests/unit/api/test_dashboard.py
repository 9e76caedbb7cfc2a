"""The dashboard's pure view: objects in, grid / pending / incidents out (tables of cases)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from refplatform.api.dashboard import CellState, Incident, build_grid, build_incidents, build_pending, build_view

Obj = dict[str, Any]
T0 = datetime(2027, 1, 15, 8, 0, 0, tzinfo=timezone.utc)
SCRIPT = "<script>alert(1)</script>"


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node(name: str, gpus: int = 4, ready: str = "True", labels: Obj | None = None, taints: list[Obj] | None = None,
         unschedulable: bool = False, reason: str = "KubeletReady") -> Obj:
    spec: Obj = {"taints": taints or []}
    if unschedulable:
        spec["unschedulable"] = True
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec,
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus)},
                       "conditions": [{"type": "Ready", "status": ready, "reason": reason}]}}


def pod(name: str, node_name: str | None = None, gpus: int = 1, index: str | None = None, phase: str = "Running",
        ns: str = "team-a", milli: int = 0, scheduler: str = "volcano", conditions: list[Obj] | None = None,
        labels: Obj | None = None, started: str | None = None, created: str | None = None) -> Obj:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    if milli:
        limits = {"firedrill.dev/gpu-milli": str(milli)}
    meta: Obj = {"name": name, "namespace": ns, "labels": labels or {}, "annotations": {}}
    if index is not None:
        meta["annotations"]["firedrill.dev/gpu-index"] = index
    if created:
        meta["creationTimestamp"] = created
    spec: Obj = {"schedulerName": scheduler, "containers": [{"name": "main", "resources": {"limits": limits}}]}
    if node_name:
        spec["nodeName"] = node_name
    status: Obj = {"phase": phase, "conditions": conditions or []}
    if started:
        status["containerStatuses"] = [{"name": "main", "state": {"running": {"startedAt": started}}}]
    return {"metadata": meta, "spec": spec, "status": status}


def states(rows: Any, name: str) -> list[str]:
    row = next(r for r in rows if r.name == name)
    return [c.state.value for c in row.cells]


# ---------------------------------------------------------------- grid
GRID_CASES = [
    pytest.param([node("n0")], [pod("p", "n0", 2, "1,3")], "n0", ["free", "allocated", "free", "allocated"],
                 id="indices-from-annotation"),
    pytest.param([node("n0", labels={"firedrill.dev/spare": "true"})], [], "n0", ["spare"] * 4, id="spare-pool"),
    pytest.param([node("n0", ready="Unknown", reason="NodeStatusUnknown")], [pod("p", "n0", 1, "0")], "n0",
                 ["unhealthy"] * 4, id="not-ready-overrides-allocation"),
    pytest.param([node("n0", ready="Unknown", labels={"firedrill.dev/quarantine": "unreachable"})], [], "n0",
                 ["quarantined"] * 4, id="quarantine-label"),
    pytest.param([node("n0", taints=[{"key": "node.kubernetes.io/out-of-service", "effect": "NoExecute"}])], [], "n0",
                 ["quarantined"] * 4, id="out-of-service-taint"),
    pytest.param([node("n0", unschedulable=True)], [pod("p", "n0", 1, "2")], "n0",
                 ["cordoned", "cordoned", "allocated", "cordoned"], id="cordoned-keeps-running-pods"),
    pytest.param([node("n0")], [pod("p", "n0", 1, "0", phase="Succeeded"), pod("q", "n0", 1, "1", phase="Failed")],
                 "n0", ["free"] * 4, id="finished-pods-hold-nothing"),
    pytest.param([node("n0")], [pod("s", "n0", 0, "2", milli=300)], "n0", ["free", "free", "shared", "free"],
                 id="gpu-share"),
    pytest.param([node("n0", gpus=0)], [], "n0", [], id="cpu-node-has-no-cells"),
]


@pytest.mark.parametrize(("nodes", "pods", "name", "expected"), GRID_CASES)
def test_grid_states(nodes: list[Obj], pods: list[Obj], name: str, expected: list[str]) -> None:
    assert states(build_grid(nodes, pods), name) == expected


def test_grid_names_the_pods_and_keeps_them_on_an_unhealthy_node() -> None:
    rows = build_grid([node("n1", ready="Unknown"), node("n0")],
                      [pod(SCRIPT, "n1", 1, "0"), pod("ok", "n0", 1, "3", ns="team-b")])
    assert [r.name for r in rows] == ["n0", "n1"]
    assert [(p.namespace, p.name) for p in rows[0].cells[3].pods] == [("team-b", "ok")]
    assert rows[1].cells[0].state is CellState.UNHEALTHY
    assert rows[1].cells[0].pods[0].name == SCRIPT  # passed through untouched: the page renders it as text
    assert rows[1].reason.startswith("Ready=Unknown")


@pytest.mark.parametrize("index", [None, "x", "7", "-1", ""])
def test_pods_without_a_usable_gpu_index_are_listed_beside_the_row(index: str | None) -> None:
    (row,) = build_grid([node("n0")], [pod("p", "n0", 1, index)])
    assert [c.state.value for c in row.cells] == ["free"] * 4
    assert [p.name for p in row.unplaced_pods] == ["p"]


# ---------------------------------------------------------------- pending
UNPLACED = {"type": "firedrill.dev/Unplaced", "status": "True", "reason": "Fragmentation",
            "message": "needs 4 GPUs: 6 free in the cluster, at most 2 on one node"}
PENDING_CASES = [
    pytest.param(pod(SCRIPT, scheduler="none", phase="Pending"), "NotOurScheduler", "'none'", id="foreign-scheduler"),
    pytest.param(pod("big", gpus=4, phase="Pending",
                     conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                  "message": "0/4 nodes"}, UNPLACED]),
                 "Fragmentation", "at most 2 on one node", id="unplaced-condition-wins"),
    pytest.param(pod("u", phase="Pending", conditions=[{"type": "PodScheduled", "status": "False",
                                                        "reason": "Unschedulable", "message": "0/4 nodes"}]),
                 "Unschedulable", "0/4 nodes", id="podscheduled-false"),
    pytest.param(pod("fresh", phase="Pending", scheduler="default-scheduler"), "Waiting", "not yet", id="waiting"),
]


@pytest.mark.parametrize(("obj", "reason", "in_message"), PENDING_CASES)
def test_pending_reasons(obj: Obj, reason: str, in_message: str) -> None:
    (p,) = build_pending([obj])
    assert (p.name, p.reason) == (obj["metadata"]["name"], reason)
    assert in_message in p.message


def test_pending_skips_bound_finished_and_deleting_pods_and_sorts_oldest_first() -> None:
    deleting = pod("gone", phase="Pending")
    deleting["metadata"]["deletionTimestamp"] = at(0)
    out = build_pending([pod("b", created=at(5), phase="Pending"), pod("a", created=at(1), phase="Pending"),
                         pod("bound", "n0"), pod("done", phase="Succeeded"), deleting])
    assert [p.name for p in out] == ["a", "b"]


# ---------------------------------------------------------------- incidents
def event(reason: str, kind: str, name: str, t: float, message: str = "", ns: str = "default",
          repeat_at: float | None = None) -> Obj:
    ev: Obj = {"reason": reason, "message": message, "eventTime": at(t),
               "involvedObject": {"kind": kind, "name": name, "namespace": ns if kind != "Node" else ""}}
    if repeat_at is not None:
        ev["series"] = {"count": 2, "lastObservedTime": at(repeat_at)}
    return ev


def lease(name: str, t: float) -> Obj:
    return {"metadata": {"name": name, "namespace": "kube-node-lease"}, "spec": {"renewTime": at(t)}}


JOB = {"metadata": {"name": "canary", "namespace": "default"}}
NEW_RANKS = [pod(f"canary-worker-{i}", "gpu-node-4" if i == 0 else "gpu-node-1", 4, "0,1,2,3", ns="default",
                 labels={"volcano.sh/job-name": "canary"}, started=at(2.6 + 0.05 * i)) for i in range(2)]
PULL = [event("NodeNotReady", "Node", "gpu-node-0", 2.5),
        event("Evicted", "Pod", "canary-worker-0", 2.55, "Force-deleted (grace 0) for PodEvicted: node gpu-node-0 is lost"),
        event("Evicted", "Pod", "canary-worker-1", 2.58, "Force-deleted (grace 0) for PodEvicted: node gpu-node-1 is lost"),
        event("Resumed", "Pod", "canary-worker-0", 2.9, "Resumed training at step 12 beyond checkpoint 10")]


def test_an_incident_is_timed_phase_by_phase() -> None:
    (inc,) = build_incidents(PULL, NEW_RANKS, [JOB], [lease("gpu-node-0", 0.3), lease("gpu-node-1", 2.9)])
    assert (inc.node, inc.job, inc.namespace) == ("gpu-node-0", "canary", "default")
    assert inc.durations() == pytest.approx({"detect": 2.2, "evict": 0.05, "replace": 0.1, "resume": 0.25,
                                             "total": 2.6})


def test_the_agents_started_event_times_the_replacement_to_the_microsecond() -> None:
    """``startedAt`` has whole seconds; the agent's ``Started`` Event has microseconds and wins."""
    ranks = [dict(p, status={**p["status"], "containerStatuses": [
        {"name": "main", "state": {"running": {"startedAt": "2027-01-15T08:00:02Z"}}}]}) for p in NEW_RANKS]
    started = [event("Started", "Pod", f"canary-worker-{i}", 2.6 + 0.05 * i, "Started container main")
               for i in range(2)]
    (inc,) = build_incidents([*PULL, *started], ranks, [JOB], [lease("gpu-node-0", 0.3)])
    assert inc.durations()["replace"] == pytest.approx(0.1)
    (coarse,) = build_incidents(PULL, ranks, [JOB], [lease("gpu-node-0", 0.3)])
    assert coarse.replace is None  # a start stamped (to the second) before the loss is no replacement


def test_missing_instants_leave_their_phases_empty() -> None:
    waiting = [pod("canary-worker-0", None, 4, ns="default", phase="Pending", labels={"volcano.sh/job-name": "canary"})]
    (inc,) = build_incidents(PULL[:2], waiting, [JOB], [lease("gpu-node-0", 9.0)])  # the lease moved on: node back
    d = inc.durations()
    assert d["detect"] is None and d["total"] is None  # no heartbeat before the loss is known
    assert d["evict"] == pytest.approx(0.05)
    assert d["replace"] is None and d["resume"] is None


def test_a_loss_without_evictions_is_one_row_and_events_after_the_node_returned_do_not_count() -> None:
    events = [event("NodeNotReady", "Node", "gpu-node-2", 10.0), event("NodeReady", "Node", "gpu-node-2", 20.0),
              event("Evicted", "Pod", "canary-worker-0", 21.0, "Force-deleted (grace 0): node gpu-node-2 is out of service")]
    (inc,) = build_incidents(events, [], [JOB], [])
    assert (inc.node, inc.job, inc.evict) == ("gpu-node-2", "", None)


def test_a_repeated_loss_uses_the_latest_occurrence_and_rows_are_newest_first() -> None:
    events = [event("NodeNotReady", "Node", "gpu-node-0", 1.0, repeat_at=30.0), event("NodeNotReady", "Node", "b", 5.0)]
    out = build_incidents(events, [], [], [])
    assert [(i.node, i.detect) for i in out] == [("gpu-node-0", T0 + timedelta(seconds=30)),
                                                 ("b", T0 + timedelta(seconds=5))]


def test_incident_json_names_instants_and_seconds() -> None:
    inc = Incident("n", "j", "ns", None, T0, T0 + timedelta(seconds=1), None, None)
    doc = inc.to_dict()
    assert doc["instants"] == {"fault": None, "detect": "2027-01-15T08:00:00Z", "evict": "2027-01-15T08:00:01Z",
                               "replace": None, "resume": None}
    assert doc["seconds"] == {"detect": None, "evict": 1.0, "replace": None, "resume": None, "total": None}


# ---------------------------------------------------------------- the whole view
def test_view_json_counts_every_state_and_passes_names_through() -> None:
    nodes = [node("gpu-node-0"), node("gpu-node-1", labels={"firedrill.dev/spare": "true"})]
    pods = [pod("train-0", "gpu-node-0", 2, "0,1"), pod(SCRIPT, scheduler="none", phase="Pending", ns="default")]
    doc = build_view(T0, nodes=nodes, pods=pods).to_dict()
    assert doc["kind"] == "DashboardView" and doc["now"] == "2027-01-15T08:00:00Z"
    assert {s["state"]: s["count"] for s in doc["gpuStates"]} == {
        "free": 2, "allocated": 2, "shared": 0, "spare": 4, "cordoned": 0, "unhealthy": 0, "quarantined": 0}
    assert doc["nodes"][0]["cells"][0]["pods"] == [{"namespace": "team-a", "name": "train-0", "phase": "Running",
                                                     "milli": 1000}]
    assert doc["pending"][0]["name"] == SCRIPT
    assert doc["incidents"] == []
