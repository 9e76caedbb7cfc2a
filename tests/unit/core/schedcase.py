"""Builders and the runner for the scheduler's table-driven tests.

A :class:`Case` gives nodes, pods, pod groups, queues and a clock, and expects
binds, evictions, pod-group phases, FailedScheduling reasons and GPU indices.
Names in expectations are short pod / pod-group names in namespace ``default``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from refplatform.core import (
    GPU_MODEL_LABEL,
    Decisions,
    EvictReason,
    Node,
    Pod,
    PodGroup,
    PodGroupPhase,
    PodPhase,
    Queue,
    Resources,
    SchedulerConfig,
    Snapshot,
    Taint,
    TieBreak,
    Toleration,
    Usage,
    gpu_model_requirement,
    schedule,
)

NS = "default"
GIB = 1 << 30
FIRST = SchedulerConfig(tie_break=TieBreak.FIRST)


def node(name: str, gpus: int = 8, cpu: int = 64000, mem_gib: int = 512, labels: dict | None = None,
         taints: Iterable[Taint] = (), unschedulable: bool = False, model: str | None = None,
         domain: str | None = None, ext: dict[str, int] | None = None) -> Node:
    labels = dict(labels or {})
    if model:
        labels[GPU_MODEL_LABEL] = model
    if domain:
        labels["firedrill.dev/nvlink-domain"] = domain
    return Node(name, Resources(cpu, mem_gib * GIB, gpus, extended=tuple((ext or {}).items())), labels=labels, taints=tuple(taints),
                unschedulable=unschedulable)


def pod(name: str, gpus: int = 0, milli: int = 0, cpu: int = 1000, mem_gib: int = 1, group: str | None = None,
        on: str | None = None, gpu_indices: tuple[int, ...] = (), priority: int = 0, created: float = 0.0,
        models: Iterable[str] | None = None, selector: dict | None = None,
        tolerations: Iterable[Toleration] = (), phase: PodPhase | None = None, terminating: bool = False,
        ext: dict[str, int] | None = None) -> Pod:
    affinity = (gpu_model_requirement(models),) if models else ()
    if phase is None:
        phase = PodPhase.RUNNING if on else PodPhase.PENDING
    return Pod(NS, name, uid=f"uid-{name}", requests=Resources(cpu, mem_gib * GIB, gpus, milli, tuple((ext or {}).items())),
               priority=priority, node_name=on, gpu_indices=gpu_indices, group=group,
               node_selector=selector or {}, affinity=affinity, tolerations=tuple(tolerations),
               created_at=created, phase=phase, terminating=terminating)


def gang(name: str, members: int, gpus: int = 8, *, min_member: int | None = None, queue: str = "default",
         priority: int = 0, created: float = 0.0, phase: PodGroupPhase = PodGroupPhase.INQUEUE,
         on: Iterable[str | None] | None = None, cpu: int = 1000, min_resources: Usage | None = None,
         milli: int = 0, ext: dict[str, int] | None = None) -> tuple[PodGroup, list[Pod]]:
    placements = list(on) if on is not None else [None] * members
    group = PodGroup(NS, name, min_member if min_member is not None else members, min_resources, queue,
                     priority=priority, phase=phase, created_at=created)
    pods = [pod(f"{name}-{i}", gpus=gpus, milli=milli, cpu=cpu, group=name, on=placements[i],
                priority=priority, created=created + i * 0.001, ext=ext) for i in range(members)]
    return group, pods


@dataclass
class Case:
    name: str
    nodes: list[Node]
    pods: list[Pod] = field(default_factory=list)
    groups: list[PodGroup] = field(default_factory=list)
    queues: list[Queue] = field(default_factory=list)
    now: float = 0.0
    config: SchedulerConfig = FIRST
    binds: dict[str, str] | None = None
    """Exactly these new binds (pod -> node; node ``*`` = any)."""
    evicted: dict[str, EvictReason] = field(default_factory=dict)
    """Exactly these evictions, with their reason."""
    phases: dict[str, PodGroupPhase] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    """Pod -> substring of its FailedScheduling message."""
    gpu_indices: dict[str, tuple[int, ...]] = field(default_factory=dict)
    reserved: dict[str, set[str]] = field(default_factory=dict)
    """Pod group -> nodes reserved for it (exactly)."""

    def gangs(self, *entries: tuple[PodGroup, list[Pod]]) -> Case:
        for group, pods in entries:
            self.groups.append(group)
            self.pods.extend(pods)
        return self

    def snapshot(self) -> Snapshot:
        return Snapshot(tuple(self.nodes), tuple(self.pods), tuple(self.groups), tuple(self.queues), self.now)


def short(key: str) -> str:
    return key.split("/", 1)[1]


def check(case: Case) -> Decisions:
    decisions = schedule(case.snapshot(), case.config)
    committed = [b for c in decisions.commits for b in c.binds]
    assert sorted(committed, key=str) == sorted(decisions.binds, key=str), "every bind is in exactly one commit"
    binds = {short(k): v for k, v in decisions.bind_map().items()}
    if case.binds is not None:
        assert set(binds) == set(case.binds), f"bound {sorted(binds)} != expected {sorted(case.binds)}"
        for name, where in case.binds.items():
            assert where == "*" or binds[name] == where, f"{name} bound to {binds[name]}, expected {where}"
    evicted = {short(e.pod.key): e.reason for e in decisions.evictions}
    assert evicted == case.evicted, f"evicted {evicted} != expected {case.evicted}"
    phases = {short(k): v for k, v in decisions.phases().items()}
    for name, phase in case.phases.items():
        assert phases[name] is phase, f"pod group {name} is {phases[name]}, expected {phase}"
    messages = {short(k): v for k, v in decisions.failure_messages().items()}
    for name, text in case.reasons.items():
        assert name in messages, f"{name} has no FailedScheduling (bound? {binds.get(name)})"
        assert text in messages[name], f"{name}: {messages[name]!r} lacks {text!r}"
    indices = {b.pod.name: b.gpu_indices for b in decisions.binds}
    for name, expected in case.gpu_indices.items():
        assert indices[name] == expected, f"{name} got GPUs {indices[name]}, expected {expected}"
    reserved = {short(r.job): set(r.nodes) for r in decisions.reservations}
    for name, nodes in case.reserved.items():
        assert reserved.get(name) == nodes, f"reservation of {name}: {reserved.get(name)} != {nodes}"
    return decisions
