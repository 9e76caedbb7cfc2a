"""The horizontal pod autoscaler: upstream's replica algorithm and behavior as a pure function of readings and
a clock, the Prometheus text it reads, and one sync against a real loopback metrics endpoint (with and without
the ``no-autoscaling`` defect)."""

from __future__ import annotations

import copy
import http.server
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import pytest

from refplatform.controllers.autoscaler import (
    DEFAULT_SCALE_DOWN, DEFAULT_SCALE_UP, ConditionType, HorizontalPodAutoscalerController, HpaMemory, HpaSpec,
    NoMetrics, PodReading, PodSample, PodsMetric, ScalingRules, decide, hpa_spec, metric_value, record_scale,
    replicas_for_metric,
)

M = "vllm:num_requests_waiting"
V, MISSING, UNREADY, IGNORED = PodReading.VALUE, PodReading.MISSING, PodReading.UNREADY, PodReading.IGNORED


def pods(*readings: tuple[PodReading, float]) -> list[PodSample]:
    return [PodSample(f"p{i}", r, v) for i, (r, v) in enumerate(readings)]


# ------------------------------------------------------------------ replicas_for_metric
def test_desired_is_ceil_of_current_times_ratio() -> None:
    assert replicas_for_metric(1, pods((V, 6)), 2) == (3, 6)
    assert replicas_for_metric(2, pods((V, 5), (V, 4)), 2) == (5, 4.5)
    assert replicas_for_metric(4, pods((V, 0), (V, 1), (V, 0), (V, 1)), 2) == (1, 0.5)


def test_within_tolerance_nothing_changes() -> None:
    assert replicas_for_metric(2, pods((V, 2.2), (V, 2.2)), 2) == (2, 2.2)
    assert replicas_for_metric(2, pods((V, 2.4), (V, 2.4)), 2)[0] == 3


def test_unready_pods_count_as_zero_on_scale_up_and_are_left_out_on_scale_down() -> None:
    # one loaded replica at 6 waiting, one still loading: 6+0 over 2 -> ratio 1.5 -> ceil(1.5*2) = 3
    assert replicas_for_metric(2, pods((V, 6), (UNREADY, 0)), 2) == (3, 6)
    # the loading replica would absorb it: 3+0 over 2 is within tolerance of 2 -> hold
    assert replicas_for_metric(2, pods((V, 4), (UNREADY, 0)), 2) == (2, 4)
    # scale-down: unready pods are not counted at all
    assert replicas_for_metric(3, pods((V, 0), (UNREADY, 0), (UNREADY, 0)), 2) == (0, 0)


def test_missing_readings_count_as_target_going_down_and_zero_going_up() -> None:
    assert replicas_for_metric(2, pods((V, 0), (MISSING, 0)), 2) == (1, 0)  # (0+2)/2 -> ratio .5 -> 1
    assert replicas_for_metric(2, pods((V, 1.5), (MISSING, 0)), 2) == (2, 1.5)  # flips to a scale-down: hold
    assert replicas_for_metric(2, pods((V, 10), (MISSING, 0)), 2) == (5, 10)
    assert replicas_for_metric(3, pods((V, 6), (IGNORED, 0), (MISSING, 0)), 2)[0] == 3  # (6+0)/2=3 -> 1.5*2


def test_no_reading_at_all_is_an_error() -> None:
    with pytest.raises(NoMetrics):
        replicas_for_metric(1, pods((UNREADY, 0), (MISSING, 0)), 2)


# ------------------------------------------------------------------ decide: limits and behavior
def spec(**kw: Any) -> HpaSpec:
    base: dict[str, Any] = dict(min_replicas=1, max_replicas=3, metrics=(PodsMetric(M, 2.0),))
    base.update(kw)
    return HpaSpec(**base)


def conds(d: Any) -> dict[ConditionType, tuple[bool, str]]:
    return {c.type: (c.status, c.reason) for c in d.conditions}


def test_scale_up_clamped_by_max_replicas_says_so() -> None:
    d = decide(spec(), 1, {M: pods((V, 10))}, HpaMemory(), 0.0)
    assert d.desired == 3 and d.reason == f"pods metric {M} above target"
    assert conds(d)[ConditionType.SCALING_LIMITED] == (True, "TooManyReplicas")
    assert conds(d)[ConditionType.SCALING_ACTIVE] == (True, "ValidMetricFound")
    assert [(m.name, m.average) for m in d.metrics] == [(M, 10)]


