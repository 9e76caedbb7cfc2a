"""Layers computed from the node agents' DCGM metrics agree with the platform's own leak report within 1 %.

Two nodes x 4 GPUs; two training pods at fixed shares (one with its own MFU)
and one idle pod.  Once they step steadily, every agent's ``/metrics`` is
scraped about every 0.25 s for ~12 s and parsed with prometheus-client's
parser; over the scrape window, in GPU-seconds:

- capacity = sum over scrape intervals of (GPU series) x dt,
- allocated = the same for series with a non-empty ``pod`` label,
- active = sum of ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` x dt,
- effective = sum of ``DCGM_FI_PROF_PIPE_TENSOR_ACTIVE`` x dt;

then the leak report of the same window (once the pods' progress snapshots
cover it) must give each layer's share within 1 % (relative).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from refplatform.cluster import Cluster, ClusterSpec, wait_until
from tests.integration.test_leakreport import PODS, bind, leak_report, node_ready, progress_at, settled, training_pod

pytestmark = pytest.mark.integration

NODES = ("gpu-node-0", "gpu-node-1")
SCRAPE_EVERY = 0.25
WINDOW = 12.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(ClusterSpec(tmp_path / "cluster", nodes=2, gpus_per_node=4, heartbeat=0.5, controllers=()))
    try:
        c.start()
        with c.http_client() as http:
            wait_until(lambda: all(node_ready(http, n) for n in NODES), 30, "both nodes Ready")
        yield c
    finally:
        c.stop()


def metrics_port(cluster: Cluster, node: str) -> int:
    return int(json.loads((cluster.data_dir / "agents" / f"{node}.json").read_text())["logPort"])


def scrape(agents: httpx.Client, ports: list[int]) -> tuple[float, int, int, float, float]:
    """One scrape of every agent: (instant, GPU series, held series, sum GR_ENGINE_ACTIVE, sum PIPE_TENSOR_ACTIVE)."""
    series = held = 0
    gr = tensor = 0.0
    before = time.time()
    texts = [agents.get(f"http://127.0.0.1:{port}/metrics").text for port in ports]
    at = (before + time.time()) / 2
    for text in texts:
        for family in text_string_to_metric_families(text):
            if family.name == "DCGM_FI_PROF_GR_ENGINE_ACTIVE":
                for s in family.samples:
                    series += 1
                    held += bool(s.labels.get("pod"))
                    gr += s.value
            elif family.name == "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE":
                tensor += sum(s.value for s in family.samples)
    return at, series, held, gr, tensor


def test_layers_from_dcgm_metrics_agree_with_the_leak_report(cluster: Cluster) -> None:
    pods = {"llm": (training_pod("llm", gpus=2, input_share=0.3, comm_share=0.2, mfu=0.5), NODES[0]),
            "vision": (training_pod("vision", gpus=1, input_share=0.1, comm_share=0.4), NODES[1])}
    with cluster.http_client() as http:
        for name, (body, node) in pods.items():
            http.post(PODS, json=body).raise_for_status()
            bind(http, name, node)
        idle = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "idle"},
                "spec": {"containers": [{"name": "main", "image": "busybox",
                                         "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
        http.post(PODS, json=idle).raise_for_status()
        bind(http, "idle", NODES[1])
        wait_until(lambda: all(progress_at(http, p) > 0 for p in pods), 30, "both training pods to step")
        ports = [metrics_port(cluster, n) for n in NODES]

        with httpx.Client(timeout=2.0, headers={"Authorization": f"Bearer {cluster.token}"}) as agents:
            def steady() -> bool:
                _, series, held, gr, _ = scrape(agents, ports)
                return series == 8 and held == 4 and gr == pytest.approx(2 * 0.7 + 0.9)
            wait_until(steady, 20, "every pod on its GPUs in /metrics, both trainers stepping", interval=SCRAPE_EVERY)
            samples = [scrape(agents, ports)]
            while samples[-1][0] - samples[0][0] < WINDOW:
                time.sleep(max(0.0, samples[-1][0] + SCRAPE_EVERY - time.time()))
                samples.append(scrape(agents, ports))

        capacity = allocated = active = effective = 0.0
        for (t0, series, held, gr, tensor), (t1, *_) in zip(samples, samples[1:]):
            dt = t1 - t0
            capacity += series * dt
            allocated += held * dt
            active += gr * dt
            effective += tensor * dt
        start, end = samples[0][0], samples[-1][0]
        settled(http, list(pods), end + 0.2)
        report = leak_report(http, start, end)

    from_metrics = {"allocated": allocated / capacity, "active": active / capacity,
                    "effective": effective / capacity}
    from_report = {k: v["share"] for k, v in report["layers"].items()}
    assert report["capacityGpuHours"] * 3600 == pytest.approx(capacity, rel=0.01)
    for layer, share in from_metrics.items():
        assert from_report[layer] == pytest.approx(share, rel=0.01), (layer, from_report, from_metrics)
    # And both agree with what the pods were told to do: 4 of 8 GPUs held; 2 x 0.7 + 0.9 active;
    # 2 x 0.5 x 0.5 + 0.4 x 0.5 effective.
    assert from_report == pytest.approx({"allocated": 0.5, "active": 2.3 / 8, "effective": 0.7 / 8}, rel=0.01)
