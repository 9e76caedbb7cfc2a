"""The usage tracker: observed API objects -> the accounting history (hand-computed tables)."""

from __future__ import annotations

from typing import Any

import pytest

from refplatform.core.accounting import (
    ActivitySample, Hole, Incident, NodeCapacity, PendingDemand, PendingReason, PodInterval, Window, account,
)
from refplatform.core.usage import Observation, PendingNow, Resource, UsageTracker, project

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def iso(t: float) -> str:
    """RFC 3339 with milliseconds and Z, as the agent writes progress-at."""
    from datetime import UTC, datetime
    d = datetime.fromtimestamp(t, UTC)
    return d.strftime("%Y-%m-%dT%H:%M:%S.") + f"{d.microsecond // 1000:03d}Z"


def node(name: str, gpus: int = 8, ready: str = "True", quarantine: str = "") -> dict[str, Any]:
    labels = {"firedrill.dev/quarantine": quarantine} if quarantine else {}
    return {"metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "64"},
                       "conditions": [{"type": "Ready", "status": ready, "lastHeartbeatTime": "x"}]}}


def pod(name: str, *, gpus: int = 1, node_name: str = "", ns: str = "team-a", uid: str = "",
        labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
        phase: str = "Pending", started: float | None = None, unplaced: str | None = None,
        deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": uid or f"uid-{name}",
                            "labels": labels or {}, "annotations": annotations or {}}
    if deleting:
        meta["deletionTimestamp"] = "2027-01-15T09:00:00Z"
    spec: dict[str, Any] = {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}
    if node_name:
        spec["nodeName"] = node_name
    status: dict[str, Any] = {"phase": phase, "conditions": []}
    if unplaced:
        status["conditions"].append({"type": "firedrill.dev/Unplaced", "status": "True", "reason": unplaced,
                                     "message": "no node had room"})
    if started is not None:
        status["containerStatuses"] = [{"name": "main", "state": {"running": {"startedAt": iso(started)[:19] + "Z"}}}]
    return {"metadata": meta, "spec": spec, "status": status}


def progress(at: float, stepped: float, input_s: float = 0.0, comm_s: float = 0.0, step: int = 0,
             **extra: str) -> dict[str, str]:
    return {"firedrill.dev/progress-at": iso(at), "firedrill.dev/stepped-seconds": f"{stepped:.3f}",
            "firedrill.dev/input-stall-seconds": f"{input_s:.3f}", "firedrill.dev/comm-stall-seconds": f"{comm_s:.3f}",
            "firedrill.dev/step": str(step), **extra}


def feed(tracker: UsageTracker, resource: Resource, obj: dict[str, Any], at: float, deleted: bool = False) -> None:
    tracker.observe(Observation(resource, obj, deleted, at))


# --------------------------------------------------------------------------- node capacity
@pytest.mark.parametrize(("steps", "expected"), [
    pytest.param([(0, node("n", 8)), (60, node("n", 8, "False")), (90, node("n", 8)), (150, None)],
                 [(0, 60, 8, True), (60, 90, 8, False), (90, 150, 8, True)], id="notready-then-deleted"),
    pytest.param([(0, node("n", 8)), (30, node("n", 8, quarantine="lost")), (40, node("n", 8))],
                 [(0, 30, 8, True), (30, 40, 8, False), (40, 200, 8, True)], id="quarantine-is-unhealthy"),
    pytest.param([(0, node("n", 8, "Unknown"))], [(0, 200, 8, False)], id="unknown-is-unhealthy"),
    pytest.param([(0, node("n", 8)), (10, node("n", 8)), (20, node("n", 4))],
                 [(0, 20, 8, True), (20, 200, 4, True)], id="unchanged-observations-merge"),
    pytest.param([(0, node("n", 0))], [(0, 200, 0, True)], id="no-gpus"),
])
def test_node_capacity(steps: list[tuple[float, dict[str, Any] | None]],
                       expected: list[tuple[float, float, int, bool]]) -> None:
    tr = UsageTracker()
    last = node("n")
    for t, obj in steps:
        feed(tr, Resource.NODE, obj or last, T0 + t, deleted=obj is None)
        last = obj or last
    got = [(c.start - T0, c.end - T0, c.gpus, c.healthy) for c in tr.history(T0 + 200).capacity]
    assert got == expected