def test_default_rate_policy_limits_a_scale_up_to_max_of_double_and_plus_four() -> None:
    d = decide(spec(max_replicas=50), 2, {M: pods((V, 40), (V, 40))}, HpaMemory(), 0.0)
    assert d.desired == 6 and conds(d)[ConditionType.SCALING_LIMITED] == (True, "ScaleUpLimit")
    memory = HpaMemory()
    record_scale(memory, 2, 6, 0.0)
    # 10 s later the period (15 s) still holds the +4: it started at 2, so at most 6 -> no change
    assert decide(spec(max_replicas=50), 6, {M: pods(*[(V, 40)] * 6)}, memory, 10.0).desired == 6
    assert decide(spec(max_replicas=50), 6, {M: pods(*[(V, 40)] * 6)}, memory, 16.0).desired == 12


def test_scale_down_waits_out_the_stabilization_window() -> None:
    memory = HpaMemory()
    s = spec(max_replicas=5)
    assert decide(s, 3, {M: pods((V, 2), (V, 2), (V, 2))}, memory, 0.0).desired == 3  # at target
    quiet = {M: pods((V, 0), (V, 0), (V, 0))}
    d = decide(s, 3, quiet, memory, 100.0)
    assert d.desired == 3 and conds(d)[ConditionType.ABLE_TO_SCALE] == (True, "ScaleDownStabilized")
    d = decide(s, 3, quiet, memory, 299.0)
    assert d.desired == 3
    d = decide(s, 3, quiet, memory, 301.0)  # the recommendation of 3 (t=0) left the 300 s window
    assert d.desired == 1 and d.reason == "All metrics below target"
    assert conds(d)[ConditionType.SCALING_LIMITED] == (True, "TooFewReplicas")


def test_a_scale_up_window_takes_the_lowest_recent_recommendation() -> None:
    memory = HpaMemory()
    s = spec(max_replicas=10, scale_up=ScalingRules(5.0, DEFAULT_SCALE_UP.select, DEFAULT_SCALE_UP.policies))
    assert decide(s, 1, {M: pods((V, 2))}, memory, 0.0).desired == 1
    d = decide(s, 1, {M: pods((V, 6))}, memory, 1.0)
    assert d.desired == 1 and conds(d)[ConditionType.ABLE_TO_SCALE] == (True, "ScaleUpStabilized")
    assert decide(s, 1, {M: pods((V, 6))}, memory, 6.0).desired == 3


def test_out_of_range_and_zero_replicas() -> None:
    assert decide(spec(), 5, {M: pods((V, 2))}, HpaMemory(), 0.0).desired == 3
    assert decide(spec(min_replicas=2), 1, {M: pods((V, 2))}, HpaMemory(), 0.0).desired == 2
    d = decide(spec(), 0, {M: []}, HpaMemory(), 0.0)
    assert d.desired == 0 and conds(d)[ConditionType.SCALING_ACTIVE] == (False, "ScalingDisabled")
    d = decide(spec(), 1, {M: pods((UNREADY, 0))}, HpaMemory(), 0.0)
    assert d.desired == 1 and conds(d)[ConditionType.SCALING_ACTIVE] == (False, "FailedGetPodsMetric")


def test_hpa_spec_defaults_behavior_as_upstream() -> None:
    s = hpa_spec(hpa_object())
    assert (s.min_replicas, s.max_replicas, s.metrics) == (1, 3, (PodsMetric(M, 2.0),))
    assert s.scale_up == DEFAULT_SCALE_UP and s.scale_up.stabilization_window == 0
    assert s.scale_down == DEFAULT_SCALE_DOWN and s.scale_down.stabilization_window == 300
    custom = hpa_object()
    custom["spec"]["behavior"] = {"scaleDown": {"stabilizationWindowSeconds": 5}}
    s = hpa_spec(custom)
    assert s.scale_down.stabilization_window == 5 and s.scale_down.policies == DEFAULT_SCALE_DOWN.policies


# ------------------------------------------------------------------ the metrics text
CANARY_TEXT = f"""# HELP {M} Number of requests waiting for a batch slot.
# TYPE {M} gauge
{M}{{model_name="a"}} 3.0
{M}{{model_name="b"}} 1.0
# HELP vllm:num_requests_running Number of requests in the running batch.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{model_name="a"}} 2.0
"""


def test_metric_value_sums_label_sets_and_says_when_absent() -> None:
    assert metric_value(CANARY_TEXT, M) == 4.0
    assert metric_value(CANARY_TEXT, "vllm:num_requests_running") == 2.0
    assert metric_value(CANARY_TEXT, "vllm:gpu_cache_usage_perc") is None


