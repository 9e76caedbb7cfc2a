"""GPU accounting over a window: the utilization layers, the four holes, chargeback.

Pure: the caller hands in a typed history (instants are seconds since the Unix
epoch, as floats) and gets a :class:`LeakReport`.  Definitions follow
``DESIGN.md`` ("What the numbers mean"); the JSON form is the leak report
contract specified in ``docs/LEAK_REPORT.md``.

Every interval is half-open ``[start, end)`` and clipped to the window.  Nothing
is counted twice:

- a pod's GPUs count as allocated only while its node is healthy, so the layers
  are shares of *healthy* capacity and never exceed 1;
- a pod's activity samples are clipped to the pod's bound interval, to its
  node's healthy time and to the window, and samples of one pod may not overlap;
- while a job is down after a fault (``[fault_at, resume_at)`` of an incident),
  that time belongs to the fault tolerance hole only: the job's stalls and its
  fragmentation-blocked demand are not counted in the other holes then.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum

from refplatform.core.errors import ConfigError

API_VERSION = "firedrill.dev/v1alpha1"
KIND = "LeakReport"
SECONDS_PER_HOUR = 3600.0
DIGITS = 6
"""Decimal places of every number in the JSON form (and of the ranking comparison)."""


class Hole(Enum):
    """Where healthy GPU time leaks; the order of the members is the tie order."""

    DATA_PIPELINE = "dataPipeline"
    """Allocated GPUs idle, waiting for input (the input pipeline is too slow)."""
    COMMUNICATION = "communication"
    """Active GPUs stalled on non-overlapped collectives."""
    FRAGMENTATION = "fragmentation"
    """Free healthy GPUs that pending work could not use because no node had room."""
    FAULT_TOLERANCE = "faultTolerance"
    """Fault-to-resume time of affected jobs times their GPUs, plus recomputed work."""


HOLE_WORDS: dict[Hole, str] = {
    Hole.DATA_PIPELINE: "data pipeline",
    Hole.COMMUNICATION: "communication",
    Hole.FRAGMENTATION: "fragmentation",
    Hole.FAULT_TOLERANCE: "fault tolerance",
}


UNPLACED_CONDITION = "firedrill.dev/Unplaced"
"""The pod condition whose ``reason`` is a :class:`PendingReason` (written by the scheduler on pending pods)."""


class PendingReason(Enum):
    """Why pending demand could not be placed."""

    FRAGMENTATION = "Fragmentation"
    """Enough free GPUs in the cluster, but no node had room: counts in the fragmentation hole."""
    INSUFFICIENT_CAPACITY = "InsufficientCapacity"
    """Not enough free GPUs in the whole cluster: not a leak."""
    QUOTA = "Quota"
    """The tenant's queue was over its quota: a policy choice, not a leak."""
    OTHER = "Other"
    """Any other reason (selectors, taints, ...): not counted."""


@dataclass(frozen=True, slots=True)
class Window:
    """The accounting window ``[start, end)`` in seconds since the epoch."""

    start: float
    end: float

    def __post_init__(self) -> None:
        if not self.end > self.start:
            raise ConfigError(f"window end {self.end} must be after start {self.start}")

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class NodeCapacity:
    """A node's GPUs over ``[start, end)`` and whether they were healthy then."""

    node: str
    gpus: int
    start: float
    end: float
    healthy: bool = True


@dataclass(frozen=True, slots=True)
class PodInterval:
    """A pod holding ``gpus`` GPUs of ``node`` from bind (``start``) to release (``end``)."""

    pod: str
    namespace: str
    queue: str
    job: str
    node: str
    gpus: int
    start: float
    end: float