# --------------------------------------------------------------------------- pod intervals
def test_pod_interval_from_bind_to_deleting() -> None:
    tr = UsageTracker()
    feed(tr, Resource.POD, pod("p", gpus=4), T0)
    feed(tr, Resource.POD, pod("p", gpus=4, node_name="n1"), T0 + 10)
    feed(tr, Resource.POD, pod("p", gpus=4, node_name="n1", phase="Running"), T0 + 12)
    feed(tr, Resource.POD, pod("p", gpus=4, node_name="n1", phase="Running", deleting=True), T0 + 70)
    feed(tr, Resource.POD, pod("p", gpus=4, node_name="n1", phase="Running", deleting=True), T0 + 75, deleted=True)
    assert tr.history(T0 + 100).pods == (PodInterval("team-a/p/uid-p", "team-a", "default", "p", "n1", 4,
                                                     T0 + 10, T0 + 70),)


@pytest.mark.parametrize(("end", "expected_end"), [
    pytest.param(pod("p", node_name="n", phase="Succeeded"), 50.0, id="succeeded"),
    pytest.param(pod("p", node_name="n", phase="Failed"), 50.0, id="failed"),
    pytest.param(None, 50.0, id="deleted"),
    pytest.param(pod("p", node_name="n", phase="Running"), 100.0, id="still-running-ends-at-now"),
])
def test_pod_release(end: dict[str, Any] | None, expected_end: float) -> None:
    tr = UsageTracker()
    feed(tr, Resource.POD, pod("p", node_name="n", phase="Running"), T0)
    feed(tr, Resource.POD, end or pod("p", node_name="n", phase="Running"), T0 + 50, deleted=end is None)
    (iv,) = tr.history(T0 + 100).pods
    assert (iv.start, iv.end) == (T0, T0 + expected_end)


@pytest.mark.parametrize(("labels", "annotations", "groups", "jobs", "queue", "job"), [
    pytest.param({}, {}, {}, {}, "default", "p", id="defaults"),
    pytest.param({}, {"scheduling.volcano.sh/queue-name": "research"}, {}, {}, "research", "p", id="queue-annotation"),
    pytest.param({"volcano.sh/job-name": "llm", "volcano.sh/queue-name": "prod"}, {}, {}, {}, "prod", "llm",
                 id="vcjob-labels"),
    pytest.param({}, {"scheduling.k8s.io/group-name": "g"}, {"g": "batch"}, {}, "batch", "g", id="podgroup-queue"),
    pytest.param({"volcano.sh/job-name": "llm"}, {}, {}, {"llm": "gold"}, "gold", "llm", id="job-queue"),
])
def test_pod_tenant(labels: dict[str, str], annotations: dict[str, str], groups: dict[str, str],
                    jobs: dict[str, str], queue: str, job: str) -> None:
    tr = UsageTracker()
    for g, q in groups.items():
        feed(tr, Resource.PODGROUP, {"metadata": {"name": g, "namespace": "team-a"}, "spec": {"queue": q}}, T0)
    for j, q in jobs.items():
        feed(tr, Resource.JOB, {"metadata": {"name": j, "namespace": "team-a"}, "spec": {"queue": q}}, T0)
    feed(tr, Resource.POD, pod("p", node_name="n", labels=labels, annotations=annotations), T0)
    (iv,) = tr.history(T0 + 10).pods
    assert (iv.namespace, iv.queue, iv.job) == ("team-a", queue, job)


def test_a_pod_name_reused_by_a_new_pod_is_a_new_interval() -> None:
    tr = UsageTracker()
    feed(tr, Resource.POD, pod("p", node_name="a", uid="1"), T0)
    feed(tr, Resource.POD, pod("p", node_name="a", uid="1"), T0 + 10, deleted=True)
    feed(tr, Resource.POD, pod("p", node_name="b", uid="2"), T0 + 20)
    assert [(p.pod, p.node, p.start - T0, p.end - T0) for p in tr.history(T0 + 30).pods] == [
        ("team-a/p/1", "a", 0.0, 10.0), ("team-a/p/2", "b", 20.0, 30.0)]


# --------------------------------------------------------------------------- activity samples
def run(tr: UsageTracker, snapshots: list[dict[str, str]], *, started: float = 0.0, mfu: str | None = None) -> None:
    extra = {"firedrill.dev/mfu": mfu} if mfu is not None else {}
    feed(tr, Resource.POD, pod("p", gpus=2, node_name="n", phase="Running", started=T0 + started, annotations=extra),
         T0)
    for i, snap in enumerate(snapshots):
        feed(tr, Resource.POD, pod("p", gpus=2, node_name="n", phase="Running", started=T0 + started,
                                   annotations={**extra, **snap}), T0 + 1 + i)


