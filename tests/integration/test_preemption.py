"""Priority preemption on a real reference cluster (issue 14 item 2): inference takes the GPUs training fills.

One node of 2 GPUs.  Two PriorityClasses through the official client: ``training-low`` (100) and
``inference-high`` (1,000,000).  A Volcano Job of 2 training canary ranks x 1 GPU at ``training-low``, started
with ``--checkpoint-on-sigterm`` and a grace period of 10 s, fills the GPUs.  A Deployment of one
``inference-high`` inference canary needing 1 GPU arrives:

- honest scheduler: the preemptor is nominated to the node, both ranks (the whole gang, though one GPU would
  do) get ``DisruptionTarget`` (reason ``PreemptionByScheduler``) and a ``Preempted`` Event and are deleted
  gracefully; rank 0 logs its SIGTERM checkpoint of the last completed step and exits 143; the victims are
  gone; the inference pod runs on the freed node.  The Volcano job restarts its ranks, which stay Pending
  (strictly lower priority never preempts back).
- ``no-preemption`` defect: the inference pod is marked Unschedulable and stays Pending while training goes on
  (waited on the canary's own step lines, not a sleep); nothing is evicted.

Every wait has a deadline; a watch records every version of the pods, so transient states are checked.
kubectl (when installed) creates and lists PriorityClasses, and a pod of an unknown class is refused.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch

from refplatform.cluster import Cluster, ClusterSpec, wait_until
from tests.integration.kube import api_client

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
NS = "default"
NODE = "gpu-node-0"
KUBECTL = shutil.which("kubectl")
Line = dict[str, Any]


def start(tmp: Path, defects: tuple[str, ...] = ()) -> Cluster:
    cluster = Cluster(ClusterSpec(tmp, nodes=1, gpus_per_node=2, heartbeat=0.5, defects=defects,
                                  controllers=("scheduler", "vcjob", "deployment", "replicaset")))
    cluster.start()
    v1 = client.CoreV1Api(api_client(cluster))
    wait_until(lambda: any(c.type == "Ready" and c.status == "True"
                           for n in v1.list_node().items for c in n.status.conditions or []), 30, "a Ready node")
    return cluster


@pytest.fixture
def honest(tmp_path: Path) -> Iterator[Cluster]:
    cluster = start(tmp_path / "honest")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def defective(tmp_path: Path) -> Iterator[Cluster]:
    cluster = start(tmp_path / "defect", ("no-preemption",))
    try:
        yield cluster
    finally:
        cluster.stop()


def priority_classes(api: client.ApiClient) -> None:
    sched = client.SchedulingV1Api(api)
    for name, value in (("training-low", 100), ("inference-high", 1_000_000)):
        sched.create_priority_class({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                     "metadata": {"name": name}, "value": value})


def _field(path: str) -> dict[str, Any]:
    return {"valueFrom": {"fieldRef": {"fieldPath": path}}}


def training_job() -> dict[str, Any]:
    """A Volcano Job of 2 canary ranks x 1 GPU, checkpoints on the reference platform's nfs, rank and generation
    from Volcano's annotations (as drills/workloads/canaryjob.py writes them), restarted whole when a rank is evicted."""
    root = "/firedrill/preemption/train"
    container = {
        "name": "main", "image": "firedrill/canary", "command": ["python", "-m", "drills.canary"],
        "args": ["train", "--compute-seconds", "0.05", "--checkpoint-every", "1000", "--checkpoint-on-sigterm",
                 "--checkpoint-dir", f"{root}/checkpoints", "--rendezvous-dir", f"{root}/rendezvous",
                 "--rendezvous-timeout", "30"],
        "env": [{"name": "PYTHONPATH", "value": str(REPO)}, {"name": "WORLD_SIZE", "value": "2"},
                {"name": "RANK", **_field("metadata.annotations['volcano.sh/task-index']")},
                {"name": "FIREDRILL_GENERATION", **_field("metadata.annotations['volcano.sh/job-version']")},
                {"name": "POD_IP", **_field("status.podIP")}],
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
        "volumeMounts": [{"name": "shared", "mountPath": "/firedrill"}]}
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "train"},
            "spec": {"minAvailable": 2, "maxRetry": 3, "queue": "default", "schedulerName": "volcano",
                     "priorityClassName": "training-low",
                     "policies": [{"event": "PodEvicted", "action": "RestartJob"}],
                     "tasks": [{"name": "worker", "replicas": 2, "template": {"spec": {
                         "restartPolicy": "Never", "terminationGracePeriodSeconds": 10, "containers": [container],
                         "volumes": [{"name": "shared",
                                      "nfs": {"server": "refplatform-nfs", "path": "/firedrill"}}]}}}]}}


