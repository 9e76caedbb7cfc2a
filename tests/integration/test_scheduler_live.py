"""The live scheduler on a running platform: a 4 x 8-GPU gang is placed whole, or not at all, and a bind the API
server refuses in the middle of a gang undoes the gang's other binds."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from kubernetes import client

from refplatform import core
from refplatform.client import RestClient
from refplatform.cluster import Cluster, ClusterSpec, wait_until
from refplatform.controllers.manager import ControllerManager
from refplatform.controllers.process import FACTORIES
from refplatform.controllers.scheduler import SchedulerController
from tests.integration.kube import api_client, canary_job, pod_manifest

pytestmark = pytest.mark.integration


def start(tmp: Path, profile: str = "gang") -> Cluster:
    cluster = Cluster(ClusterSpec(tmp, nodes=4, gpus_per_node=8, heartbeat=0.5, scheduler_profile=profile))
    cluster.start()
    v1 = client.CoreV1Api(api_client(cluster))

    def ready() -> bool:
        nodes = v1.list_node().items
        return len(nodes) == 4 and all(any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
                                       for n in nodes)
    wait_until(ready, 30, "4 Ready nodes")
    return cluster


@pytest.fixture
def gang_cluster(tmp_path: Path) -> Iterator[Cluster]:
    cluster = start(tmp_path / "c")
    try:
        yield cluster
    finally:
        cluster.stop()


def submit_gang(cluster: Cluster, name: str, workers: int = 4, gpus: int = 8) -> None:
    """A PodGroup with minMember and its pods carrying the group annotation, as Volcano users write them."""
    custom = client.CustomObjectsApi(api_client(cluster))
    custom.create_namespaced_custom_object("scheduling.volcano.sh", "v1beta1", "default", "podgroups", {
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": {"name": name},
        "spec": {"minMember": workers, "minResources": {"nvidia.com/gpu": str(workers * gpus)}}})
    v1 = client.CoreV1Api(api_client(cluster))
    for i in range(workers):
        pod = pod_manifest(f"{name}-worker-{i}", gpus=gpus,
                           annotations={"scheduling.k8s.io/group-name": name})
        pod["spec"]["schedulerName"] = "volcano"
        v1.create_namespaced_pod("default", pod)


def bound(cluster: Cluster, prefix: str) -> dict[str, str]:
    pods = client.CoreV1Api(api_client(cluster)).list_namespaced_pod("default").items
    return {p.metadata.name: p.spec.node_name for p in pods if p.metadata.name.startswith(prefix) and p.spec.node_name}


def occupy_one_node(cluster: Cluster) -> str:
    """A plain 8-GPU pod that fills one node, so only 3 nodes stay free."""
    v1 = client.CoreV1Api(api_client(cluster))
    v1.create_namespaced_pod("default", pod_manifest("blocker", gpus=8))
    wait_until(lambda: bool(bound(cluster, "blocker")), 20, "the blocker to be bound")
    return bound(cluster, "blocker")["blocker"]


def test_a_gang_of_four_by_eight_lands_whole_on_four_free_nodes(gang_cluster: Cluster) -> None:
    submit_gang(gang_cluster, "train")
    wait_until(lambda: len(bound(gang_cluster, "train-")) == 4, 30, "all 4 workers bound")
    assert sorted(bound(gang_cluster, "train-").values()) == [f"gpu-node-{i}" for i in range(4)]
    custom = client.CustomObjectsApi(api_client(gang_cluster))
    wait_until(lambda: custom.get_namespaced_custom_object_status(
        "scheduling.volcano.sh", "v1beta1", "default", "podgroups", "train")["status"].get("phase") == "Running",
        20, "the PodGroup to be Running")
    v1 = client.CoreV1Api(api_client(gang_cluster))
    # Each bind's Scheduled Event is written in the background (as upstream's event broadcaster does), so it may
    # trail the bind and the PodGroup's status by a moment.
    wait_until(lambda: sum(1 for e in v1.list_namespaced_event("default").items
                           if e.reason == "Scheduled" and e.involved_object.kind == "Pod") >= 4,
               20, "a Scheduled Event for each of the 4 workers")


def test_a_gang_that_does_not_fit_holds_nothing_and_says_why(gang_cluster: Cluster) -> None:
    occupy_one_node(gang_cluster)
    submit_gang(gang_cluster, "train")
    v1 = client.CoreV1Api(api_client(gang_cluster))

    def explained() -> bool:
        events = v1.list_namespaced_event("default").items
        return any(e.reason in ("FailedScheduling", "Unschedulable") for e in events)
    wait_until(explained, 30, "a FailedScheduling/Unschedulable reason")
    assert bound(gang_cluster, "train-") == {}
    pod = v1.read_namespaced_pod("train-worker-0", "default")
    cond = next(c for c in pod.status.conditions if c.type == "PodScheduled")
    assert cond.status == "False" and cond.reason == "Unschedulable" and cond.message
    # Freeing the node lets the whole gang in.
    v1.delete_namespaced_pod("blocker", "default", grace_period_seconds=0)
    wait_until(lambda: len(bound(gang_cluster, "train-")) == 4, 30, "the gang to be placed once room exists")


def test_the_no_gang_profile_places_part_of_the_gang(tmp_path: Path) -> None:
    cluster = start(tmp_path / "c", profile="no-gang")
    try:
        occupy_one_node(cluster)
        submit_gang(cluster, "train")
        wait_until(lambda: len(bound(cluster, "train-")) == 3, 30, "3 of 4 workers bound (a partial gang)")
        assert len(bound(cluster, "train-")) == 3
    finally:
        cluster.stop()


def unplaced(cluster: Cluster, name: str) -> dict[str, str] | None:
    """The pod's ``firedrill.dev/Unplaced`` condition as the API serves it (raw JSON), or None."""
    v1 = client.CoreV1Api(api_client(cluster))
    raw = json.loads(v1.read_namespaced_pod_status(name, "default", _preload_content=False).data)
    return next((c for c in (raw.get("status") or {}).get("conditions") or []
                 if c.get("type") == "firedrill.dev/Unplaced"), None)


