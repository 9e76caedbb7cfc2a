"""The leak report computed from Prometheus (drills.target.leakreport.promql, PrometheusSource) from canned query answers,
and the kube-state-metrics series the reference API server adds to its /metrics."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from drills.kinds.leak.judge import judge_naming, unmeasurable
from drills.kinds.leak.truth import fragmentation_truth, stall_truth
from drills.records.verdict import DrillInconclusive
from drills.target.leakreport.model import Hole, LeakReading, ReportUnavailable
from drills.target.leakreport.promql import MAX_POINTS, Series, grid
from drills.target.leakreport.source import PrometheusSource

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z
BASE = "http://127.0.0.1:9090"
Values = Mapping[Series, Callable[[float], float | None]]
"""Series -> its value at an instant (seconds since T0); None: no sample (an empty sum or count)."""


def matrix(fn: Callable[[float], float | None], start: float, end: float, step: float) -> dict[str, Any]:
    """What Prometheus answers to query_range for a sum/count: one series without labels, or none.  The value at
    an instant is that of the latest scrape, taken half a step before it."""
    values, k = [], 0
    while (t := start + k * step) <= end + 1e-6:
        v = fn(t - T0 - step / 2)
        if v is not None:
            values.append([round(t, 3), repr(float(v))])
        k += 1
    return {"status": "success", "data": {"resultType": "matrix",
                                          "result": [{"metric": {}, "values": values}] if values else []}}


class FakePrometheus:
    """A fetch function answering query_range from :data:`Values`, recording each request."""

    def __init__(self, values: Values, answer: tuple[int, bytes] | None = None) -> None:
        self.values, self.answer, self.calls = values, answer, []  # type: ignore[var-annotated]

    def __call__(self, url: str, fields: Mapping[str, str]) -> tuple[int, bytes]:
        self.calls.append((url, dict(fields)))
        if self.answer is not None:
            return self.answer
        series = next(s for s in Series if s.query == fields["query"])
        doc = matrix(self.values.get(series, lambda t: None), float(fields["start"]), float(fields["end"]),
                     float(fields["step"]))
        return 200, json.dumps(doc).encode()


def read(values: Values, start: float = 0.0, end: float = 12.0, **kw: Any) -> tuple[LeakReading, FakePrometheus]:
    fake = FakePrometheus(values, **kw)
    return PrometheusSource(BASE, step=1.0, fetch=fake).read(T0 + start, T0 + end), fake


def constant(v: float) -> Callable[[float], float]:
    return lambda t: v


CLUSTER = {Series.CAPACITY: constant(40), Series.GPUS_SEEN: constant(40)}
"""Five nodes x 8 GPUs, all Ready, all reported by DCGM."""


# ------------------------------------------------------------------------------------- the grid
@pytest.mark.parametrize(("start", "end", "step", "first", "dt", "points"), [
    (0, 12, 1, 1.0, 1.0, 12),
    (0, 12.5, 1, 12.5 / 13, 12.5 / 13, 13),
    (0, 0.4, 1, 0.4, 0.4, 1),
    (0, 100_000, 1, 10.0, 10.0, MAX_POINTS),  # long windows: fewer, longer steps
])
def test_the_grid_covers_the_window_with_step_ends(start: float, end: float, step: float, first: float, dt: float,
                                                   points: int) -> None:
    g = grid(start, end, step)
    assert (g.first, g.step, g.points) == (pytest.approx(first), pytest.approx(dt), points)
    assert g.first - g.step == pytest.approx(start) and g.last == pytest.approx(end)


def test_the_grid_refuses_an_empty_window_or_step() -> None:
    with pytest.raises(ValueError, match="must end after it starts"):
        grid(5, 5, 1)
    with pytest.raises(ValueError, match="step must be above 0"):
        grid(0, 5, 0)


# ------------------------------------------------------------------------ the computation (by hand)
def test_a_data_pipeline_stall_is_measured_and_the_unmeasurable_holes_are_unknown() -> None:
    # 8 GPUs of 2 ranks, half of each step waiting on input, 0.05 on collectives, MFU 0.4:
    # active 8 x 0.5 = 4 GPUs, effective 8 x 0.45 x 0.4 = 1.44, nvidia-smi 8, stalled 8 x (1 - 0.5) = 4.
    reading, fake = read({**CLUSTER, Series.ALLOCATED: constant(8), Series.ACTIVE: constant(4),
                          Series.EFFECTIVE: constant(1.44), Series.NVIDIA_SMI: constant(8),
                          Series.STALLED: constant(4)})
    assert reading.capacity_gpu_hours * 3600 == pytest.approx(40 * 12)
    assert {k: v[0] * 3600 for k, v in reading.layers.items()} == pytest.approx(
        {"allocated": 96, "active": 48, "effective": 17.28})
    assert reading.layers["allocated"][1] == pytest.approx(0.2)
    assert reading.gpu_hours(Hole.DATA_PIPELINE) * 3600 == pytest.approx(48)  # 8 GPUs x 0.5 x 12 s
    assert reading.gpu_hours(Hole.FRAGMENTATION) == 0
    assert reading.largest == "dataPipeline"
    assert [n for n, _, _ in reading.holes] == ["dataPipeline", "fragmentation"]
    assert set(reading.unmeasured) == {"communication", "faultTolerance"}
    assert "DCGM" in reading.unmeasured["communication"]
    raw = reading.raw
    assert raw["kind"] == "LeakReport" and raw["window"] == {"start": "2027-01-15T08:00:00.000Z",
                                                              "end": "2027-01-15T08:00:12.000Z", "seconds": 12.0}
    assert raw["nvidiaSmiUtilization"] == {"gpuHours": round(96 / 3600, 6), "share": 0.2}
    assert [(h["name"], h["gpuHours"]) for h in raw["holes"][2:]] == [("communication", None),
                                                                        ("faultTolerance", None)]
    assert raw["computedFrom"]["source"] == "prometheus"
    assert raw["computedFrom"]["idleAllocatedGpuHours"] == 0  # 96 allocated - 48 active - 48 data pipeline
    assert reading.summary.startswith("The largest measurable hole is data pipeline: 0.013333 GPU-hours, 10% of")
    # Every query asked the same grid: the ends of 1 s steps.
    assert {(f["start"], f["end"], f["step"]) for _, f in fake.calls} == {
        (f"{T0 + 1:.3f}", f"{T0 + 12:.3f}", "1.000000")}
    assert {u for u, _ in fake.calls} == {BASE + "/api/v1/query_range"}
    assert len(fake.calls) == len(Series)


@pytest.mark.parametrize(("allocated", "pending", "frag_gpu_seconds", "idle_gpu_seconds"), [
    # 32 of 40 allocated (8 free), a pod of 4 unschedulable: min(8, 4) x 12 s.
    (constant(32), constant(4), 48.0, 32 * 12),
    # Free drops from 8 to 2 at 6 s: min(8, 4) x 6 + min(2, 4) x 6.
    (lambda t: 32 if t < 6 else 38, constant(4), 4 * 6 + 2 * 6, 32 * 6 + 38 * 6),
    # Pending only from 3 s on (no series before: an empty sum reads 0).
    (constant(32), lambda t: None if t < 3 else 4, 4 * 9, 32 * 12),
    # No free GPUs: nothing is fragmentation (it is insufficient capacity).
    (constant(40), constant(4), 0.0, 40 * 12),
])
def test_fragmentation_is_min_of_free_and_pending(allocated: Callable[[float], float], pending: Any,
                                                 frag_gpu_seconds: float, idle_gpu_seconds: float) -> None:
    # The fill pods hold GPUs without running a kernel: idle, which is not the data pipeline hole.
    reading, _ = read({**CLUSTER, Series.ALLOCATED: allocated, Series.PENDING: pending})
    assert reading.gpu_hours(Hole.FRAGMENTATION) * 3600 == pytest.approx(frag_gpu_seconds)
    assert reading.gpu_hours(Hole.DATA_PIPELINE) == 0
    assert reading.raw["computedFrom"]["idleAllocatedGpuHours"] == pytest.approx(idle_gpu_seconds / 3600, abs=1e-6)
    assert reading.largest == ("fragmentation" if frag_gpu_seconds else None)


def test_capacity_follows_ready_nodes_over_time() -> None:
    # A node of 8 leaves capacity at 4 s (NotReady): 40 x 4 + 32 x 8.
    reading, _ = read({**CLUSTER, Series.CAPACITY: lambda t: 40 if t < 4 else 32})
    assert reading.capacity_gpu_hours * 3600 == pytest.approx(40 * 4 + 32 * 8)


def test_no_measurable_leak_names_no_hole() -> None:
    reading, _ = read(dict(CLUSTER))
    assert reading.largest is None and reading.summary.startswith("No measurable leak")
    assert reading.largest_words() == "no hole (every hole is zero)"


# ------------------------------------------------------------------------------- the judge and drill
def test_the_judge_ranks_only_among_measurable_holes_and_says_so() -> None:
    reading, _ = read({**CLUSTER, Series.ALLOCATED: constant(8), Series.STALLED: constant(4)})
    naming = judge_naming(stall_truth(Hole.DATA_PIPELINE, 8, 0.5, 12), reading)
    assert naming.ok and "ranked among the holes the source can measure; communication, fault tolerance not " \
                          "measurable" in naming.message
    assert unmeasurable(stall_truth(Hole.DATA_PIPELINE, 8, 0.5, 12), reading, "P") is None
    why = unmeasurable(stall_truth(Hole.COMMUNICATION, 8, 0.5, 12), reading, "the configured Prometheus X")
    assert why is not None and why.startswith("the configured Prometheus X cannot measure communication: DCGM")
    assert "no claim either way" in why and "leakReport.url" in why


@pytest.mark.parametrize(("truth", "inconclusive"), [
    (stall_truth(Hole.COMMUNICATION, 8, 0.5, 12), True),
    (fragmentation_truth(4, 8, 12), False),
])
def test_the_drill_is_inconclusive_for_a_hole_prometheus_cannot_measure(truth: Any, inconclusive: bool) -> None:
    from drills.kinds.leak.drill import LeakDrill
    from drills.records.verdict import DrillResult, Verdict
    clock = SimpleNamespace(wall=lambda: T0 + 1000, mono=lambda: 0.0)
    drill = LeakDrill(target=SimpleNamespace(timeline=SimpleNamespace(clock=clock)),  # type: ignore[arg-type]
                      result=DrillResult("leak-identification"), run_id="fd0001")
    fake = FakePrometheus({**CLUSTER, Series.ALLOCATED: constant(36), Series.PENDING: constant(4)})
    drill.source = PrometheusSource("http://user:secret@127.0.0.1:9090", fetch=fake)
    drill.hole, drill.truth, drill.window = truth.hole, truth, (T0, T0 + 12)
    drill.result.details["leak"] = {}
    if not inconclusive:
        drill.read()
        drill.judge_named(truth.hole)
        drill.judge_size(truth.hole, 10)
        assert drill.result.verdict is Verdict.PASS, drill.result.findings
        return
    with pytest.raises(DrillInconclusive, match="the configured Prometheus http://127.0.0.1:9090 cannot measure "
                                                "communication"):
        drill.read()
    assert drill.result.verdict is Verdict.INCONCLUSIVE
    assert "secret" not in json.dumps(drill.result.details, default=str)
    assert drill.result.details["leak"]["report"]["computedFrom"]["source"] == "prometheus"


# ------------------------------------------------------------------------------------- the errors
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_prometheus_names_the_url_and_the_profile_key() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ReportUnavailable) as err:
        PrometheusSource(url, timeout=2).read(T0, T0 + 12)
    text = str(err.value)
    assert f"the configured Prometheus {url} cannot be reached ({url}/api/v1/query_range)" in text
    assert "check prometheus.url in the target profile" in text


@pytest.mark.parametrize(("answer", "match"), [
    ((400, b'{"status":"error","errorType":"bad_data","error":"parse error at char 4"}'),
     r"answered 400 to GET http://127.0.0.1:9090/api/v1/query_range \(query 'sum\(kube_node.*parse error at "
     r"char 4; check that prometheus.url is the Prometheus base URL"),
    ((404, b"404 page not found"), "answered 404 .*404 page not found"),
    ((200, b"<html>Grafana</html>"), "answered 200 to GET .* but not JSON: '<html>Grafana"),
    ((200, b'{"status":"success","data":{"resultType":"vector","result":[]}}'),
     "with data that is not a matrix, not a Prometheus query_range result"),
    ((200, b'{"status":"success","data":{"resultType":"matrix","result":[{"values":[["x","1"]]}]}}'),
     r"with the sample \['x', '1'\]"),
])
def test_a_malformed_answer_is_unavailable_naming_what_failed(answer: tuple[int, bytes], match: str) -> None:
    with pytest.raises(ReportUnavailable, match=match):
        read({}, answer=answer)


@pytest.mark.parametrize(("values", "match"), [
    ({Series.GPUS_SEEN: constant(40)}, "no healthy GPU capacity .* scrape kube-state-metrics"),
    ({Series.CAPACITY: constant(40)}, "no DCGM exporter series .* scrape NVIDIA's dcgm-exporter"),
])
def test_missing_metrics_are_unavailable_and_say_what_to_scrape(values: Values, match: str) -> None:
    with pytest.raises(ReportUnavailable, match=match):
        read(values)


def test_credentials_are_sent_but_never_shown() -> None:
    src = PrometheusSource("https://reader:s3cret@prom.example:9090/")
    assert src.description == "the configured Prometheus https://prom.example:9090/"
    assert src._headers["authorization"] == "Basic cmVhZGVyOnMzY3JldA=="  # reader:s3cret
    assert src.kind == "prometheus"


# ------------------------------------------------------- the reference API server's KSM series
def test_the_api_server_serves_kube_state_metrics_series(tmp_path: Path) -> None:
    from refplatform.api.leakreport import render_metrics
    from refplatform.api.usagelog import UsageRecorder
    from refplatform.resources import NODES, PODS
    from refplatform.store import Store

    store = Store(tmp_path)
    rec = UsageRecorder(store, None, clock=lambda: T0, flush_interval=60).start()
    try:
        for name, ready in (("gpu-0", "True"), ("gpu-1", "Unknown")):
            store.create(NODES.key, {"metadata": {"name": name}, "status": {
                "allocatable": {"nvidia.com/gpu": "8", "cpu": "64"}, "conditions": [{"type": "Ready",
                                                                                    "status": ready}]}}, now="x")

        uids: dict[str, str] = {}

        def pod(name: str, gpus: str, node: str | None, conditions: list[Any], phase: str = "Pending") -> None:
            spec: dict[str, Any] = {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": gpus}}},
                                                   {"name": "side", "resources": {}}]}
            if node:
                spec["nodeName"] = node
            made = store.create(PODS.key, {"metadata": {"name": name, "namespace": "ml"}, "spec": spec,
                                           "status": {"phase": phase, "conditions": conditions}}, now="x")
            uids[name] = made["metadata"]["uid"]
        pod("blocked", "4", None, [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}])
        pod("bound", "6", "gpu-0", [{"type": "PodScheduled", "status": "True"}], phase="Running")
        pod("done", "2", "gpu-0", [], phase="Succeeded")
        text = render_metrics(rec).decode()
    finally:
        rec.close()
        store.close()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(text) for s in f.samples}

    def value(name: str, **labels: str) -> float | None:
        return samples.get((name, tuple(sorted(labels.items()))))
    assert value("kube_node_status_allocatable", node="gpu-0", resource="nvidia_com_gpu", unit="integer") == 8
    assert value("kube_node_status_condition", node="gpu-0", condition="Ready", status="true") == 1
    assert value("kube_node_status_condition", node="gpu-1", condition="Ready", status="true") == 0
    assert value("kube_node_status_condition", node="gpu-1", condition="Ready", status="unknown") == 1
    assert value("kube_pod_status_unschedulable", namespace="ml", pod="blocked", uid=uids["blocked"]) == 1
    assert value("kube_pod_status_unschedulable", namespace="ml", pod="bound", uid=uids["bound"]) is None
    assert value("kube_pod_container_resource_requests", namespace="ml", pod="blocked", uid=uids["blocked"],
                 container="main", node="", resource="nvidia_com_gpu", unit="integer") == 4
    assert value("kube_pod_container_resource_requests", namespace="ml", pod="bound", uid=uids["bound"],
                 container="main", node="gpu-0", resource="nvidia_com_gpu", unit="integer") == 6
    assert not any(k[0] == "kube_pod_container_resource_requests" and ("pod", "done") in k[1] for k in samples)
    assert not any(k[0] == "kube_pod_container_resource_requests" and ("container", "side") in k[1] for k in samples)
    assert "firedrill_healthy_gpus" in text  # the scheduler's series are still there


def test_an_empty_window_asks_nothing() -> None:
    fake = FakePrometheus(CLUSTER)
    with pytest.raises(ReportUnavailable, match="is empty: nothing to ask the configured Prometheus"):
        PrometheusSource(BASE, fetch=fake).read(T0, T0)
    assert fake.calls == []
