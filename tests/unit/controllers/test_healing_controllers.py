"""The healing controllers over an in-memory API on a virtual clock: what they write, and in which order.

The decisions themselves are tested in ``tests/unit/core/test_healing.py``; here
the point is the contract with the rest of the platform: the Events (with
microsecond ``eventTime``), the pod and PodGroup shapes the agents rely on,
the epoch written first with a fenced JSON patch, and no blind PUT of a Job.
"""

from __future__ import annotations

import re
import threading
import time
from datetime import datetime, timezone
from typing import Any

import pytest

from refplatform.controllers import process
from refplatform.controllers.events import BackgroundEvents, EventRecorder
from refplatform.controllers.healer import HealerController
from refplatform.controllers.health import Answer, HealthProber, probe_healthz
from refplatform.controllers.nodelifecycle import NodeLifecycleController
from refplatform.controllers.tainteviction import TaintEvictionController
from refplatform.controllers.vcjob import VolcanoJobController, build_pod, build_pod_group, job_spec_of
from refplatform.core.vcjob import ranks_of
from refplatform.profiles import K8S_DEFAULTS, TUNED, ProfileError, get_profile
from refplatform.resources import LEASES, NODES, PODGROUPS, PODS, VCJOBS

from .fakes import FakeApi, path_of

T0 = 1_800_000_000.0
MICRO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
Obj = dict[str, Any]


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def iso(t: float, micro: bool = False) -> str:
    fmt = "%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ"
    return datetime.fromtimestamp(t, timezone.utc).strftime(fmt)


def node(name: str, ready: str = "True", port: int = 10250, **spec: Any) -> Obj:
    return {"metadata": {"name": name, "labels": {}, "creationTimestamp": iso(T0 - 100)},
            "spec": dict(spec),
            "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "KubeletReady",
                                       "lastTransitionTime": iso(T0 - 100)}],
                       "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                       "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
                       "allocatable": {"nvidia.com/gpu": "8"}}}


def lease(name: str, renewed: float) -> Obj:
    return {"metadata": {"name": name, "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": 4, "renewTime": iso(renewed, micro=True)}}


class StaticProber(HealthProber):
    """Answers from a table instead of the network."""

    def __init__(self, answers: dict[str, bool]) -> None:
        self.answers = answers
        self.forgotten: list[str] = []

    def check(self, name: str, node: Obj) -> Answer | None:
        if name not in self.answers:
            return None
        healthy = self.answers[name]
        return Answer(("127.0.0.1", 1), healthy, "HTTP 200 ok" if healthy else "HTTP 503 partitioned", 0.0)

    def forget(self, name: str) -> None:
        self.forgotten.append(name)


# ----------------------------------------------------------------------- profiles
def test_profiles_carry_the_documented_timers() -> None:
    assert (TUNED.heartbeat, TUNED.node_monitor_grace_period, TUNED.default_toleration_seconds, TUNED.spares,
            TUNED.quarantine) == (1.0, 3.0, 0.0, 1, True)
    assert (K8S_DEFAULTS.heartbeat, K8S_DEFAULTS.node_monitor_grace_period, K8S_DEFAULTS.default_toleration_seconds,
            K8S_DEFAULTS.spares, K8S_DEFAULTS.quarantine) == (10.0, 50.0, 300.0, 0, False)
    assert K8S_DEFAULTS.lease_duration_seconds() == 40 and TUNED.lease_duration_seconds() == 4
    assert TUNED.detect_bounds()[1] <= 3.5
    with pytest.raises(ProfileError, match="known: tuned, k8s-defaults"):
        get_profile("fast")


