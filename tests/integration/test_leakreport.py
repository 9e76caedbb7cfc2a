"""The leak report served live: a training pod stalled on input half of each step is the data pipeline hole.

One node agent with 4 GPUs, no controllers (pods are bound by hand, as the
scheduler would): the API server's own accounting sees the bind, the agent's
progress snapshots and the node's health, and serves the layers and holes of a
window.  Also: who may read it, bad parameters, ``/metrics`` and a restart.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from refplatform.cluster import Cluster, ClusterSpec, wait_until
from tests.integration.kube import canary_job

pytestmark = pytest.mark.integration

NODE = "gpu-node-0"
LEAKREPORT = "/apis/firedrill.dev/v1alpha1/leakreport"
TENANT_TOKEN = "tenant-token-for-the-leak-report-test"
PODS = "/api/v1/namespaces/default/pods"


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def training_pod(name: str, gpus: int, input_share: float, comm_share: float = 0.0, mfu: float | None = None,
                 queue: str = "research", step_seconds: float = 0.1) -> dict[str, Any]:
    ann = {"firedrill.dev/workload": "training", "firedrill.dev/step-seconds": str(step_seconds),
           "firedrill.dev/input-stall-share": str(input_share), "firedrill.dev/comm-stall-share": str(comm_share),
           "scheduling.volcano.sh/queue-name": queue}
    if mfu is not None:
        ann["firedrill.dev/mfu"] = str(mfu)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": ann},
            "spec": {"containers": [{"name": "main", "image": "firedrill/trainer:1",
                                     "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}


def bind(http: httpx.Client, pod: str, node: str) -> None:
    http.post(f"{PODS}/{pod}/binding", json={
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node}}).raise_for_status()


def node_ready(http: httpx.Client, name: str) -> bool:
    resp = http.get(f"/api/v1/nodes/{name}")
    conds = (resp.json().get("status") or {}).get("conditions") or [] if resp.status_code == 200 else []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def progress_at(http: httpx.Client, pod: str) -> float:
    """The pod's last published ``progress-at`` (0 before the first snapshot with steps)."""
    anns = http.get(f"{PODS}/{pod}").json()["metadata"].get("annotations") or {}
    if float(anns.get("firedrill.dev/stepped-seconds", "0")) <= 0:
        return 0.0
    return datetime.fromisoformat(anns["firedrill.dev/progress-at"]).timestamp()


def settled(http: httpx.Client, pods: list[str], until: float, timeout: float = 20.0) -> None:
    """Wait until every pod published a snapshot after ``until``: activity up to it is then known."""
    wait_until(lambda: all(progress_at(http, p) > until for p in pods), timeout,
               f"progress snapshots of {', '.join(pods)} after the window")


def leak_report(http: httpx.Client, start: float, end: float) -> dict[str, Any]:
    resp = http.get(LEAKREPORT, params={"start": iso(start), "end": iso(end)})
    assert resp.status_code == 200, resp.text
    return resp.json()


def write_tokens(data_dir: Path, admin: str) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / "tokens.yaml"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        yaml.safe_dump({"tokens": [{"token": admin, "user": "admin", "role": "cluster-admin"},
                                   {"token": TENANT_TOKEN, "user": "team-a", "role": "tenant",
                                    "namespaces": ["default"]}]}, fh)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    data = tmp_path / "cluster"
    write_tokens(data, "admin-token-for-the-leak-report-test")
    c = Cluster(ClusterSpec(data, nodes=1, gpus_per_node=4, heartbeat=0.5, controllers=()))
    try:
        c.start()
        with c.http_client() as http:
            wait_until(lambda: node_ready(http, NODE), 30, f"{NODE} Ready")
        yield c
    finally:
        c.stop()


