"""The job's progress, as its ranks logged it (pure): the last step every rank completed, and the checkpoint
writes rank 0 began and finished.

A synchronous job makes progress when a step completes on every rank (its all-reduce returned everywhere); a hung
rank stops the whole job, whose other ranks wait in the all-reduce.  A checkpoint write is declared by the canary
(``checkpoint-begin`` before it, ``checkpoint`` once it is durable): between the two the job makes no step and
says why, as real frameworks' heartbeats do.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from drills.workloads.canarylog import CanaryEvent, CanaryLine

__all__ = ["CheckpointWrite", "JobProgress", "checkpoint_writes", "job_progress", "whole_steps"]


@dataclass(frozen=True)
class JobProgress:
    """The newest step every rank of one generation completed."""

    generation: str
    step: int
    mono: float
    """The harness's clock when the last rank's line for it arrived."""


def whole_steps(lines: Iterable[CanaryLine], world_size: int, uids: set[str] | None = None) -> list[JobProgress]:
    """Every step all ``world_size`` ranks of one generation logged (only pods ``uids``, when given), in the order
    the harness learned they were complete."""
    ranks: dict[tuple[str, int], dict[int, float]] = {}
    for line in lines:
        if line.event is CanaryEvent.STEP and line.step is not None and (uids is None or line.uid in uids):
            ranks.setdefault((line.generation, line.step), {})[line.rank] = line.mono
    out = [JobProgress(generation, step, max(seen.values())) for (generation, step), seen in ranks.items()
           if len(seen) >= world_size]
    out.sort(key=lambda p: (p.mono, p.step))
    return out


def job_progress(lines: Iterable[CanaryLine], world_size: int, uids: set[str] | None = None) -> JobProgress | None:
    """The newest step all ``world_size`` ranks of one generation logged (only pods ``uids``, when given)."""
    steps = whole_steps(lines, world_size, uids)
    return steps[-1] if steps else None


@dataclass(frozen=True)
class CheckpointWrite:
    """One checkpoint write of rank 0: begun, and complete or not (yet)."""

    uid: str
    pod: str
    generation: str
    step: int
    file: str
    began: float
    """The harness's clock at the ``checkpoint-begin`` line."""
    done: float | None
    """...at the ``checkpoint`` line of the same step (None: not complete, or never)."""

    def seconds(self, now: float) -> float:
        """How long the write took (or has taken by ``now``)."""
        return (self.done if self.done is not None else now) - self.began


def checkpoint_writes(lines: Iterable[CanaryLine]) -> list[CheckpointWrite]:
    """Every checkpoint write the canaries declared, in the order they began."""
    begun: dict[tuple[str, int], CanaryLine] = {}
    done: dict[tuple[str, int], float] = {}
    for line in lines:
        if line.step is None:
            continue
        if line.event is CanaryEvent.CHECKPOINT_BEGIN:
            begun.setdefault((line.uid, line.step), line)
        elif line.event is CanaryEvent.CHECKPOINT:
            done.setdefault((line.uid, line.step), line.mono)
    out = [CheckpointWrite(ln.uid, ln.pod, ln.generation, step, str(ln.fields.get("file") or ""), ln.mono,
                           done.get((uid, step)))
           for (uid, step), ln in begun.items()]
    out.sort(key=lambda w: w.began)
    return out