def inference_deployment() -> dict[str, Any]:
    container = {"name": "serve", "image": "firedrill-inference",
                 "command": ["python", "-m", "drills.inference", "serve", "--port", "8000", "--model", "preempt",
                             "--ttft-seconds", "0.01", "--tpot-seconds", "0.001"],
                 "env": [{"name": "PYTHONPATH", "value": str(REPO)}, {"name": "POD_IP", **_field("status.podIP")}],
                 "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "infer"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "infer"}},
                     "template": {"metadata": {"labels": {"app": "infer"}},
                                  "spec": {"priorityClassName": "inference-high", "containers": [container]}}}}


class PodWatch:
    """Every version of every pod of the namespace, from a watch opened before the story starts."""

    def __init__(self, api: client.ApiClient) -> None:
        self.core = client.CoreV1Api(api)
        self.seen: list[tuple[str, client.V1Pod]] = []
        self._watch = watch.Watch()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for event in self._watch.stream(self.core.list_namespaced_pod, NS, timeout_seconds=120):
                with self._lock:
                    self.seen.append((event["type"], event["object"]))
        except Exception:  # the cluster stopping under the watch ends it
            return

    def versions(self, uid: str) -> list[tuple[str, client.V1Pod]]:
        with self._lock:
            return [(t, p) for t, p in self.seen if p.metadata.uid == uid]

    def stop(self) -> None:
        self._watch.stop()


class LogFollower:
    """A pod's log, followed from the agent as it is written (a deleted pod's log is gone afterwards)."""

    def __init__(self, api: client.ApiClient, pod: str) -> None:
        self.pod = pod
        self.lines: list[Line] = []
        self._resp = client.CoreV1Api(api).read_namespaced_pod_log(pod, NS, follow=True, _preload_content=False)
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        buf = b""
        try:
            for chunk in self._resp.stream(4096):
                buf += chunk
                *complete, buf = buf.split(b"\n")
                for raw in complete:
                    try:
                        line = json.loads(raw)
                    except ValueError:
                        continue
                    if isinstance(line, dict):
                        with self._lock:
                            self.lines.append(line)
        except Exception:  # the stream ends with the container (or the cluster)
            return

    def events(self, event: str, where: Callable[[Line], bool] = lambda line: True) -> list[Line]:
        with self._lock:
            return [line for line in self.lines if line.get("event") == event and where(line)]

    def last_step(self) -> int:
        steps = self.events("step")
        return steps[-1]["step"] if steps else 0

    def close(self) -> None:
        self._resp.release_conn()


def running(core: client.CoreV1Api, prefix: str) -> list[client.V1Pod]:
    return [p for p in core.list_namespaced_pod(NS).items if p.metadata.name.startswith(prefix)
            and p.status.phase == "Running" and p.metadata.deletion_timestamp is None]


