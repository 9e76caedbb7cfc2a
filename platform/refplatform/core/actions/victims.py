"""Choosing whole gangs to evict so that one gang fits, fewest GPUs disturbed first."""

from __future__ import annotations

from collections.abc import Callable

from refplatform.core.decisions import EvictReason, Nomination
from refplatform.core.framework import Session
from refplatform.core.jobs import Job, TaskStatus
from refplatform.core.statement import Statement


def needs_room(job: Job) -> bool:
    """Attempted this cycle, not held, still short of minMember, no room kept yet."""
    return (job.attempted and not job.hold_reason and not job.reserved and bool(job.pending())
            and job.ready_count() < job.min_member)


def select_victims(ssn: Session, job: Job, pool: list[Job],
                   admissible: Callable[[list[Job]], bool] | None = None
                   ) -> tuple[list[Job], list[int]] | None:
    """Smallest set (in GPUs held) of gangs from ``pool`` whose eviction lets ``job`` fit.

    Victims are preferred by (GPUs held, priority, newest first).  Tries every single
    gang in that order, then a greedy accumulation in the same order, pruned from
    the least preferred end; returns the victims and the nodes the job would use.
    """
    pool = sorted(pool, key=lambda v: (v.gpu_held(), v.priority, -v.created_at, v.key))
    pool = pool[: ssn.config.max_victim_candidates]
    ok = admissible or (lambda victims: True)
    best: tuple[int, list[Job], list[int]] | None = None
    for victim in pool:
        if ok([victim]):
            nodes = ssn.fits_after(job, [victim])
            if nodes is not None:
                best = (victim.gpu_held(), [victim], nodes)
                break
    chosen: list[Job] = []
    nodes = None
    for victim in pool:
        if ok(chosen + [victim]):
            chosen.append(victim)
            nodes = ssn.fits_after(job, chosen)
            if nodes is not None:
                break
    if nodes is not None:
        for victim in reversed(list(chosen)):  # keep the most preferred victims
            trial = [v for v in chosen if v is not victim]
            if trial and ok(trial):
                fewer = ssn.fits_after(job, trial)
                if fewer is not None:
                    chosen, nodes = trial, fewer
        total = sum(v.gpu_held() for v in chosen)
        if best is None or total < best[0]:
            best = (total, chosen, nodes)
    return None if best is None else (best[1], best[2])


def evict(ssn: Session, job: Job, victims: list[Job], nodes: list[int], reason: EvictReason) -> None:
    """Evict the victims whole, keep ``nodes`` for ``job`` and nominate each of its pending pods to
    the node it would take once the victims are gone (kube-scheduler's ``status.nominatedNodeName``)."""
    placed = ssn.placement_after(job, victims) or []
    ssn.nominations.extend(Nomination(task.pod.ref, ssn.state.names[node]) for task, node in placed)
    stmt = Statement(ssn)
    for victim in victims:
        for task in victim.active():
            stmt.evict(task)
    verb = "preempted" if reason is EvictReason.PREEMPTED else "reclaimed"
    stmt.commit(reason, f"{verb} for pod group {job.key}", job.key)
    ssn.reserve_nodes(job, nodes, f"{verb} {len(victims)} pod group(s); waiting for them to terminate")


def wait_for_releasing(ssn: Session, job: Job) -> bool:
    """If terminating pods already make room, keep that room and evict nothing more."""
    if not any(t.status is TaskStatus.RELEASING for t in ssn.tasks.values()):
        return False
    nodes = ssn.fits_after(job)
    if nodes is None:
        return False
    ssn.reserve_nodes(job, nodes, "waiting for terminating pods")
    return True