@dataclass(frozen=True, slots=True)
class ActivitySample:
    """What one pod's GPUs did over ``[start, end)`` (DCGM profiling and workload stalls).

    Shares are averages over the sample and over the pod's GPUs; stall seconds are
    wall seconds of the pod within the sample (each of its GPUs waits that long).
    """

    pod: str
    start: float
    end: float
    active_share: float
    """``DCGM_FI_PROF_GR_ENGINE_ACTIVE``: share of time a kernel runs (0..1)."""
    effective_share: float
    """``DCGM_FI_PROF_PIPE_TENSOR_ACTIVE``, the MFU proxy (0..1, at most ``active_share``)."""
    input_stall_seconds: float = 0.0
    """``firedrill.dev/input-stall-seconds`` accrued in the sample."""
    comm_stall_seconds: float = 0.0
    """``firedrill.dev/comm-stall-seconds`` accrued in the sample."""
    busy_share: float | None = None
    """``DCGM_FI_DEV_GPU_UTIL`` / 100 (``nvidia-smi``: any kernel running, stalls included); None = ``active_share``.
    Feeds the ``nvidiaSmiUtilization`` figure only, never a layer."""

    @property
    def busy(self) -> float:
        return self.active_share if self.busy_share is None else self.busy_share


@dataclass(frozen=True, slots=True)
class PendingDemand:
    """``gpus`` GPUs of a tenant's job waiting unplaced over ``[start, end)``."""

    namespace: str
    queue: str
    job: str
    gpus: int
    start: float
    end: float
    reason: PendingReason


@dataclass(frozen=True, slots=True)
class Incident:
    """A fault hitting a job: down from ``fault_at`` until it resumes training at ``resume_at``."""

    namespace: str
    queue: str
    job: str
    fault_at: float
    resume_at: float
    gpus: int
    """GPUs of the affected job."""
    recomputed_gpu_seconds: float = 0.0
    """Work redone since the last checkpoint; counted when ``fault_at`` lies in the window."""


@dataclass(frozen=True, slots=True)
class History:
    """Everything the accounting needs about a cluster over some time."""

    capacity: tuple[NodeCapacity, ...] = ()
    pods: tuple[PodInterval, ...] = ()
    samples: tuple[ActivitySample, ...] = ()
    pending: tuple[PendingDemand, ...] = ()
    incidents: tuple[Incident, ...] = ()


@dataclass(frozen=True, slots=True)
class Layer:
    """One utilization layer."""

    gpu_hours: float
    share: float
    """Of healthy capacity (0 when there is none)."""


@dataclass(frozen=True, slots=True)
class HoleAmount:
    """One hole's size."""

    hole: Hole
    gpu_hours: float
    share: float
    """Of healthy capacity (0 when there is none)."""


@dataclass(frozen=True, slots=True)
class TenantCharge:
    """Chargeback for one (namespace, queue)."""

    namespace: str
    queue: str
    allocated_gpu_hours: float
    holes: tuple[tuple[Hole, float, float], ...]
    """(hole, GPU-hours charged to the tenant, share of that hole's total), in ``Hole`` order."""