def test_input_stall_is_the_data_pipeline_hole_and_survives_a_restart(cluster: Cluster) -> None:
    with cluster.http_client() as http:
        http.post(PODS, json=training_pod("stalled", gpus=2, input_share=0.5)).raise_for_status()
        bind(http, "stalled", NODE)
        wait_until(lambda: progress_at(http, "stalled") > 0, 30, "the training pod to step")
        start = progress_at(http, "stalled") + 0.5  # stepping steadily from here on
        end = start + 6.0
        settled(http, ["stalled"], end + 0.2)
        report = leak_report(http, start, end)

    # 4 healthy GPUs x 6 s; 2 held; active = 1 - 0.5 of stepping; effective = 0.4 (default MFU) x 0.5.
    assert report["window"]["seconds"] == pytest.approx(6.0)
    assert report["capacityGpuHours"] == pytest.approx(4 * 6 / 3600, rel=1e-3)
    layers = {k: v["share"] for k, v in report["layers"].items()}
    assert layers == pytest.approx({"allocated": 0.5, "active": 0.25, "effective": 0.1}, rel=0.01)
    assert report["nvidiaSmiUtilization"]["share"] == pytest.approx(0.5, rel=0.01)  # what nvidia-smi would say
    holes = {h["name"]: h for h in report["holes"]}
    assert report["largest"] == "dataPipeline" and report["holes"][0]["name"] == "dataPipeline"
    assert holes["dataPipeline"]["share"] == pytest.approx(0.25, rel=0.01)  # 0.5 x 2 GPUs of 4
    assert holes["communication"]["gpuHours"] == 0.0 and holes["faultTolerance"]["gpuHours"] == 0.0
    assert report["summary"].startswith("The largest hole is data pipeline:")
    (tenant,) = report["tenants"]
    assert (tenant["namespace"], tenant["queue"]) == ("default", "research")
    assert tenant["holes"]["dataPipeline"]["share"] == 1.0

    # The history lives in the data directory: a restarted API server reports the same window.
    assert cluster.server is not None
    cluster.server.stop()
    cluster.start_server()
    with cluster.http_client() as http:
        assert leak_report(http, start, end) == report


def test_who_may_read_it_and_bad_parameters(cluster: Cluster) -> None:
    with cluster.http_client() as admin, cluster.http_client(TENANT_TOKEN) as tenant, \
            cluster.http_client("") as anonymous:
        assert anonymous.get(LEAKREPORT).status_code == 401
        refused = tenant.get(LEAKREPORT)
        assert refused.status_code == 403 and "cluster-admin" in refused.json()["message"]
        assert tenant.get("/metrics").status_code == 403

        today = admin.get(LEAKREPORT)  # default window: today 00:00 UTC to now
        assert today.status_code == 200
        start = today.json()["window"]["start"]
        assert start == datetime.now(UTC).strftime("%Y-%m-%dT00:00:00Z") and today.json()["capacityGpuHours"] > 0

        future = admin.get(LEAKREPORT, params={"start": start, "end": "2999-01-01T00:00:00Z"})
        assert future.status_code == 200
        assert datetime.fromisoformat(future.json()["window"]["end"]).year < 2999  # clipped to now

        for params, named in [({"start": "yesterday"}, "start"), ({"end": "12:00"}, "end"),
                              ({"start": "2027-01-15T09:00:00Z", "end": "2027-01-15T08:00:00Z"}, "start"),
                              ({"start": "2027-01-15T08:00:00"}, "start")]:
            resp = admin.get(LEAKREPORT, params=params)
            assert resp.status_code == 400, params
            body = resp.json()
            assert body["kind"] == "Status" and body["reason"] == "BadRequest"
            assert f"{named}=" in body["message"] and "RFC 3339" in body["message"]
        assert admin.post(LEAKREPORT, json={}).status_code == 405

        groups = admin.get("/apis").json()["groups"]
        assert "firedrill.dev" in [g["name"] for g in groups]
        resources = admin.get("/apis/firedrill.dev/v1alpha1").json()["resources"]
        assert [r["name"] for r in resources] == ["leakreport"]


