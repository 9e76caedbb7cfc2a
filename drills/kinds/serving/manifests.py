"""What the serving drills submit: the inference canary's Deployment, its LoadBalancer Service and its
autoscaler, and where a client outside the cluster reaches the Service (pure)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from drills.kube.driver import RESOURCES
from drills.kube.flavors import RUN_LABEL
from drills.workloads.canaryjob import gpu_taint_toleration

Obj = dict[str, Any]

DEPLOYMENT = RESOURCES[("apps/v1", "Deployment")]


HPA = RESOURCES[("autoscaling/v2", "HorizontalPodAutoscaler")]


PRIORITY_CLASS = RESOURCES[("scheduling.k8s.io/v1", "PriorityClass")]


LOW_PRIORITY = -100
"""The value of the low PriorityClass the drill gives training that fills idle GPUs (inference keeps 0, the
cluster's default, so it may preempt the training)."""


QUEUE_METRIC = "vllm:num_requests_waiting"


SERVICE_NAME = "firedrill-inference"
"""The Service's name when the profile gives ``inference.url`` (a route the customer points at it)."""


SERVICE = RESOURCES[("v1", "Service")]


INFERENCE_COMMAND = ("firedrill-inference",)


PORT = 8000


LB_PORTS_ANNOTATION = "firedrill.dev/load-balancer-ports"
"""Where the reference platform's loopback load balancer publishes its port (docs/SERVICES.md)."""


@dataclass(frozen=True)
class ServiceShape:
    """What the inference canary is asked to be: its timings, batch and queue (``firedrill-inference serve``)."""

    ttft_s: float = 0.05
    tpot_s: float = 0.01
    max_batch: int = 8
    max_queue: int = 64
    max_tokens: int = 16


@dataclass(frozen=True)
class Autoscale:
    """Scale out on the inference canary's own queue: an HPA on ``vllm:num_requests_waiting`` per replica."""

    max_replicas: int
    waiting_per_replica: int
    warmup_s: float
    """``--warmup-seconds`` of every replica: it stands for loading the model (``/health`` 503 until then)."""
    scale_down_window_s: int = 300
    """``behavior.scaleDown.stabilizationWindowSeconds`` (upstream's default 300 s)."""


BURST_SHAPE = ServiceShape(ttft_s=0.05, tpot_s=0.05, max_batch=4)
"""The model an autoscaled service simulates: 4 requests per batch, 0.85 s for 16 tokens, so a burst queues."""


def hpa_manifest(name: str, run_id: str, namespace: str, replicas: int, autoscale: Autoscale) -> Obj:
    """The HorizontalPodAutoscaler of the service (pure): Pods metric ``vllm:num_requests_waiting``, AverageValue."""
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": name, "namespace": namespace, "labels": {RUN_LABEL: run_id}},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                     "minReplicas": replicas, "maxReplicas": autoscale.max_replicas,
                     "metrics": [{"type": "Pods", "pods": {
                         "metric": {"name": QUEUE_METRIC},
                         "target": {"type": "AverageValue", "averageValue": str(autoscale.waiting_per_replica)}}}],
                     "behavior": {"scaleDown": {"stabilizationWindowSeconds": autoscale.scale_down_window_s}}}}


def inference_manifests(name: str, run_id: str, namespace: str, image: str, replicas: int, gpus: int,
                        gpu_resource: str, shape: ServiceShape = ServiceShape(),
                        command: tuple[str, ...] = INFERENCE_COMMAND, warmup_s: float = 0.0) -> list[Obj]:
    """A Deployment of inference canaries and its LoadBalancer Service (pure).

    Each replica binds ``POD_IP`` (the downward API), is Ready once ``/health`` answers (a readiness probe, so a
    replica loading its model gets no traffic), and asks for ``gpus`` of ``gpu_resource`` (0: none)."""
    labels = {"app": name, RUN_LABEL: run_id}
    container: Obj = {
        "name": "inference", "image": image, "command": list(command),
        "args": ["serve", "--port", str(PORT), "--ttft-seconds", f"{shape.ttft_s:g}",
                 "--tpot-seconds", f"{shape.tpot_s:g}", "--max-batch", str(shape.max_batch),
                 "--max-queue", str(shape.max_queue), "--warmup-seconds", f"{warmup_s:g}"],
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "ports": [{"name": "http", "containerPort": PORT}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 1,
                           "failureThreshold": 1}}
    if gpus:
        container["resources"] = {"limits": {gpu_resource: str(gpus)}}
    pod_spec: Obj = {"containers": [container], "terminationGracePeriodSeconds": 30}
    if gpus:
        pod_spec["tolerations"] = list(gpu_taint_toleration(gpu_resource))
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": labels, "annotations": {"prometheus.io/port": str(PORT)}},
                              "spec": pod_spec}}}
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"type": "LoadBalancer", "selector": {"app": name},
                 "ports": [{"name": "http", "port": PORT, "targetPort": "http"}]}}
    return [deployment, service]


def service_url(service: Obj, port: int = PORT) -> str | None:
    """Where a client outside the cluster reaches the Service: the reference platform's published loopback port,
    else the first ``status.loadBalancer.ingress`` address with the Service port; None while it has none."""
    meta = service.get("metadata") or {}
    raw = (meta.get("annotations") or {}).get(LB_PORTS_ANNOTATION)
    if raw:
        try:
            published = json.loads(raw).get(str(port))
        except (ValueError, AttributeError):
            published = None
        if isinstance(published, int):
            return f"http://127.0.0.1:{published}"
    for ingress in ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []:
        host = ingress.get("ip") or ingress.get("hostname")
        if host:
            return f"http://{host}:{port}"
    return None