@dataclass(frozen=True, slots=True)
class LeakReport:
    """Where healthy GPU time went over a window."""

    window: Window
    capacity_gpu_hours: float
    allocated: Layer
    active: Layer
    effective: Layer
    holes: tuple[HoleAmount, ...]
    """Ranked: largest first, ties in ``Hole`` order."""
    tenants: tuple[TenantCharge, ...] = field(default=())
    """Sorted by (namespace, queue)."""
    nvidia_smi: Layer | None = None
    """What ``nvidia-smi`` (``DCGM_FI_DEV_GPU_UTIL``) would show: GPU time with any kernel running, over
    healthy capacity.  Shown for contrast, labelled as what it is; NOT a layer."""

    @property
    def largest(self) -> Hole | None:
        """The largest hole, or None when every hole is zero."""
        top = self.holes[0]
        return top.hole if _r(top.gpu_hours) > 0 else None

    @property
    def summary(self) -> str:
        """The largest hole, in words."""
        top = self.holes[0]
        if self.largest is None:
            return "No leak: every hole is zero."
        return (f"The largest hole is {HOLE_WORDS[top.hole]}: {_r(top.gpu_hours):g} GPU-hours, "
                f"{_r(100 * top.share):g}% of healthy capacity.")

    def to_dict(self) -> dict[str, object]:
        """The leak report contract (``docs/LEAK_REPORT.md``)."""

        def layer(x: Layer) -> dict[str, object]:
            return {"gpuHours": _r(x.gpu_hours), "share": _r(x.share)}

        largest = self.largest
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "window": {"start": _rfc3339(self.window.start), "end": _rfc3339(self.window.end),
                       "seconds": _r(self.window.seconds)},
            "capacityGpuHours": _r(self.capacity_gpu_hours),
            "layers": {"allocated": layer(self.allocated), "active": layer(self.active),
                       "effective": layer(self.effective)},
            **({"nvidiaSmiUtilization": layer(self.nvidia_smi)} if self.nvidia_smi is not None else {}),
            "holes": [{"rank": i + 1, "name": h.hole.value, "words": HOLE_WORDS[h.hole],
                       "gpuHours": _r(h.gpu_hours), "share": _r(h.share)}
                      for i, h in enumerate(self.holes)],
            "largest": None if largest is None else largest.value,
            "summary": self.summary,
            "tenants": [{"namespace": t.namespace, "queue": t.queue,
                         "allocatedGpuHours": _r(t.allocated_gpu_hours),
                         "holes": {h.value: {"gpuHours": _r(hours), "share": _r(share)}
                                   for h, hours, share in t.holes}}
                        for t in self.tenants],
        }


def _r(x: float) -> float:
    v = round(x, DIGITS)
    return 0.0 if v == 0 else v


def _rfc3339(t: float) -> str:
    """UTC RFC 3339 with ``Z``; microseconds only when non-zero (no datetime: the core reads no clock)."""
    micros = round(t * 1_000_000)
    secs, frac = divmod(micros, 1_000_000)
    days, rem = divmod(secs, 86_400)
    hh, rem = divmod(rem, 3600)
    mm, ss = divmod(rem, 60)
    # Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (month <= 2)
    text = f"{year:04d}-{month:02d}-{day:02d}T{hh:02d}:{mm:02d}:{ss:02d}"
    return text + (f".{frac:06d}Z" if frac else "Z")


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def _clip(a0: float, a1: float, b0: float, b1: float) -> tuple[float, float] | None:
    lo, hi = max(a0, b0), min(a1, b1)
    return (lo, hi) if hi > lo else None