def test_a_pod_blocked_by_fragmentation_says_so_in_its_unplaced_condition(tmp_path: Path) -> None:
    cluster = Cluster(ClusterSpec(tmp_path / "c", nodes=2, gpus_per_node=8, heartbeat=0.5))
    cluster.start()
    try:
        v1 = client.CoreV1Api(api_client(cluster))
        wait_until(lambda: len(v1.list_node().items) == 2, 30, "2 nodes registered")
        for name in ("six-a", "six-b"):
            v1.create_namespaced_pod("default", pod_manifest(name, gpus=6))
        wait_until(lambda: len(bound(cluster, "six-")) == 2, 30, "both 6-GPU pods bound")
        assert len(set(bound(cluster, "six-").values())) == 2  # one per node: 2 GPUs free on each
        v1.create_namespaced_pod("default", pod_manifest("four", gpus=4))
        wait_until(lambda: (unplaced(cluster, "four") or {}).get("reason") == "Fragmentation", 30,
                   "the 4-GPU pod's Unplaced reason to be Fragmentation")
        cond = unplaced(cluster, "four")
        assert cond is not None and cond["status"] == "True" and cond["lastTransitionTime"]
        assert cond["message"] == "needs 4 GPUs: 4 free in the cluster, at most 2 on one node"
        raw = json.loads(v1.read_namespaced_pod_status("four", "default", _preload_content=False).data)
        scheduled = next(c for c in raw["status"]["conditions"] if c["type"] == "PodScheduled")
        assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")
        # A pod that wants more than the cluster has free is short of capacity, not fragmented.
        v1.create_namespaced_pod("default", pod_manifest("twelve", gpus=12))
        wait_until(lambda: (unplaced(cluster, "twelve") or {}).get("reason") == "InsufficientCapacity", 30,
                   "the 12-GPU pod's Unplaced reason to be InsufficientCapacity")
        # Room on one node: the fragmented pod is placed.
        v1.delete_namespaced_pod("six-a", "default", grace_period_seconds=0)
        wait_until(lambda: bool(bound(cluster, "four")), 30, "the 4-GPU pod to be bound once a node has room")
        # Bound is no longer pending: the why-pending condition leaves with PodScheduled=False.
        assert unplaced(cluster, "four") is None
    finally:
        cluster.stop()


# ------------------------------------------------------------------------------------------------------------
# A gang is committed whole through the API: a bind the server refuses undoes the gang's other binds.


class DeletesBeforeItsBinding(RestClient):
    """A real client of the real server that, just before the scheduler POSTs the Binding of pod ``victim``, deletes
    that pod through the same server: a real cause (the pod is gone between the scheduler's decision and its bind),
    so the server itself refuses the Binding.  Only once."""

    def __init__(self, cluster: Cluster, victim: str) -> None:
        super().__init__(cluster.url, cluster.token, ca_file=cluster.ca_file)
        self.victim = victim
        self.fired = False

    def create(self, path: str, body: dict, params: dict | None = None) -> dict:
        if not self.fired and path == f"/api/v1/namespaces/default/pods/{self.victim}/binding":
            self.fired = True
            super().delete(f"/api/v1/namespaces/default/pods/{self.victim}", {"gracePeriodSeconds": 0},
                           {"gracePeriodSeconds": 0})
        return super().create(path, body, params)


@contextmanager
def in_process_scheduler(cluster: Cluster, victim: str) -> Iterator[DeletesBeforeItsBinding]:
    """The live scheduler, run here over that client, as the cluster's only scheduler."""
    api = DeletesBeforeItsBinding(cluster, victim)
    scheduler = SchedulerController(api, core.SchedulerConfig())
    manager = ControllerManager(api, [scheduler])
    manager.start()
    try:
        yield api
    finally:
        manager.stop()
        scheduler.close()
        api.close()


def without_scheduler(tmp: Path) -> Cluster:
    controllers = tuple(name for name in FACTORIES if name != "scheduler")
    cluster = Cluster(ClusterSpec(tmp, nodes=4, gpus_per_node=8, heartbeat=0.5, controllers=controllers))
    cluster.start()
    cluster.wait_ready()
    return cluster


