"""A Deployment of the inference canary behind a Service of type LoadBalancer, on the embedded platform (issue 14).

Through the official client: a Deployment of 2 replicas running ``python -m drills.inference serve --port 8000``
(each pod binds its own loopback ``POD_IP``), a Service of type LoadBalancer.  Checked: the Deployment owns one
ReplicaSet that keeps 2 pods with owner references and writes its status; the EndpointSlice lists both pods'
IPs with port 8000; completions sent to the loopback load balancer are answered, and both replicas serve some
(their own ``served`` log lines say so, five each); a deleted pod is replaced, the slice drops its IP, and
completions are still answered (with a stated retry policy: the balancer learns of the deletion an informer hop
after the slice, and the deleted replica drains with 503, as on any cluster); a template change rolls out to a
new ReplicaSet.  ``kubectl create -f`` and ``kubectl get`` handle the new kinds.  Every wait has a deadline.
"""

from __future__ import annotations

import http.client
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from refplatform.cluster import Cluster, ClusterSpec, wait_until
from refplatform.controllers.loadbalancer import listen_port
from tests.integration.kube import api_client

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
NS = "default"
KUBECTL = shutil.which("kubectl")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(ClusterSpec(tmp_path_factory.mktemp("deploy"), nodes=2, heartbeat=0.5,
                            controllers=("scheduler", "deployment", "replicaset", "endpoints", "loadbalancer")))
    c.start()
    try:
        yield c
    finally:
        c.stop()


def deployment() -> dict[str, Any]:
    container = {"name": "serve", "image": "firedrill-inference",
                 "command": ["python", "-m", "drills.inference", "serve", "--port", "8000", "--model", "deploy-test",
                             "--ttft-seconds", "0.01", "--tpot-seconds", "0.001"],
                 "ports": [{"name": "http", "containerPort": 8000}],
                 "env": [{"name": "PYTHONPATH", "value": str(REPO)},
                         {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "infer"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "infer"}},
                     "template": {"metadata": {"labels": {"app": "infer"}}, "spec": {"containers": [container]}}}}


