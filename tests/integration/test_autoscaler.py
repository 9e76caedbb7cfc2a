"""The horizontal pod autoscaler on the embedded platform (issue 14 item 2): a burst scales the inference canary
out on its queue depth, and a new replica takes traffic only once its model has "loaded".

A Deployment of one inference canary (``--max-batch 2``, ``--warmup-seconds 2``, a readiness probe on
``/health``, ``prometheus.io/port``) behind a Service of type LoadBalancer, and an autoscaling/v2
HorizontalPodAutoscaler on the per-pod metric ``vllm:num_requests_waiting`` (AverageValue 2, at most 3
replicas).  Locust (``drills.load.run``, its own process) sends enough closed-loop users through the load
balancer to queue.  Checked, each by a wait with a deadline:

- the first replica turns Ready only after its warm-up (its readiness probe gets 503 until the canary's own
  ``ready`` line);
- under load the HPA scales the Deployment out (``SuccessfulRescale``: "New size: N; reason: pods metric
  vllm:num_requests_waiting above target"), its status reports the metric, ``desiredReplicas`` and
  ``lastScaleTime``;
- a new replica is seen running but not Ready, out of the EndpointSlice's ready endpoints, and turns Ready
  only after its own warm-up;
- with the ``no-autoscaling`` defect, ``desiredReplicas`` rises while the Deployment stays at 1 replica.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from drills.load.run import LoadRun, LoadSpec
from refplatform.cluster import Cluster, ClusterSpec, wait_until
from refplatform.controllers.loadbalancer import listen_port
from tests.integration.kube import api_client

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
NS = "default"
METRIC = "vllm:num_requests_waiting"
WARMUP_S = 2
KUBECTL = shutil.which("kubectl")
CONTROLLERS = ("scheduler", "deployment", "replicaset", "endpoints", "loadbalancer", "autoscaler")


@pytest.fixture(params=[pytest.param((), id="honest"), pytest.param(("no-autoscaling",), id="no-autoscaling")])
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(ClusterSpec(tmp_path_factory.mktemp("hpa"), nodes=1, heartbeat=0.5, controllers=CONTROLLERS,
                            defects=request.param))
    c.start()
    try:
        yield c
    finally:
        c.stop()


def deployment() -> dict[str, Any]:
    container = {"name": "serve", "image": "firedrill-inference",
                 "command": ["python", "-m", "drills.inference", "serve", "--port", "8000", "--max-batch", "2",
                             "--warmup-seconds", str(WARMUP_S), "--ttft-seconds", "0.1", "--tpot-seconds", "0.05"],
                 "ports": [{"name": "http", "containerPort": 8000}],
                 "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 1},
                 "env": [{"name": "PYTHONPATH", "value": str(REPO)},
                         {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "infer"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "infer"}},
                     "template": {"metadata": {"labels": {"app": "infer"},
                                               "annotations": {"prometheus.io/port": "8000"}},
                                  "spec": {"containers": [container]}}}}


SERVICE = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "infer"},
           "spec": {"type": "LoadBalancer", "selector": {"app": "infer"},
                    "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}
HPA = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "infer"},
       "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "infer"},
                "minReplicas": 1, "maxReplicas": 3,
                "metrics": [{"type": "Pods", "pods": {"metric": {"name": METRIC},
                                                      "target": {"type": "AverageValue", "averageValue": "2"}}}]}}


def get(cluster: Cluster, path: str) -> dict[str, Any]:
    with cluster.http_client() as http:
        r = http.get(path)
    assert r.status_code == 200, r.text
    doc: dict[str, Any] = r.json()
    return doc


def pods(cluster: Cluster) -> list[dict[str, Any]]:
    return [p for p in get(cluster, f"/api/v1/namespaces/{NS}/pods?labelSelector=app%3Dinfer")["items"]
            if not p["metadata"].get("deletionTimestamp")]


def condition(pod: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (pod.get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


def ready(pod: dict[str, Any]) -> bool:
    return condition(pod, "Ready").get("status") == "True"


def ready_endpoints(cluster: Cluster) -> set[str]:
    with cluster.http_client() as http:
        r = http.get(f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices/infer")
    if r.status_code != 200:
        return set()
    return {a for e in r.json().get("endpoints") or [] if e["conditions"]["ready"] for a in e["addresses"]}


def canary_ready_at(core: client.CoreV1Api, pod: str) -> datetime | None:
    """When the canary logged ``ready`` (its warm-up passed), from its own log."""
    for line in core.read_namespaced_pod_log(pod, NS).splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("event") == "ready":
            return datetime.fromisoformat(entry["ts"].replace("Z", "+00:00"))
    return None


def assert_ready_only_after_warmup(cluster: Cluster, core: client.CoreV1Api, name: str) -> None:
    pod = next(p for p in pods(cluster) if p["metadata"]["name"] == name)
    became = datetime.fromisoformat(condition(pod, "Ready")["lastTransitionTime"].replace("Z", "+00:00"))
    started = datetime.fromisoformat(pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
                                     .replace("Z", "+00:00"))
    loaded = canary_ready_at(core, name)
    assert loaded is not None, f"{name} is Ready but its canary never logged ready"
    # the condition's time has whole seconds: it cannot be earlier than the second the model loaded in
    assert became >= loaded.replace(microsecond=0), (name, became, loaded)
    assert (became - started).total_seconds() >= WARMUP_S, (name, started, became)


def lb_port(cluster: Cluster) -> int | None:
    svc = get(cluster, f"/api/v1/namespaces/{NS}/services/infer")
    ingress = ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    return listen_port(svc, 80) if ingress else None


def hpa_status(cluster: Cluster) -> dict[str, Any]:
    return get(cluster, f"/apis/autoscaling/v2/namespaces/{NS}/horizontalpodautoscalers/infer").get("status") or {}


def deployment_replicas(cluster: Cluster) -> int:
    return int(get(cluster, f"/apis/apps/v1/namespaces/{NS}/deployments/infer")["spec"]["replicas"])


def rescale_events(cluster: Cluster) -> list[str]:
    events = get(cluster, f"/api/v1/namespaces/{NS}/events?fieldSelector=involvedObject.name%3Dinfer,"
                          "reason%3DSuccessfulRescale")["items"]
    return [e["message"] for e in events if e["involvedObject"]["kind"] == "HorizontalPodAutoscaler"]


def test_a_burst_scales_out_and_new_replicas_serve_only_once_loaded(cluster: Cluster, tmp_path: Path) -> None:
    defective = "no-autoscaling" in cluster.spec.defects
    api = api_client(cluster)
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    apps.create_namespaced_deployment(NS, deployment())
    core.create_namespaced_service(NS, SERVICE)
    client.AutoscalingV2Api(api).create_namespaced_horizontal_pod_autoscaler(NS, HPA)

    # the first replica: Ready only after its warm-up, then in the slice, behind the balancer
    wait_until(lambda: any(ready(p) for p in pods(cluster)), 30, "the first replica to turn Ready")
    [first] = pods(cluster)
    assert_ready_only_after_warmup(cluster, core, first["metadata"]["name"])
    wait_until(lambda: ready_endpoints(cluster) == {first["status"]["podIP"]}, 15, "the slice to list the replica")
    wait_until(lambda: lb_port(cluster) is not None, 15, "the load balancer's port")
    port = lb_port(cluster)
    wait_until(lambda: hpa_status(cluster).get("currentReplicas") == 1, 15, "the HPA's first sync")
    assert hpa_status(cluster).get("desiredReplicas") == 1, hpa_status(cluster)

    spec = LoadSpec(host=f"http://127.0.0.1:{port}", out_dir=tmp_path / "load", users=12, spawn_rate=12,
                    duration_s=60, max_tokens=16, stop_timeout_s=2)
    with LoadRun(spec) as load:
        if defective:
            # desiredReplicas rises with the queue and the target never moves.  An honest autoscaler writes the
            # scale before the status of the same sync, so a status saying >= 2 beside a Deployment still at 1
            # is the defect, not a race.
            wait_until(lambda: hpa_status(cluster).get("desiredReplicas", 0) >= 2, 30,
                       "the HPA to report desiredReplicas >= 2")
            assert deployment_replicas(cluster) == 1, "no-autoscaling scaled the Deployment"
            assert len(pods(cluster)) == 1 and rescale_events(cluster) == []
            assert "lastScaleTime" not in hpa_status(cluster)
            load.stop()
            return

        first_ip = first["status"]["podIP"]
        seen_loading: set[str] = set()

        def scaled_out_and_loading_seen() -> bool:
            # a new replica is running but not Ready (its model loads): the slice must not offer it
            for p in pods(cluster):
                ip = (p.get("status") or {}).get("podIP")
                if ip and ip != first_ip and p["status"].get("phase") == "Running" and not ready(p):
                    assert ip not in ready_endpoints(cluster), f"loading replica {ip} offered as ready"
                    seen_loading.add(p["metadata"]["name"])
            return deployment_replicas(cluster) >= 2 and bool(seen_loading)
        wait_until(scaled_out_and_loading_seen, 30, "a scale-out and a new replica seen loading")
        status = hpa_status(cluster)
        assert status["desiredReplicas"] >= 2 and status.get("lastScaleTime"), status
        [metric] = status["currentMetrics"]
        assert metric["pods"]["metric"]["name"] == METRIC
        messages = rescale_events(cluster)
        assert any(m.startswith("New size: ") and m.endswith(f"reason: pods metric {METRIC} above target")
                   for m in messages), messages

        # the new replicas turn Ready only after their own warm-up, and then the slice offers them
        def all_ready() -> bool:
            current = pods(cluster)
            return len(current) == deployment_replicas(cluster) and all(ready(p) for p in current)
        wait_until(all_ready, 30, "every replica of the scaled Deployment to turn Ready")
        for name in seen_loading:
            assert_ready_only_after_warmup(cluster, core, name)
        ips = {p["status"]["podIP"] for p in pods(cluster)}
        wait_until(lambda: ready_endpoints(cluster) == ips, 15, f"the slice to offer every replica {ips}")
        load.stop()
    if KUBECTL:  # kubectl reads the HPA through the server's table: the reference, the metric against its target
        out = subprocess.run([KUBECTL, "--kubeconfig", str(cluster.kubeconfig), "get", "hpa", "infer",
                              "--no-headers"], capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        fields = out.stdout.split()
        assert fields[:2] == ["infer", "Deployment/infer"] and fields[2].endswith("/2"), out.stdout
        assert fields[3:5] == ["1", "3"], out.stdout
