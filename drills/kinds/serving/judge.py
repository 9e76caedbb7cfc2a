"""How the users' samples are judged: when the SLA held again and which requests were lost (pure); the
per-second series the report draws is :func:`drills.load.series.series`; and whether the autoscaler could
read its metric at all, when no new replica served (pure)."""

from __future__ import annotations

from typing import Any

from drills.load.run import Outcome, Sample, nearest_rank
from drills.load.series import by_start

Obj = dict[str, Any]


def sla_back(samples: tuple[Sample, ...], since: float, until: float, ttft_s: float, bucket_s: float = 1.0
             ) -> float | None:
    """Seconds after ``since`` from which every bucket of request starts up to ``until`` had its p99 TTFT within
    ``ttft_s`` and nothing failed or lost (pure); None when the last bucket still misses."""
    buckets = by_start((s for s in samples if since <= s.start_mono < until), since, bucket_s)
    if not buckets:
        return None
    good_from: int | None = None
    for b in range(max(buckets) + 1):
        items = buckets.get(b, [])
        ttfts = [s.ttft_s for s in items if s.outcome is Outcome.ANSWERED and s.ttft_s is not None]
        ok = bool(items) and all(s.outcome is Outcome.ANSWERED for s in items) and \
            nearest_rank(ttfts, 99) <= ttft_s
        if ok and good_from is None:
            good_from = b
        elif not ok:
            good_from = None
    return None if good_from is None else good_from * bucket_s


def lost_findings(samples: tuple[Sample, ...], act_mono: float | None, limit: int = 3) -> list[str]:
    """Plain words for the first few lost requests: id, error, and when each started relative to the act."""
    lost = [s for s in samples if s.outcome is Outcome.LOST]
    out = []
    for s in lost[:limit]:
        when = f"{s.start_mono - act_mono:+.2f} s from the act" if act_mono is not None else "before any act"
        out.append(f"request {s.request_id} ({when}, {s.attempts} attempt(s)): {s.error or 'no answer'}")
    if len(lost) > limit:
        out.append(f"... and {len(lost) - limit} more lost request(s)")
    return out


METRIC_REASONS = ("FailedGetPodsMetric", "FailedGetObjectMetric", "FailedGetExternalMetric",
                  "FailedGetResourceMetric", "FailedGetContainerResourceMetric", "InvalidMetricSourceType")
"""``ScalingActive`` reasons upstream's HPA controller gives when it cannot read a metric (a missing metrics API)."""

ADAPTER_NEEDED = ("the cluster needs a custom metrics adapter serving custom.metrics.k8s.io, such as "
                  "prometheus-adapter or KEDA, that exposes {metric} per pod of the service from a Prometheus "
                  "scraping the replicas (docs/SERVICES.md)")


def autoscaler_blind(hpa: Obj | None, metric: str) -> str | None:
    """Why the HorizontalPodAutoscaler ``hpa`` could not scale at all, from its ``ScalingActive`` condition
    (pure): None while that condition is not False (the autoscaler read its metric, or says nothing), else the
    condition's reason and message, and, for a metric it could not get, what the cluster needs to serve it.

    A missing prerequisite of the test, not a broken promise: with no metrics API the HPA cannot scale out,
    and the scenario is INCONCLUSIVE rather than a FAIL that blames the platform."""
    status = (hpa or {}).get("status") or {}
    active = next((c for c in status.get("conditions") or [] if c.get("type") == "ScalingActive"), None)
    if active is None or active.get("status") != "False":
        return None
    name = ((hpa or {}).get("metadata") or {}).get("name", "?")
    reason, message = active.get("reason") or "no reason given", (active.get("message") or "").strip()
    why = (f"the HorizontalPodAutoscaler {name} could not scale: its ScalingActive condition is False "
           f"({reason}{': ' + message if message else ''})")
    if reason in METRIC_REASONS:
        why += "; " + ADAPTER_NEEDED.format(metric=metric)
    return why
