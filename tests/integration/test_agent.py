"""Node agents as real processes against a real API server, on loopback.

Every wait is on a condition with a deadline; no bare sleeps.
"""

from __future__ import annotations

import ipaddress
import signal
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient

from refplatform.client import ApiStatusError, RestClient, resource_path
from refplatform.cluster import Cluster, ClusterSpec, wait_until

pytestmark = pytest.mark.integration

HEARTBEAT = 0.5
NODES = ("gpu-node-0", "gpu-node-1")
DEADLINE = 30.0


def deserialize(obj: dict[str, Any], klass: str) -> Any:
    return ApiClient()._ApiClient__deserialize(obj, klass)  # type: ignore[attr-defined]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(ClusterSpec(tmp_path / "cluster", nodes=0, heartbeat=HEARTBEAT, bookmark_interval=0.5))
    c.start_server()
    try:
        c.start_agent(NODES[0], extra=("--node-group", "rack-a"))
        c.start_agent(NODES[1], gpus=4, gpu_model="A100-SXM4-40GB", extra=("--node-group", "rack-b"))
        yield c
    finally:
        c.stop()


@pytest.fixture
def api(cluster: Cluster) -> Iterator[RestClient]:
    with RestClient(cluster.url, cluster.token, ca_file=cluster.ca_file) as client:
        yield client


def node(api: RestClient, name: str) -> dict[str, Any] | None:
    try:
        return api.get(resource_path("", "v1", "nodes", None, name))
    except ApiStatusError as err:
        if err.not_found:
            return None
        raise