def metric_values(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    return {f.name: [(s.labels, s.value) for s in f.samples] for f in text_string_to_metric_families(text)}


def test_metrics_show_pending_demand_and_why(cluster: Cluster) -> None:
    with cluster.http_client() as http:
        ns_pods = PODS
        for name, gpus in (("big", 8), ("wide", 3)):
            pod = training_pod(name, gpus=gpus, input_share=0.0, queue="prod")
            http.post(ns_pods, json=pod).raise_for_status()
        # As the scheduler writes it (PodScheduled=False plus firedrill.dev/Unplaced with the reason).
        for name, reason in (("big", "InsufficientCapacity"), ("wide", "Fragmentation")):
            conditions = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"},
                          {"type": "firedrill.dev/Unplaced", "status": "True", "reason": reason,
                           "message": "0/1 nodes are available"}]
            http.patch(f"{ns_pods}/{name}/status", content=json.dumps({"status": {"conditions": conditions}}),
                       headers={"Content-Type": "application/merge-patch+json"}).raise_for_status()
        resp = http.get("/metrics")
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
        m = metric_values(resp.text)
        gpus = {(lbl["namespace"], lbl["queue"], lbl["reason"]): v for lbl, v in m["firedrill_pending_gpus"]}
        pods = {(lbl["namespace"], lbl["queue"], lbl["reason"]): v for lbl, v in m["firedrill_pending_pods"]}
        assert gpus == {("default", "prod", "InsufficientCapacity"): 8.0, ("default", "prod", "Fragmentation"): 3.0}
        assert pods == {("default", "prod", "InsufficientCapacity"): 1.0, ("default", "prod", "Fragmentation"): 1.0}
        assert m["firedrill_healthy_gpus"] == [({}, 4.0)]

        bind(http, "wide", NODE)  # placed after all: no longer pending
        m = metric_values(http.get("/metrics").text)
        assert [lbl["reason"] for lbl, _ in m["firedrill_pending_gpus"]] == ["InsufficientCapacity"]
        assert m["firedrill_allocated_gpus"] == [({}, 3.0)]


def test_a_node_pull_under_a_training_job_is_the_fault_tolerance_hole(tmp_path: Path) -> None:
    """Fault = the lost rank's last progress (at most a publish interval before the kill); resume = the new
    epoch's first Resumed Event; 8 GPUs down in between, plus the steps since the checkpoint redone."""
    c = Cluster(ClusterSpec(tmp_path / "c", nodes=2, spares=1, gpus_per_node=4, profile="tuned"))
    try:
        c.start()
        c.wait_ready(30)
        jobs = "/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs"
        with c.http_client() as http:
            start = datetime.now(UTC).timestamp()
            http.post(jobs, json=canary_job()).raise_for_status()

            def ranks(epoch: int) -> list[dict[str, Any]]:
                return [p for p in http.get(PODS).json()["items"]
                        if (p["metadata"].get("annotations") or {}).get("firedrill.dev/epoch") == str(epoch)]

            def stepped_past_a_checkpoint() -> bool:
                pods = ranks(0)
                return len(pods) == 2 and all(int(p["metadata"]["annotations"].get("firedrill.dev/step", "0")) >= 7
                                              for p in pods)
            wait_until(stepped_past_a_checkpoint, 45, "both ranks of epoch 0 past step 7")
            victim = next(p for p in ranks(0) if p["metadata"]["annotations"]["firedrill.dev/rank"] == "0")
            killed_at = datetime.now(UTC).timestamp()
            c.agents[victim["spec"]["nodeName"]].kill()

            def resumed_at() -> float | None:
                new = {p["metadata"]["uid"] for p in ranks(1)}  # same names as epoch 0's: tell them by uid
                times = [datetime.fromisoformat(e["eventTime"]).timestamp()
                         for e in http.get("/api/v1/namespaces/default/events").json()["items"]
                         if e.get("reason") == "Resumed" and e["involvedObject"].get("uid") in new]
                return min(times) if times else None
            wait_until(lambda: resumed_at() is not None, 60, "a rank of epoch 1 to report Resumed")
            resume = resumed_at()
            assert resume is not None
            report = leak_report(http, start, datetime.now(UTC).timestamp())
    finally:
        c.stop()
    holes = {h["name"]: h["gpuHours"] * 3600 for h in report["holes"]}
    down = resume - killed_at
    # Lower bound: the fault is no later than the kill; upper: a publish interval (1 s) plus latency earlier,
    # and at most 4 steps since checkpoint 5 plus a few stepped by the survivor: <= 8 steps x 0.1 s x 8 GPUs.
    assert 8 * down - 0.1 <= holes["faultTolerance"] <= 8 * (down + 1.2) + 8 * 0.1 * 8, (down, report)
    assert report["largest"] == "faultTolerance"