def events(cluster: Cluster, reason: str, kind: str | None = None) -> list[client.CoreV1Event]:
    found = client.CoreV1Api(api_client(cluster)).list_namespaced_event("default").items
    return [e for e in found if e.reason == reason and kind in (None, e.involved_object.kind)]


def test_a_bind_refused_in_the_middle_of_a_gang_undoes_the_gangs_other_binds(tmp_path: Path) -> None:
    cluster = without_scheduler(tmp_path / "c")
    try:
        with in_process_scheduler(cluster, victim="train-worker-2") as api:
            submit_gang(cluster, "train")
            wait_until(lambda: api.fired, 30, "the scheduler to bind the gang's third pod (which the server refuses)")
            # The two pods bound before the refusal are deleted (a bound pod cannot be unbound) and gone once their
            # agents stopped them; the fourth was never bound: nothing of the gang holds a GPU.
            wait_until(lambda: bound(cluster, "train-") == {}, 30, "no pod of the gang left bound")
            v1 = client.CoreV1Api(api_client(cluster))
            left = {p.metadata.name: p.spec.node_name for p in v1.list_namespaced_pod("default").items}
            assert left == {"train-worker-3": None}
            message = events(cluster, "GangBindFailed", "PodGroup")[0].message
            assert message.startswith("binding pod train-worker-2 to gpu-node-")
            assert "deleting train-worker-0, train-worker-1" in message
            assert "with 0 of minMember 4 pods placed" in message
            assert {e.involved_object.name for e in events(cluster, "GangBindFailed", "Pod")} == {
                "train-worker-0", "train-worker-1"}
    finally:
        cluster.stop()


def test_a_volcano_job_whose_bind_was_refused_is_created_again_and_runs_whole(tmp_path: Path) -> None:
    cluster = without_scheduler(tmp_path / "c")
    try:
        with in_process_scheduler(cluster, victim="canary-worker-1") as api:
            custom = client.CustomObjectsApi(api_client(cluster))
            custom.create_namespaced_custom_object("batch.volcano.sh", "v1alpha1", "default", "jobs", canary_job())
            v1 = client.CoreV1Api(api_client(cluster))

            def running_whole() -> bool:
                pods = [p for p in v1.list_namespaced_pod("default").items if p.metadata.name.startswith("canary-")]
                return api.fired and len(pods) == 2 and all(
                    p.status.phase == "Running" and not p.metadata.deletion_timestamp for p in pods)
            wait_until(running_whole, 60, "the job's two ranks to run again, whole, after the refused bind")
            assert events(cluster, "GangBindFailed", "PodGroup") and events(cluster, "GangBindFailed", "Job")
            job = custom.get_namespaced_custom_object("batch.volcano.sh", "v1alpha1", "default", "jobs", "canary")
            assert job["status"]["retryCount"] >= 1  # PodEvicted -> RestartJob: the new ranks are a new epoch
    finally:
        cluster.stop()


class HoldsABinding(RestClient):
    """A real client of the real server that holds the Binding of pod ``held`` until ``release`` is set (a slow
    bind), and counts the Binding POSTs of each pod."""

    def __init__(self, cluster: Cluster, held: str) -> None:
        super().__init__(cluster.url, cluster.token, ca_file=cluster.ca_file)
        self.held = held
        self.holding = threading.Event()
        self.release = threading.Event()
        self.posts: Counter[str] = Counter()

    def create(self, path: str, body: dict, params: dict | None = None) -> dict:
        if path.endswith("/binding"):
            name = path.split("/")[-2]
            self.posts[name] += 1
            if name == self.held:
                self.holding.set()
                self.release.wait(60)
        return super().create(path, body, params)


def test_a_slow_bind_holds_up_neither_the_next_cycles_nor_other_gangs_and_each_pod_is_bound_once(
        tmp_path: Path) -> None:
    cluster = without_scheduler(tmp_path / "c")
    api = HoldsABinding(cluster, "first-worker-0")
    scheduler = SchedulerController(api, core.SchedulerConfig())
    manager = ControllerManager(api, [scheduler])
    try:
        manager.start()
        submit_gang(cluster, "first", workers=2)
        wait_until(api.holding.is_set, 30, "the scheduler to reach the held bind")
        submit_gang(cluster, "second", workers=2)
        wait_until(lambda: len(bound(cluster, "second-")) == 2, 30, "the second gang bound while a bind is held")
        assert bound(cluster, "first-") == {}  # the first gang's binds stay in order behind the held one
        api.release.set()
        wait_until(lambda: len(bound(cluster, "first-")) == 2, 30, "the first gang bound once its bind went through")
        placed = {**bound(cluster, "first-"), **bound(cluster, "second-")}
        assert len(set(placed.values())) == 4  # four 8-GPU pods on four nodes: no GPU booked twice
        assert dict(api.posts) == {"first-worker-0": 1, "first-worker-1": 1, "second-worker-0": 1, "second-worker-1": 1}
    finally:
        api.release.set()
        manager.stop()
        scheduler.close()
        api.close()
        cluster.stop()
