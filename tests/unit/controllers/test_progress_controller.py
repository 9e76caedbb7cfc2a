"""The progress watchdog over an in-memory API on a virtual clock: it watches only the Volcano Jobs that opt in,
names a hung one once (a ProgressStalled Warning Event on the Job, with the rank that stopped first) and evicts
each of its pods (DisruptionTarget ProgressStalled, a graceful delete); the defects switch the naming off or make
it ignore a declared checkpoint.  The decision itself is tested in tests/unit/core/test_progress.py."""

from __future__ import annotations

from typing import Any

from refplatform.client import ApiStatusError
from refplatform.controllers import process
from refplatform.controllers.progress import ProgressController, job_progress
from refplatform.resources import PODS, VCJOBS

from .fakes import FakeApi

T0 = 1_800_000_000.0
TIMEOUT = "10"


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


def seed(api: FakeApi, ranks: int = 2, *, job: str = "train", timeout: str | None = TIMEOUT, step: int = 7,
         stalled_on: dict[int, str] | None = None, activity: dict[int, str] | None = None) -> None:
    annotations = {"firedrill.dev/progress-timeout-seconds": timeout} if timeout is not None else {}
    stored = api.put(VCJOBS, {"metadata": {"name": job, "uid": f"{job}-uid", "annotations": annotations},
                              "spec": {"minAvailable": ranks, "tasks": [{"name": "worker", "replicas": ranks}],
                                       "policies": [{"event": "PodEvicted", "action": "RestartJob"}]}})
    for i in range(ranks):
        pod_annotations = {"firedrill.dev/step": str(step), "volcano.sh/task-index": str(i)}
        if stalled_on and i in stalled_on:
            pod_annotations["firedrill.dev/stalled-on"] = stalled_on[i]
        if activity and i in activity:
            pod_annotations["firedrill.dev/activity"] = activity[i]
        api.put(PODS, {"metadata": {"name": f"{job}-worker-{i}", "uid": f"{job}-pod-{i}",
                                    "labels": {"volcano.sh/job-name": job}, "annotations": pod_annotations,
                                    "ownerReferences": [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                                                         "name": job, "uid": stored["metadata"]["uid"]}]},
                       "spec": {"nodeName": f"node-{i}"}, "status": {"phase": "Running"}})


def with_defect(api: FakeApi, clock: Clock, *defects: str) -> ProgressController:
    """The controller as the controller process builds it (with ``--defect`` each of ``defects``), on the clock."""
    argv = ["--api", "x", *[a for d in defects for a in ("--defect", d)]]
    ctl = process.FACTORIES["progress"](api, process.build_parser().parse_args(argv))  # type: ignore[arg-type]
    ctl.clock = clock  # type: ignore[attr-defined]
    return ctl  # type: ignore[return-value]


def passes(api: FakeApi, ctl: ProgressController, clock: Clock, seconds: int) -> None:
    for _ in range(seconds + 1):
        ctl.reconcile(api.cache())  # type: ignore[arg-type]
        clock.t += 1.0
    clock.t -= 1.0


def deleted(api: FakeApi, name: str) -> bool:
    return bool((api.find(PODS, "default", name) or {})["metadata"].get("deletionTimestamp"))


def test_a_hung_job_is_named_on_the_job_and_every_rank_is_evicted_once() -> None:
    api, clock = FakeApi(), Clock()
    seed(api, 3, stalled_on={0: "1,2", 1: "0"})  # rank 2 stuck in its kernel: rank 0 waits on it, rank 1 on rank 0
    ctl = with_defect(api, clock)
    passes(api, ctl, clock, 9)
    assert api.writes(events=True) == []
    passes(api, ctl, clock, 1)
    (event,) = [e for e in api.events() if e.get("reason") == "ProgressStalled"]
    assert event["type"] == "Warning"
    assert {k: event["involvedObject"][k] for k in ("kind", "apiVersion", "name", "namespace", "uid")} == {
        "kind": "Job", "apiVersion": "batch.volcano.sh/v1alpha1", "name": "train", "namespace": "default",
        "uid": "train-uid"}
    assert event["message"] == ("Job default/train made no progress past step 7 for 10.0 s (threshold 10 s) with all "
                                "3 of its ranks running; rank that stopped first: 2; restarting the job from its "
                                "checkpoint")
    for i in range(3):
        pod = api.find(PODS, "default", f"train-worker-{i}") or {}
        assert deleted(api, f"train-worker-{i}")
        assert [c["reason"] for c in pod["status"]["conditions"] if c["type"] == "DisruptionTarget"] == [
            "ProgressStalled"]
    writes = len(api.writes(events=True))
    passes(api, ctl, clock, 5)
    assert len(api.writes(events=True)) == writes  # named once