def ready(api: RestClient, name: str) -> bool:
    obj = node(api, name)
    conds = ((obj or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def renew_time(api: RestClient, name: str) -> datetime | None:
    try:
        lease = api.get(resource_path("coordination.k8s.io", "v1", "leases", "kube-node-lease", name))
    except ApiStatusError as err:
        if err.not_found:
            return None
        raise
    return deserialize(lease, "V1Lease").spec.renew_time


def kubelet_events(api: RestClient, pod: str, namespace: str = "default") -> list[dict[str, Any]]:
    """The Events a node agent recorded on ``pod``, oldest ``eventTime`` first (each a strict CoreV1Event)."""
    listed = api.list(resource_path("", "v1", "events", namespace), {"fieldSelector": f"involvedObject.name={pod}"})
    out = [e for e in listed["items"] if e.get("reportingComponent") == "kubelet"]
    for e in out:
        deserialize(e, "CoreV1Event")
    return sorted(out, key=lambda e: e["eventTime"])


def event_time(ev: dict[str, Any]) -> datetime:
    return deserialize(ev, "CoreV1Event").event_time  # type: ignore[no-any-return]


def alive_check(cluster: Cluster) -> None:
    for name, proc in cluster.agents.items():
        if proc.popen.poll() is not None and proc.popen.returncode != -signal.SIGKILL:
            raise AssertionError(f"agent {name} exited {proc.popen.returncode}:\n{proc.tail(40)}")


def wait_for(cluster: Cluster, predicate: Any, what: str, timeout: float = DEADLINE) -> None:
    def check() -> bool:
        alive_check(cluster)
        return bool(predicate())

    wait_until(check, timeout, what, interval=0.05)


def wait_renewals(cluster: Cluster, api: RestClient, name: str, count: int) -> list[datetime]:
    """Wait until ``name``'s lease has been renewed ``count`` more times; returns the renew times seen."""
    seen: list[datetime] = []

    def more() -> bool:
        t = renew_time(api, name)
        if t is not None and (not seen or t > seen[-1]):
            seen.append(t)
        return len(seen) > count

    wait_for(cluster, more, f"{count} lease renewals of {name}")
    return seen


def test_two_agents_register_heartbeat_run_pods_and_one_is_killed(cluster: Cluster, api: RestClient) -> None:
    # Both Nodes register and are Ready, with the shapes the strict official client accepts.
    for name in NODES:
        wait_for(cluster, lambda name=name: ready(api, name), f"node {name} Ready")
    n0 = deserialize(node(api, NODES[0]), "V1Node")  # type: ignore[arg-type]
    n1 = deserialize(node(api, NODES[1]), "V1Node")  # type: ignore[arg-type]
    assert n0.status.capacity["nvidia.com/gpu"] == "8" and n1.status.capacity["nvidia.com/gpu"] == "4"
    assert n0.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert n1.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    assert n1.metadata.labels["firedrill.dev/node-group"] == "rack-b"
    assert n0.status.node_info.kubelet_version and n0.status.daemon_endpoints.kubelet_endpoint.port > 0

    # Both leases keep renewing, about once a heartbeat.
    for name in NODES:
        times = wait_renewals(cluster, api, name, 2)
        lease = deserialize(
            api.get(resource_path("coordination.k8s.io", "v1", "leases", "kube-node-lease", name)), "V1Lease"
        )
        assert lease.spec.holder_identity == name and lease.spec.lease_duration_seconds == 2
        assert lease.metadata.owner_references[0].kind == "Node"
        assert (times[-1] - times[0]).total_seconds() < 10 * HEARTBEAT

    # SIGKILL one agent: its lease freezes while the other's keeps moving.
    cluster.agents[NODES[0]].kill()
    frozen = renew_time(api, NODES[0])
    wait_renewals(cluster, api, NODES[1], 4)
    assert renew_time(api, NODES[0]) == frozen

    # A pod bound to the live node runs, reports status, and its log comes through the API server.
    pods = resource_path("", "v1", "pods", "default")
    annotations = {
        "firedrill.dev/workload": "training",
        "firedrill.dev/step-seconds": "0.1",
        "firedrill.dev/checkpoint-every": "5",
    }
    api.create(pods, {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train-0", "annotations": annotations},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]},
    })
    api.create(pods + "/train-0/binding", {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "train-0"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": NODES[1]},
    })

    def pod() -> dict[str, Any]:
        return api.get(pods + "/train-0")

    running_seen: list[datetime] = []

    def running() -> bool:
        if pod()["status"].get("phase") != "Running":
            return False
        running_seen.append(datetime.now(UTC))  # the instant this test saw it Running
        return True

    wait_for(cluster, running, "pod train-0 Running")
    v1pod = deserialize(pod(), "V1Pod")
    assert v1pod.spec.node_name == NODES[1] and v1pod.status.host_ip == "127.0.0.1"
    assert ipaddress.ip_address(v1pod.status.pod_ip) in ipaddress.ip_network(cluster.pod_cidr(NODES[1]))
    cs = v1pod.status.container_statuses[0]
    assert cs.ready and cs.state.running.started_at is not None
    assert {c.type for c in v1pod.status.conditions if c.status == "True"} >= {"PodScheduled", "Initialized", "ContainersReady", "Ready"}

    # The agent's Events: Started at the instant it set the pod Running, then Resumed at its first step.
    wait_for(cluster, lambda: {"Started", "Resumed"} <= {e["reason"] for e in kubelet_events(api, "train-0")},
             "Started and Resumed Events on train-0")
    started, resumed = (next(e for e in kubelet_events(api, "train-0") if e["reason"] == r) for r in ("Started", "Resumed"))
    for ev in (started, resumed):
        ref = ev["involvedObject"]
        assert (ref["kind"], ref["name"], ref["uid"]) == ("Pod", "train-0", v1pod.metadata.uid)
        assert (ev["type"], ev["source"], ev["reportingInstance"]) == ("Normal", {"component": "kubelet", "host": NODES[1]}, NODES[1])
    assert started["message"] == "Started container main"
    assert resumed["message"] == "Resumed training at step 1 beyond checkpoint 0"
    t_started, t_resumed, seen = event_time(started), event_time(resumed), running_seen[0]
    assert t_started < t_resumed  # in order, each stamped at its own instant (microseconds)
    assert t_started <= seen and (seen - t_started).total_seconds() < 1.0, (t_started, seen)
    assert abs((t_resumed - seen).total_seconds()) < 1.0, (t_resumed, seen)
    assert cs.state.running.started_at == t_started.replace(microsecond=0)  # the same instant, to the second

    def log_text(**params: Any) -> str:
        return api.get_raw(pods + "/train-0/log", params).decode()

    wait_for(cluster, lambda: "checkpoint step=10" in log_text(), "checkpoint step=10 in the pod's log")
    lines = log_text().splitlines()
    assert "starting training" in lines[0] and any(" step=3 loss=" in ln for ln in lines)
    assert len(log_text(tailLines=2).splitlines()) == 2
    wait_for(
        cluster,
        lambda: int((pod()["metadata"].get("annotations") or {}).get("firedrill.dev/checkpoint-step", "0")) >= 10,
        "progress annotations",
    )
    log_file = cluster.data_dir / "logs" / NODES[1] / "default_train-0_main.log"
    assert "checkpoint step=5" in log_file.read_text()

    # Graceful delete: the agent stops the workload and deletes the pod itself.
    deleting = api.delete(pods + "/train-0")
    assert deleting.get("metadata", {}).get("deletionTimestamp")

    def gone() -> bool:
        try:
            pod()
        except ApiStatusError as err:
            return err.not_found
        return False

    wait_for(cluster, gone, "the agent to delete train-0")
    assert "received SIGTERM" in log_file.read_text().splitlines()[-1]
    wait_for(cluster, lambda: any(e["reason"] == "Killing" for e in kubelet_events(api, "train-0")), "a Killing Event")
    killing = next(e for e in kubelet_events(api, "train-0") if e["reason"] == "Killing")
    assert killing["message"] == "Stopping container main" and event_time(killing) > t_resumed

    # SIGTERM: a clean exit.
    assert cluster.agents[NODES[1]].stop(timeout=10) == 0


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_agent_survives_an_api_server_restart_and_its_own(tmp_path: Path) -> None:
    cluster = Cluster(ClusterSpec(tmp_path / "cluster", nodes=0, heartbeat=HEARTBEAT, port=free_port()))
    cluster.start_server()
    try:
        cluster.start_agent(NODES[0])
        with RestClient(cluster.url, cluster.token, ca_file=cluster.ca_file) as api:
            wait_for(cluster, lambda: ready(api, NODES[0]), "node Ready")
            pods = resource_path("", "v1", "pods", "default")
            api.create(pods, {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "t", "annotations": {"firedrill.dev/workload": "training", "firedrill.dev/step-seconds": "0.1"}},
                "spec": {"nodeName": NODES[0], "containers": [{"name": "main", "image": "busybox"}]},
            })
            wait_for(cluster, lambda: api.get(pods + "/t")["status"].get("phase") == "Running", "pod Running")

            # The API server goes away and comes back on the same port: heartbeats resume.
            assert cluster.server is not None
            cluster.server.stop()
            cluster.start_server()
            wait_renewals(cluster, api, NODES[0], 2)
            wait_for(cluster, lambda: ready(api, NODES[0]), "node Ready after the server restart")

            # The agent dies and comes back: the running pod's container restarts, resuming from its checkpoint.
            wait_for(
                cluster,
                lambda: int((api.get(pods + "/t")["metadata"].get("annotations") or {}).get("firedrill.dev/checkpoint-step", "0")) >= 10,
                "a checkpoint",
            )
            cluster.agents[NODES[0]].kill()
            boot_before = node(api, NODES[0])["metadata"]["annotations"]["firedrill.dev/agent-boot-id"]  # type: ignore[index]
            cluster.start_agent(NODES[0])

            def restarted() -> bool:
                statuses = api.get(pods + "/t")["status"].get("containerStatuses") or []
                return bool(statuses) and statuses[0].get("restartCount") == 1 and "running" in statuses[0]["state"]

            wait_for(cluster, restarted, "the container to restart under the new agent")
            wait_for(
                cluster,
                lambda: node(api, NODES[0])["metadata"]["annotations"]["firedrill.dev/agent-boot-id"] != boot_before,  # type: ignore[index]
                "the node to be updated by the new agent",
            )
            log = api.get_raw(pods + "/t/log").decode()
            assert "resumed from checkpoint step=" in log
            assert log.count("starting training") == 2
    finally:
        cluster.stop()


# -- ranks of a job: gang-synchronous steps, checkpoint records, partition, fencing, hang -----

JOBS = resource_path("batch.volcano.sh", "v1alpha1", "jobs", "default")
PODS = resource_path("", "v1", "pods", "default")


def healthz(cluster: Cluster, name: str) -> int | None:
    """The agent's /healthz status code (None: no answer)."""
    import json

    import urllib3

    try:
        port = json.loads((cluster.data_dir / "agents" / f"{name}.json").read_text())["logPort"]
        return int(urllib3.request("GET", f"http://127.0.0.1:{port}/healthz", timeout=2.0, retries=False,
                                   headers={"Authorization": f"Bearer {cluster.token}"}).status)
    except (OSError, ValueError, KeyError, urllib3.exceptions.HTTPError):
        return None


def create_gang(api: RestClient, job: str = "j", world: int = 2) -> None:
    """What the Volcano job controller does: the Job (epoch 0) and one pod per rank, unbound."""
    api.create(JOBS, {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": job, "annotations": {"firedrill.dev/epoch": "0"}},
        "spec": {"minAvailable": world, "tasks": [{
            "name": "worker", "replicas": world,
            "template": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}},
        }]},
    })
    for rank in range(world):
        api.create(PODS, {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{job}-worker-{rank}",
                "labels": {"volcano.sh/job-name": job, "volcano.sh/task-spec": "worker"},
                "annotations": {
                    "scheduling.k8s.io/group-name": job,
                    "volcano.sh/task-index": str(rank),
                    "firedrill.dev/rank": str(rank),
                    "firedrill.dev/world-size": str(world),
                    "firedrill.dev/epoch": "0",
                    "firedrill.dev/workload": "training",
                    "firedrill.dev/step-seconds": "0.1",
                    "firedrill.dev/checkpoint-every": "5",
                    "firedrill.dev/comm-stall-share": "0.2",
                },
            },
            "spec": {"containers": [{"name": "main", "image": "busybox"}]},
        })


