"""The horizontal pod autoscaler: ``autoscaling/v2`` HorizontalPodAutoscalers on a custom per-pod metric.

Every sync period (``--horizontal-pod-autoscaler-sync-period``, upstream's
15 s; the tuned profile 1 s) each HPA whose ``scaleTargetRef`` is a
Deployment (or ReplicaSet) is brought up to date:

1. its target's scale is read through the ``scale`` subresource
   (``spec.replicas`` and ``status.selector``);
2. each ``type: Pods`` metric is read by scraping the target's pods: every
   Ready pod with a ``prometheus.io/port`` annotation is asked for
   ``http://<podIP>:<port><prometheus.io/path, default /metrics>`` and the
   metric's samples (all label sets summed, e.g. vLLM's per-model
   ``vllm:num_requests_waiting``) are its value;
3. the pure :func:`decide` turns the readings into a replica count, with
   upstream's algorithm (``pkg/controller/podautoscaler``);
4. a changed count is written through the scale subresource, with the Event
   ``SuccessfulRescale`` ("New size: 3; reason: pods metric
   vllm:num_requests_waiting above target"), and the status
   (``currentReplicas``, ``desiredReplicas``, ``currentMetrics``,
   ``lastScaleTime``, conditions ``AbleToScale``, ``ScalingActive``,
   ``ScalingLimited``) through the status subresource.

The algorithm (:func:`replicas_for_metric`, :func:`decide`), as upstream:

- ``desired = ceil(current * average / target)`` per metric, the largest
  wins; no change while ``|average/target - 1| <= tolerance`` (0.1);
- pods being deleted or Failed are ignored; pods not Ready (Pending, or a
  model still loading behind its readiness probe) have no reading: on a
  scale-up they count as 0, on a scale-down they are left out; Ready pods
  whose scrape failed count as 0 on a scale-up and as exactly the target on
  a scale-down; when that flips the direction or lands within tolerance,
  nothing changes;
- ``behavior``: the recommendation is stabilized over
  ``stabilizationWindowSeconds`` (scale-up default 0, scale-down 300: the
  lowest recent recommendation for going up, the highest for going down), then
  limited by the rate policies (default up: the larger of +100 % and +4 pods
  per 15 s; down: -100 % per 15 s) and by ``minReplicas``/``maxReplicas``.

Upstream differs in where readings come from (the custom metrics API, served
by an adapter such as prometheus-adapter or KEDA, not a scrape by the
controller) and in treating readiness only for CPU; here a pod is read only
once Ready, so the "unready" rule applies to every metric.
"""

from __future__ import annotations

import enum
import http.client
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from refplatform.client import MERGE_PATCH, ApiStatusError, ApiUnreachable, RestClient, resource_path
from refplatform.controllers.deployment import pod_ready
from refplatform.controllers.events import EventRecorder
from refplatform.controllers.manager import Cache
from refplatform.quantity import parse_quantity
from refplatform.resources import DEPLOYMENTS, HPAS, PODS, REPLICASETS, ResourceType
from refplatform.selectors import LabelSelector, SelectorError

log = logging.getLogger(__name__)
Obj = dict[str, Any]

DEFAULT_SYNC_PERIOD = 15.0
"""Seconds between two looks at an HPA (kube-controller-manager's ``--horizontal-pod-autoscaler-sync-period``)."""
DEFAULT_TOLERANCE = 0.1
"""Ratios within this of 1 change nothing (``--horizontal-pod-autoscaler-tolerance``)."""
PORT_ANNOTATION = "prometheus.io/port"
PATH_ANNOTATION = "prometheus.io/path"
SCRAPE_ANNOTATION = "prometheus.io/scrape"
SCRAPE_TIMEOUT = 1.0
COMPONENT = "horizontal-pod-autoscaler"
TARGETS: Mapping[str, ResourceType] = {"Deployment": DEPLOYMENTS, "ReplicaSet": REPLICASETS}