def test_a_job_without_the_annotation_is_never_watched() -> None:
    api, clock = FakeApi(), Clock()
    seed(api, timeout=None)
    seed(api, job="bad", timeout="soon")
    passes(api, with_defect(api, clock), clock, 60)
    assert api.writes(events=True) == []


def test_a_declared_checkpoint_is_waited_out_unless_the_defect_ignores_it() -> None:
    for defects, restarted in (((), False), (("restart-on-pause",), True)):
        api, clock = FakeApi(), Clock()
        seed(api, activity={0: "checkpoint"}, stalled_on={1: "0"})
        passes(api, with_defect(api, clock, *defects), clock, 30)
        assert deleted(api, "train-worker-0") is restarted, defects
        assert any(e.get("reason") == "ProgressStalled" for e in api.events()) is restarted, defects


def test_no_hang_detection_never_names_or_restarts() -> None:
    api, clock = FakeApi(), Clock()
    seed(api, stalled_on={0: "1"})
    passes(api, with_defect(api, clock, "no-hang-detection"), clock, 60)
    assert api.writes(events=True) == []


def test_a_naming_whose_evictions_all_failed_is_tried_again() -> None:
    class Refusing(FakeApi):
        refuse = True

        def delete(self, path: str, body: Any = None, params: Any = None) -> Any:
            if self.refuse:
                raise ApiStatusError(500, "InternalError", "try later")
            return super().delete(path, body, params)

    api, clock = Refusing(), Clock()
    seed(api)
    ctl = with_defect(api, clock)
    passes(api, ctl, clock, 10)
    assert not deleted(api, "train-worker-0")
    api.refuse = False
    passes(api, ctl, clock, 1)
    assert deleted(api, "train-worker-0") and deleted(api, "train-worker-1")


def test_the_snapshot_takes_the_jobs_own_non_terminal_pods() -> None:
    api = FakeApi()
    seed(api, stalled_on={0: "1"}, activity={1: "checkpoint"})
    seed(api, job="other")
    api.put(PODS, {"metadata": {"name": "old", "labels": {"volcano.sh/job-name": "train"}},
                   "spec": {"nodeName": "node-0"}, "status": {"phase": "Failed"}})
    api.put(PODS, {"metadata": {"name": "pending", "labels": {"volcano.sh/job-name": "train"},
                                "annotations": {"firedrill.dev/rank": "5"}},
                   "spec": {}, "status": {"phase": "Pending"}})
    job = api.find(VCJOBS, "default", "train")
    assert job is not None
    snap = job_progress(job, api.cache().list(PODS))
    assert snap is not None and (snap.job, snap.uid, snap.timeout_s, snap.min_available) == (
        "default/train", "train-uid", 10.0, 2)
    assert [(r.name, r.rank, r.running, r.step, r.activity, r.stalled_on) for r in snap.ranks] == [
        ("default/pending", 5, False, None, None, None),
        ("default/train-worker-0", 0, True, 7, None, (1,)),
        ("default/train-worker-1", 1, True, 7, "checkpoint", None)]
    other = api.find(VCJOBS, "default", "other")
    assert other is not None
    other["metadata"]["annotations"] = {}
    assert job_progress(other, api.cache().list(PODS)) is None