# ------------------------------------------------------------------ one sync, real scrape
class _Metrics(http.server.BaseHTTPRequestHandler):
    waiting = 6.0

    def do_GET(self) -> None:  # noqa: N802
        body = f"# TYPE {M} gauge\n{M}{{model_name=\"m\"}} {_Metrics.waiting}\n".encode()
        self.send_response(200 if self.path == "/metrics" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture()
def metrics_port() -> Iterator[int]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield srv.server_address[1]
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(5)


def hpa_object() -> dict[str, Any]:
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "infer", "namespace": "default", "uid": "hpa-1", "generation": 1},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "infer"},
                     "minReplicas": 1, "maxReplicas": 3,
                     "metrics": [{"type": "Pods", "pods": {"metric": {"name": M},
                                                           "target": {"type": "AverageValue", "averageValue": "2"}}}]}}


class ScaleApi:
    """The calls the autoscaler makes: GET/PATCH of a Deployment's scale, PATCH of the HPA status, Events."""

    SCALE = "/apis/apps/v1/namespaces/default/deployments/infer/scale"

    def __init__(self, replicas: int) -> None:
        self.replicas = replicas
        self.calls: list[tuple[str, str, Any]] = []

    def get(self, path: str, params: Any = None) -> dict[str, Any]:
        assert path == self.SCALE, path
        return {"kind": "Scale", "spec": {"replicas": self.replicas},
                "status": {"replicas": self.replicas, "selector": "app=infer"}}

    def patch(self, path: str, body: Any, content_type: str, params: Any = None) -> dict[str, Any]:
        self.calls.append(("PATCH", path, copy.deepcopy(body)))
        if path == self.SCALE:
            self.replicas = body["spec"]["replicas"]
        return {}

    def create(self, path: str, body: Any, params: Any = None) -> dict[str, Any]:
        self.calls.append(("POST", path, copy.deepcopy(body)))
        return {"metadata": {"name": "ev"}}

    def status(self) -> dict[str, Any]:
        return [b for m, p, b in self.calls if p.endswith("/status")][-1]["status"]


def pod(name: str, port: int, ready: bool = True) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "labels": {"app": "infer"},
                         "annotations": {"prometheus.io/port": str(port)}},
            "status": {"phase": "Running", "podIP": "127.0.0.1",
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


WALL = datetime(2026, 12, 1, 6, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize("defect", [False, True])
def test_one_sync_scrapes_ready_pods_and_scales_unless_the_defect(metrics_port: int, defect: bool) -> None:
    api = ScaleApi(replicas=1)
    ctrl = HorizontalPodAutoscalerController(api, 1.0, no_autoscaling=defect, clock=lambda: 0.0,  # type: ignore[arg-type]
                                             wall=lambda: WALL)
    _Metrics.waiting = 6.0
    ctrl.sync(hpa_object(), [pod("a", metrics_port), pod("other", metrics_port, ready=True) | {
        "metadata": {"name": "other", "namespace": "default", "labels": {"app": "else"}}}], 0.0)
    status = api.status()
    assert status["desiredReplicas"] == 3 and status["currentReplicas"] == 1
    assert status["currentMetrics"] == [{"type": "Pods", "pods": {"metric": {"name": M},
                                                                  "current": {"averageValue": "6"}}}]
    events = [b for m, p, b in api.calls if m == "POST" and p.endswith("/events")]
    scale_writes = [b for m, p, b in api.calls if p == ScaleApi.SCALE]
    if defect:
        assert scale_writes == [] and api.replicas == 1, "no-autoscaling never touches the target"
        assert "lastScaleTime" not in status and events == []
    else:
        assert scale_writes == [{"spec": {"replicas": 3}}] and api.replicas == 3
        assert status["lastScaleTime"] == "2026-12-01T06:00:00Z"
        assert [(e["reason"], e["message"]) for e in events] == [
            ("SuccessfulRescale", f"New size: 3; reason: pods metric {M} above target")]
        types = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
        assert types["AbleToScale"] == ("True", "SucceededRescale")
        assert types["ScalingLimited"] == ("False", "DesiredWithinRange")


def test_a_loading_replica_is_not_scraped_and_holds_a_borderline_scale_up(metrics_port: int) -> None:
    api = ScaleApi(replicas=2)
    ctrl = HorizontalPodAutoscalerController(api, 1.0, clock=lambda: 0.0, wall=lambda: WALL)  # type: ignore[arg-type]
    _Metrics.waiting = 4.0
    ctrl.sync(hpa_object(), [pod("a", metrics_port), pod("loading", metrics_port, ready=False)], 0.0)
    assert api.replicas == 2 and api.status()["desiredReplicas"] == 2