# ======================================================================== pure core
class PodReading(enum.Enum):
    """What one pod of the target gave for a metric."""

    VALUE = "value"
    """Ready, scraped: it has a value."""
    MISSING = "missing"
    """Ready, but the scrape failed or lacked the metric."""
    UNREADY = "unready"
    """Not Ready yet (Pending, or its readiness probe has not passed): never scraped."""
    IGNORED = "ignored"
    """Being deleted, or Failed: left out."""


@dataclass(frozen=True)
class PodSample:
    name: str
    reading: PodReading
    value: float = 0.0


class PolicyType(enum.Enum):
    """``behavior.*.policies[].type``."""

    PODS = "Pods"
    """At most ``value`` pods per period."""
    PERCENT = "Percent"
    """At most ``value`` % of the replicas at the period's start per period."""


class SelectPolicy(enum.Enum):
    """``behavior.*.selectPolicy``."""

    MAX = "Max"
    """The policy allowing the largest change (default)."""
    MIN = "Min"
    """The policy allowing the smallest change."""
    DISABLED = "Disabled"
    """No scaling in this direction."""


@dataclass(frozen=True)
class ScalingPolicy:
    type: PolicyType
    value: int
    period: float


@dataclass(frozen=True)
class ScalingRules:
    stabilization_window: float
    select: SelectPolicy = SelectPolicy.MAX
    policies: tuple[ScalingPolicy, ...] = ()


DEFAULT_SCALE_UP = ScalingRules(0.0, SelectPolicy.MAX, (ScalingPolicy(PolicyType.PERCENT, 100, 15.0),
                                                         ScalingPolicy(PolicyType.PODS, 4, 15.0)))
DEFAULT_SCALE_DOWN = ScalingRules(300.0, SelectPolicy.MAX, (ScalingPolicy(PolicyType.PERCENT, 100, 15.0),))


@dataclass(frozen=True)
class PodsMetric:
    """A ``type: Pods`` metric with an ``AverageValue`` target."""

    name: str
    target: float


@dataclass(frozen=True)
class HpaSpec:
    min_replicas: int
    max_replicas: int
    metrics: tuple[PodsMetric, ...]
    scale_up: ScalingRules = DEFAULT_SCALE_UP
    scale_down: ScalingRules = DEFAULT_SCALE_DOWN
    tolerance: float = DEFAULT_TOLERANCE


@dataclass
class HpaMemory:
    """What the controller remembers of one HPA between syncs (upstream keeps the same in memory)."""

    recommendations: list[tuple[float, int]] = field(default_factory=list)
    """(when, unstabilized recommendation)."""
    scale_events: list[tuple[float, int]] = field(default_factory=list)
    """(when, replica change): positive for scale-ups, negative for scale-downs."""


class ConditionType(enum.Enum):
    """The HPA's status conditions."""

    ABLE_TO_SCALE = "AbleToScale"
    """Whether the target's scale could be read and written."""
    SCALING_ACTIVE = "ScalingActive"
    """Whether a replica count could be computed from the metrics."""
    SCALING_LIMITED = "ScalingLimited"
    """Whether the count wanted was clamped by min/max or a rate policy."""


@dataclass(frozen=True)
class Condition:
    type: ConditionType
    status: bool
    reason: str
    message: str


@dataclass(frozen=True)
class MetricValue:
    name: str
    average: float


@dataclass(frozen=True)
class Decision:
    desired: int
    """The replica count the target should have (== current when nothing changes)."""
    reason: str
    """Why (the ``SuccessfulRescale`` Event's reason), empty when nothing changes."""
    metrics: tuple[MetricValue, ...]
    conditions: tuple[Condition, ...]

    def rescale(self, current: int) -> bool:
        return self.desired != current


class NoMetrics(Exception):
    """No pod of the target gave a reading (all unready, or every scrape failed)."""


def _milli(value: float) -> int:
    return round(value * 1000)


def _usage_ratio(milli_values: Sequence[int], target_milli: int) -> tuple[float, int]:
    """Upstream's ``GetMetricUsageRatio``: the average in milli-units (integer division) over the target."""
    average = sum(milli_values) // len(milli_values)
    return average / target_milli, average


