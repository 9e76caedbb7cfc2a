"""The accelerator metrics drill's judgment (docs/METRICS.md), on hand-made readings: a GPU missing from a node's
answer is named, an empty answer reports no GPU, a frozen series is told from a live one, a rise on the
canary's GPU alone passes and one on a neighbour is named; the Prometheus reader groups dcgm-exporter's series
by node; a real cluster without Prometheus has no source (the reason the scenarios are INCONCLUSIVE)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from types import MappingProxyType

import pytest

from drills.kinds.telemetry.drill import TelemetryDrill
from drills.kinds.telemetry.judge import (Point, changes, first_above, first_xid, frozen_words, inventory_gaps,
                                          other_peaks, utilization_series)
from drills.target.gpumetrics import FB_USED, NO_SOURCE, UTIL, XID, GpuSample, MetricsUnavailable, NodeAnswer, Reading
from drills.target.gpumetrics.model import group, host_of, rows_of_exposition
from drills.target.gpumetrics.source import PrometheusGpus, source_problem
from drills.target.profile import LeakReportSettings, reference_profile

NODE = "gpu-node-0"
UUIDS = [f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd" for i in range(4)]


class Still:
    """A clock that never moves (readings are stamped by hand)."""

    def mono(self) -> float:
        return 0.0

    def wall(self) -> float:
        return 0.0


def gpu(i: int, util: float | None = 0.0, mem: float | None = 0.0, xid: float | None = 0.0,
        node: str = NODE) -> GpuSample:
    values = {k: v for k, v in ((UTIL, util), (FB_USED, mem), (XID, xid)) if v is not None}
    return GpuSample(node, str(i), UUIDS[i], "", "", MappingProxyType(values))


def reading(at: float, answers: Mapping[str, NodeAnswer]) -> Reading:
    return Reading(at, 1000.0 + at, answers, "the test's metrics")


def node_reading(at: float, utils: list[float], xid: int = 0) -> Reading:
    """``NODE`` at ``at`` with one GPU per value of ``utils``."""
    return reading(at, {NODE: NodeAnswer(NODE, tuple(gpu(i, u, 512.0, xid) for i, u in enumerate(utils)))})


# ------------------------------------------------------------------ inventory
def test_every_gpu_with_utilization_and_memory_leaves_no_gap() -> None:
    r = reading(0, {NODE: NodeAnswer(NODE, tuple(gpu(i) for i in range(4)))})
    assert inventory_gaps({NODE: 4}, r) == []


def test_a_missing_gpu_is_named_with_its_node() -> None:
    r = reading(0, {NODE: NodeAnswer(NODE, tuple(gpu(i) for i in (0, 1, 3)))})
    (gap,) = inventory_gaps({NODE: 4}, r)
    assert gap.unreported == 1
    assert gap.message == "node gpu-node-0: reports 3 of its 4 GPUs: GPU 2 has no series"


def test_a_gpu_without_memory_or_utilization_is_named() -> None:
    r = reading(0, {NODE: NodeAnswer(NODE, (gpu(0), gpu(1, mem=None), gpu(2, util=None), gpu(3)))})
    (gap,) = inventory_gaps({NODE: 4}, r)
    assert gap.unreported == 2
    assert f"GPU 2 ({UUIDS[2]}) reports no utilization" in gap.message
    assert f"GPU 1 ({UUIDS[1]}) reports no memory (DCGM_FI_DEV_FB_USED)" in gap.message


def test_an_empty_answer_and_an_unreachable_exporter_report_no_gpu() -> None:
    r = reading(0, {"a": NodeAnswer("a"), "b": NodeAnswer("b", problem="its /metrics cannot be reached")})
    empty, down, unread = inventory_gaps({"a": 8, "b": 8, "c": 2}, r)
    assert empty.unreported == down.unreported == 8 and unread.unreported == 2
    assert "answered with no GPU sample at all: an empty answer" in empty.message
    assert down.message.startswith("node b (8 GPUs): its /metrics cannot be reached")
    assert unread.node == "c"


# ---------------------------------------------------------------- live/frozen
def test_a_live_series_changes_and_a_frozen_one_is_called_frozen() -> None:
    live = [Point(t / 4, v) for t, v in enumerate([0, 0, 12, 37, 62, 88, 100, 75, 50])]
    frozen = [Point(t / 4, 0.0) for t in range(41)]
    assert changes(live) == 7 and frozen_words(live) == ""
    assert changes(frozen) == 0
    assert frozen_words(frozen) == "41 samples over 10.0 s, every one 0 %: frozen telemetry"
    assert first_above(live, 50) == Point(1.0, 62)
    assert first_above(frozen, 50) is None
    assert changes([Point(0, 5), Point(1, None), Point(2, 5)]) == 0  # a missing reading is no change


def test_the_rise_on_the_canary_gpu_alone_passes_and_a_neighbour_s_is_named() -> None:
    readings = [node_reading(0.0, [0, 0, 0, 0]), node_reading(1.0, [0, 0, 0, 0]),
                node_reading(2.0, [0, 80, 0, 0]), node_reading(3.0, [0, 100, 0, 5])]
    series = utilization_series(readings, NODE, UUIDS[1], since=1.0)
    assert [p.value for p in series] == [0, 80, 100]
    assert first_above(series, 50) == Point(2.0, 80)
    assert other_peaks(readings, NODE, {UUIDS[1]}, since=1.0, above=10) == []
    (wrong,) = other_peaks(readings, NODE, {UUIDS[0]}, since=1.0, above=10)
    assert wrong.name == f"GPU 1 ({UUIDS[1]})" and wrong.percent == 100 and wrong.mono == 3.0


def test_the_xid_is_found_only_on_its_gpu_and_after_the_injection() -> None:
    readings = [node_reading(0.0, [0, 0], xid=43), node_reading(1.0, [0, 0])]
    readings.append(reading(2.0, {NODE: NodeAnswer(NODE, (gpu(0, xid=0), gpu(1, xid=43)))}))
    assert first_xid(readings, NODE, UUIDS[1], 43, since=1.0) is readings[2]
    assert first_xid(readings, NODE, UUIDS[0], 43, since=1.0) is None


# --------------------------------------------------------------------- reading
EXPOSITION = """# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",Hostname="n",pod=""} 0
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-b",Hostname="n",pod="canary"} 100
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-a",Hostname="n",pod=""} 0
DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-b",Hostname="n",pod="canary"} 512
# TYPE DCGM_FI_DEV_SM_CLOCK gauge
DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-a",Hostname="n"} 1980
"""


def test_an_exposition_becomes_one_sample_per_gpu_with_the_fields_read() -> None:
    rows = rows_of_exposition(EXPOSITION)
    assert {name for name, _, _ in rows} == {UTIL, FB_USED}  # the clock is not a field the drill reads
    (samples,) = group(rows, lambda labels: "n").values()
    assert [(s.gpu, s.uuid, s.pod, s.utilization, s.memory_mib, s.xid) for s in samples] == [
        ("0", "GPU-a", "", 0.0, 0.0, None), ("1", "GPU-b", "canary", 100.0, 512.0, None)]


def test_mig_instances_read_the_engine_ratio_as_utilization() -> None:
    rows = rows_of_exposition('DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-a",GPU_I_ID="2"} 0.25\n')
    (sample,) = group(rows, lambda labels: "n")["n"]
    assert sample.instance == "2" and sample.utilization == 25.0 and sample.name == "GPU 0 instance 2 (GPU-a)"


def test_a_series_names_its_node_by_the_first_host_label_that_is_a_node() -> None:
    known = {"gpu-node-1"}
    assert host_of({"Hostname": "gpu-node-1"}, known) == "gpu-node-1"
    assert host_of({"Hostname": "dcgm-exporter-4flp2", "node": "gpu-node-1"}, known) == "gpu-node-1"
    assert host_of({"Hostname": "dcgm-exporter-4flp2"}, known) is None


def vector(*series: tuple[str, dict[str, str], float]) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"__name__": name, **labels}, "value": [1700000000.0, str(value)]}
        for name, labels, value in series]}}).encode()


def test_prometheus_answers_are_grouped_by_node_and_a_node_without_series_is_empty() -> None:
    asked: list[tuple[str, Mapping[str, str]]] = []
    body = vector((UTIL, {"gpu": "0", "UUID": "GPU-a", "Hostname": "n1"}, 42.0),
                  (FB_USED, {"gpu": "0", "UUID": "GPU-a", "Hostname": "n1"}, 1024.0),
                  (XID, {"gpu": "0", "UUID": "GPU-a", "Hostname": "n1"}, 79.0),
                  (UTIL, {"gpu": "0", "UUID": "GPU-z", "Hostname": "elsewhere"}, 99.0))

    def fetch(url: str, fields: Mapping[str, str]) -> tuple[int, bytes]:
        asked.append((url, fields))
        return 200, body
    source = PrometheusGpus("https://user:secret@prom.example:9090/", Still(), fetch=fetch)
    got = source.read(["n1", "n2"])
    assert asked[0][0] == "https://prom.example:9090/api/v1/query"
    assert "DCGM_FI_DEV_GPU_UTIL" in asked[0][1]["query"] and "secret" not in source.description
    (sample,) = got.answers["n1"].gpus
    assert (sample.utilization, sample.memory_mib, sample.xid) == (42.0, 1024.0, 79)
    assert got.answers["n2"].empty and set(got.answers) == {"n1", "n2"}


@pytest.mark.parametrize("answer", [(503, b"unavailable"), (200, b"<html>not json</html>")])
def test_a_prometheus_that_does_not_answer_a_query_is_no_source(answer: tuple[int, bytes]) -> None:
    source = PrometheusGpus("http://prom.example:9090", Still(), fetch=lambda url, fields: answer)
    with pytest.raises(MetricsUnavailable, match="check that prometheus.url is the Prometheus base URL"):
        source.read(["n1"])


def test_an_unreachable_prometheus_is_no_source() -> None:
    def fetch(url: str, fields: Mapping[str, str]) -> tuple[int, bytes]:
        raise OSError("connection refused")
    with pytest.raises(MetricsUnavailable, match="cannot be reached: connection refused"):
        PrometheusGpus("http://prom.example:9090", Still(), fetch=fetch).read(["n1"])


# ---------------------------------------------------------------------- target
def test_a_real_cluster_without_prometheus_has_no_metrics_source() -> None:
    profile = reference_profile()
    with_prometheus = dataclasses.replace(profile, leak_report=LeakReportSettings(prometheus_url="http://prom:9090"))
    assert TelemetryDrill.unsupported(profile, reference=True) is None
    assert TelemetryDrill.unsupported(profile, reference=False) == NO_SOURCE
    assert "prometheus.url" in NO_SOURCE
    assert source_problem(with_prometheus, reference=False) is None
    assert TelemetryDrill.unsupported(with_prometheus, reference=False) is None


def test_the_drill_asks_for_its_pods_their_logs_and_the_nodes() -> None:
    wanted = {(p.resource, p.subresource, p.verb) for p in TelemetryDrill.permissions(reference_profile())}
    assert {("pods", "", "create"), ("pods", "", "delete"), ("pods", "log", "get"), ("nodes", "", "list")} <= wanted


def test_a_real_cluster_scenario_says_why_it_is_inconclusive_before_it_starts() -> None:
    """What the run (and ``--dry-run``) says for each scenario on a real cluster: without Prometheus there is no
    source; with it the inventory runs, and a load scenario still cannot (the canary runs no GPU kernels there)."""
    from drills.kinds.telemetry.steps import NO_KERNELS
    from drills.scenario.needs import needs_of, problems

    inventory = needs_of(["the GPU metrics of every node are read",
                          "every GPU of every node reports its utilization and memory within 10 seconds"])
    load = needs_of(["the GPU metrics of every node are read", "a canary computes on 1 GPU of an idle node",
                     "that GPU's utilization rises above 50 % within 10 seconds"])
    profile = reference_profile()
    with_prometheus = dataclasses.replace(profile, leak_report=LeakReportSettings(prometheus_url="http://prom:9090"))
    assert problems(inventory, profile, reference=False) == [NO_SOURCE]
    assert problems(inventory, with_prometheus, reference=False) == []
    assert problems(load, with_prometheus, reference=False) == [NO_KERNELS]
    assert problems(load, profile, reference=True) == []