def shares(tr: UsageTracker, now: float = 100.0) -> list[tuple[float, float, float, float, float, float, float]]:
    return [(s.start - T0, s.end - T0, round(s.active_share, 6), round(s.effective_share, 6),
             round(s.input_stall_seconds, 6), round(s.comm_stall_seconds, 6), round(s.busy, 6))
            for s in tr.history(T0 + now).samples]


@pytest.mark.parametrize(("snapshots", "mfu", "expected"), [
    # start at 0 (counters 0); resumed at 1 (still 0); 10 steps of 0.2 s by 3: input 0.5, comm 0.1 of each.
    pytest.param([progress(T0 + 1, 0), progress(T0 + 3, 2.0, 1.0, 0.2, 10)], None,
                 [(0, 1, 0, 0, 0, 0, 0), (1, 3, 0.5, 0.16, 1.0, 0.2, 1.0)], id="shares-from-deltas"),
    pytest.param([progress(T0 + 2, 2.0, 0.0, 0.0)], "0.5", [(0, 2, 1.0, 0.5, 0, 0, 1.0)], id="mfu-annotation"),
    pytest.param([progress(T0 + 2, 1.0, 0.25, 0.25)], "bogus", [(0, 2, 0.375, 0.1, 0.25, 0.25, 0.5)],
                 id="bad-mfu-default"),
    # stepped 1 s over 4 s of wall: the rank stalled on peers for 3 s (not active).
    pytest.param([progress(T0 + 4, 1.0, 0.0, 0.0)], "1", [(0, 4, 0.25, 0.25, 0, 0, 0.25)], id="peer-wait-idle"),
    pytest.param([progress(T0 + 2, 2.0), {**progress(T0 + 4, 4.0), "firedrill.dev/stepped-seconds": "x"},
                  progress(T0 + 6, 6.0)], "1", [(0, 6, 1, 1, 0, 0, 1)], id="malformed-skipped-steady-merged"),
    pytest.param([progress(T0 + 2, 2.0), progress(T0 + 2, 2.0), progress(T0 + 1, 1.0)], "1",
                 [(0, 2, 1, 1, 0, 0, 1)], id="repeated-and-older-skipped"),
    # counters that exceed the wall time (clock skew) are clamped to shares of 1.
    pytest.param([progress(T0 + 1, 3.0, 0.0, 0.0)], "1", [(0, 1, 1, 1, 0, 0, 1)], id="clamped"),
    # counters going back without a visible restart: start over from that snapshot.
    pytest.param([progress(T0 + 2, 2.0), progress(T0 + 3, 0.5), progress(T0 + 4, 1.5)], "1",
                 [(0, 2, 1, 1, 0, 0, 1), (3, 4, 1, 1, 0, 0, 1)], id="counters-back"),
])
def test_activity_samples(snapshots: list[dict[str, str]], mfu: str | None,
                          expected: list[tuple[float, ...]]) -> None:
    tr = UsageTracker()
    run(tr, snapshots, mfu=mfu)
    assert shares(tr) == [tuple(float(x) for x in e) for e in expected]


def test_a_restarted_container_starts_from_zero_at_its_new_start() -> None:
    tr = UsageTracker()
    feed(tr, Resource.POD, pod("p", node_name="n", phase="Running", started=T0, annotations=progress(T0 + 4, 4.0)),
         T0 + 4)
    # Restarted at 10: the pod still carries the old snapshot until the new container publishes.
    feed(tr, Resource.POD, pod("p", node_name="n", phase="Running", started=T0 + 10,
                               annotations=progress(T0 + 4, 4.0)), T0 + 10)
    feed(tr, Resource.POD, pod("p", node_name="n", phase="Running", started=T0 + 10,
                               annotations={**progress(T0 + 12, 1.0), "firedrill.dev/mfu": "1"}), T0 + 12)
    assert [(s.start - T0, s.end - T0, s.active_share) for s in tr.history(T0 + 20).samples] == [
        (0.0, 4.0, 1.0), (10.0, 12.0, 0.5)]