def test_the_controller_process_registers_every_controller_and_takes_the_profile() -> None:
    assert set(process.FACTORIES) == {"scheduler", "nodelifecycle", "tainteviction", "vcjob", "healer",
                                      "deployment", "replicaset", "endpoints", "loadbalancer", "autoscaler", "straggler",
                                      "progress", "job", "disruption", "serviceaccount", "root-ca-cert-publisher",
                                      "kube-state-metrics"}
    # the kube-state-metrics stand-in serves a port: only where asked (for an API server without KSM series)
    assert set(process.DEFAULT_CONTROLLERS) == set(process.FACTORIES) - {"kube-state-metrics"}
    assert process.build_parser().parse_args(["--api", "x"]).controllers.split(",") == \
        list(process.DEFAULT_CONTROLLERS)
    args = process.build_parser().parse_args(["--api", "https://127.0.0.1:1", "--profile", "k8s-defaults",
                                              "--default-toleration-seconds", "30"])
    profile = process.profile_of(args)
    assert profile.node_monitor_grace_period == 50 and profile.default_toleration_seconds == 30
    assert process.profile_of(process.build_parser().parse_args(["--api", "x"])) == TUNED
    assert (TUNED.hpa_sync_period, K8S_DEFAULTS.hpa_sync_period) == (1.0, 15.0)
    hpa = process.FACTORIES["autoscaler"](None, process.build_parser().parse_args(  # type: ignore[arg-type]
        ["--api", "x", "--horizontal-pod-autoscaler-sync-period", "0.5", "--defect", "no-autoscaling"]))
    assert (hpa.resync, hpa.no_autoscaling) == (0.5, True)  # type: ignore[attr-defined]


# ------------------------------------------------------------------------- events
def test_events_carry_a_microsecond_event_time_and_repeats_update_the_series() -> None:
    api = FakeApi()
    pod = api.put(PODS, {"metadata": {"name": "p"}, "spec": {}})
    when = datetime(2026, 11, 30, 1, 2, 3, 123456, tzinfo=timezone.utc)
    rec = EventRecorder(api, "node-controller", clock=lambda: when)  # type: ignore[arg-type]
    rec.record(pod, "Pod", "Normal", "NodeNotReady", "Node n0 status is now: NodeNotReady")
    [event] = api.events()
    assert event["eventTime"] == "2026-11-30T01:02:03.123456Z" and MICRO.match(event["eventTime"])
    assert event["firstTimestamp"] == "2026-11-30T01:02:03Z"
    assert event["source"] == {"component": "node-controller"} and event["reportingComponent"] == "node-controller"
    assert event["involvedObject"]["uid"] == pod["metadata"]["uid"] and event["action"] == "NodeNotReady"
    rec.record(pod, "Pod", "Normal", "NodeNotReady", "Node n0 status is now: NodeNotReady",
               when=datetime(2026, 11, 30, 1, 2, 9, 5, tzinfo=timezone.utc))
    [event] = api.events()
    assert event["count"] == 2 and event["series"] == {"count": 2, "lastObservedTime": "2026-11-30T01:02:09.000005Z"}
    assert event["eventTime"] == "2026-11-30T01:02:03.123456Z"


def test_background_events_never_block_the_caller_keep_the_instant_and_drop_beyond_capacity() -> None:
    api = FakeApi()
    pod = api.put(PODS, {"metadata": {"name": "p"}, "spec": {}})
    gate = threading.Event()
    create = api.create

    def slow_create(path: str, body: Obj, params: Any = None) -> Obj:
        gate.wait(10)  # an API server that answers only when the test says so
        return create(path, body, params)

    api.create = slow_create  # type: ignore[method-assign]
    instants = iter([datetime(2026, 11, 30, 1, 2, 3, i, tzinfo=timezone.utc) for i in range(1, 10)])
    rec = EventRecorder(api, "volcano", clock=lambda: next(instants))  # type: ignore[arg-type]
    events = BackgroundEvents(rec, workers=1, capacity=2)
    for i in range(4):  # one taken by the worker (blocked in create), two queued, the fourth dropped
        events.record(pod, "Pod", "Normal", "Scheduled", f"Successfully assigned default/p to n{i}")
        if i == 0:
            wait_for(lambda: events._queue.empty(), "the worker to take the first Event")  # noqa: SLF001
    assert api.events() == [] and events.dropped == 1  # nothing written yet, and the caller was never held
    gate.set()
    events.flush()
    written = sorted(api.events(), key=lambda e: e["eventTime"])
    assert [e["message"][-2:] for e in written] == ["n0", "n1", "n2"]
    # each Event carries the instant it was recorded at, not the instant it was written
    assert [e["eventTime"] for e in written] == [f"2026-11-30T01:02:03.00000{i}Z" for i in (1, 2, 3)]
    events.close()
    assert not any(t.is_alive() for t in events._threads)  # noqa: SLF001


def wait_for(condition: Any, what: str, deadline: float = 10.0) -> None:
    end = time.monotonic() + deadline
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


