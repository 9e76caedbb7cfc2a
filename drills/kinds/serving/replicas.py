"""What the harness reads from the replicas themselves: each one's own /metrics (its queue and its served
count), directly or through a Prometheus that scrapes them, and the instants those readings prove (pure but
for the two readers)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from drills.kinds.serving.manifests import QUEUE_METRIC
from drills.kube.driver import RESOURCES

Obj = dict[str, Any]

ENDPOINT_SLICE = RESOURCES[("discovery.k8s.io/v1", "EndpointSlice")]


SCRAPE_EVERY = 0.25
"""Seconds between two reads of every replica's own /metrics (the canary's queue and served count)."""


SERVED_METRIC = "firedrill_inference_requests_served_total"


def prometheus_readings(base: str, namespace: str, deployment: str, mono: float,
                        timeout: float = 2.0) -> list[Reading]:
    """One Reading per replica from a Prometheus that scrapes the replicas (instant queries by ``pod``); none
    when it cannot be asked. For clusters whose pod IPs the harness cannot reach."""
    values: dict[str, dict[str, float]] = {}
    for metric in (QUEUE_METRIC, SERVED_METRIC):
        query = f'sum by (pod) ({metric}{{namespace="{namespace}",pod=~"{deployment}-.*"}})'
        url = f"{base.rstrip('/')}/api/v1/query?" + urllib.parse.urlencode({"query": query})
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:
                doc = json.loads(resp.read().decode("utf-8", "replace"))
        except (OSError, urllib.error.URLError, ValueError):
            return []
        for item in ((doc.get("data") or {}).get("result") or []) if isinstance(doc, dict) else []:
            pod = (item.get("metric") or {}).get("pod")
            try:
                value = float((item.get("value") or [0, "nan"])[1])
            except (TypeError, ValueError, IndexError):
                continue
            if pod:
                values.setdefault(pod, {})[metric] = value
    return [Reading(mono, pod, v.get(QUEUE_METRIC), v.get(SERVED_METRIC)) for pod, v in sorted(values.items())]


def metric_value(text: str, name: str) -> float | None:
    """The sum over label sets of one metric in a Prometheus text exposition (the canary's /metrics); None if
    absent. Only plain samples (``name{...} value`` or ``name value``) are read."""
    total, seen = 0.0, False
    for line in text.splitlines():
        if not line.startswith(name) or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        if head.split("{", 1)[0].strip() != name:
            continue
        try:
            total += float(value)
            seen = True
        except ValueError:
            continue
    return total if seen else None


@dataclass(frozen=True)
class Reading:
    """One read of one replica's /metrics by the harness."""

    mono: float
    pod: str
    waiting: float | None
    served: float | None


def queue_crossing(readings: list[Reading], after: float, threshold: float, every: float = SCRAPE_EVERY
                   ) -> float | None:
    """The first instant after ``after`` at which the replicas' mean queue, over one round of reads, was above
    ``threshold`` requests per replica (pure)."""
    rounds: dict[int, list[float]] = {}
    for r in readings:
        if r.mono >= after and r.waiting is not None:
            rounds.setdefault(int(r.mono // every), []).append(r.waiting)
    for key in sorted(rounds):
        values = rounds[key]
        if sum(values) / len(values) > threshold:
            return key * every
    return None


def first_served_by_new(readings: list[Reading], old: set[str]) -> tuple[float, str] | None:
    """The first read at which a replica that was not serving before the burst had served a request (pure)."""
    for r in sorted(readings, key=lambda r: r.mono):
        if r.pod not in old and (r.served or 0) > 0:
            return r.mono, r.pod
    return None


def ready_endpoint_addresses(slices: list[Obj]) -> list[str]:
    """Every address of a ready endpoint in these EndpointSlices (pure)."""
    return sorted(a for s in slices for ep in s.get("endpoints") or []
                  if (ep.get("conditions") or {}).get("ready") is not False for a in ep.get("addresses") or [])


def pod_ready(pod: Obj) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and (pod.get("status") or {}).get("phase") == "Running" \
        and any(c.get("type") == "Ready" and c.get("status") == "True"
                for c in (pod.get("status") or {}).get("conditions") or [])
