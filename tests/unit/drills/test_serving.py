"""The serving drill's pure parts: the manifests it submits, where it finds the service, how it words losses; and
its judgement of a burst no new replica absorbed (FAIL, or INCONCLUSIVE when the autoscaler could not read its
metric)."""

from __future__ import annotations

import json

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from drills.kinds.serving import (LB_PORTS_ANNOTATION, PORT, Autoscale, Reading, ServiceShape, ServingDrill,
                                  autoscaler_blind, first_served_by_new, hpa_manifest, inference_manifests,
                                  lost_findings, metric_value, pod_ready, prometheus_readings, ready_endpoint_addresses,
                                  queue_crossing, service_url, sla_back)
from drills.kube.driver import KubeError
from drills.load.run import Outcome, Sample
from drills.load.series import series
from drills.records.verdict import DrillInconclusive, DrillResult, Threshold, Verdict
from drills.target.profile import reference_profile


def sample(rid: str, start: float, outcome: Outcome = Outcome.ANSWERED, ttft: float | None = 0.05,
           attempts: int = 1, error: str | None = None) -> Sample:
    return Sample(rid, "inference", 0.0, start, start + 0.2, 0.2, outcome, 200, ttft if outcome is Outcome.ANSWERED
                  else None, error, None, attempts)


def test_the_service_is_a_deployment_of_inference_canaries_behind_a_load_balancer() -> None:
    deployment, service = inference_manifests("infer-x", "fdx", "drills", "img:1", 3, 8, "nvidia.com/gpu",
                                              ServiceShape(ttft_s=0.05, tpot_s=0.01, max_batch=4, max_queue=9))
    spec = deployment["spec"]
    assert (deployment["kind"], spec["replicas"], spec["selector"]) == ("Deployment", 3, {"matchLabels": {"app":
                                                                                                      "infer-x"}})
    pod = spec["template"]["spec"]
    (c,) = pod["containers"]
    assert c["command"] == ["firedrill-inference"] and c["image"] == "img:1"
    assert c["args"] == ["serve", "--port", str(PORT), "--ttft-seconds", "0.05", "--tpot-seconds", "0.01",
                         "--max-batch", "4", "--max-queue", "9", "--warmup-seconds", "0"]
    assert c["resources"] == {"limits": {"nvidia.com/gpu": "8"}}
    assert c["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in c["env"]
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert spec["template"]["metadata"]["labels"]["firedrill.dev/drill-run"] == "fdx"
    assert service["spec"]["type"] == "LoadBalancer" and service["spec"]["selector"] == {"app": "infer-x"}
    # no GPUs asked: no limits and no toleration
    cpu_only = inference_manifests("i", "r", "ns", "img", 1, 0, "nvidia.com/gpu")[0]["spec"]["template"]["spec"]
    assert "resources" not in cpu_only["containers"][0] and "tolerations" not in cpu_only


def test_the_service_address_is_the_published_loopback_port_or_the_ingress() -> None:
    assert service_url({"metadata": {}}) is None
    assert service_url({"metadata": {"annotations": {LB_PORTS_ANNOTATION: json.dumps({str(PORT): 40123})}}}) == \
        "http://127.0.0.1:40123"
    assert service_url({"metadata": {}, "status": {"loadBalancer": {"ingress": [{"hostname": "lb.example"}]}}}) == \
        f"http://lb.example:{PORT}"
    assert service_url({"metadata": {"annotations": {LB_PORTS_ANNOTATION: "not json"}},
                        "status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.9"}]}}}) == f"http://10.0.0.9:{PORT}"