def bind(api: RestClient, pod: str, node_name: str) -> None:
    api.create(f"{PODS}/{pod}/binding", {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
    })


def job_annotations(api: RestClient, job: str = "j") -> dict[str, str]:
    return api.get(f"{JOBS}/{job}")["metadata"].get("annotations") or {}


def rank_log(cluster: Cluster, node_name: str, pod: str) -> list[str]:
    """The container's log texts (the agent's file, so it is readable while the node is cut off)."""
    path = cluster.data_dir / "logs" / node_name / f"default_{pod}_main.log"
    try:
        return [line.split(" ", 1)[1] for line in path.read_text().splitlines()]
    except FileNotFoundError:
        return []


def has_line(cluster: Cluster, node_name: str, pod: str, text: str) -> bool:
    return any(text in line for line in rank_log(cluster, node_name, pod))


def pod_gone(api: RestClient, name: str) -> bool:
    try:
        api.get(f"{PODS}/{name}")
    except ApiStatusError as err:
        return err.not_found
    return False


def step_times(lines: list[str]) -> list[float]:
    return [datetime.fromisoformat(line.split(" ", 1)[0]).timestamp() for line in lines if " loss=" in line]


@pytest.fixture
def gang_cluster(tmp_path: Path) -> Iterator[tuple[Cluster, RestClient]]:
    c = Cluster(ClusterSpec(tmp_path / "cluster", nodes=0, heartbeat=HEARTBEAT, controllers=()))
    c.start_server()
    try:
        for name in NODES:
            c.start_agent(name)
        with RestClient(c.url, c.token, ca_file=c.ca_file) as client:
            for name in NODES:
                wait_for(c, lambda name=name: ready(client, name), f"node {name} Ready")
            create_gang(client)
            yield c, client
    finally:
        c.stop()