def _within(ratio: float, tolerance: float) -> bool:
    return 1.0 - tolerance <= ratio <= 1.0 + tolerance


def replicas_for_metric(current: int, samples: Sequence[PodSample], target: float,
                        tolerance: float = DEFAULT_TOLERANCE) -> tuple[int, float]:
    """Upstream's ``calcPlainMetricReplicas``: (replicas wanted, average over the pods with a value).

    Values are compared in milli-units, as upstream's metrics client reads them (``MilliValue``)."""
    values = {s.name: _milli(s.value) for s in samples if s.reading is PodReading.VALUE}
    unready = [s.name for s in samples if s.reading is PodReading.UNREADY]
    missing = [s.name for s in samples if s.reading is PodReading.MISSING]
    if not values:
        raise NoMetrics("no pod of the target gave a reading (pods might be unready)")
    goal = max(1, _milli(target))
    ratio, average = _usage_ratio(list(values.values()), goal)
    up_with_unready = bool(unready) and ratio > 1.0
    if not up_with_unready and not missing:
        if _within(ratio, tolerance):
            return current, average / 1000
        return math.ceil(ratio * len(values)), average / 1000
    filled = dict(values)
    if ratio < 1.0:
        filled.update({name: goal for name in missing})  # a scale-down counts them at the target
    elif ratio > 1.0:
        filled.update({name: 0 for name in missing})
    if up_with_unready:
        filled.update({name: 0 for name in unready})
    new_ratio, _ = _usage_ratio(list(filled.values()), goal)
    if _within(new_ratio, tolerance) or (ratio < 1.0 < new_ratio) or (ratio > 1.0 > new_ratio):
        return current, average / 1000
    wanted = math.ceil(new_ratio * len(filled))
    if (new_ratio < 1.0 and wanted > current) or (new_ratio > 1.0 and wanted < current):
        return current, average / 1000
    return wanted, average / 1000


def _changed_within(events: Sequence[tuple[float, int]], period: float, now: float, up: bool) -> int:
    return sum(abs(c) for t, c in events if t > now - period and (c > 0) == up)


def _up_limit(current: int, memory: HpaMemory, rules: ScalingRules, now: float) -> int:
    if rules.select is SelectPolicy.DISABLED:
        return current
    picks = []
    for p in rules.policies:
        start = current - _changed_within(memory.scale_events, p.period, now, True) \
            + _changed_within(memory.scale_events, p.period, now, False)
        picks.append(start + p.value if p.type is PolicyType.PODS else math.ceil(start * (1 + p.value / 100)))
    if not picks:
        return 2 ** 31 - 1
    return min(picks) if rules.select is SelectPolicy.MIN else max(picks)


def _down_limit(current: int, memory: HpaMemory, rules: ScalingRules, now: float) -> int:
    if rules.select is SelectPolicy.DISABLED:
        return current
    picks = []
    for p in rules.policies:
        start = current - _changed_within(memory.scale_events, p.period, now, True) \
            + _changed_within(memory.scale_events, p.period, now, False)
        picks.append(start - p.value if p.type is PolicyType.PODS else int(start * (1 - p.value / 100)))
    if not picks:
        return 0
    return max(picks) if rules.select is SelectPolicy.MIN else min(picks)