def fill_with_training(cluster: Cluster) -> tuple[client.ApiClient, list[client.V1Pod], LogFollower]:
    """PriorityClasses, the training job on both GPUs, its ranks stepping; rank 0's log followed."""
    api = api_client(cluster)
    core = client.CoreV1Api(api)
    priority_classes(api)
    client.CustomObjectsApi(api).create_namespaced_custom_object("batch.volcano.sh", "v1alpha1", NS, "jobs",
                                                                 training_job())
    wait_until(lambda: len(running(core, "train-")) == 2, 30, "both training ranks Running")
    ranks = sorted(running(core, "train-"), key=lambda p: p.metadata.name)
    assert [p.spec.priority for p in ranks] == [100, 100]  # the Priority admission resolved the job's class
    assert [p.spec.node_name for p in ranks] == [NODE, NODE]
    rank0 = LogFollower(api, "train-worker-0")
    wait_until(lambda: rank0.last_step() >= 3, 30, "rank 0 to complete 3 steps")
    return api, ranks, rank0


def inference_pod(core: client.CoreV1Api) -> client.V1Pod | None:
    pods = [p for p in core.list_namespaced_pod(NS, label_selector="app=infer").items]
    return pods[0] if pods else None


def test_inference_preempts_training_which_checkpoints_on_sigterm(honest: Cluster) -> None:
    api, ranks, rank0 = fill_with_training(honest)
    core = client.CoreV1Api(api)
    pods = PodWatch(api)
    try:
        client.AppsV1Api(api).create_namespaced_deployment(NS, inference_deployment())

        # rank 0 checkpoints the last step it completed, through its normal path, and exits 143
        wait_until(lambda: bool(rank0.events("exit")), 30, "rank 0 to exit")
        (sigterm,) = rank0.events("checkpoint", lambda line: line.get("trigger") == "sigterm")
        (exit_line,) = rank0.events("exit")
        assert (exit_line["code"], exit_line["reason"]) == (143, "sigterm")
        assert sigterm["step"] == rank0.last_step() == exit_line["step"] >= 3
        nfs = honest.data_dir / "nfs" / "refplatform-nfs" / "firedrill" / "preemption" / "train" / "checkpoints"
        assert (nfs / sigterm["file"]).is_file()

        # the victims (the whole gang) are gone; the preemptor runs on the node they freed
        victims = {p.metadata.uid for p in ranks}
        wait_until(lambda: not victims & {p.metadata.uid for p in core.list_namespaced_pod(NS).items}, 30,
                   "both preempted ranks to be gone")
        wait_until(lambda: (pod := inference_pod(core)) is not None and pod.status.phase == "Running", 30,
                   "the inference pod to run")
        infer = inference_pod(core)
        assert infer is not None and infer.spec.node_name == NODE and infer.spec.priority == 1_000_000
        assert infer.spec.preemption_policy == "PreemptLowerPriority"
        assert any(p.status.nominated_node_name == NODE for _, p in pods.versions(infer.metadata.uid)), \
            "the preemptor was never nominated to the node"

        # each victim was marked DisruptionTarget by the scheduler, deleted gracefully, and got a Preempted Event
        for rank in ranks:
            versions = [p for _, p in pods.versions(rank.metadata.uid)]
            marked = [c for p in versions for c in p.status.conditions or [] if c.type == "DisruptionTarget"]
            assert marked and marked[-1].status == "True" and marked[-1].reason == "PreemptionByScheduler", \
                f"{rank.metadata.name}: conditions seen {[(c.type, c.reason) for c in marked]}"
            graces = {p.metadata.deletion_grace_period_seconds for p in versions if p.metadata.deletion_timestamp}
            assert graces == {10}, f"{rank.metadata.name} deleted with grace {graces}, not its own 10 s"
        events = [e for e in core.list_namespaced_event(NS).items if e.reason == "Preempted"]
        assert {e.involved_object.uid for e in events} == victims
        assert all(f"on node {NODE}" in e.message for e in events)

        # the job's restarted ranks stay Pending: strictly lower priority never preempts back
        wait_until(lambda: len([p for p in core.list_namespaced_pod(NS).items if p.metadata.name.startswith("train-")
                                and any(c.type == "PodScheduled" and c.status == "False"
                                        for c in p.status.conditions or [])]) == 2, 30,
                   "the restarted ranks to be marked Unschedulable")
        assert inference_pod(core).metadata.deletion_timestamp is None  # type: ignore[union-attr]
    finally:
        pods.stop()
        rank0.close()


