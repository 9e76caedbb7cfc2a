"""The agent's DCGM-exporter-style ``/metrics`` (docs/WORKLOAD.md "Metrics")."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from refplatform.agent.clock import VirtualClock
from refplatform.agent.events import PodEventRecorder
from refplatform.agent.logs import LogServer, LogStore
from refplatform.agent.metrics import DEFAULT_FB_USED_MIB, GpuCollector, GpuMetrics, activity
from refplatform.agent.pods import PodSync, PodWorker
from refplatform.agent.workload import GangStatus, StallKind, TrainingParams, TrainingWorkload
from refplatform.gpu.device import DeviceSet
from refplatform.gpu.partition import parse_partition_config

from .fakeapi import FakeApi, sync_pass

NODE = "gpu-node-0"
H200_MIB = 143771
NAMES = ["DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_DEV_GPU_UTIL",
         "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_XID_ERRORS"]
GPU_LABELS = {"gpu", "UUID", "device", "modelName", "Hostname", "pod", "namespace", "container"}
TRAINING = {"firedrill.dev/workload": "training", "firedrill.dev/step-seconds": "1"}


class Env:
    def __init__(self, tmp_path: Path, gpus: int = 2, config: dict[str, Any] | None = None) -> None:
        self.api = FakeApi()
        self.clock = VirtualClock()
        self.store = LogStore(tmp_path / "logs" / NODE)
        self.events = PodEventRecorder(self.api, NODE, retry_delays=())
        self.devices = None if config is None else DeviceSet(parse_partition_config(config), "H200", gpus, H200_MIB)
        self.sync = PodSync(self.api, NODE, self.store, self.clock, events=self.events,  # type: ignore[arg-type]
                            devices=self.devices)
        self.metrics = GpuMetrics(GpuCollector(NODE, self.sync, gpus, "NVIDIA-H200", "H200"))
        self.api.put_object(f"/api/v1/nodes/{NODE}", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})

    def add_pod(self, name: str, resources: dict[str, str], annotations: dict[str, str] | None = None) -> None:
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "team-a", "annotations": annotations or {}},
            "spec": {"nodeName": NODE, "containers": [{"name": "trainer", "image": "busybox",
                                                        "resources": {"limits": resources, "requests": resources}}]},
            "status": {"phase": "Pending"},
        }
        self.sync._apply("ADDED", self.api.put_object(f"/api/v1/namespaces/team-a/pods/{name}", pod))

    def step(self) -> None:
        sync_pass(self.sync, self.api, self.clock)

    def inject(self, entries: list[dict[str, Any]]) -> None:
        self.sync.note_node({"metadata": {"name": NODE, "uid": "node-uid",
                                          "annotations": {"firedrill.dev/inject-xid": json.dumps(entries)}}})

    def scrape(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        return parse(self.metrics.render().decode())


def parse(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "gauge", family.name
        out[family.name] = [(s.labels, s.value) for s in family.samples]
    return out


def by_gpu(samples: list[tuple[dict[str, str], float]]) -> dict[str, float]:
    return {labels["gpu"] + ("/" + labels["GPU_I_ID"] if "GPU_I_ID" in labels else ""): v for labels, v in samples}


def test_idle_node_reports_every_gpu_unallocated_and_zero(tmp_path: Path) -> None:
    m = Env(tmp_path).scrape()
    assert list(m) == [*NAMES, "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"]
    assert by_gpu(m["DCGM_FI_DEV_SM_CLOCK"]) == {"0": 1980.0, "1": 1980.0}  # full speed, nothing throttles
    for name in NAMES:
        assert len(m[name]) == 2
        for labels, value in m[name]:
            assert set(labels) == GPU_LABELS
            assert value == 0.0
            assert labels["pod"] == labels["namespace"] == labels["container"] == ""
            assert labels["Hostname"] == NODE and labels["modelName"] == "NVIDIA H200"
            assert labels["device"] == f"nvidia{labels['gpu']}" and labels["UUID"].startswith("GPU-")
    uuids = {labels["UUID"] for labels, _ in m["DCGM_FI_DEV_FB_USED"]}
    assert len(uuids) == 2


def test_idle_workload_holds_a_gpu_but_runs_no_kernel(tmp_path: Path) -> None:
    env = Env(tmp_path)
    env.add_pod("sleeper", {"nvidia.com/gpu": "1"})
    env.step()
    m = env.scrape()
    labels, value = m["DCGM_FI_PROF_GR_ENGINE_ACTIVE"][0]
    assert (labels["pod"], labels["namespace"], labels["container"]) == ("sleeper", "team-a", "trainer")
    assert value == 0.0
    assert by_gpu(m["DCGM_FI_DEV_GPU_UTIL"]) == {"0": 0.0, "1": 0.0}
    assert by_gpu(m["DCGM_FI_DEV_FB_USED"]) == {"0": DEFAULT_FB_USED_MIB, "1": 0.0}
    assert m["DCGM_FI_PROF_GR_ENGINE_ACTIVE"][1][0]["pod"] == ""


def test_training_rank_with_known_stall_shares(tmp_path: Path) -> None:
    env = Env(tmp_path)
    env.add_pod("rank-0", {"nvidia.com/gpu": "2"}, {**TRAINING, "firedrill.dev/input-stall-share": "0.25",
                                                     "firedrill.dev/comm-stall-share": "0.15",
                                                     "firedrill.dev/mfu": "0.5", "firedrill.dev/memory-mib": "70000"})
    env.step()
    env.step()
    m = env.scrape()
    assert by_gpu(m["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]) == {"0": pytest.approx(0.75), "1": pytest.approx(0.75)}
    assert by_gpu(m["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"]) == {"0": pytest.approx(0.3), "1": pytest.approx(0.3)}
    assert by_gpu(m["DCGM_FI_DEV_GPU_UTIL"]) == {"0": 100.0, "1": 100.0}
    assert by_gpu(m["DCGM_FI_DEV_FB_USED"]) == {"0": 70000.0, "1": 70000.0}
    assert {labels["pod"] for labels, _ in m["DCGM_FI_DEV_FB_USED"]} == {"rank-0"}


def test_default_mfu_is_applied(tmp_path: Path) -> None:
    env = Env(tmp_path, gpus=1)
    env.add_pod("rank-0", {"nvidia.com/gpu": "1"}, {**TRAINING, "firedrill.dev/input-stall-share": "0.5"})
    env.step()
    m = env.scrape()
    assert m["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"][0][1] == pytest.approx(0.4 * 0.5)


class _Broken:
    def status(self, now: datetime) -> GangStatus:
        return GangStatus(None, StallKind.PEERS, "1/2 ranks running")


def test_a_rank_stalled_on_peers_runs_no_kernel() -> None:
    wl = TrainingWorkload(TrainingParams(input_stall_share=0.1), gang=_Broken())
    wl.start(datetime(2026, 1, 1, tzinfo=UTC))
    assert wl.stalled is StallKind.PEERS
    worker = PodWorker("uid", "team-a", "rank-1", "trainer", workload=wl)
    act = activity(worker)
    assert (act.gr_engine, act.tensor, act.util) == (0.0, 0.0, 0.0)


def test_mig_partitioned_gpu_reports_per_instance(tmp_path: Path) -> None:
    env = Env(tmp_path, gpus=1, config={"mode": "mig-mixed", "layout": [["3g.71gb", "2g.35gb", "1g.18gb"]]})
    env.add_pod("small", {"nvidia.com/mig-1g.18gb": "1"},
                {**TRAINING, "firedrill.dev/input-stall-share": "0.2", "firedrill.dev/memory-mib": "9000"})
    env.step()
    env.step()
    m = env.scrape()
    assert "DCGM_FI_DEV_GPU_UTIL" not in m  # not reported for MIG instances, as upstream
    gr = m["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]
    assert [(labels["GPU_I_ID"], labels["GPU_I_PROFILE"]) for labels, _ in gr] == [
        ("0", "3g.71gb"), ("1", "2g.35gb"), ("2", "1g.18gb")]
    for labels, _ in gr:
        assert set(labels) == GPU_LABELS | {"GPU_I_PROFILE", "GPU_I_ID"}
        assert labels["gpu"] == "0"
    assert len({labels["UUID"] for labels, _ in gr}) == 1  # the parent GPU's UUID, as dcgm-exporter
    assert by_gpu(gr) == {"0/0": 0.0, "0/1": 0.0, "0/2": pytest.approx(0.8)}
    assert [labels["pod"] for labels, _ in gr] == ["", "", "small"]
    assert by_gpu(m["DCGM_FI_DEV_FB_USED"]) == {"0/0": 0.0, "0/1": 0.0, "0/2": 9000.0}


def test_xid_is_the_last_one_injected_on_that_gpu(tmp_path: Path) -> None:
    env = Env(tmp_path, gpus=2, config={"mode": "none"})
    env.add_pod("rank-0", {"nvidia.com/gpu": "1"}, TRAINING)
    env.step()
    env.step()
    before = env.scrape()
    assert by_gpu(before["DCGM_FI_DEV_XID_ERRORS"]) == {"0": 0.0, "1": 0.0}
    assert by_gpu(before["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]) == {"0": 1.0, "1": 0.0}
    env.inject([{"id": "a", "gpu": 1, "instance": None, "xid": 31}, {"id": "b", "gpu": 0, "instance": None, "xid": 79}])
    env.step()
    env.inject([{"id": "c", "gpu": 1, "instance": None, "xid": 13}])
    env.step()
    after = env.scrape()
    assert by_gpu(after["DCGM_FI_DEV_XID_ERRORS"]) == {"0": 79.0, "1": 13.0}
    # Xid 79 failed the pod on GPU 0: nothing runs there any more.
    assert by_gpu(after["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]) == {"0": 0.0, "1": 0.0}


def test_mig_xid_on_one_instance_and_on_the_whole_gpu(tmp_path: Path) -> None:
    env = Env(tmp_path, gpus=1, config={"mode": "mig-mixed", "layout": [["1g.18gb"] * 7]})
    env.inject([{"id": "a", "gpu": 0, "instance": 3, "xid": 94}])
    env.step()
    assert by_gpu(env.scrape()["DCGM_FI_DEV_XID_ERRORS"]) == {f"0/{i}": (94.0 if i == 3 else 0.0) for i in range(7)}
    env.inject([{"id": "b", "gpu": 0, "instance": None, "xid": 48}])
    env.step()
    assert by_gpu(env.scrape()["DCGM_FI_DEV_XID_ERRORS"]) == {f"0/{i}": 48.0 for i in range(7)}


def test_log_server_serves_metrics_over_http(tmp_path: Path) -> None:
    env = Env(tmp_path, gpus=1)
    server = LogServer(env.store)
    server.start()
    with pytest.raises(urllib.error.HTTPError) as info:  # no metrics source yet
        urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5)
    assert info.value.code == 404
    info.value.close()
    server.serve_metrics(env.metrics.render)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            m = parse(resp.read().decode())
    finally:
        server.stop()
    assert list(m) == [*NAMES, "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"]


def test_a_bad_mfu_annotation_falls_back_to_the_default(tmp_path: Path) -> None:
    env = Env(tmp_path, gpus=1)
    env.add_pod("rank-0", {"nvidia.com/gpu": "1"}, {**TRAINING, "firedrill.dev/mfu": "1.7"})
    env.step()
    assert env.scrape()["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"][0][1] == pytest.approx(0.4)


def test_a_finished_rank_runs_no_kernel(tmp_path: Path) -> None:
    env = Env(tmp_path, gpus=1)
    env.add_pod("rank-0", {"nvidia.com/gpu": "1"}, {**TRAINING, "firedrill.dev/step-seconds": "0.1",
                                                     "firedrill.dev/steps-total": "2"})
    for _ in range(5):
        env.step()
    m = env.scrape()
    assert m["DCGM_FI_PROF_GR_ENGINE_ACTIVE"][0][1] == 0.0
    assert m["DCGM_FI_DEV_GPU_UTIL"][0][1] == 0.0


def test_whole_gpus_follow_the_indices_the_scheduler_chose(tmp_path: Path) -> None:
    env = Env(tmp_path, gpus=4)
    env.add_pod("picked", {"nvidia.com/gpu": "2"}, {"firedrill.dev/gpu-index": "2,3"})
    env.add_pod("by-hand", {"nvidia.com/gpu": "1"})
    env.step()
    pods = {labels["gpu"]: labels["pod"] for labels, _ in env.scrape()["DCGM_FI_DEV_FB_USED"]}
    assert pods == {"0": "by-hand", "1": "", "2": "picked", "3": "picked"}


def test_a_throttled_gpu_reports_its_clock_and_the_power_cap_reason(tmp_path: Path) -> None:
    env = Env(tmp_path)
    env.sync.gpu_count = 2
    env.sync.note_node({"metadata": {"name": NODE, "uid": "node-uid", "annotations": {
        "firedrill.dev/inject-throttle": json.dumps([{"id": "t", "gpu": 1, "speed": 0.25}])}}})
    got = env.scrape()
    clocks, reasons = by_gpu(got["DCGM_FI_DEV_SM_CLOCK"]), by_gpu(got["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"])
    assert clocks["1"] == 495.0 and clocks["0"] == 1980.0
    assert reasons["1"] == 4.0 and reasons["0"] == 0.0