def _normalize(spec: HpaSpec, memory: HpaMemory, current: int, wanted: int, now: float) -> tuple[int, list[Condition]]:
    """Stabilize ``wanted`` over the behavior's windows, then limit it by the rate policies and min/max."""
    up_floor, down_ceiling = wanted, wanted
    for when, rec in memory.recommendations:
        if when > now - spec.scale_up.stabilization_window:
            up_floor = min(up_floor, rec)
        if when > now - spec.scale_down.stabilization_window:
            down_ceiling = max(down_ceiling, rec)
    stabilized = min(max(current, up_floor), down_ceiling)
    horizon = max(spec.scale_up.stabilization_window, spec.scale_down.stabilization_window)
    memory.recommendations = [(t, r) for t, r in memory.recommendations if t > now - horizon] + [(now, wanted)]
    conditions = []
    if stabilized != wanted:
        up = wanted >= current
        conditions.append(Condition(
            ConditionType.ABLE_TO_SCALE, True, "ScaleUpStabilized" if up else "ScaleDownStabilized",
            "recent recommendations were lower than current one, applying the lowest recent recommendation" if up
            else "recent recommendations were higher than current one, applying the highest recent recommendation"))
    else:
        conditions.append(Condition(ConditionType.ABLE_TO_SCALE, True, "ReadyForNewScale",
                                    "recommended size matches current size"))
    desired, reason, message = stabilized, "DesiredWithinRange", "the desired count is within the acceptable range"
    if stabilized > current:
        limit = max(_up_limit(current, memory, spec.scale_up, now), current)
        top, reason, message = (limit, "ScaleUpLimit", "the desired replica count is increasing faster than the "
                                                       "maximum scale rate") if spec.max_replicas > limit else \
            (spec.max_replicas, "TooManyReplicas", "the desired replica count is more than the maximum replica count")
        if stabilized > top:
            desired = top
        else:
            reason, message = "DesiredWithinRange", "the desired count is within the acceptable range"
    elif stabilized < current:
        limit = min(_down_limit(current, memory, spec.scale_down, now), current)
        bottom, reason, message = (limit, "ScaleDownLimit", "the desired replica count is decreasing faster than the "
                                                            "maximum scale rate") if spec.min_replicas < limit else \
            (spec.min_replicas, "TooFewReplicas", "the desired replica count is less than the minimum replica count")
        if stabilized < bottom:
            desired = bottom
        else:
            reason, message = "DesiredWithinRange", "the desired count is within the acceptable range"
    conditions.append(Condition(ConditionType.SCALING_LIMITED, desired != stabilized, reason, message))
    return desired, conditions


def decide(spec: HpaSpec, current: int, samples: Mapping[str, Sequence[PodSample]], memory: HpaMemory,
           now: float) -> Decision:
    """One sync of one HPA (upstream's ``reconcileAutoscaler`` less the I/O).

    ``current``: the target's ``spec.replicas``; ``samples``: per metric name, what each pod of the target
    gave; ``memory``: updated in place (recommendations); ``now``: seconds on the controller's clock.
    """
    able = Condition(ConditionType.ABLE_TO_SCALE, True, "SucceededGetScale",
                     "the HPA controller was able to get the target's current scale")
    if current == 0 and spec.min_replicas != 0:
        return Decision(0, "", (), (able, Condition(ConditionType.SCALING_ACTIVE, False, "ScalingDisabled",
                                                    "scaling is disabled since the replica count of the target "
                                                    "is zero")))
    if current > spec.max_replicas:
        return Decision(spec.max_replicas, "Current number of replicas above Spec.MaxReplicas", (),
                        (able, Condition(ConditionType.SCALING_ACTIVE, True, "ValidMetricFound",
                                         "the HPA was able to successfully calculate a replica count")))
    if current < spec.min_replicas:
        return Decision(spec.min_replicas, "Current number of replicas below Spec.MinReplicas", (),
                        (able, Condition(ConditionType.SCALING_ACTIVE, True, "ValidMetricFound",
                                         "the HPA was able to successfully calculate a replica count")))
    wanted, wanted_metric, values = 0, "", []
    errors = []
    for metric in spec.metrics:
        try:
            n, average = replicas_for_metric(current, samples.get(metric.name, ()), metric.target, spec.tolerance)
        except NoMetrics as exc:
            errors.append(f"pods metric {metric.name}: {exc}")
            continue
        values.append(MetricValue(metric.name, average))
        if n > wanted:
            wanted, wanted_metric = n, f"pods metric {metric.name}"
    if not values:
        return Decision(current, "", (), (able, Condition(
            ConditionType.SCALING_ACTIVE, False, "FailedGetPodsMetric",
            "the HPA was unable to compute the replica count: " + "; ".join(errors))))
    active = Condition(ConditionType.SCALING_ACTIVE, True, "ValidMetricFound",
                       f"the HPA was able to successfully calculate a replica count from {wanted_metric or 'its metrics'}")
    reason = f"{wanted_metric} above target" if wanted > current else \
        "All metrics below target" if wanted < current else ""
    desired, conditions = _normalize(spec, memory, current, wanted, now)
    if desired == current:
        reason = ""
    return Decision(desired, reason, tuple(values), (conditions[0], active, conditions[1]))