def test_a_terminating_or_unready_replica_is_not_ready() -> None:
    ready = {"metadata": {}, "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    assert pod_ready(ready)
    assert not pod_ready({**ready, "metadata": {"deletionTimestamp": "2026-12-01T00:00:00Z"}})
    assert not pod_ready({"metadata": {}, "status": {"phase": "Running", "conditions": [{"type": "Ready",
                                                                                        "status": "False"}]}})


def test_lost_requests_are_named_with_their_time_from_the_act() -> None:
    samples = (sample("a", 9.0), *(sample(f"l{i}", 10.0 + i, Outcome.LOST, error="cut") for i in range(5)))
    found = lost_findings(samples, act_mono=10.5)
    assert found[0] == "request l0 (-0.50 s from the act, 1 attempt(s)): cut"
    assert found[2].startswith("request l2 (+1.50 s") and found[3] == "... and 2 more lost request(s)"


def test_the_series_buckets_requests_by_start_around_the_act() -> None:
    samples = (sample("a", 9.2, ttft=0.04), sample("b", 9.9, ttft=0.08), sample("c", 10.1, Outcome.LOST),
               sample("d", 10.4, Outcome.FAILED), sample("e", 11.5, ttft=0.05))
    rows = series(samples, origin=10.0)
    assert [r["t"] for r in rows] == [-1.0, 0.0, 1.0]
    assert rows[0] == {"t": -1.0, "sent": 2, "answered": 2, "failed": 0, "lost": 0, "p99_ttft_s": 0.08}
    assert rows[1] == {"t": 0.0, "sent": 2, "answered": 0, "failed": 1, "lost": 1, "p99_ttft_s": None}


def test_the_autoscaler_scales_on_the_canarys_own_queue_per_replica() -> None:
    hpa = hpa_manifest("infer-x", "fdx", "drills", 2, Autoscale(4, 3, 2.0, scale_down_window_s=5))
    spec = hpa["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "infer-x"}
    assert (spec["minReplicas"], spec["maxReplicas"]) == (2, 4)
    assert spec["metrics"] == [{"type": "Pods", "pods": {"metric": {"name": "vllm:num_requests_waiting"},
                                                         "target": {"type": "AverageValue", "averageValue": "3"}}}]
    assert spec["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 5


def test_a_metric_is_summed_over_its_label_sets_and_absent_is_none() -> None:
    text = ("# HELP vllm:num_requests_waiting Waiting.\n# TYPE vllm:num_requests_waiting gauge\n"
            'vllm:num_requests_waiting{model_name="a"} 3\nvllm:num_requests_waiting{model_name="b"} 2.5\n'
            "vllm:num_requests_waiting_other 100\nfiredrill_inference_requests_served_total 7\n")
    assert metric_value(text, "vllm:num_requests_waiting") == 5.5
    assert metric_value(text, "firedrill_inference_requests_served_total") == 7
    assert metric_value(text, "vllm:num_requests_running") is None


def test_the_queue_crosses_when_a_round_of_reads_averages_above_the_threshold() -> None:
    r = [Reading(10.0, "a", 1, 0), Reading(10.1, "b", 2, 0), Reading(10.5, "a", 2, 0), Reading(10.6, "b", 5, 0),
         Reading(9.0, "a", 50, 0)]
    assert queue_crossing(r, after=9.5, threshold=3) == 10.5  # (2 + 5) / 2 > 3; the read before the jump is ignored
    assert queue_crossing(r, after=9.5, threshold=4) is None


def test_a_new_replica_serves_at_its_first_read_with_a_served_request() -> None:
    r = [Reading(11.0, "old", 3, 40), Reading(11.2, "new", 0, 0), Reading(11.7, "new", 1, 2)]
    assert first_served_by_new(r, {"old"}) == (11.7, "new")
    assert first_served_by_new(r, {"old", "new"}) is None


def test_the_sla_is_back_from_the_start_of_the_last_unbroken_good_run_of_seconds() -> None:
    slow, fast = 0.9, 0.05
    samples = tuple(sample(f"r{i}", 100.0 + t, ttft=x) for i, (t, x) in enumerate(
        [(0.1, slow), (1.1, fast), (2.1, slow), (3.1, fast), (4.1, fast), (5.1, fast)]))
    assert sla_back(samples, since=100.0, until=106.0, ttft_s=0.5) == 3.0
    assert sla_back(samples + (sample("late", 105.5, Outcome.LOST),), 100.0, 106.0, 0.5) is None
    assert sla_back(samples, since=100.0, until=106.0, ttft_s=1.0) == 0.0


class FakePrometheus(BaseHTTPRequestHandler):
    """A Prometheus HTTP API answering instant queries by the metric named in the query (a real HTTP server)."""

    queries: list[str] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        query = parse_qs(urlsplit(self.path).query)["query"][0]
        self.queries.append(query)
        value = "3" if "vllm:num_requests_waiting" in query else "12"
        body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
            {"metric": {"pod": "infer-x-abc"}, "value": [1.0, value]},
            {"metric": {"pod": "infer-x-def"}, "value": [1.0, "NaN" if value == "3" else "0"]}]}}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_replica_readings_come_from_prometheus_when_pods_are_out_of_reach() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakePrometheus)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        found = prometheus_readings(f"http://127.0.0.1:{server.server_address[1]}/", "ns", "infer-x", 5.0)
    finally:
        server.shutdown()
        server.server_close()
    assert found[0] == Reading(5.0, "infer-x-abc", 3.0, 12.0)
    assert found[1].pod == "infer-x-def" and found[1].served == 0.0
    assert FakePrometheus.queries[0] == 'sum by (pod) (vllm:num_requests_waiting{namespace="ns",pod=~"infer-x-.*"})'
    assert prometheus_readings("http://127.0.0.1:9/", "ns", "infer-x", 5.0, timeout=0.5) == []


def test_ready_endpoints_are_those_not_marked_unready() -> None:
    slices = [{"endpoints": [{"addresses": ["10.0.0.2"], "conditions": {"ready": True}},
                             {"addresses": ["10.0.0.3"], "conditions": {"ready": False}},
                             {"addresses": ["10.0.0.1"]}]}, {"endpoints": None}]
    assert ready_endpoint_addresses(slices) == ["10.0.0.1", "10.0.0.2"]
    assert ready_endpoint_addresses([]) == []


#: What upstream's HPA controller writes when no custom metrics API is served (kube-controller-manager v1.37.2).
NO_ADAPTER = {"type": "ScalingActive", "status": "False", "reason": "FailedGetPodsMetric",
              "message": "the HPA was unable to compute the replica count: unable to get metric "
                         "vllm:num_requests_waiting: unable to fetch metrics from custom metrics API: no custom "
                         "metrics API (custom.metrics.k8s.io) registered"}
