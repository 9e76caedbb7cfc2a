"""Pure GPU accounting: layers, the four holes, chargeback, and the leak report contract."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from refplatform.core.accounting import (
    ActivitySample,
    History,
    Hole,
    Incident,
    NodeCapacity,
    PendingDemand,
    PendingReason,
    PodInterval,
    Window,
    account,
)
from refplatform.core.errors import ConfigError

T = 1_800_000_000.0  # 2027-01-15T08:00:00Z
H = 3600.0
W = Window(T, T + H)
CAP = (NodeCapacity("n1", 8, T - H, T + 2 * H), NodeCapacity("n2", 8, T - H, T + 2 * H))  # 16 GPU-h


def pod(name: str, node: str, gpus: int, start: float = 0, end: float = H, ns: str = "team-a",
        queue: str = "q", job: str = "j") -> PodInterval:
    return PodInterval(name, ns, queue, job, node, gpus, T + start, T + end)


def sample(name: str, start: float = 0, end: float = H, active: float = 0.5, eff: float = 0.3,
           inp: float = 0.0, comm: float = 0.0) -> ActivitySample:
    return ActivitySample(name, T + start, T + end, active, eff, inp, comm)


def pending(gpus: int, start: float, end: float, ns: str = "team-b", queue: str = "q", job: str = "k",
            reason: PendingReason = PendingReason.FRAGMENTATION) -> PendingDemand:
    return PendingDemand(ns, queue, job, gpus, T + start, T + end, reason)


def incident(fault: float, resume: float, gpus: int, redo: float = 0.0, ns: str = "team-a",
             job: str = "j", queue: str = "q") -> Incident:
    return Incident(ns, queue, job, T + fault, T + resume, gpus, redo)


# name, history, expected hole GPU-hours, expected ranking (first = largest)
CASES = [
    ("data pipeline dominates",
     History(CAP, (pod("a", "n1", 8),), (sample("a", inp=1800, comm=360),)),
     {Hole.DATA_PIPELINE: 4.0, Hole.COMMUNICATION: 0.8},
     [Hole.DATA_PIPELINE, Hole.COMMUNICATION, Hole.FRAGMENTATION, Hole.FAULT_TOLERANCE]),
    ("communication dominates",
     History(CAP, (pod("a", "n1", 8),), (sample("a", inp=360, comm=1800),)),
     {Hole.DATA_PIPELINE: 0.8, Hole.COMMUNICATION: 4.0},
     [Hole.COMMUNICATION, Hole.DATA_PIPELINE, Hole.FRAGMENTATION, Hole.FAULT_TOLERANCE]),
    # 4 + 4 GPUs held on two 8-GPU nodes: 8 free, an 8-GPU gang cannot fit anywhere for 30 min.
    ("fragmentation dominates",
     History(CAP, (pod("a", "n1", 4), pod("b", "n2", 4)), (sample("a", inp=360), sample("b")),
             (pending(8, 0, 1800), pending(16, 0, H, reason=PendingReason.INSUFFICIENT_CAPACITY))),
     {Hole.DATA_PIPELINE: 0.4, Hole.FRAGMENTATION: 4.0},
     [Hole.FRAGMENTATION, Hole.DATA_PIPELINE, Hole.COMMUNICATION, Hole.FAULT_TOLERANCE]),
    # Bounded by demand: 8 GPUs free but only 2 wanted -> 2 GPUs x 30 min.
    ("fragmentation bounded by demand",
     History(CAP, (pod("a", "n1", 4), pod("b", "n2", 4)), (), (pending(2, 0, 1800),)),
     {Hole.FRAGMENTATION: 1.0},
     [Hole.FRAGMENTATION, Hole.DATA_PIPELINE, Hole.COMMUNICATION, Hole.FAULT_TOLERANCE]),
    # Bounded by free GPUs: 12 wanted, 4 free (n1 full, n2 half) -> 4 GPUs x 1 h.
    ("fragmentation bounded by free GPUs",
     History(CAP, (pod("a", "n1", 8), pod("b", "n2", 4)), (), (pending(12, 0, H),)),
     {Hole.FRAGMENTATION: 4.0},
     [Hole.FRAGMENTATION, Hole.DATA_PIPELINE, Hole.COMMUNICATION, Hole.FAULT_TOLERANCE]),
    # 8 GPUs down 15 min (2 GPU-h) + 1 GPU-h recomputed; the comm stall counts only while the
    # job is up: 360 s x 45/60 x 8 GPUs = 0.6 GPU-h.
    ("fault tolerance dominates",
     History(CAP, (pod("a", "n1", 8),), (sample("a", comm=360),), (), (incident(600, 1500, 8, 3600),)),
     {Hole.COMMUNICATION: 0.6, Hole.FAULT_TOLERANCE: 3.0},
     [Hole.FAULT_TOLERANCE, Hole.COMMUNICATION, Hole.DATA_PIPELINE, Hole.FRAGMENTATION]),
    ("tie keeps the fixed order",
     History(CAP, (pod("a", "n1", 8),), (sample("a", inp=900, comm=900),)),
     {Hole.DATA_PIPELINE: 2.0, Hole.COMMUNICATION: 2.0},
     [Hole.DATA_PIPELINE, Hole.COMMUNICATION, Hole.FRAGMENTATION, Hole.FAULT_TOLERANCE]),
    # Pod and sample start 30 min before the window: half of each counts; the fault is before
    # the window, so only its in-window downtime (15 min x 8) counts and not its recomputed work.
    ("window clipping",
     History(CAP, (pod("a", "n1", 8, -1800, 1800),), (sample("a", -1800, 1800, inp=900),), (),
             (incident(-600, 900, 8, 7200, job="other"),)),
     {Hole.DATA_PIPELINE: 1.0, Hole.FAULT_TOLERANCE: 2.0},
     [Hole.FAULT_TOLERANCE, Hole.DATA_PIPELINE, Hole.COMMUNICATION, Hole.FRAGMENTATION]),
    # Job j is down for the first half hour: its stalls then belong to fault tolerance only.
    ("downtime is not double counted",
     History(CAP, (pod("a", "n1", 8),), (sample("a", inp=1800),),
             (pending(8, 0, 1800, ns="team-a", job="j"),), (incident(0, 1800, 8),)),
     {Hole.DATA_PIPELINE: 2.0, Hole.FAULT_TOLERANCE: 4.0},
     [Hole.FAULT_TOLERANCE, Hole.DATA_PIPELINE, Hole.COMMUNICATION, Hole.FRAGMENTATION]),
    ("no leak", History(CAP), {}, [Hole.DATA_PIPELINE, Hole.COMMUNICATION, Hole.FRAGMENTATION,
                                   Hole.FAULT_TOLERANCE]),
]


@pytest.mark.parametrize(("history", "expected", "ranking"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_holes(history: History, expected: dict[Hole, float], ranking: list[Hole]) -> None:
    report = account(W, history)
    got = {h.hole: h.gpu_hours for h in report.holes}
    for hole in Hole:
        assert got[hole] == pytest.approx(expected.get(hole, 0.0), abs=1e-9), hole
        share = next(h.share for h in report.holes if h.hole is hole)
        assert share == pytest.approx(expected.get(hole, 0.0) / 16.0, abs=1e-9)
    assert [h.hole for h in report.holes] == ranking
    assert report.largest is (ranking[0] if expected else None)
    if expected:
        assert report.summary.startswith(f"The largest hole is {report.to_dict()['holes'][0]['words']}: ")
    else:
        assert report.summary == "No leak: every hole is zero."


def test_layers() -> None:
    report = account(W, History(CAP, (pod("a", "n1", 8),), (sample("a", active=0.5, eff=0.3),)))
    assert report.capacity_gpu_hours == pytest.approx(16.0)
    assert (report.allocated.gpu_hours, report.allocated.share) == pytest.approx((8.0, 0.5))
    assert (report.active.gpu_hours, report.active.share) == pytest.approx((4.0, 0.25))
    assert (report.effective.gpu_hours, report.effective.share) == pytest.approx((2.4, 0.15))


def test_unhealthy_node_leaves_capacity() -> None:
    cap = (NodeCapacity("n1", 8, T, T + H), NodeCapacity("n2", 8, T, T + 1800),
           NodeCapacity("n2", 8, T + 1800, T + H, healthy=False))
    # n2 breaks half way: capacity 8 + 4 = 12 GPU-h; its pod counts only while it is healthy.
    report = account(W, History(cap, (pod("a", "n2", 8),), (sample("a", active=1.0, eff=0.5, inp=1800),),
                                (pending(8, 0, H),)))
    assert report.capacity_gpu_hours == pytest.approx(12.0)
    assert report.allocated.gpu_hours == pytest.approx(4.0)
    assert report.allocated.share == pytest.approx(4 / 12)
    assert report.active.gpu_hours == pytest.approx(4.0)
    assert report.effective.gpu_hours == pytest.approx(2.0)
    got = {h.hole: h.gpu_hours for h in report.holes}
    assert got[Hole.DATA_PIPELINE] == pytest.approx(2.0)  # half the sample is on healthy time
    # Free: n1's 8 GPUs all hour (n2 is full, then unhealthy) -> 8 GPU-h blocked.
    assert got[Hole.FRAGMENTATION] == pytest.approx(8.0)


def test_tenants() -> None:
    history = History(
        CAP,
        (pod("a", "n1", 6, ns="team-a"), pod("b", "n2", 6, ns="team-b", queue="batch", job="k")),
        (sample("a", inp=1800), sample("b", comm=1200)),
        (pending(4, 0, H, ns="team-c", job="x"), pending(4, 0, H, ns="team-a", job="y")),
        (incident(0, 900, 6, 1800, ns="team-b", job="k", queue="batch"),),
    )
    report = account(W, history)
    rows = {(t.namespace, t.queue): t for t in report.tenants}
    assert list(rows) == [("team-a", "q"), ("team-b", "batch"), ("team-c", "q")]
    hours = {k: {h: x for h, x, _ in t.holes} for k, t in rows.items()}
    shares = {k: {h: s for h, _, s in t.holes} for k, t in rows.items()}
    assert rows["team-a", "q"].allocated_gpu_hours == pytest.approx(6.0)
    assert rows["team-b", "batch"].allocated_gpu_hours == pytest.approx(6.0)
    assert rows["team-c", "q"].allocated_gpu_hours == 0.0
    assert hours["team-a", "q"][Hole.DATA_PIPELINE] == pytest.approx(3.0)
    # team-b's comm stall: 1200 s over the hour, 900 s of it down -> 1200 * 2700/3600 * 6 GPU-s.
    assert hours["team-b", "batch"][Hole.COMMUNICATION] == pytest.approx(1.5)
    # 4 free GPUs, 8 wanted by two tenants equally -> 2 GPU-h each.
    assert hours["team-a", "q"][Hole.FRAGMENTATION] == pytest.approx(2.0)
    assert hours["team-c", "q"][Hole.FRAGMENTATION] == pytest.approx(2.0)
    assert shares["team-c", "q"][Hole.FRAGMENTATION] == pytest.approx(0.5)
    assert hours["team-b", "batch"][Hole.FAULT_TOLERANCE] == pytest.approx(6 * 0.25 + 0.5)
    assert shares["team-b", "batch"][Hole.FAULT_TOLERANCE] == pytest.approx(1.0)
    for hole in Hole:
        total = next(h.gpu_hours for h in report.holes if h.hole is hole)
        assert sum(x[hole] for x in hours.values()) == pytest.approx(total)


@pytest.mark.parametrize("history", [
    History(CAP, (pod("a", "n1", 8),), (sample("a", 0, 1800), sample("a", 1700, H))),
    History(CAP + (NodeCapacity("n1", 8, T, T + H),)),
    History(CAP, (pod("a", "n1", 8), pod("a", "n2", 8))),
    History(CAP, (), (sample("ghost"),)),
    History(CAP, (pod("a", "n1", 8),), (sample("a", active=0.2, eff=0.3),)),
    History(CAP, (), (), (), (incident(100, 50, 8),)),
], ids=["overlapping samples", "overlapping capacity", "duplicate pod", "unknown pod", "effective>active",
        "resume before fault"])
def test_rejects_inconsistent_history(history: History) -> None:
    with pytest.raises(ConfigError):
        account(W, history)


def test_empty_window_rejected() -> None:
    with pytest.raises(ConfigError):
        Window(T, T)


# The example of docs/LEAK_REPORT.md: two 8-GPU nodes, one down for the last 15 minutes.
EXAMPLE_WINDOW = Window(T, T + H)
EXAMPLE = History(
    capacity=(NodeCapacity("node-a", 8, T - H, T + 2 * H),
              NodeCapacity("node-b", 8, T - H, T + 2700),
              NodeCapacity("node-b", 8, T + 2700, T + 2 * H, healthy=False)),
    pods=(PodInterval("llm-0", "team-llm", "research", "llm", "node-a", 4, T - 1800, T + 2 * H),
          PodInterval("vision-0", "team-vision", "prod", "vision", "node-b", 2, T, T + 2700)),
    samples=(ActivitySample("llm-0", T - 600, T + 1800, 0.8, 0.4, 240.0, 360.0),
             ActivitySample("llm-0", T + 1800, T + 3600, 0.7, 0.35, 180.0, 270.0),
             ActivitySample("vision-0", T, T + 2700, 0.5, 0.2, 900.0, 0.0)),
    pending=(PendingDemand("team-llm", "research", "llm-ft", 6, T, T + 1800, PendingReason.FRAGMENTATION),
             PendingDemand("team-vision", "prod", "vision-big", 16, T, T + H, PendingReason.INSUFFICIENT_CAPACITY)),
    incidents=(Incident("team-vision", "prod", "vision", T + 2700, T + 3300, 2, 1200.0),),
)


def test_doc_example_matches_code() -> None:
    doc = (Path(__file__).parents[3] / "docs" / "LEAK_REPORT.md").read_text()
    block = re.search(r"<!-- example-output -->\s*```json\n(.*?)```", doc, re.S)
    assert block, "docs/LEAK_REPORT.md lost its example-output block"
    got = json.loads(json.dumps(account(EXAMPLE_WINDOW, EXAMPLE).to_dict()))
    assert json.loads(block.group(1)) == got


@pytest.mark.parametrize(("t", "text"), [
    (0.0, "1970-01-01T00:00:00Z"),
    (951_782_400.0, "2000-02-29T00:00:00Z"),
    (T, "2027-01-15T08:00:00Z"),
    (T + 0.5, "2027-01-15T08:00:00.500000Z"),
    (-1.0, "1969-12-31T23:59:59Z"),
])
def test_window_instants_are_rfc3339(t: float, text: str) -> None:
    window = account(Window(t, t + 1), History()).to_dict()["window"]
    assert window["start"] == text and window["seconds"] == 1.0  # type: ignore[index]


def test_empty_history_reports_no_capacity() -> None:
    d = account(W, History()).to_dict()
    assert d["capacityGpuHours"] == 0.0 and d["largest"] is None and d["tenants"] == []
    assert d["layers"] == {k: {"gpuHours": 0.0, "share": 0.0} for k in ("allocated", "active", "effective")}