def test_with_no_preemption_the_inference_pod_stays_pending(defective: Cluster) -> None:
    api, ranks, rank0 = fill_with_training(defective)
    core = client.CoreV1Api(api)
    try:
        client.AppsV1Api(api).create_namespaced_deployment(NS, inference_deployment())

        def unschedulable() -> bool:
            pod = inference_pod(core)
            return pod is not None and any(c.type == "PodScheduled" and c.status == "False"
                                           and c.reason == "Unschedulable" for c in pod.status.conditions or [])
        wait_until(unschedulable, 30, "the inference pod to be marked Unschedulable")
        # time passes on the canary's own clock: 20 more steps while the pod waits (the scheduler runs every
        # second and on every change, so it has had its chances)
        mark = rank0.last_step()
        wait_until(lambda: rank0.last_step() >= mark + 20, 30, "rank 0 to train 20 more steps")

        infer = inference_pod(core)
        assert infer is not None and infer.spec.node_name is None and infer.status.phase == "Pending"
        assert infer.spec.priority == 1_000_000 and not infer.status.nominated_node_name
        still = {p.metadata.uid: p for p in core.list_namespaced_pod(NS).items}
        for rank in ranks:
            assert rank.metadata.uid in still and still[rank.metadata.uid].metadata.deletion_timestamp is None
        assert [e for e in core.list_namespaced_event(NS).items if e.reason == "Preempted"] == []
        assert rank0.events("checkpoint") == [] and rank0.events("exit") == []
    finally:
        rank0.close()


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
def test_kubectl_creates_and_lists_priority_classes(tmp_path: Path) -> None:
    """kubectl sends PriorityClasses as protobuf and prints the server's table; pods resolve their class."""
    cluster = Cluster(ClusterSpec(tmp_path / "kubectl", nodes=1, gpus_per_node=2, controllers=()))
    cluster.start()

    def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
        assert KUBECTL is not None
        return subprocess.run([KUBECTL, "--kubeconfig", str(cluster.kubeconfig), "--cache-dir",
                               str(tmp_path / "cache"), *args], capture_output=True, text=True, timeout=60)
    try:
        made = kubectl("create", "priorityclass", "inference-high", "--value=1000000", "--description=serve")
        assert made.returncode == 0, made.stderr
        made = kubectl("create", "priorityclass", "fill", "--value=10", "--global-default", "--preemption-policy=Never")
        assert made.returncode == 0, made.stderr
        huge = kubectl("create", "priorityclass", "huge", "--value=2000000000")
        assert huge.returncode == 1 and "maximum allowed value of a user defined priority is 1000000000" in huge.stderr
        table = kubectl("get", "pc", "-o", "wide")
        assert table.returncode == 0, table.stderr
        rows = [line.split() for line in table.stdout.splitlines()]
        assert rows[0] == ["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"]
        by_name = {row[0]: row for row in rows[1:]}
        assert by_name["fill"][1:3] == ["10", "true"] and by_name["fill"][4] == "Never"
        assert by_name["system-node-critical"][1] == "2000001000"
        unknown = kubectl("run", "x", "--image=i", "--overrides", '{"spec":{"priorityClassName":"foo"}}')
        assert unknown.returncode == 1
        assert 'pods "x" is forbidden: no PriorityClass with name foo was found' in unknown.stderr
        assert kubectl("run", "y", "--image=i").returncode == 0  # no class: the global default
        got = kubectl("get", "pod", "y", "-o", "jsonpath={.spec.priority} {.spec.preemptionPolicy} "
                                               "{.spec.priorityClassName}")
        assert got.stdout.split() == ["10", "Never", "fill"]
    finally:
        cluster.stop()
