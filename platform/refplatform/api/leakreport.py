"""``GET /apis/firedrill.dev/v1alpha1/leakreport`` and the scheduler's ``GET /metrics``.

``/metrics`` also carries the few kube-state-metrics series (KSM's names and labels) that a leak report
computed from Prometheus needs (drills.target.leakreport.promql), so the reference platform can be drilled that way too.

Both are served from the API server's :class:`~refplatform.api.usagelog.UsageRecorder`
and are for cluster-admins only (they show every tenant); a tenant token gets
403, no token 401.  The leak report's JSON is ``docs/LEAK_REPORT.md``'s contract.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response

from refplatform.api import errors as E
from refplatform.api.auth import Identity, Role
from refplatform.api.usagelog import UsageRecorder
from refplatform.controllers.kubestate import KubeStateCollector
from refplatform.core.accounting import API_VERSION, Window
from refplatform.core.usage import parse_instant

__all__ = ["LEAKREPORT_PATH", "METRICS_PATH", "PATHS", "KubeStateCollector", "misrank", "parse_window",
           "render_metrics", "serve"]

LEAKREPORT_PATH = f"/apis/{API_VERSION}/leakreport"
METRICS_PATH = "/metrics"
PATHS = frozenset({LEAKREPORT_PATH, METRICS_PATH})
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
FORMAT = "an RFC 3339 instant with a zone, e.g. 2027-01-15T08:00:00Z"


def serve(recorder: UsageRecorder, request: Request, who: Identity, path: str, misranked: bool = False) -> Response:
    """Answer one request for :data:`PATHS`; raises :class:`~refplatform.api.errors.ApiError` to refuse.
    ``misranked``: the ``misranked-leaks`` defect (docs/DEFECTS.md), off on an honest server."""
    if request.method != "GET":
        raise E.method_not_allowed(request.method, path)
    if who.role is not Role.CLUSTER_ADMIN:
        raise E.ApiError(403, "Forbidden", f'User "{who.user}" cannot get path "{path}": it shows every tenant\'s '
                         "usage, so only a cluster-admin token may read it")
    if path == METRICS_PATH:
        return Response(render_metrics(recorder), media_type=CONTENT_TYPE)
    window = parse_window(request.query_params.get("start"), request.query_params.get("end"), recorder.now())
    body = recorder.report(window).to_dict()
    if misranked:
        body = misrank(body)
    return Response(json.dumps(body, separators=(",", ":")).encode(), media_type="application/json")


def misrank(body: dict[str, Any]) -> dict[str, Any]:
    """The ``misranked-leaks`` defect: the report's two largest holes swap ranks, and the second largest is
    named the largest (``largest`` and ``summary``), every amount left as computed."""
    holes = list(body.get("holes") or [])
    if len(holes) < 2:
        return body
    holes[0], holes[1] = {**holes[1], "rank": 1}, {**holes[0], "rank": 2}
    out = {**body, "holes": holes}
    if body.get("largest") is not None:
        top = holes[0]
        out["largest"] = top["name"]
        out["summary"] = (f"The largest hole is {top['words']}: {top['gpuHours']:g} GPU-hours, "
                          f"{round(100 * top['share'], 6):g}% of healthy capacity.")
    return out


def _instant(name: str, raw: str) -> float:
    t = parse_instant(raw.strip())
    if t is None:
        raise E.bad_request(f"query parameter {name}={raw!r} is not {FORMAT}; fix the value or leave it out "
                            f"(start: today 00:00 UTC, end: now)")
    return t


def parse_window(start: str | None, end: str | None, now: float) -> Window:
    """The window of ``start``/``end`` (defaults: UTC midnight of the end's day, and now); an end after now
    is clipped to now.  Raises 400 naming the parameter."""
    t_end = now if end is None or end == "" else min(_instant("end", end), now)
    if start is None or start == "":
        day = datetime.fromtimestamp(t_end, UTC) - timedelta(microseconds=1)
        t_start = day.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()
    else:
        t_start = _instant("start", start)
    if not t_end > t_start:
        clipped = " (end is clipped to the server's now)" if end and _instant("end", end) > now else ""
        raise E.bad_request(f"query parameter start={start or 'today 00:00 UTC'!s} must be before end="
                            f"{end or 'now'!s}{clipped}; the window is [start, end), both {FORMAT}")
    return Window(t_start, t_end)


class SchedulerCollector(Collector):
    """Pending demand the scheduler could not place (and why), healthy and allocated GPUs, at the scrape."""

    def __init__(self, recorder: UsageRecorder) -> None:
        self.recorder = recorder

    def collect(self) -> Iterator[Metric]:
        labels = ["namespace", "queue", "reason"]
        gpus = GaugeMetricFamily("firedrill_pending_gpus",
                                 "GPUs of pods the scheduler could not place, by tenant and reason "
                                 "(Fragmentation, InsufficientCapacity, Quota, Other).", labels=labels)
        pods = GaugeMetricFamily("firedrill_pending_pods",
                                 "Pods the scheduler could not place, by tenant and reason.", labels=labels)
        for row in self.recorder.pending_now():
            values = [row.namespace, row.queue, row.reason.value]
            gpus.add_metric(values, float(row.gpus))
            pods.add_metric(values, float(row.pods))
        healthy, allocated = self.recorder.gpus_now()
        yield gpus
        yield pods
        yield GaugeMetricFamily("firedrill_healthy_gpus", "Whole GPUs of Ready, unquarantined nodes.",
                                value=float(healthy))
        yield GaugeMetricFamily("firedrill_allocated_gpus",
                                "Whole GPUs bound to live pods on healthy nodes.", value=float(allocated))


def render_metrics(recorder: UsageRecorder) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SchedulerCollector(recorder))
    registry.register(KubeStateCollector(lambda rt: recorder.store.list(rt.key)[0]))
    return generate_latest(registry)