def test_samples_feed_the_data_pipeline_hole() -> None:
    """A 2-GPU pod with input share 0.5 on an 8-GPU node: dataPipeline = 0.5 x 2 x 100 s."""
    tr = UsageTracker()
    feed(tr, Resource.NODE, node("n", 8), T0)
    feed(tr, Resource.POD, pod("p", gpus=2, node_name="n", phase="Running", started=T0), T0)
    for k in range(1, 101):
        feed(tr, Resource.POD, pod("p", gpus=2, node_name="n", phase="Running", started=T0,
                                   annotations=progress(T0 + k, float(k), 0.5 * k, 0.0, 10 * k)), T0 + k)
    r = account(Window(T0, T0 + 100), tr.history(T0 + 100))
    holes = {h.hole: h.gpu_hours * 3600 for h in r.holes}
    assert holes[Hole.DATA_PIPELINE] == pytest.approx(100.0)
    assert r.allocated.share == pytest.approx(2 / 8)
    assert r.active.share == pytest.approx(0.5 * 2 / 8)
    assert r.effective.share == pytest.approx(0.4 * 0.5 * 2 / 8)
    assert r.nvidia_smi is not None and r.nvidia_smi.share == pytest.approx(2 / 8)
    assert r.largest is Hole.DATA_PIPELINE


# --------------------------------------------------------------------------- pending demand
def test_pending_demand_follows_the_unplaced_condition() -> None:
    tr = UsageTracker()
    ann = {"scheduling.volcano.sh/queue-name": "research"}
    feed(tr, Resource.POD, pod("p", gpus=6, annotations=ann), T0)
    feed(tr, Resource.POD, pod("p", gpus=6, annotations=ann, unplaced="Fragmentation"), T0 + 5)
    feed(tr, Resource.POD, pod("p", gpus=6, annotations=ann, unplaced="Fragmentation"), T0 + 8)
    assert tr.pending_now() == [PendingNow("team-a", "research", PendingReason.FRAGMENTATION, 1, 6)]
    feed(tr, Resource.POD, pod("p", gpus=6, annotations=ann, unplaced="InsufficientCapacity"), T0 + 30)
    feed(tr, Resource.POD, pod("p", gpus=6, annotations=ann, unplaced="Surprise"), T0 + 40)
    feed(tr, Resource.POD, pod("p", gpus=6, annotations=ann, node_name="n"), T0 + 50)
    assert tr.history(T0 + 60).pending == (
        PendingDemand("team-a", "research", "p", 6, T0 + 5, T0 + 30, PendingReason.FRAGMENTATION),
        PendingDemand("team-a", "research", "p", 6, T0 + 30, T0 + 40, PendingReason.INSUFFICIENT_CAPACITY),
        PendingDemand("team-a", "research", "p", 6, T0 + 40, T0 + 50, PendingReason.OTHER),
    )
    assert tr.pending_now() == []


def test_open_pending_demand_ends_at_now_and_a_deleted_pod_ends_it() -> None:
    tr = UsageTracker()
    feed(tr, Resource.POD, pod("a", gpus=8, unplaced="Quota"), T0)
    feed(tr, Resource.POD, pod("b", gpus=4, unplaced="Fragmentation"), T0)
    feed(tr, Resource.POD, pod("b", gpus=4, unplaced="Fragmentation"), T0 + 20, deleted=True)
    assert sorted((d.job, d.start - T0, d.end - T0, d.reason.value) for d in tr.history(T0 + 30).pending) == [
        ("a", 0.0, 30.0, "Quota"), ("b", 0.0, 20.0, "Fragmentation")]


