"""Ground truth: how many GPU-seconds the drill leaked through the hole it opened (pure, no clock).

Only what the drill placed (GPUs), the instants the harness itself observed and what the canary measured
of its own time (its log) enter here; never anything from the leak report under test.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from drills.target.leakreport.model import Hole
from drills.workloads.canarylog import StallTotals


@dataclass(frozen=True)
class Truth:
    """The injected hole and its size, with the arithmetic that produced it (for the evidence)."""

    hole: Hole
    gpu_seconds: float
    formula: str
    """The arithmetic in words and numbers, e.g. ``8 GPUs x 0.5 input share x 12 s``."""

    @property
    def gpu_hours(self) -> float:
        return self.gpu_seconds / 3600.0


def stall_truth(hole: Hole, gpus: int, share: float, seconds: float) -> Truth:
    """Data pipeline or communication: every rank stalls ``share`` of its wall time for the whole window."""
    if hole not in (Hole.DATA_PIPELINE, Hole.COMMUNICATION):
        raise ValueError(f"a stall leaks through data pipeline or communication, not {hole.words}")
    if gpus < 0 or not 0 <= share <= 1 or seconds < 0:
        raise ValueError(f"stall truth needs GPUs >= 0, 0 <= share <= 1, seconds >= 0 (got {gpus}, {share}, {seconds})")
    kind = "input" if hole is Hole.DATA_PIPELINE else "communication"
    return Truth(hole, gpus * share * seconds, f"{gpus} GPUs x {share:g} {kind} stall share x {seconds:.3f} s")


def fragmentation_truth(blocked_gpus: int, free_gpus: int, seconds: float) -> Truth:
    """A pending pod of ``blocked_gpus`` that no node has room for, while ``free_gpus`` are free in the cluster:
    the hole is min(free, blocked) x the time it waits within the window."""
    if blocked_gpus < 0 or free_gpus < 0 or seconds < 0:
        raise ValueError("fragmentation truth needs non-negative GPUs and seconds")
    gpus = min(blocked_gpus, free_gpus)
    return Truth(Hole.FRAGMENTATION, gpus * seconds,
                 f"min({free_gpus} free, {blocked_gpus} blocked) GPUs x {seconds:.3f} s pending")


def measured_stall_truth(hole: Hole, gpus_per_rank: int, ranks: Mapping[str, StallTotals]) -> Truth:
    """Data pipeline or communication, from the canary's own account: each rank's GPUs x the seconds it
    measured itself waiting on input (or in non-overlapped collectives) over the steps it completed in the
    window."""
    if hole not in (Hole.DATA_PIPELINE, Hole.COMMUNICATION):
        raise ValueError(f"a stall leaks through data pipeline or communication, not {hole.words}")
    if gpus_per_rank < 0:
        raise ValueError(f"GPUs per rank must be >= 0, got {gpus_per_rank}")
    kind = "input" if hole is Hole.DATA_PIPELINE else "communication"
    seconds = {uid: (t.input_s if hole is Hole.DATA_PIPELINE else t.comm_s) for uid, t in ranks.items()}
    steps = sum(t.steps for t in ranks.values())
    total = sum(seconds.values())
    return Truth(hole, gpus_per_rank * total,
                 f"{gpus_per_rank} GPUs x {total:.3f} s of {kind} wait the canary measured over {steps} steps "
                 f"of {len(ranks)} rank(s) (" + " + ".join(f"{v:.3f}" for v in sorted(seconds.values())) + ")")


def fault_truth(gpus: int, t_fault: float, t_resume: float, step_seconds: float, steps_at_fault: int,
                checkpoint: int, window: tuple[float, float] | None = None) -> Truth:
    """Fault tolerance: GPUs x (t_resume - t_fault) + GPUs x step-seconds x lost steps, where lost steps =
    steps at the fault - the checkpoint the job resumed from.  With ``window`` the downtime is clipped to it
    and the recomputed work counts only when the fault lies in it (as the contract counts it)."""
    if t_resume < t_fault:
        raise ValueError(f"resume ({t_resume}) before fault ({t_fault})")
    lo, hi = window if window is not None else (t_fault, t_resume)
    down = max(0.0, min(t_resume, hi) - max(t_fault, lo))
    lost = max(0, steps_at_fault - checkpoint)
    recomputed = gpus * step_seconds * lost if lo <= t_fault < hi else 0.0
    return Truth(Hole.FAULT_TOLERANCE, gpus * down + recomputed,
                 f"{gpus} GPUs x {down:.3f} s down + {gpus} GPUs x {step_seconds:g} s x {lost} lost steps "
                 f"({steps_at_fault} at the fault - checkpoint {checkpoint})")