def record_scale(memory: HpaMemory, current: int, desired: int, now: float, horizon: float = 1800.0) -> None:
    """Remember a rescale (for the rate policies); events older than ``horizon`` seconds are dropped."""
    memory.scale_events = [(t, c) for t, c in memory.scale_events if t > now - horizon] + [(now, desired - current)]


# ======================================================================== reading the objects
class SpecError(Exception):
    """An HPA this controller cannot act on (named in its ScalingActive condition)."""


def _rules(raw: Any, default: ScalingRules) -> ScalingRules:
    if not isinstance(raw, dict):
        return default
    window = raw.get("stabilizationWindowSeconds")
    policies = raw.get("policies")
    return ScalingRules(
        float(window) if isinstance(window, int) else default.stabilization_window,
        SelectPolicy(raw["selectPolicy"]) if raw.get("selectPolicy") else default.select,
        tuple(ScalingPolicy(PolicyType(p["type"]), int(p["value"]), float(p["periodSeconds"])) for p in policies)
        if isinstance(policies, list) and policies else default.policies)


def parse_quantity_value(value: Any) -> float:
    return float(parse_quantity(value))


def hpa_spec(hpa: Obj, tolerance: float = DEFAULT_TOLERANCE) -> HpaSpec:
    """The typed spec of an HPA as stored (admission checked its shape)."""
    spec = hpa.get("spec") or {}
    metrics = []
    for m in spec.get("metrics") or []:
        pods = m.get("pods") or {}
        if m.get("type") != "Pods":
            raise SpecError(f"metric type {m.get('type')!r} is not served (Pods only)")
        metrics.append(PodsMetric(pods["metric"]["name"], parse_quantity_value(pods["target"]["averageValue"])))
    behavior = spec.get("behavior") or {}
    return HpaSpec(int(spec.get("minReplicas") or 1), int(spec["maxReplicas"]), tuple(metrics),
                   _rules(behavior.get("scaleUp"), DEFAULT_SCALE_UP), _rules(behavior.get("scaleDown"), DEFAULT_SCALE_DOWN),
                   tolerance)


def metric_value(text: str, name: str) -> float | None:
    """The value of metric ``name`` in a Prometheus text exposition (every label set summed); None if absent."""
    found = None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                found = (found or 0.0) + float(sample.value)
    return found