SERVICE = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "infer"},
           "spec": {"type": "LoadBalancer", "selector": {"app": "infer"},
                    "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}


def complete(port: int, request_id: str) -> int:
    """One non-streaming completion through the load balancer; the HTTP status (0: the connection failed)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", "/v1/completions", body=json.dumps({"prompt": "hi", "max_tokens": 2}),
                     headers={"Content-Type": "application/json", "X-Request-Id": request_id})
        resp = conn.getresponse()
        body = json.loads(resp.read())
        if resp.status == 200:
            assert body["choices"][0]["text"], body
        return resp.status
    except (OSError, http.client.HTTPException, ValueError):
        return 0
    finally:
        conn.close()


def complete_retrying(port: int, request_id: str) -> int:
    """The load generator's stated retry policy: a request refused by a draining replica (503) or whose
    connection failed is sent again, twice at most; the last status."""
    status = 0
    for attempt in range(3):
        status = complete(port, f"{request_id}-{attempt}" if attempt else request_id)
        if status not in (0, 503):
            return status
    return status


def logged(core: client.CoreV1Api, pod: str, event: str) -> list[dict[str, Any]]:
    out = []
    for line in core.read_namespaced_pod_log(pod, NS).splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("event") == event:
            out.append(entry)
    return out


def served_by(core: client.CoreV1Api, pod: str) -> set[str]:
    return {entry["request_id"] for entry in logged(core, pod, "served")}


def running_pods(core: client.CoreV1Api) -> list[client.V1Pod]:
    return [p for p in core.list_namespaced_pod(NS, label_selector="app=infer").items
            if p.metadata.deletion_timestamp is None and p.status.phase == "Running" and p.status.pod_ip]


def slice_ips(cluster: Cluster) -> tuple[set[str], list[int]]:
    with cluster.http_client() as http:
        es = http.get(f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices/infer")
    if es.status_code != 200:
        return set(), []
    doc = es.json()
    return ({a for e in doc.get("endpoints") or [] if e["conditions"]["ready"] for a in e["addresses"]},
            [p["port"] for p in doc.get("ports") or []])


def test_deployment_service_and_load_balancer_serve_and_heal(cluster: Cluster, tmp_path: Path) -> None:
    api = api_client(cluster)
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    apps.create_namespaced_deployment(NS, deployment())
    core.create_namespaced_service(NS, SERVICE)

    # the Deployment owns one ReplicaSet, which owns 2 running pods with their own loopback IPs
    wait_until(lambda: len(running_pods(core)) == 2, 60, "2 running pods of the Deployment")
    sets = apps.list_namespaced_replica_set(NS).items
    assert len(sets) == 1 and sets[0].metadata.owner_references[0].kind == "Deployment"
    rs = sets[0]
    pods = running_pods(core)
    assert {p.metadata.owner_references[0].name for p in pods} == {rs.metadata.name}
    assert all(p.metadata.owner_references[0].controller for p in pods)
    ips = {p.status.pod_ip for p in pods}
    assert len(ips) == 2 and all(ip.startswith("127.") for ip in ips)

    # the EndpointSlice lists both, on the target port the container port's name resolves to
    wait_until(lambda: slice_ips(cluster) == (ips, [8000]), 30, f"the slice to list {ips} port 8000")

    # status written by the controllers
    def ready() -> int:
        status = apps.read_namespaced_deployment("infer", NS).status  # None until the controller's first write
        return status and status.ready_replicas or 0
    wait_until(lambda: ready() == 2, 30,
               "the Deployment's readyReplicas to reach 2")
    d = apps.read_namespaced_deployment("infer", NS)
    assert d.status.available_replicas == 2 and d.status.observed_generation == d.metadata.generation
    rs = apps.read_namespaced_replica_set(rs.metadata.name, NS)
    assert (rs.status.replicas, rs.status.ready_replicas, rs.status.available_replicas) == (2, 2, 2)

    # the load balancer: an address in the Service's status, a port in its annotation
    def lb_port() -> int | None:
        svc = core.read_namespaced_service("infer", NS)
        ingress = (svc.status.load_balancer.ingress or []) if svc.status.load_balancer else []
        return listen_port(api.sanitize_for_serialization(svc), 80) if ingress and ingress[0].ip == "127.0.0.1" \
            else None
    wait_until(lambda: lb_port() is not None, 30, "the load balancer's port in the Service")
    port = lb_port()
    assert port is not None
    for p in pods:  # no readiness probes: wait for each replica's own "listening" line
        wait_until(lambda name=p.metadata.name: bool(logged(core, name, "listening")), 30,
                   f"{p.metadata.name} to listen")
    statuses = [complete(port, f"r{i}") for i in range(10)]
    assert statuses == [200] * 10  # no retries: both replicas listen
    sent = {f"r{i}" for i in range(10)}
    wait_until(lambda: set().union(*(served_by(core, p.metadata.name) for p in pods)) >= sent, 15,
               "every request in some replica's served log")
    by_pod = {p.metadata.name: served_by(core, p.metadata.name) & sent for p in pods}
    assert sorted(len(v) for v in by_pod.values()) == [5, 5], f"round robin alternates: {by_pod}"

    # a deleted pod is replaced; the slice drops its IP; traffic is still served
    victim = pods[0]
    core.delete_namespaced_pod(victim.metadata.name, NS)
    wait_until(lambda: victim.status.pod_ip not in slice_ips(cluster)[0], 30, "the slice to drop the deleted pod")
    after = [complete_retrying(port, f"a{i}") for i in range(6)]
    assert after == [200] * 6
    wait_until(lambda: len(running_pods(core)) == 2 and victim.metadata.name not in
               {p.metadata.name for p in running_pods(core)}, 60, "a replacement pod")
    new_ips = {p.status.pod_ip for p in running_pods(core)}
    wait_until(lambda: slice_ips(cluster)[0] == new_ips, 30, f"the slice to list {new_ips}")
    replacement = next(p for p in running_pods(core) if p.metadata.name != pods[1].metadata.name)
    assert replacement.metadata.owner_references[0].name == rs.metadata.name

    def replacement_served() -> bool:
        complete(port, "probe")
        return bool(served_by(core, replacement.metadata.name))
    wait_until(replacement_served, 30, "the replacement pod to serve through the load balancer")
    assert [complete_retrying(port, f"z{i}") for i in range(4)] == [200] * 4

    # a new template rolls out (minimally): a second ReplicaSet at full scale, the first scaled to 0
    apps.patch_namespaced_deployment("infer", NS, {"spec": {"template": {"metadata": {"annotations": {
        "firedrill.dev/revision": "2"}}}}})

    def rolled() -> bool:
        by_name = {r.metadata.name: r for r in apps.list_namespaced_replica_set(NS).items
                   if r.metadata.owner_references[0].name == "infer"}
        new = [r for n, r in by_name.items() if n != rs.metadata.name]
        return (len(new) == 1 and by_name[rs.metadata.name].spec.replicas == 0
                and (new[0].status and new[0].status.ready_replicas or 0) == 2  # no status until its first write
                and {p.metadata.owner_references[0].name for p in running_pods(core)} == {new[0].metadata.name})
    wait_until(rolled, 60, "the new ReplicaSet to run both pods and the old one to scale to 0")
    d = apps.read_namespaced_deployment("infer", NS)
    wait_until(lambda: (apps.read_namespaced_deployment("infer", NS).status.updated_replicas or 0) == 2, 30,
               "updatedReplicas to reach 2")
    assert d.metadata.generation == 2
    for p in running_pods(core):
        wait_until(lambda name=p.metadata.name: bool(logged(core, name, "listening")), 30,
                   f"{p.metadata.name} to listen")
    assert [complete_retrying(port, f"v{i}") for i in range(4)] == [200] * 4

    if KUBECTL:
        manifest = tmp_path / "idle.json"
        idle = deployment()
        idle["metadata"]["name"] = "idle"
        idle["spec"]["replicas"] = 0
        manifest.write_text(json.dumps(idle))
        created = subprocess.run([KUBECTL, "--kubeconfig", str(cluster.kubeconfig), "create", "-f", str(manifest)],
                                 capture_output=True, text=True, timeout=60)
        assert created.returncode == 0 and "deployment.apps/idle created" in created.stdout, created.stderr
        out = subprocess.run([KUBECTL, "--kubeconfig", str(cluster.kubeconfig), "get",
                              "deployments,replicasets,services,endpointslices", "-n", NS],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert "deployment.apps/idle" in out.stdout, out.stdout
        for name in ("deployment.apps/infer", f"replicaset.apps/{rs.metadata.name}", "service/infer",
                     "endpointslice.discovery.k8s.io/infer"):
            assert name in out.stdout, out.stdout