ABLE = {"type": "AbleToScale", "status": "True", "reason": "SucceededGetScale", "message": "ok"}


def hpa(*conditions: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "infer-x"}, "status": {"conditions": list(conditions)}}


def test_an_autoscaler_that_cannot_read_its_metric_is_named_with_what_the_cluster_needs() -> None:
    why = autoscaler_blind(hpa(ABLE, NO_ADAPTER), "vllm:num_requests_waiting")
    assert why is not None and why.startswith("the HorizontalPodAutoscaler infer-x could not scale: its ScalingActive "
                                              "condition is False (FailedGetPodsMetric: the HPA was unable to")
    assert "no custom metrics API (custom.metrics.k8s.io) registered" in why
    assert "a custom metrics adapter serving custom.metrics.k8s.io, such as prometheus-adapter or KEDA, that " \
        "exposes vllm:num_requests_waiting per pod" in why
    # another reason is quoted, without advice about metrics
    other = autoscaler_blind(hpa({"type": "ScalingActive", "status": "False", "reason": "ScalingDisabled"}), "m")
    assert other == ("the HorizontalPodAutoscaler infer-x could not scale: its ScalingActive condition is False "
                     "(ScalingDisabled)")


@pytest.mark.parametrize("found", [
    None, {"metadata": {"name": "infer-x"}}, hpa(ABLE),
    hpa(ABLE, {"type": "ScalingActive", "status": "True", "reason": "ValidMetricFound", "message": "ok"}),
    hpa({"type": "ScalingActive", "status": "Unknown"})], ids=["gone", "no-status", "no-condition", "active",
                                                               "unknown"])
def test_an_autoscaler_that_read_its_metric_or_says_nothing_is_not_blind(found: dict[str, Any] | None) -> None:
    assert autoscaler_blind(found, "vllm:num_requests_waiting") is None


class HpaDriver:
    """Answers the drill's one read of its HPA."""

    def __init__(self, answer: dict[str, Any] | KubeError | None) -> None:
        self.answer = answer

    def find(self, res: Any, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        assert res.kind == "HorizontalPodAutoscaler" and name == "infer-x", (res, name)
        if isinstance(self.answer, KubeError):
            raise self.answer
        return self.answer


def unabsorbed_burst(answer: dict[str, Any] | KubeError | None) -> ServingDrill:
    """A drill after a burst whose queue crossed 2 per replica at t=11 and that no new replica served."""
    target = SimpleNamespace(profile=reference_profile(), driver=HpaDriver(answer))
    drill = ServingDrill(target=target, result=DrillResult("serving"), run_id="x")  # type: ignore[arg-type]
    drill.name, drill.autoscale, drill.jump_mono, drill.end_mono = "infer-x", Autoscale(4, 2, 2.0), 10.0, 25.0
    drill.serving_before = {"old-a", "old-b"}
    drill.readings = [Reading(11.0, "old-a", 5, 10), Reading(11.1, "old-b", 5, 10), Reading(12.0, "new", 0, 0)]
    return drill


def test_a_burst_no_replica_absorbed_fails_when_the_autoscaler_read_its_metric() -> None:
    drill = unabsorbed_burst(hpa(ABLE, {"type": "ScalingActive", "status": "True", "reason": "ValidMetricFound"}))
    drill.measure_new_replica()
    judged = drill.result.check(Threshold("time to a new replica serving", 10.0, "s"))
    assert judged.verdict is Verdict.FAIL and "no new replica served before the load stopped (14.0 s after the " \
        "crossing)" in judged.message


def test_a_burst_no_replica_absorbed_is_inconclusive_when_the_autoscaler_could_not_read_its_metric() -> None:
    drill = unabsorbed_burst(hpa(ABLE, NO_ADAPTER))
    with pytest.raises(DrillInconclusive) as raised:
        drill.measure_new_replica()
    assert str(raised.value).startswith("no new replica served, and the HorizontalPodAutoscaler infer-x could not "
                                        "scale: its ScalingActive condition is False (FailedGetPodsMetric: ")
    assert "prometheus-adapter or KEDA" in str(raised.value)
    assert drill.result.details["burst"]["autoscaler"]["conditions"][1]["reason"] == "FailedGetPodsMetric"
    # a FAIL found before stands: the missing metric is said beside it, never instead of it
    failed = unabsorbed_burst(hpa(ABLE, NO_ADAPTER))
    failed.result.fail("an invariant broke")
    failed.measure_new_replica()
    assert failed.result.verdict is Verdict.FAIL and "FailedGetPodsMetric" in failed.result.findings[-1]


def test_an_autoscaler_that_cannot_be_read_leaves_the_missed_promise_a_fail() -> None:
    drill = unabsorbed_burst(KubeError("forbidden", code=403))
    drill.measure_new_replica()
    assert drill.result.check(Threshold("time to a new replica serving", 10.0, "s")).verdict is Verdict.FAIL
    assert "could not be read" in drill.result.findings[-1]