# --------------------------------------------------------------------------- incidents
JOB = {"metadata": {"name": "llm", "namespace": "team-a", "annotations": {"firedrill.dev/epoch": "0"}},
       "spec": {"queue": "research", "tasks": [{"name": "worker", "replicas": 2, "template": {"spec": {
           "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}}}]}}


def job(epoch: int) -> dict[str, Any]:
    return {**JOB, "metadata": {**JOB["metadata"], "annotations": {"firedrill.dev/epoch": str(epoch)}}}


def rank(i: int, epoch: int, snap: dict[str, str] | None = None, uid: str = "") -> dict[str, Any]:
    return pod(f"llm-worker-{i}", gpus=4, node_name=f"n{i}", phase="Running", uid=uid or f"e{epoch}-{i}",
               labels={"volcano.sh/job-name": "llm"},
               annotations={"firedrill.dev/epoch": str(epoch), "firedrill.dev/rank": str(i),
                            "firedrill.dev/step-seconds": "0.5", **(snap or {})})


def resumed(pod_name: str, uid: str, at: float, step: int, checkpoint: int) -> dict[str, Any]:
    return {"metadata": {"name": f"{pod_name}.resumed", "namespace": "team-a", "uid": f"ev-{uid}"},
            "reason": "Resumed", "message": f"Resumed training at step {step} beyond checkpoint {checkpoint}",
            "eventTime": iso(at)[:-1] + "000Z", "involvedObject": {"kind": "Pod", "namespace": "team-a",
                                                                   "name": pod_name, "uid": uid}}


def incident_tracker() -> UsageTracker:
    tr = UsageTracker()
    feed(tr, Resource.JOB, job(0), T0)
    # Rank 1 publishes steps 18 (at 99) and 20 (at 100), then is lost; rank 0 publishes up to step 23 at 104.
    feed(tr, Resource.POD, rank(1, 0, progress(T0 + 99, 9.0, step=18)), T0 + 99)
    feed(tr, Resource.POD, rank(1, 0, progress(T0 + 100, 10.0, step=20)), T0 + 100)
    feed(tr, Resource.POD, rank(0, 0, progress(T0 + 99.5, 9.5, step=19)), T0 + 99.5)
    feed(tr, Resource.POD, rank(0, 0, progress(T0 + 104, 11.5, step=23)), T0 + 104)
    feed(tr, Resource.JOB, job(1), T0 + 106)  # the restart
    feed(tr, Resource.POD, rank(0, 1, uid="new-0"), T0 + 110)
    return tr


def test_incident_from_the_lost_ranks_last_progress_to_the_first_resumed_event() -> None:
    tr = incident_tracker()
    feed(tr, Resource.EVENT, resumed("llm-worker-0", "new-0", T0 + 120.5, 11, 10), T0 + 121)
    feed(tr, Resource.EVENT, resumed("llm-worker-0", "new-0", T0 + 125, 11, 10), T0 + 126)  # later: ignored
    # fault = rank 1's last progress (100); step at the fault = 20 (rank 1 at 100; rank 0 had 19);
    # recomputed = (20 - 10) steps x 0.5 s x 8 GPUs = 40 GPU-s.
    assert tr.history(T0 + 200).incidents == (Incident("team-a", "research", "llm", T0 + 100, T0 + 120.5, 8, 40.0),)


def test_an_open_incident_ends_at_now_without_recomputed_work() -> None:
    tr = incident_tracker()
    assert tr.history(T0 + 130).incidents == (Incident("team-a", "research", "llm", T0 + 100, T0 + 130, 8, 0.0),)


def test_a_job_deleted_before_it_resumed_ends_its_incident_there_and_no_later_window_counts_it() -> None:
    tr = incident_tracker()
    feed(tr, Resource.JOB, job(1), T0 + 112, deleted=True)
    feed(tr, Resource.EVENT, resumed("llm-worker-0", "new-0", T0 + 113, 11, 10), T0 + 113)  # too late: gone
    assert tr.history(T0 + 300).incidents == (Incident("team-a", "research", "llm", T0 + 100, T0 + 112, 8, 0.0),)
    assert tr.history(T0 + 300, Window(T0 + 200, T0 + 212)).incidents == ()


def test_a_second_restart_before_resuming_stays_one_incident() -> None:
    tr = incident_tracker()
    feed(tr, Resource.JOB, job(2), T0 + 115)
    feed(tr, Resource.EVENT, resumed("llm-worker-0", "new-0", T0 + 118, 11, 10), T0 + 118)  # epoch 1: too old
    feed(tr, Resource.POD, rank(0, 2, uid="e2-0"), T0 + 119)
    feed(tr, Resource.EVENT, resumed("llm-worker-0", "e2-0", T0 + 130, 11, 10), T0 + 130)
    (inc,) = tr.history(T0 + 200).incidents
    assert (inc.fault_at - T0, inc.resume_at - T0) == (100.0, 130.0)


def test_a_restart_with_no_published_progress_faults_at_the_restart() -> None:
    tr = UsageTracker()
    feed(tr, Resource.JOB, job(0), T0)
    feed(tr, Resource.POD, rank(0, 0), T0 + 1)
    feed(tr, Resource.JOB, job(1), T0 + 5)
    (inc,) = tr.history(T0 + 9).incidents
    assert (inc.fault_at, inc.resume_at, inc.gpus) == (T0 + 5, T0 + 9, 8)


def test_incident_downtime_is_charged_to_fault_tolerance() -> None:
    tr = incident_tracker()
    feed(tr, Resource.EVENT, resumed("llm-worker-0", "new-0", T0 + 120.5, 11, 10), T0 + 121)
    r = account(Window(T0, T0 + 200), tr.history(T0 + 200))
    ft = next(h for h in r.holes if h.hole is Hole.FAULT_TOLERANCE)
    assert ft.gpu_hours * 3600 == pytest.approx(8 * 20.5 + 40.0)


def batch_rank(index: int, uid: str, snap: dict[str, str] | None = None, job_uid: str = "job-uid-1",
               phase: str = "Running", deleting: bool = False) -> dict[str, Any]:
    """A rank of a batch/v1 Indexed Job (the native flavor): no epoch, an index, the Job's labels."""
    return pod(f"llm-{index}-{uid}", gpus=4, node_name=f"n{index}", phase=phase, uid=uid, deleting=deleting,
               labels={"batch.kubernetes.io/job-name": "llm", "batch.kubernetes.io/controller-uid": job_uid},
               annotations={"batch.kubernetes.io/job-completion-index": str(index),
                            "firedrill.dev/step-seconds": "0.5", **(snap or {})})


def batch_incident_tracker() -> UsageTracker:
    tr = UsageTracker()
    # Index 1 publishes step 20 at 100, then its pod fails (101) and the Job controller replaces it (111).
    feed(tr, Resource.POD, batch_rank(1, "a1", progress(T0 + 99, 9.0, step=18)), T0 + 99)
    feed(tr, Resource.POD, batch_rank(1, "a1", progress(T0 + 100, 10.0, step=20)), T0 + 100)
    feed(tr, Resource.POD, batch_rank(0, "a0", progress(T0 + 104, 11.5, step=23)), T0 + 104)
    feed(tr, Resource.POD, batch_rank(1, "a1", phase="Failed"), T0 + 101)
    feed(tr, Resource.POD, batch_rank(1, "b1"), T0 + 111)
    return tr


def test_a_batch_jobs_replaced_rank_is_its_restart_and_its_resumed_event_ends_the_incident() -> None:
    tr = batch_incident_tracker()
    feed(tr, Resource.EVENT, resumed("llm-0-a0", "a0", T0 + 118, 11, 10), T0 + 118)  # a survivor: not the restart
    assert tr.history(T0 + 119).incidents == (Incident("team-a", "default", "llm", T0 + 100, T0 + 119, 8, 0.0),)
    feed(tr, Resource.EVENT, resumed("llm-1-b1", "b1", T0 + 120.5, 11, 10), T0 + 121)
    # fault = the lost pod's last progress (100); step at the fault 20; recomputed (20 - 10) x 0.5 s x 8 GPUs.
    assert tr.history(T0 + 200).incidents == (Incident("team-a", "default", "llm", T0 + 100, T0 + 120.5, 8, 40.0),)


def test_a_batch_incident_counts_every_rank_of_the_job_even_one_that_also_failed() -> None:
    tr = UsageTracker()
    feed(tr, Resource.POD, batch_rank(0, "a0", progress(T0 + 10, 5.0, step=10)), T0 + 10)
    feed(tr, Resource.POD, batch_rank(1, "a1", progress(T0 + 10, 5.0, step=10)), T0 + 10)
    feed(tr, Resource.POD, batch_rank(1, "a1", phase="Failed"), T0 + 11)
    feed(tr, Resource.POD, batch_rank(0, "a0", phase="Failed"), T0 + 12)  # its peer gone, rank 0 exits too
    feed(tr, Resource.POD, batch_rank(1, "b1"), T0 + 20)
    feed(tr, Resource.POD, batch_rank(0, "b0"), T0 + 21)  # the second replacement: the same incident
    (inc,) = tr.history(T0 + 30).incidents
    assert (inc.fault_at, inc.gpus) == (T0 + 10, 8)


def test_a_batch_jobs_first_pods_and_another_jobs_pods_open_no_incident() -> None:
    tr = UsageTracker()
    feed(tr, Resource.POD, batch_rank(0, "a0"), T0)
    feed(tr, Resource.POD, batch_rank(1, "a1"), T0)
    feed(tr, Resource.POD, batch_rank(0, "a0", phase="Succeeded"), T0 + 50)  # done: not replaced
    feed(tr, Resource.POD, batch_rank(0, "c0", job_uid="job-uid-2"), T0 + 60)  # a new Job of the same name
    assert tr.history(T0 + 100).incidents == ()


def test_a_batch_incident_survives_the_projection_the_usage_log_stores() -> None:
    tr = UsageTracker()
    for at, obj in ((99, batch_rank(1, "a1", progress(T0 + 99, 9.0, step=18))), (104, batch_rank(0, "a0")),
                    (101, batch_rank(1, "a1", deleting=True)), (111, batch_rank(1, "b1"))):
        tr.observe(Observation(Resource.POD, project(Resource.POD, obj), False, T0 + at))
    (inc,) = tr.history(T0 + 130).incidents
    assert (inc.fault_at, inc.gpus) == (T0 + 99, 8)


# --------------------------------------------------------------------------- projection, window
def test_projection_observes_the_same_as_the_object() -> None:
    objs = [(Resource.NODE, node("n1", 8), 0.0), (Resource.JOB, job(0), 0.0),
            (Resource.PODGROUP, {"metadata": {"name": "g", "namespace": "team-a"}, "spec": {"queue": "q"}}, 0.0),
            (Resource.POD, pod("x", gpus=3, unplaced="Fragmentation",
                               annotations={"scheduling.k8s.io/group-name": "g"}), 1.0),
            (Resource.POD, rank(1, 0, progress(T0 + 99, 9.0, 0.5, 0.25, step=18)), 99.0),
            (Resource.POD, rank(1, 0, progress(T0 + 100, 10.0, 1.0, 0.5, step=20)), 100.0),
            (Resource.NODE, node("n1", 8, "False"), 101.0), (Resource.JOB, job(1), 106.0),
            (Resource.POD, rank(0, 1, uid="new-0"), 110.0),
            (Resource.EVENT, resumed("llm-worker-0", "new-0", T0 + 120.5, 11, 10), 121.0)]
    full, projected = UsageTracker(), UsageTracker()
    for resource, obj, t in objs:
        feed(full, resource, obj, T0 + t)
        proj = project(resource, obj)
        assert proj is not None
        feed(projected, resource, proj, T0 + t)
    assert projected.history(T0 + 200) == full.history(T0 + 200)
    assert project(Resource.EVENT, {**resumed("a", "b", T0, 1, 0), "reason": "Started"}) is None


def test_steady_samples_merge_into_one_with_the_same_accounting() -> None:
    tr = UsageTracker()
    run(tr, [progress(T0 + k, float(k), 0.25 * k, 0.5 * k) for k in range(1, 101)], mfu="1")
    (s,) = tr.history(T0 + 200).samples
    assert (s.start, s.end, s.active_share, s.effective_share) == (T0, T0 + 100, 0.75, 0.25)
    assert (s.input_stall_seconds, s.comm_stall_seconds) == pytest.approx((25.0, 50.0))


def test_history_of_a_window_keeps_only_what_touches_it() -> None:
    tr = UsageTracker()
    stepped = [0.5 * k + 0.25 * (k % 2) for k in range(1, 11)]  # alternating rates: nothing merges
    run(tr, [progress(T0 + k, x) for k, x in zip(range(1, 11), stepped)], mfu="1")
    h = tr.history(T0 + 100, Window(T0 + 4.5, T0 + 6.5))
    assert [(s.start - T0, s.end - T0) for s in h.samples] == [(4.0, 5.0), (5.0, 6.0), (6.0, 7.0)]


def test_gpus_now() -> None:
    tr = UsageTracker()
    feed(tr, Resource.NODE, node("a", 8), T0)
    feed(tr, Resource.NODE, node("b", 8, "False"), T0)
    feed(tr, Resource.POD, pod("p", gpus=3, node_name="a", phase="Running"), T0)
    feed(tr, Resource.POD, pod("q", gpus=2, node_name="b", phase="Running"), T0)
    assert tr.gpus_now() == (8, 3)


def test_activity_sample_busy_defaults_to_active() -> None:
    assert ActivitySample("p", 0, 1, 0.5, 0.2).busy == 0.5
    assert NodeCapacity("n", 1, 0, 1).healthy