def _union(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for lo, hi in sorted(s for s in spans if s[1] > s[0]):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _minus(lo: float, hi: float, holes: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """``[lo, hi)`` without the (disjoint, sorted) spans ``holes``."""
    out: list[tuple[float, float]] = []
    cur = lo
    for a, b in holes:
        if b <= cur or a >= hi:
            continue
        if a > cur:
            out.append((cur, a))
        cur = max(cur, b)
    if hi > cur:
        out.append((cur, hi))
    return out


def _check_disjoint(kind: str, key: str, spans: list[tuple[float, float]]) -> None:
    spans = sorted(spans)
    for (_, e), (s, _) in zip(spans, spans[1:]):
        if s < e:
            raise ConfigError(f"{kind} intervals of {key} overlap")


def _validate(h: History) -> None:
    for iv in (*h.capacity, *h.pods, *h.samples, *h.pending):
        if iv.end < iv.start:
            raise ConfigError(f"interval ends before it starts: {iv}")
    for inc in h.incidents:
        if inc.resume_at < inc.fault_at or inc.recomputed_gpu_seconds < 0 or inc.gpus < 0:
            raise ConfigError(f"bad incident: {inc}")
    for x in (*h.capacity, *h.pods, *h.pending):
        if x.gpus < 0:
            raise ConfigError(f"negative GPUs: {x}")
    for s in h.samples:
        if not (0 <= s.effective_share <= s.active_share <= 1) or s.input_stall_seconds < 0 \
                or s.comm_stall_seconds < 0 or not 0 <= s.busy <= 1:
            raise ConfigError(f"bad activity sample: {s}")
    by: dict[str, list[tuple[float, float]]] = {}
    for c in h.capacity:
        by.setdefault(c.node, []).append((c.start, c.end))
    for node, spans in by.items():
        _check_disjoint("capacity", node, spans)
    names = [p.pod for p in h.pods]
    if len(set(names)) != len(names):
        raise ConfigError("pod names must be unique in a history")
    known = set(names)
    by = {}
    for s in h.samples:
        if s.pod not in known:
            raise ConfigError(f"activity sample of unknown pod {s.pod}")
        by.setdefault(s.pod, []).append((s.start, s.end))
    for pod, spans in by.items():
        _check_disjoint("activity sample", pod, spans)


def account(window: Window, history: History) -> LeakReport:
    """Account the window: layers, holes (ranked) and chargeback."""
    _validate(history)
    w0, w1 = window.start, window.end
    tenants: set[tuple[str, str]] = set()
    charge: dict[tuple[str, str], dict[Hole, float]] = {}
    alloc_by: dict[tuple[str, str], float] = {}

    def add(tenant: tuple[str, str], hole: Hole, gpu_s: float) -> None:
        tenants.add(tenant)
        d = charge.setdefault(tenant, {})
        d[hole] = d.get(hole, 0.0) + gpu_s

    # Healthy capacity, clipped to the window.
    healthy: dict[str, list[tuple[float, float, int]]] = {}
    capacity = 0.0
    for c in history.capacity:
        span = _clip(c.start, c.end, w0, w1)
        if c.healthy and span:
            healthy.setdefault(c.node, []).append((*span, c.gpus))
            capacity += c.gpus * (span[1] - span[0])

    # Downtime per job (incidents), clipped to the window.
    down: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
    for inc in history.incidents:
        key = (inc.namespace, inc.queue, inc.job)
        span = _clip(inc.fault_at, inc.resume_at, w0, w1)
        if span:
            down.setdefault(key, []).append(span)
    down_u = {k: _union(v) for k, v in down.items()}

    # Allocation: pod intervals on healthy node time.
    pod_healthy: dict[str, list[tuple[float, float]]] = {}
    alloc_spans: list[tuple[float, float, int]] = []
    allocated = 0.0
    for p in history.pods:
        tenant = (p.namespace, p.queue)
        spans = [s for c0, c1, _ in healthy.get(p.node, []) if (s := _clip(p.start, p.end, c0, c1))]
        pod_healthy[p.pod] = spans
        held = sum(b - a for a, b in spans) * p.gpus
        allocated += held
        if p.gpus and spans:
            tenants.add(tenant)
            alloc_by[tenant] = alloc_by.get(tenant, 0.0) + held
            alloc_spans.extend((a, b, p.gpus) for a, b in spans)

    # Active/effective layers and the two stall holes, from activity samples.
    pods = {p.pod: p for p in history.pods}
    active = effective = busy = 0.0
    for s in history.samples:
        p = pods[s.pod]
        length = s.end - s.start
        if length <= 0 or not p.gpus:
            continue
        tenant = (p.namespace, p.queue)
        spans = [c for a, b in pod_healthy[p.pod] if (c := _clip(s.start, s.end, a, b))]
        inside = sum(b - a for a, b in spans)
        active += s.active_share * inside * p.gpus
        effective += s.effective_share * inside * p.gpus
        busy += s.busy * inside * p.gpus
        dt = down_u.get((p.namespace, p.queue, p.job), [])
        up = sum(b - a for lo, hi in spans for a, b in _minus(lo, hi, dt))
        frac = up / length
        if s.input_stall_seconds:
            add(tenant, Hole.DATA_PIPELINE, s.input_stall_seconds * frac * p.gpus)
        if s.comm_stall_seconds:
            add(tenant, Hole.COMMUNICATION, s.comm_stall_seconds * frac * p.gpus)

    # Fragmentation: min(free healthy GPUs, blocked demand) over time, split by demand.
    blocked: list[tuple[float, float, int, tuple[str, str]]] = []
    for d in history.pending:
        if d.reason is not PendingReason.FRAGMENTATION or not d.gpus:
            continue
        span = _clip(d.start, d.end, w0, w1)
        if span:
            dt = down_u.get((d.namespace, d.queue, d.job), [])
            blocked.extend((a, b, d.gpus, (d.namespace, d.queue)) for a, b in _minus(*span, dt))
    if blocked:
        # One sweep over every instant where free GPUs or blocked demand change (intervals are half-open).
        free_delta: dict[float, int] = {}
        demand_delta: dict[float, dict[tuple[str, str], int]] = {}
        for v in healthy.values():
            for a, b, g in v:
                free_delta[a] = free_delta.get(a, 0) + g
                free_delta[b] = free_delta.get(b, 0) - g
        for a, b, g in alloc_spans:
            free_delta[a] = free_delta.get(a, 0) - g
            free_delta[b] = free_delta.get(b, 0) + g
        for a, b, g, tenant in blocked:
            for t, d in ((a, g), (b, -g)):
                row = demand_delta.setdefault(t, {})
                row[tenant] = row.get(tenant, 0) + d
        free = 0
        demand: dict[tuple[str, str], int] = {}
        cuts = sorted({w0, w1, *free_delta, *demand_delta})
        for t0, t1 in zip(cuts, cuts[1:]):
            free += free_delta.get(t0, 0)
            for tenant, d in demand_delta.get(t0, {}).items():
                demand[tenant] = demand.get(tenant, 0) + d
            total = sum(demand.values())
            lost = max(0, min(free, total)) * (t1 - t0)
            if lost:
                for tenant, g in demand.items():
                    if g:
                        add(tenant, Hole.FRAGMENTATION, lost * g / total)

    # Fault tolerance: downtime x GPUs, plus recomputed work of faults in the window.
    for inc in history.incidents:
        tenant = (inc.namespace, inc.queue)
        gpu_s = inc.gpus * _overlap(inc.fault_at, inc.resume_at, w0, w1)
        if w0 <= inc.fault_at < w1:
            gpu_s += inc.recomputed_gpu_seconds
        if gpu_s:
            add(tenant, Hole.FAULT_TOLERANCE, gpu_s)

    def share(gpu_s: float) -> float:
        return gpu_s / capacity if capacity else 0.0

    totals = {h: sum(c.get(h, 0.0) for c in charge.values()) for h in Hole}
    order = list(Hole)
    ranked = sorted(Hole, key=lambda h: (-_r(totals[h] / SECONDS_PER_HOUR), order.index(h)))
    holes = tuple(HoleAmount(h, totals[h] / SECONDS_PER_HOUR, share(totals[h])) for h in ranked)
    table = tuple(
        TenantCharge(ns, q, alloc_by.get((ns, q), 0.0) / SECONDS_PER_HOUR,
                     tuple((h, charge.get((ns, q), {}).get(h, 0.0) / SECONDS_PER_HOUR,
                            charge.get((ns, q), {}).get(h, 0.0) / totals[h] if totals[h] else 0.0)
                           for h in Hole))
        for ns, q in sorted(tenants))
    return LeakReport(
        window=window,
        capacity_gpu_hours=capacity / SECONDS_PER_HOUR,
        allocated=Layer(allocated / SECONDS_PER_HOUR, share(allocated)),
        active=Layer(active / SECONDS_PER_HOUR, share(active)),
        effective=Layer(effective / SECONDS_PER_HOUR, share(effective)),
        holes=holes,
        tenants=table,
        nvidia_smi=Layer(busy / SECONDS_PER_HOUR, share(busy)),
    )