def test_a_gang_steps_together_and_a_partitioned_or_replaced_rank_stops(gang_cluster: tuple[Cluster, RestClient]) -> None:
    cluster, api = gang_cluster
    n0, n1 = NODES
    # Rank 0 alone: it resumes from the (empty) record, then waits for its peer without stepping.
    bind(api, "j-worker-0", n0)
    wait_for(cluster, lambda: has_line(cluster, n0, "j-worker-0", "stalled: waiting for peers (1/2 ranks of epoch 0 running)"),
             "rank 0 to wait for its peer")
    log0 = rank_log(cluster, n0, "j-worker-0")
    assert any(line.endswith("resumed from checkpoint step=0") for line in log0)
    assert not any(" loss=" in line for line in log0)

    # The whole gang: both ranks step, rank 0 records checkpoints on the Job with the fenced patch.
    bind(api, "j-worker-1", n1)
    wait_for(cluster, lambda: int(job_annotations(api).get("firedrill.dev/checkpoint-step", "0")) >= 10, "a checkpoint record")
    ann = job_annotations(api)
    assert datetime.fromisoformat(ann["firedrill.dev/checkpoint-time"]).microsecond >= 0
    assert ann["firedrill.dev/checkpoint-time"].endswith("Z") and len(ann["firedrill.dev/checkpoint-time"]) == 27
    wait_for(cluster, lambda: has_line(cluster, n1, "j-worker-1", "step=10 loss="), "rank 1 at step 10")
    assert not has_line(cluster, n1, "j-worker-1", "checkpoint record")  # only rank 0 writes it
    wait_for(cluster, lambda: float((api.get(f"{PODS}/j-worker-1")["metadata"].get("annotations") or {})
                                    .get("firedrill.dev/comm-stall-seconds", "0")) > 0, "stall seconds published")

    # SIGUSR1: node 1 is cut off.  Its health check fails, its lease freezes, its rank stalls on a stale view.
    assert healthz(cluster, n1) == 200
    cluster.agents[n1].signal(signal.SIGUSR1)
    wait_for(cluster, lambda: healthz(cluster, n1) == 503, "node 1 unhealthy")
    assert healthz(cluster, n0) == 200
    wait_for(cluster, lambda: has_line(cluster, n1, "j-worker-1", "stalled: peer view stale"), "rank 1 to stall")
    frozen = renew_time(api, n1)
    wait_renewals(cluster, api, n0, 2)
    assert renew_time(api, n1) == frozen

    # RestartJob while node 1 is away: epoch 1, the old pods deleted (node 1's stays Terminating).
    restarted = api.patch(f"{JOBS}/j", {"metadata": {"annotations": {"firedrill.dev/epoch": "1"}}})
    record_at_restart = restarted["metadata"]["annotations"]["firedrill.dev/checkpoint-step"]
    api.delete(f"{PODS}/j-worker-1")
    # Rank 0, still up, learns it was replaced: it stops at once, Failed with reason Fenced.
    wait_for(cluster, lambda: api.get(f"{PODS}/j-worker-0")["status"].get("phase") == "Failed", "rank 0 fenced")
    pod0 = api.get(f"{PODS}/j-worker-0")
    assert pod0["status"]["reason"] == "Fenced"
    assert pod0["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] == "Fenced"
    assert rank_log(cluster, n0, "j-worker-0")[-1].endswith("fenced: job restarted at epoch 1; rank 0 of epoch 0 stops")
    wait_for(cluster, lambda: "Fenced" in {e["reason"] for e in kubelet_events(api, "j-worker-0")}, "a Fenced Event")
    assert [(e["reason"], e["type"]) for e in kubelet_events(api, "j-worker-0")] == [
        ("Started", "Normal"), ("Resumed", "Normal"), ("Fenced", "Warning")]
    fenced = kubelet_events(api, "j-worker-0")[-1]
    assert fenced["message"] == pod0["status"]["message"] and fenced["source"]["host"] == n0
    assert job_annotations(api)["firedrill.dev/checkpoint-step"] == record_at_restart  # nothing written after
    # Rank 0 stepped on while node 1 was away (its pod still showed Running), but it never recorded a
    # checkpoint that rank 1 had not saved: the record claims no step the whole gang did not do.
    saved1 = [int(line.rsplit("=", 1)[1]) for line in rank_log(cluster, n1, "j-worker-1") if " checkpoint step=" in line]
    assert 10 <= int(record_at_restart) <= max(saved1)

    # SIGUSR2 heals node 1: it resyncs, stops and deletes its deleted pod, and is healthy again.
    cluster.agents[n1].signal(signal.SIGUSR2)
    wait_for(cluster, lambda: pod_gone(api, "j-worker-1"), "node 1 to finish deleting its pod")
    wait_for(cluster, lambda: healthz(cluster, n1) == 200, "node 1 healthy again")
    wait_renewals(cluster, api, n1, 1)
    log1 = rank_log(cluster, n1, "j-worker-1")
    stale = next(i for i, line in enumerate(log1) if "stalled: peer view stale" in line)
    assert not any(" loss=" in line for line in log1[stale:])  # never trained on after the view went stale
    assert "received SIGTERM" in log1[-1] or "fenced:" in log1[-1]
    agent_log = cluster.agents[n1].log_path.read_text()
    assert "network partition: all API traffic" in agent_log and "network partition healed" in agent_log


def test_a_frozen_agent_stops_pods_deleted_while_it_hung_without_training_on(gang_cluster: tuple[Cluster, RestClient]) -> None:
    import time

    cluster, api = gang_cluster
    n0, n1 = NODES
    bind(api, "j-worker-0", n0)
    bind(api, "j-worker-1", n1)
    wait_for(cluster, lambda: has_line(cluster, n1, "j-worker-1", "step=5 loss="), "the gang to step")

    cluster.agents[n1].signal(signal.SIGSTOP)
    stopped_at = time.time()
    try:
        assert healthz(cluster, n1) is None  # a hung agent does not answer at all
        api.delete(f"{PODS}/j-worker-1")  # stays Terminating: its node is hung
        # Its peer sees a rank terminating and stalls; node 1's lease goes well past the freeze threshold.
        wait_for(cluster, lambda: has_line(cluster, n0, "j-worker-0", "stalled: waiting for peers"), "rank 0 to stall")
        wait_for(cluster, lambda: (renew_time(api, n0) - renew_time(api, n1)).total_seconds() > 3.0,  # type: ignore[operator]
                 "node 1's lease to fall 3 s behind")
    finally:
        cluster.agents[n1].signal(signal.SIGCONT)
    wait_for(cluster, lambda: pod_gone(api, "j-worker-1"), "node 1 to stop and delete the pod deleted while it hung")
    log1 = rank_log(cluster, n1, "j-worker-1")
    assert "received SIGTERM" in log1[-1] or "fenced:" in log1[-1]
    late = [t for t in step_times(log1) if t > stopped_at + 0.05]
    assert late == []  # no step credited to the frozen time or after it
    wait_for(cluster, lambda: healthz(cluster, n1) == 200, "node 1 healthy again")
    assert "frozen for" in cluster.agents[n1].log_path.read_text()


def scrape_metrics(cluster: Cluster, name: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """The agent's /metrics, parsed: family name -> [(labels, value)] (empty when it does not answer)."""
    import json

    import urllib3
    from prometheus_client.parser import text_string_to_metric_families

    try:
        port = json.loads((cluster.data_dir / "agents" / f"{name}.json").read_text())["logPort"]
        resp = urllib3.request("GET", f"http://127.0.0.1:{port}/metrics", timeout=2.0, retries=False,
                               headers={"Authorization": f"Bearer {cluster.token}"})  # the agent wants a caller
    except (OSError, ValueError, KeyError, urllib3.exceptions.HTTPError):
        return {}
    if resp.status != 200:
        return {}
    return {f.name: [(s.labels, s.value) for s in f.samples] for f in text_string_to_metric_families(resp.data.decode())}


def test_a_training_pods_gpu_shows_gr_engine_active_of_one_minus_input_share(tmp_path: Path) -> None:
    c = Cluster(ClusterSpec(tmp_path / "cluster", nodes=0, heartbeat=HEARTBEAT, bookmark_interval=0.5))
    c.start_server()
    try:
        c.start_agent(NODES[0], gpus=2)
        with RestClient(c.url, c.token, ca_file=c.ca_file) as api:
            wait_for(c, lambda: ready(api, NODES[0]), "node Ready")
            pods = resource_path("", "v1", "pods", "default")
            api.create(pods, {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "train-m", "annotations": {
                    "firedrill.dev/workload": "training", "firedrill.dev/step-seconds": "0.1",
                    "firedrill.dev/input-stall-share": "0.3", "firedrill.dev/comm-stall-share": "0.2"}},
                "spec": {"containers": [{"name": "main", "image": "busybox:1.36",
                                         "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            })
            bind(api, "train-m", NODES[0])

            def held() -> bool:
                gr = scrape_metrics(c, NODES[0]).get("DCGM_FI_PROF_GR_ENGINE_ACTIVE", [])
                return any(labels["pod"] == "train-m" and value > 0 for labels, value in gr)

            wait_for(c, held, "the training pod's GPU active in /metrics")
            m = scrape_metrics(c, NODES[0])
        gr = {labels["gpu"]: (labels, value) for labels, value in m["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]}
        assert set(gr) == {"0", "1"}
        labels, value = gr["0"]
        assert (labels["pod"], labels["namespace"], labels["container"], labels["Hostname"]) == (
            "train-m", "default", "main", NODES[0])
        assert value == pytest.approx(1 - 0.3)
        assert gr["1"][0]["pod"] == "" and gr["1"][1] == 0.0
        tensor = {labels["gpu"]: value for labels, value in m["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"]}
        assert tensor["0"] == pytest.approx(0.4 * (1 - 0.3 - 0.2))
    finally:
        c.stop()
