"""The straggler controller over an in-memory API on a virtual clock: it taints the slow rank's node NoSchedule,
records StragglerDetected, evicts that rank only, once; the defects switch it off or make it accuse by history.
The decision itself is tested in tests/unit/core/test_straggler.py."""

from __future__ import annotations

from typing import Any

from refplatform.controllers import process
from refplatform.controllers.straggler import STRAGGLER_TAINT, StragglerController, rank_timings
from refplatform.resources import NODES, PODS

from .fakes import FakeApi, path_of

T0 = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


def seed(api: FakeApi, computes: list[float], steps: list[float] | None = None, job: str = "train") -> None:
    for i, compute in enumerate(computes):
        api.put(NODES, {"metadata": {"name": f"node-{i}"}, "spec": {}})
        annotations: dict[str, Any] = {"firedrill.dev/compute-seconds": str(compute), "firedrill.dev/gpu-index": "0,1"}
        if steps is not None:
            annotations["firedrill.dev/step-seconds"] = str(steps[i])
        api.put(PODS, {"metadata": {"name": f"{job}-worker-{i}", "uid": f"pod-{i}", "labels": {
            "volcano.sh/job-name": job}, "annotations": annotations},
            "spec": {"nodeName": f"node-{i}"}, "status": {"phase": "Running"}})


def set_annotations(api: FakeApi, i: int, **values: str) -> None:
    pod = api.find(PODS, "default", f"train-worker-{i}")
    assert pod is not None
    pod["metadata"]["annotations"].update({f"firedrill.dev/{k.replace('_', '-')}": v for k, v in values.items()})


def taints(api: FakeApi, node: str) -> list[dict[str, Any]]:
    return (api.find(NODES, "", node) or {}).get("spec", {}).get("taints") or []


def with_defect(api: FakeApi, clock: Clock, defect: str) -> StragglerController:
    """The controller as the controller process builds it with ``--defect defect``, on the virtual clock."""
    ctl = process.FACTORIES["straggler"](api, process.build_parser().parse_args(  # type: ignore[arg-type]
        ["--api", "x", "--defect", defect]))
    ctl.clock = clock  # type: ignore[attr-defined]
    return ctl  # type: ignore[no-any-return]


def test_the_slow_rank_is_named_once_sustained_and_only_it_is_moved() -> None:
    api, clock = FakeApi(), Clock()
    seed(api, [0.4, 0.1, 0.1])
    ctl = StragglerController(api, clock=clock)  # type: ignore[arg-type]
    ctl.reconcile(api.cache())  # type: ignore[arg-type]
    assert api.writes() == []
    clock.t += 2.0
    ctl.reconcile(api.cache())  # type: ignore[arg-type]
    assert taints(api, "node-0") == [{"key": STRAGGLER_TAINT, "value": "gpu-0-1", "effect": "NoSchedule",
                                      "timeAdded": "2027-01-15T08:00:02Z"}]
    assert taints(api, "node-1") == [] and taints(api, "node-2") == []
    assert (api.find(PODS, "default", "train-worker-0") or {})["metadata"].get("deletionTimestamp")
    assert not (api.find(PODS, "default", "train-worker-1") or {})["metadata"].get("deletionTimestamp")
    (event,) = [e for e in api.events() if e.get("reason") == "StragglerDetected"]
    assert event["type"] == "Warning" and "4.00x its peers' median" in event["message"]
    writes = len(api.writes())
    clock.t += 1.0
    ctl.reconcile(api.cache())  # type: ignore[arg-type]
    assert len(api.writes()) == writes  # named once


def test_a_uniform_slowdown_names_nobody() -> None:
    api, clock = FakeApi(), Clock()
    seed(api, [0.1, 0.1], steps=[0.2, 0.2])
    ctl = StragglerController(api, clock=clock)  # type: ignore[arg-type]
    for _ in range(4):
        ctl.reconcile(api.cache())  # type: ignore[arg-type]
        for i in range(2):
            set_annotations(api, i, step_seconds="0.8")
        clock.t += 1.0
    assert api.writes() == []


def test_accuse_the_healthy_names_every_node_of_a_uniformly_slowed_job() -> None:
    api, clock = FakeApi(), Clock()
    seed(api, [0.1, 0.1], steps=[0.2, 0.2])
    ctl = with_defect(api, clock, "accuse-the-healthy")
    for _ in range(4):
        ctl.reconcile(api.cache())  # type: ignore[arg-type]
        for i in range(2):
            set_annotations(api, i, step_seconds="0.8")
        clock.t += 1.0
    assert taints(api, "node-0") and taints(api, "node-1")


def one_slow_rank(defect: str, seconds: int = 5) -> FakeApi:
    """Rank 0 of three runs at a quarter of its peers' speed for ``seconds`` passes, under ``defect``."""
    api, clock = FakeApi(), Clock()
    seed(api, [0.4, 0.1, 0.1])
    ctl = with_defect(api, clock, defect)
    for _ in range(seconds):
        ctl.reconcile(api.cache())  # type: ignore[arg-type]
        clock.t += 1.0
    return api


def test_no_straggler_detection_never_names() -> None:
    assert one_slow_rank("no-straggler-detection").writes() == []


def test_straggler_eviction_lost_names_and_marks_but_never_deletes() -> None:
    api = one_slow_rank("straggler-eviction-lost")
    assert taints(api, "node-0")
    pod = api.find(PODS, "default", "train-worker-0") or {}
    assert not pod["metadata"].get("deletionTimestamp")
    assert [c["reason"] for c in pod["status"].get("conditions") or [] if c["type"] == "DisruptionTarget"] == [
        "StragglerEviction"]


def test_the_snapshot_takes_running_job_pods_only() -> None:
    api = FakeApi()
    seed(api, [0.1, 0.1])
    api.put(PODS, {"metadata": {"name": "lone", "annotations": {"firedrill.dev/compute-seconds": "1"}},
                   "spec": {"nodeName": "node-0"}, "status": {"phase": "Running"}})
    pending = api.find(PODS, "default", "train-worker-1")
    assert pending is not None
    pending["status"]["phase"] = "Pending"
    assert [(r.job, r.name, r.node, r.compute_s) for r in rank_timings(api.cache().list(PODS))] == [
        ("default/train", "default/train-worker-0", "node-0", 0.1)]
    assert path_of(PODS, "default", "lone").endswith("/pods/lone")


def test_a_named_node_is_given_back_once_its_agent_reports_full_clocks_unless_the_taint_stays() -> None:
    for defect, given_back in ((None, True), ("straggler-taint-stays", False)):
        api, clock = FakeApi(), Clock()
        seed(api, [0.4, 0.1, 0.1])
        node = api.find(NODES, "", "node-0")
        assert node is not None
        node["metadata"]["annotations"] = {"firedrill.dev/throttled-gpus": "0"}
        ctl = with_defect(api, clock, defect) if defect else StragglerController(api, clock=clock)  # type: ignore[arg-type]
        for _ in range(4):
            ctl.reconcile(api.cache())  # type: ignore[arg-type]
            clock.t += 1.0
        assert taints(api, "node-0")  # named, and kept while its GPU is held down
        node = api.find(NODES, "", "node-0")
        assert node is not None
        node["metadata"]["annotations"] = {}  # the agent: every GPU at full clock again
        for _ in range(5):
            ctl.reconcile(api.cache())  # type: ignore[arg-type]
            clock.t += 1.0
        assert (taints(api, "node-0") == []) is given_back, defect
        assert any(e.get("reason") == "StragglerCleared" for e in api.events()) is given_back, defect