def scrape(pod: Obj, names: Sequence[str], timeout: float = SCRAPE_TIMEOUT) -> dict[str, float | None]:
    """GET the pod's Prometheus endpoint (its annotations) on its IP; each metric's value (None: absent/failed)."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    ann = meta.get("annotations") or {}
    port, ip = ann.get(PORT_ANNOTATION), status.get("podIP")
    if not ip or not str(port or "").isdigit():
        return {n: None for n in names}
    conn = http.client.HTTPConnection(ip, int(port), timeout=timeout)
    try:
        conn.request("GET", ann.get(PATH_ANNOTATION) or "/metrics", headers={"Accept": "text/plain"})
        resp = conn.getresponse()
        body = resp.read().decode("utf-8", "replace")
        if resp.status != 200:
            return {n: None for n in names}
        return {n: metric_value(body, n) for n in names}
    except (OSError, http.client.HTTPException, ValueError, UnicodeError) as exc:
        log.debug("scrape of pod %s failed: %s", meta.get("name"), exc)
        return {n: None for n in names}
    finally:
        conn.close()


def _quantity(value: float) -> str:
    """A metric value as upstream writes it: a milli-quantity (``2``, ``2500m``)."""
    milli = round(value * 1000)
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def _now_rfc3339(when: datetime) -> str:
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# ======================================================================== controller
class HorizontalPodAutoscalerController:
    name = "autoscaler"
    watches = (HPAS, PODS)

    def __init__(self, client: RestClient, sync_period: float = DEFAULT_SYNC_PERIOD, *,
                 tolerance: float = DEFAULT_TOLERANCE, no_autoscaling: bool = False,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> None:
        """``no_autoscaling``: the defect of that name (the decision is made and reported, never applied)."""
        self.client = client
        self.sync_period = sync_period
        self.resync = sync_period
        self.tolerance = tolerance
        self.no_autoscaling = no_autoscaling
        self.clock = clock
        self.wall = wall
        self.events = EventRecorder(client, COMPONENT, clock=wall)
        self._memory: dict[str, HpaMemory] = {}
        self._next: dict[str, float] = {}
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="hpa-scrape")

    def reconcile(self, cache: Cache) -> None:
        now = self.clock()
        seen = set()
        for hpa in cache.list(HPAS):
            uid = hpa["metadata"]["uid"]
            seen.add(uid)
            if now < self._next.get(uid, 0.0):
                continue
            self._next[uid] = now + self.sync_period
            try:
                self.sync(hpa, cache.list(PODS), now)
            except (ApiStatusError, ApiUnreachable) as exc:
                log.info("hpa %s: %s (retrying next period)", hpa["metadata"]["name"], exc)
        for uid in [u for u in self._next if u not in seen]:
            self._next.pop(uid, None)
            self._memory.pop(uid, None)

    def _status(self, hpa: Obj, current: int, desired: int, metrics: Sequence[MetricValue],
                conditions: Sequence[Condition], scaled: bool) -> None:
        old = hpa.get("status") or {}
        stamp = _now_rfc3339(self.wall())
        before = {c.get("type"): c for c in old.get("conditions") or []}
        conds = []
        for c in conditions:
            status = "True" if c.status else "False"
            prev = before.get(c.type.value) or {}
            conds.append({"type": c.type.value, "status": status, "reason": c.reason, "message": c.message,
                          "lastTransitionTime": prev.get("lastTransitionTime") if prev.get("status") == status
                          and prev.get("lastTransitionTime") else stamp})
        status: Obj = {
            "observedGeneration": hpa["metadata"].get("generation", 1),
            "currentReplicas": current, "desiredReplicas": desired,
            "currentMetrics": [{"type": "Pods", "pods": {"metric": {"name": m.name},
                                                         "current": {"averageValue": _quantity(m.average)}}}
                               for m in metrics] or None,
            "conditions": conds,
        }
        if scaled:
            status["lastScaleTime"] = stamp
        elif old.get("lastScaleTime"):
            status["lastScaleTime"] = old["lastScaleTime"]
        if {k: v for k, v in status.items() if v is not None} != {k: v for k, v in old.items() if v is not None}:
            meta = hpa["metadata"]
            self.client.patch(resource_path(HPAS.group, HPAS.version, HPAS.plural, meta.get("namespace", "default"),
                                            meta["name"], "status"), {"status": status}, MERGE_PATCH)

    def sync(self, hpa: Obj, pods: list[Obj], now: float) -> None:
        meta = hpa["metadata"]
        ns = meta.get("namespace", "default")
        ref = (hpa.get("spec") or {}).get("scaleTargetRef") or {}
        rt = TARGETS.get(str(ref.get("kind")))
        if rt is None:
            self._status(hpa, 0, 0, (), (Condition(ConditionType.ABLE_TO_SCALE, False, "FailedGetScale",
                                                   f"the HPA controller was unable to get the target's current scale: "
                                                   f"kind {ref.get('kind')!r} is not served (Deployment, ReplicaSet)"),),
                         False)
            return
        scale_path = resource_path(rt.group, rt.version, rt.plural, ns, str(ref.get("name")), "scale")
        try:
            scale = self.client.get(scale_path)
        except ApiStatusError as exc:
            self.events.record(hpa, "HorizontalPodAutoscaler", "Warning", "FailedGetScale", str(exc))
            self._status(hpa, 0, 0, (), (Condition(ConditionType.ABLE_TO_SCALE, False, "FailedGetScale",
                                                   f"the HPA controller was unable to get the target's current scale: "
                                                   f"{exc}"),), False)
            return
        current = int((scale.get("spec") or {}).get("replicas") or 0)
        try:
            spec = hpa_spec(hpa, self.tolerance)
            selector = LabelSelector.parse((scale.get("status") or {}).get("selector") or "")
        except (SpecError, SelectorError, KeyError, ValueError, TypeError) as exc:
            self._status(hpa, current, current, (), (Condition(ConditionType.SCALING_ACTIVE, False, "InvalidSelector"
                                                               if isinstance(exc, SelectorError) else "InvalidMetricSourceType",
                                                               str(exc)),), False)
            return
        mine = [p for p in pods if (p.get("metadata") or {}).get("namespace", "default") == ns
                and selector.matches((p.get("metadata") or {}).get("labels") or {})]
        samples = self.read(mine, [m.name for m in spec.metrics])
        memory = self._memory.setdefault(meta["uid"], HpaMemory())
        decision = decide(spec, current, samples, memory, now)
        scaled = False
        if decision.rescale(current) and not self.no_autoscaling:
            try:
                self.client.patch(scale_path, {"spec": {"replicas": decision.desired}}, MERGE_PATCH)
            except ApiStatusError as exc:
                self.events.record(hpa, "HorizontalPodAutoscaler", "Warning", "FailedRescale",
                                   f"New size: {decision.desired}; reason: {decision.reason}; error: {exc}")
                self._status(hpa, current, decision.desired, decision.metrics, (Condition(
                    ConditionType.ABLE_TO_SCALE, False, "FailedUpdateScale",
                    f"the HPA controller was unable to update the target scale: {exc}"),), False)
                return
            scaled = True
            record_scale(memory, current, decision.desired, now)
            self.events.record(hpa, "HorizontalPodAutoscaler", "Normal", "SuccessfulRescale",
                               f"New size: {decision.desired}; reason: {decision.reason}")
            log.info("hpa %s/%s: %s %s from %d to %d (%s)", ns, meta["name"], ref.get("kind"), ref.get("name"),
                     current, decision.desired, decision.reason)
        conditions = decision.conditions
        if scaled:
            conditions = (Condition(ConditionType.ABLE_TO_SCALE, True, "SucceededRescale",
                                    f"the HPA controller was able to update the target scale to {decision.desired}"),
                          *conditions[1:])
        self._status(hpa, current, decision.desired, decision.metrics, conditions, scaled)

    def read(self, pods: Sequence[Obj], names: Sequence[str]) -> dict[str, list[PodSample]]:
        """Per metric, what each pod gave: Ready pods are scraped (in parallel), the others classified."""
        out: dict[str, list[PodSample]] = {n: [] for n in names}
        ready: list[Obj] = []
        for pod in pods:
            meta, status = pod.get("metadata") or {}, pod.get("status") or {}
            name = str(meta.get("name"))
            if meta.get("deletionTimestamp") or status.get("phase") in ("Failed", "Succeeded"):
                kind = PodReading.IGNORED
            elif not pod_ready(pod) or (meta.get("annotations") or {}).get(SCRAPE_ANNOTATION) == "false":
                kind = PodReading.UNREADY
            else:
                ready.append(pod)
                continue
            for n in names:
                out[n].append(PodSample(name, kind))
        for pod, values in zip(ready, self._pool.map(lambda p: scrape(p, names), ready)):
            name = str(pod["metadata"]["name"])
            for n in names:
                v = values.get(n)
                out[n].append(PodSample(name, PodReading.MISSING) if v is None
                              else PodSample(name, PodReading.VALUE, v))
        return out