# ---------------------------------------------------------------- node lifecycle
def lifecycle(api: FakeApi, clock: Clock, answers: dict[str, bool] | None = None) -> NodeLifecycleController:
    return NodeLifecycleController(api, grace=3, monitor_period=5,  # type: ignore[arg-type]
                                   prober=StaticProber(answers or {}), clock=clock)


def test_a_stale_lease_makes_the_node_unknown_then_tainted_then_an_event() -> None:
    api, clock = FakeApi(), Clock()
    api.put(NODES, node("n0"))
    api.put(LEASES, lease("n0", T0))
    api.put(NODES, node("n1"))  # a node that stays healthy: a lone quiet node would be a full disruption
    api.put(LEASES, lease("n1", T0 + 100))
    ctrl = lifecycle(api, clock)
    clock.t = T0 + 2
    ctrl.reconcile(api.cache())
    assert api.writes(events=True) == []
    assert ctrl.resync == pytest.approx(1.005, abs=0.01)  # it wakes at the Lease's expiry
    clock.t = T0 + 3.2
    ctrl.reconcile(api.cache())
    writes = api.writes(events=True)
    assert [(verb, path.rsplit("/", 1)[-1]) for verb, path, _ in writes] == [
        ("PATCH", "status"), ("PATCH", "n0"), ("POST", "events")]
    n0 = api.find(NODES, "", "n0")
    assert n0 is not None
    ready = next(c for c in n0["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")
    assert {(t["key"], t["effect"]) for t in n0["spec"]["taints"]} == {
        ("node.kubernetes.io/unreachable", "NoExecute"), ("node.kubernetes.io/unreachable", "NoSchedule")}
    assert next(t for t in n0["spec"]["taints"] if t["effect"] == "NoExecute")["timeAdded"] == iso(T0 + 3.2)
    [event] = api.events()
    assert (event["reason"], event["involvedObject"]["kind"], event["eventTime"]) == (
        "NodeNotReady", "Node", iso(T0 + 3.2, micro=True))
    # Nothing more to write while it stays silent.
    before = len(api.calls)
    clock.t = T0 + 10
    ctrl.reconcile(api.cache())
    assert api.writes()[-1] == writes[1] and len(api.writes()) == 2 and len(api.calls) == before


def test_a_node_that_heartbeats_again_is_untainted_only_after_its_health_check() -> None:
    api, clock = FakeApi(), Clock(T0 + 10)
    n0 = node("n0", ready="Unknown", taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
                                             {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
                                             {"key": "firedrill.dev/quarantine-test", "effect": "NoSchedule"}])
    api.put(NODES, n0)
    api.put(LEASES, lease("n0", T0 + 9.5))
    api.put(NODES, node("n1"))  # a healthy node beside it: a lone quiet node would be a full disruption
    api.put(LEASES, lease("n1", T0 + 9.5))
    answers = {"n0": False}
    ctrl = lifecycle(api, clock, answers)
    ctrl.reconcile(api.cache())
    assert api.writes() == []
    [warning] = api.events()
    assert (warning["type"], warning["reason"]) == ("Warning", "NodeHealthCheckFailed")
    answers["n0"] = True
    ctrl.reconcile(api.cache())
    stored = api.find(NODES, "", "n0")
    assert stored is not None
    assert [t["key"] for t in stored["spec"]["taints"]] == ["firedrill.dev/quarantine-test"]
    assert next(c for c in stored["status"]["conditions"] if c["type"] == "Ready")["status"] == "True"
    assert [e["reason"] for e in api.events()] == ["NodeHealthCheckFailed", "NodeReady"]


# ---------------------------------------------------------------- taint eviction
def bound_pod(name: str, node_name: str, tolerations: list[Obj] | None = None) -> Obj:
    return {"metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node_name, "containers": [{"name": "main"}], "tolerations": tolerations or []},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}


def test_taint_eviction_marks_the_pod_then_deletes_it_gracefully_after_its_toleration() -> None:
    api, clock = FakeApi(), Clock(T0 + 1)
    api.put(NODES, node("n0", ready="Unknown", taints=[
        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": iso(T0)}]))
    api.put(NODES, node("n1"))
    api.put(PODS, bound_pod("a", "n0"))
    api.put(PODS, bound_pod("b", "n0", [{"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                                          "effect": "NoExecute", "tolerationSeconds": 5}]))
    api.put(PODS, bound_pod("c", "n1"))
    ctrl = TaintEvictionController(api, default_toleration_seconds=0, clock=clock)  # type: ignore[arg-type]
    ctrl.reconcile(api.cache())
    a = api.find(PODS, "default", "a")
    assert a is not None and a["metadata"].get("deletionTimestamp")
    cond = next(c for c in a["status"]["conditions"] if c["type"] == "DisruptionTarget")
    assert (cond["reason"], cond["status"]) == ("DeletionByTaintManager", "True")
    assert "Ready" in {c["type"] for c in a["status"]["conditions"]}  # a strategic merge: other conditions kept
    delete = next(c for c in api.calls if c[0] == "DELETE")
    assert "gracePeriodSeconds" not in (delete[2] or {})
    assert [(e["reason"], e["involvedObject"]["name"], e["message"]) for e in api.events()] == [
        ("TaintManagerEviction", "a", "Marking for deletion Pod default/a")]
    assert ctrl.resync == pytest.approx(4.0, abs=0.01) or ctrl.resync <= 1.0  # b is due at T0 + 5
    clock.t = T0 + 5
    ctrl.reconcile(api.cache())
    b = api.find(PODS, "default", "b")
    assert b is not None and b["metadata"].get("deletionTimestamp")
    c = api.find(PODS, "default", "c")
    assert c is not None and not c["metadata"].get("deletionTimestamp")


# ------------------------------------------------------------------------ healer
def test_the_healer_enrolls_spares_quarantines_a_lost_node_and_releases_a_spare() -> None:
    api, clock = FakeApi(), Clock(T0 + 10)
    for name in ("n0", "n1", "n4"):
        api.put(NODES, node(name))
        api.put(LEASES, lease(name, T0 + 9.5))
    prober = StaticProber({})
    healer = HealerController(api, spares=["n4"], grace=3, prober=prober, clock=clock)  # type: ignore[arg-type]
    healer.reconcile(api.cache())
    n4 = api.find(NODES, "", "n4")
    assert n4 is not None and n4["metadata"]["labels"]["firedrill.dev/spare"] == "true"
    assert n4["spec"]["taints"] == [{"key": "firedrill.dev/spare", "value": "true", "effect": "NoSchedule"}]
    # n0 goes silent and the node lifecycle controller marks it Unknown.
    n0 = api.find(NODES, "", "n0")
    assert n0 is not None
    n0["status"]["conditions"][0].update(status="Unknown", lastTransitionTime=iso(T0 + 13))
    n0["spec"]["taints"] = [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]
    api.put(NODES, n0)
    api.put(PODS, {**bound_pod("stuck", "n0"), "metadata": {"name": "stuck", "namespace": "default",
                                                            "deletionTimestamp": iso(T0 + 13)}})
    clock.t = T0 + 13.5
    for name in ("n1", "n4"):
        api.put(LEASES, lease(name, T0 + 13))
    healer.reconcile(api.cache())
    n0 = api.find(NODES, "", "n0")
    n4 = api.find(NODES, "", "n4")
    assert n0 is not None and n4 is not None
    assert n0["spec"]["unschedulable"] is True and n0["metadata"]["labels"]["firedrill.dev/quarantine"] == "unreachable"
    assert [(t["key"], t["effect"]) for t in n0["spec"]["taints"]] == [
        ("node.kubernetes.io/unreachable", "NoExecute"), ("node.kubernetes.io/out-of-service", "NoExecute")]
    assert "firedrill.dev/spare" not in n4["metadata"]["labels"] and not n4["spec"].get("taints")
    assert api.find(PODS, "default", "stuck") is None  # force-deleted on the out-of-service node
    assert [e["reason"] for e in api.events()] == ["NodeQuarantined", "SparePromoted", "Evicted"]
    assert len({e["eventTime"] for e in api.events()[:2]}) == 1 and MICRO.match(api.events()[0]["eventTime"])

    # It heartbeats again, but fails /healthz: stays quarantined.
    n0["status"]["conditions"][0].update(status="True")
    n0["spec"]["taints"] = [t for t in n0["spec"]["taints"] if t["key"] != "node.kubernetes.io/unreachable"]
    api.put(NODES, n0)
    api.put(LEASES, lease("n0", T0 + 20))
    clock.t = T0 + 20.2
    prober.answers["n0"] = False
    healer.reconcile(api.cache())
    stored = api.find(NODES, "", "n0")
    assert stored is not None and stored["metadata"]["labels"].get("firedrill.dev/quarantine") == "unreachable"
    # Passes: back in the spare pool.
    prober.answers["n0"] = True
    healer.reconcile(api.cache())
    stored = api.find(NODES, "", "n0")
    assert stored is not None
    assert stored["metadata"]["labels"] == {"firedrill.dev/spare": "true"} and not stored["spec"].get("unschedulable")
    assert [t["key"] for t in stored["spec"]["taints"]] == ["firedrill.dev/spare"]
    assert api.events()[-1]["reason"] == "NodeRecovered"


# ---------------------------------------------------------------- Volcano jobs
def canary_job(**spec: Any) -> Obj:
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "canary", "namespace": "default"},
            "spec": {"minAvailable": 2, "maxRetry": 3, "queue": "default", "schedulerName": "volcano",
                     "priorityClassName": "high",
                     "policies": [{"event": "PodEvicted", "action": "RestartJob"},
                                  {"event": "PodFailed", "action": "RestartJob"}],
                     "tasks": [{"name": "worker", "replicas": 3, "template": {
                         "metadata": {"labels": {"app": "canary"},
                                      "annotations": {"firedrill.dev/workload": "training"}},
                         "spec": {"containers": [{"name": "main", "image": "canary", "resources": {
                             "limits": {"nvidia.com/gpu": "4", "cpu": "500m"}}}]}}}], **spec}}


def test_pods_and_the_pod_group_follow_the_contract() -> None:
    api = FakeApi()
    job = api.put(VCJOBS, canary_job())
    spec = job_spec_of(job)
    pod = build_pod(job, spec, ranks_of(spec)[2], epoch=4)
    meta = pod["metadata"]
    assert meta["name"] == "canary-worker-2"
    assert meta["labels"]["volcano.sh/job-name"] == "canary" and meta["labels"]["volcano.sh/task-spec"] == "worker"
    assert meta["labels"]["app"] == "canary"
    a = meta["annotations"]
    assert (a["scheduling.k8s.io/group-name"], a["volcano.sh/task-index"], a["firedrill.dev/rank"],
            a["firedrill.dev/world-size"], a["firedrill.dev/epoch"], a["firedrill.dev/workload"]) == (
        "canary", "2", "2", "2", "4", "training")
    assert pod["spec"]["schedulerName"] == "volcano" and pod["spec"]["priorityClassName"] == "high"
    assert meta["ownerReferences"] == [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "canary",
                                        "uid": job["metadata"]["uid"], "controller": True,
                                        "blockOwnerDeletion": True}]
    group = build_pod_group(job, spec)
    assert group["metadata"]["name"] == "canary"
    assert group["spec"]["minMember"] == 2 and group["spec"]["queue"] == "default"
    assert group["spec"]["priorityClassName"] == "high"
    assert group["spec"]["minResources"] == {"cpu": "1", "nvidia.com/gpu": "8"}  # the first 2 of 3 ranks


def run_job_controller(api: FakeApi, clock: Clock) -> VolcanoJobController:
    ctrl = VolcanoJobController(api, clock=clock)  # type: ignore[arg-type]
    ctrl.reconcile(api.cache())
    return ctrl


def set_running(api: FakeApi, node_of: dict[str, str]) -> None:
    for name, node_name in node_of.items():
        pod = api.find(PODS, "default", name)
        assert pod is not None
        pod["spec"]["nodeName"] = node_name
        pod.setdefault("status", {})["phase"] = "Running"
        api.put(PODS, pod)


def test_restart_job_writes_the_epoch_first_never_puts_the_job_and_keeps_the_checkpoint() -> None:
    api, clock = FakeApi(), Clock()
    api.put(NODES, node("n0"))
    api.put(NODES, node("n1"))
    job = canary_job()
    job["spec"]["tasks"][0]["replicas"] = 2
    api.put(VCJOBS, job)
    ctrl = run_job_controller(api, clock)
    stored = api.find(VCJOBS, "default", "canary")
    assert stored is not None and stored["metadata"]["annotations"]["firedrill.dev/epoch"] == "0"
    assert api.find(PODGROUPS, "default", "canary") is not None
    assert {p["metadata"]["name"] for p in api.cache().list(PODS)} == {"canary-worker-0", "canary-worker-1"}
    set_running(api, {"canary-worker-0": "n0", "canary-worker-1": "n1"})
    ctrl.reconcile(api.cache())
    stored = api.find(VCJOBS, "default", "canary")
    assert stored is not None and stored["status"]["state"]["phase"] == "Running"

    # Rank 0 checkpoints (its own fenced patch), then n0 is lost and rank 0 is being evicted.
    stored["metadata"]["annotations"].update({"firedrill.dev/checkpoint-step": "35",
                                              "firedrill.dev/checkpoint-time": "2026-11-30T01:02:03.000001Z"})
    api.put(VCJOBS, stored)
    n0 = api.find(NODES, "", "n0")
    assert n0 is not None
    n0["status"]["conditions"][0]["status"] = "Unknown"
    api.put(NODES, n0)
    rank0 = api.find(PODS, "default", "canary-worker-0")
    assert rank0 is not None
    rank0["metadata"]["deletionTimestamp"] = iso(T0)
    api.put(PODS, rank0)
    api.calls.clear()
    ctrl.reconcile(api.cache())
    writes = api.writes(events=True)
    first = writes[0]
    assert first[0] == "PATCH" and first[1].endswith("/jobs/canary") and first[2] == [
        {"op": "test", "path": "/metadata/annotations/firedrill.dev~1epoch", "value": "0"},
        {"op": "replace", "path": "/metadata/annotations/firedrill.dev~1epoch", "value": "1"}]
    assert writes[1][0] == "PATCH" and writes[1][1].endswith("/jobs/canary/status")
    assert not [c for c in api.calls if c[0] == "PUT"]
    stored = api.find(VCJOBS, "default", "canary")
    assert stored is not None
    assert stored["metadata"]["annotations"] == {"firedrill.dev/epoch": "1", "firedrill.dev/checkpoint-step": "35",
                                                 "firedrill.dev/checkpoint-time": "2026-11-30T01:02:03.000001Z"}
    assert (stored["status"]["state"]["phase"], stored["status"]["retryCount"], stored["status"]["version"]) == (
        "Restarting", 1, 1)
    deletes = {c[1].rsplit("/", 1)[-1]: c[2] for c in api.calls if c[0] == "DELETE"}
    assert deletes["canary-worker-0"]["gracePeriodSeconds"] == 0  # on the lost node
    assert "gracePeriodSeconds" not in deletes["canary-worker-1"]  # graceful on a healthy node
    reasons = [(e["involvedObject"]["kind"], e["reason"]) for e in api.events()]
    assert ("Job", "RestartJob") in reasons and ("Pod", "Evicted") in reasons and ("Pod", "Killing") in reasons
    restart = next(e for e in api.events() if e["reason"] == "RestartJob")
    assert restart["involvedObject"]["uid"] == stored["metadata"]["uid"] and MICRO.match(restart["eventTime"])

    # The old rank 1 finishes terminating (its agent deletes it): every rank comes back at epoch 1.
    api.objects.pop(next(p for p in api.objects if p.endswith("/pods/canary-worker-1")))
    ctrl.reconcile(api.cache())
    pods = api.cache().list(PODS)
    assert sorted((p["metadata"]["name"], p["metadata"]["annotations"]["firedrill.dev/epoch"]) for p in pods) == [
        ("canary-worker-0", "1"), ("canary-worker-1", "1")]
    stored = api.find(VCJOBS, "default", "canary")
    assert stored is not None and stored["status"]["state"]["phase"] == "Pending"


def test_the_health_prober_answers_off_thread_and_never_probes_beyond_loopback() -> None:
    assert probe_healthz("10.0.0.1", 80, 0.1) == (False, "refused to probe non-loopback address 10.0.0.1")
    seen: list[tuple[str, int]] = []
    done = threading.Event()

    def fake(address: str, port: int, timeout: float) -> tuple[bool, str]:
        seen.append((address, port))
        done.set()
        return True, "HTTP 200 ok"
    prober = HealthProber(0.2, interval=0.0, probe=fake)
    try:
        n = node("n0", port=4242)
        assert prober.check("n0", n) is None  # started, not answered yet
        assert done.wait(5)
        for _ in range(100):
            answer = prober.check("n0", n)
            if answer is not None:
                break
            threading.Event().wait(0.01)
        assert answer is not None and answer.healthy and seen[0] == ("127.0.0.1", 4242)
        # A new agent (new port) needs a new answer.
        assert prober.check("n0", node("n0", port=4343)) is None
    finally:
        prober.close()


def test_a_pod_deleted_by_someone_else_before_the_controller_saw_it_counts_as_evicted() -> None:
    api, clock = FakeApi(), Clock()
    job = canary_job()
    job["spec"]["tasks"][0]["replicas"] = 2
    api.put(VCJOBS, job)
    ctrl = run_job_controller(api, clock)  # creates both ranks; its cache has not shown them yet
    # Deleted by another client (a scheduler undoing a gang, a user) before the controller's next look.
    del api.objects[path_of(PODS, "default", "canary-worker-1")]
    ctrl.reconcile(api.cache())
    stored = api.find(VCJOBS, "default", "canary")
    assert stored is not None
    assert (stored["status"]["state"]["phase"], stored["status"]["retryCount"]) == ("Restarting", 1)
    assert ("Job", "RestartJob") in [(e["involvedObject"]["kind"], e["reason"]) for e in api.events()]


class BehindCache:
    """A cache that has not taken in the API's writes after ``version`` yet (a loaded machine's watch lag)."""

    def __init__(self, api: FakeApi, version: int) -> None:
        self.inner, self.version = api.cache(), version

    def list(self, rt: Any) -> list[dict[str, Any]]:
        return [o for o in self.inner.list(rt) if int(o["metadata"]["resourceVersion"]) <= self.version]

    def get(self, rt: Any, namespace: str, name: str) -> dict[str, Any] | None:
        obj = self.inner.get(rt, namespace, name)
        return obj if obj is not None and int(obj["metadata"]["resourceVersion"]) <= self.version else None

    def resource_version(self, rt: Any) -> str:
        return str(self.version)


def test_pods_just_created_that_the_cache_has_not_shown_yet_have_not_vanished() -> None:
    api, clock = FakeApi(), Clock()
    job = canary_job()
    job["spec"]["tasks"][0]["replicas"] = 2
    api.put(VCJOBS, job)
    ctrl = run_job_controller(api, clock)
    created = [int(o["metadata"]["resourceVersion"]) for p, o in api.objects.items() if "/pods/" in p]
    assert len(created) == 2
    ctrl.reconcile(BehindCache(api, min(created) - 1))  # neither ADDED event has arrived: nothing vanished
    stored = api.find(VCJOBS, "default", "canary")
    assert stored is not None and stored["status"]["retryCount"] == 0
    assert "RestartJob" not in [e["reason"] for e in api.events()]
    ctrl.reconcile(api.cache())  # caught up: both there
    del api.objects[path_of(PODS, "default", "canary-worker-1")]
    ctrl.reconcile(api.cache())  # caught up, and one is gone: that is news
    stored = api.find(VCJOBS, "default", "canary")
    assert stored is not None and (stored["status"]["state"]["phase"], stored["status"]["retryCount"]) == \
        ("Restarting", 1)


@pytest.mark.parametrize("defect,epoch,ranks", [
    (False, "1", {"canary-worker-0": "0", "canary-worker-1": "1"}),
    (True, "0", {"canary-worker-0": "0", "canary-worker-1": "1"}),  # a first start is left alone
    (True, "1", {"canary-worker-0": "0", "canary-worker-1": "0"}),  # restarted: the last rank gets rank 0's index
])
def test_duplicate_rank_recreates_the_last_rank_with_rank_0s_index(defect: bool, epoch: str,
                                                                   ranks: dict[str, str]) -> None:
    api = FakeApi()
    job = canary_job()
    job["spec"]["tasks"][0]["replicas"] = 2
    job["metadata"]["annotations"] = {"firedrill.dev/epoch": epoch}
    api.put(VCJOBS, job)
    VolcanoJobController(api, clock=Clock(), duplicate_rank=defect).reconcile(api.cache())  # type: ignore[arg-type]
    pods = {p["metadata"]["name"]: p["metadata"]["annotations"] for p in api.cache().list(PODS)}
    assert {n: a["volcano.sh/task-index"] for n, a in pods.items()} == ranks
    assert {n: a["firedrill.dev/rank"] for n, a in pods.items()} == ranks
