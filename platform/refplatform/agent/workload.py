"""Simulated workloads: what a "container" does on a simulated node.

A workload never sleeps and never reads the time: the agent calls
:meth:`Workload.start` once and then :meth:`Workload.advance` with the current
time of an injected clock, and the workload catches up on everything due by
then (log lines, steps, checkpoints, its exit).  Unit tests drive it with a
:class:`~refplatform.agent.clock.VirtualClock`.

Which workload a pod runs is chosen by the annotation ``firedrill.dev/workload``
(see :data:`WORKLOADS`); without it a pod runs :class:`IdleWorkload`, the
equivalent of ``sleep infinity``.  To add a kind, subclass :class:`Workload`
and register a factory in :data:`WORKLOADS`.

Annotations read (all optional):

=====================================  ========  ==================================
``firedrill.dev/workload``             idle      ``idle`` or ``training``
``firedrill.dev/steps-total``          0         training: stop after N steps (0 = never)
``firedrill.dev/step-seconds``         0.5       training: seconds per step
``firedrill.dev/checkpoint-every``     10        training: checkpoint every N steps (0 = never)
``firedrill.dev/checkpoint-step``      0         training: resume from this checkpoint on restart
``firedrill.dev/run-seconds``          forever   idle: exit after N seconds
``firedrill.dev/exit-code``            0         the exit code of a natural end
=====================================  ========  ==================================

Published (by the agent, as pod annotations): ``firedrill.dev/step`` and
``firedrill.dev/checkpoint-step`` for training, from :meth:`Workload.progress`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import ClassVar

from refplatform.agent.clock import rfc3339_millis
from refplatform.agent.errors import WorkloadConfigError

__all__ = [
    "ANN_CHECKPOINT_EVERY",
    "ANN_CHECKPOINT_STEP",
    "ANN_EXIT_CODE",
    "ANN_RUN_SECONDS",
    "ANN_STEP",
    "ANN_STEP_SECONDS",
    "ANN_STEPS_TOTAL",
    "ANN_WORKLOAD",
    "Exit",
    "IdleWorkload",
    "LogLine",
    "TrainingParams",
    "TrainingWorkload",
    "WORKLOADS",
    "Workload",
    "workload_for",
]

ANN_WORKLOAD = "firedrill.dev/workload"
ANN_STEPS_TOTAL = "firedrill.dev/steps-total"
ANN_STEP_SECONDS = "firedrill.dev/step-seconds"
ANN_CHECKPOINT_EVERY = "firedrill.dev/checkpoint-every"
ANN_RUN_SECONDS = "firedrill.dev/run-seconds"
ANN_EXIT_CODE = "firedrill.dev/exit-code"
ANN_STEP = "firedrill.dev/step"
ANN_CHECKPOINT_STEP = "firedrill.dev/checkpoint-step"

# Exit code of a workload stopped by SIGTERM (128 + 15), as a shell reports it.
SIGTERM_EXIT = 143
# Never emit more than this many steps in one advance (a long-stalled agent catches up over several calls).
MAX_STEPS_PER_ADVANCE = 10_000


@dataclass(frozen=True)
class LogLine:
    """One line of container output, with the instant it was written."""

    time: datetime
    text: str


@dataclass(frozen=True)
class Exit:
    """How a workload ended: the container's ``state.terminated``."""

    code: int
    reason: str
    """``Completed`` (exit 0) or ``Error``, as the kubelet reports it."""
    finished_at: datetime
    message: str = ""

    @classmethod
    def of(cls, code: int, at: datetime, message: str = "") -> Exit:
        return cls(code, "Completed" if code == 0 else "Error", at, message)


class Workload(ABC):
    """A simulated container process.  Not thread-safe: one owner drives it."""

    kind: ClassVar[str]

    def __init__(self) -> None:
        self.started_at: datetime | None = None
        self.exit: Exit | None = None

    @property
    def running(self) -> bool:
        return self.started_at is not None and self.exit is None

    def start(self, now: datetime) -> list[LogLine]:
        """Start at ``now``; returns the first output lines."""
        if self.started_at is not None:
            raise RuntimeError("workload already started")
        self.started_at = now
        return self._on_start(now)

    def advance(self, now: datetime) -> list[LogLine]:
        """Catch up on everything due by ``now``; sets :attr:`exit` when it ends."""
        if self.started_at is None:
            raise RuntimeError("workload not started")
        if self.exit is not None:
            return []
        return self._advance(now)

    def stop(self, now: datetime) -> list[LogLine]:
        """Deliver SIGTERM: the workload ends now (exit 143) unless it already ended."""
        lines = self.advance(now) if self.started_at is not None else []
        if self.exit is None:
            lines.append(LogLine(now, f"{rfc3339_millis(now)} received SIGTERM, exiting"))
            self.exit = Exit.of(SIGTERM_EXIT, now, "stopped by the node agent")
        return lines

    def progress(self) -> dict[str, str]:
        """Pod annotations that publish the workload's progress (none by default)."""
        return {}

    @abstractmethod
    def _on_start(self, now: datetime) -> list[LogLine]: ...

    @abstractmethod
    def _advance(self, now: datetime) -> list[LogLine]: ...


def _int(annotations: Mapping[str, str], key: str, default: int, minimum: int = 0) -> int:
    raw = annotations.get(key)
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise WorkloadConfigError(f"annotation {key}={raw!r} is not an integer") from None
    if value < minimum:
        raise WorkloadConfigError(f"annotation {key}={raw!r} is below {minimum}")
    return value


def _float(annotations: Mapping[str, str], key: str, default: float | None, minimum_exclusive: float = 0.0) -> float | None:
    raw = annotations.get(key)
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = float(str(raw).strip())
    except ValueError:
        raise WorkloadConfigError(f"annotation {key}={raw!r} is not a number") from None
    if not math.isfinite(value) or value <= minimum_exclusive:
        raise WorkloadConfigError(f"annotation {key}={raw!r} must be a finite number above {minimum_exclusive}")
    return value


class IdleWorkload(Workload):
    """``sleep infinity``: silent; ends only when stopped, or after ``run_seconds``."""

    kind = "idle"

    def __init__(self, run_seconds: float | None = None, exit_code: int = 0) -> None:
        super().__init__()
        self.run_seconds = run_seconds
        self.exit_code = exit_code

    @classmethod
    def from_annotations(cls, annotations: Mapping[str, str]) -> IdleWorkload:
        return cls(_float(annotations, ANN_RUN_SECONDS, None), _int(annotations, ANN_EXIT_CODE, 0))

    def _on_start(self, now: datetime) -> list[LogLine]:
        return self._advance(now)

    def _advance(self, now: datetime) -> list[LogLine]:
        assert self.started_at is not None
        if self.run_seconds is not None:
            end = self.started_at + timedelta(seconds=self.run_seconds)
            if now >= end:
                self.exit = Exit.of(self.exit_code, end)
        return []


@dataclass(frozen=True)
class TrainingParams:
    """Parameters of :class:`TrainingWorkload`, from pod annotations."""

    steps_total: int = 0
    """Stop (exit) after this many steps; 0 = train forever."""
    step_seconds: float = 0.5
    checkpoint_every: int = 10
    """Checkpoint every N steps; 0 = never."""
    resume_step: int = 0
    """Start from this checkpointed step (a restarted container resumes)."""
    exit_code: int = 0

    @classmethod
    def from_annotations(cls, annotations: Mapping[str, str]) -> TrainingParams:
        step_seconds = _float(annotations, ANN_STEP_SECONDS, 0.5)
        assert step_seconds is not None
        return cls(
            steps_total=_int(annotations, ANN_STEPS_TOTAL, 0),
            step_seconds=step_seconds,
            checkpoint_every=_int(annotations, ANN_CHECKPOINT_EVERY, 10),
            resume_step=_int(annotations, ANN_CHECKPOINT_STEP, 0),
            exit_code=_int(annotations, ANN_EXIT_CODE, 0),
        )


class TrainingWorkload(Workload):
    """A training loop: one step every ``step_seconds``, checkpoints, a loss curve.

    Step ``s`` completes at ``started_at + (s - resume_step) * step_seconds``;
    each step logs ``<ts> step=<s> loss=<x>`` and every ``checkpoint_every``-th
    step also ``<ts> checkpoint step=<s>``.  With ``steps_total`` it exits (code
    ``exit_code``, default 0) once that step is done.

    Extension points for later kinds: :meth:`_step_due` (when is the next step
    allowed: e.g. gang-synchronous stepping), :meth:`_on_step` (what a step
    emits: e.g. checkpoint records, stall shares).
    """

    kind = "training"

    def __init__(self, params: TrainingParams | None = None) -> None:
        super().__init__()
        self.params = params or TrainingParams()
        if self.params.steps_total and self.params.resume_step > self.params.steps_total:
            raise WorkloadConfigError(
                f"resume step {self.params.resume_step} is beyond steps-total {self.params.steps_total}"
            )
        self.step = self.params.resume_step
        self.checkpoint_step = self.params.resume_step

    @classmethod
    def from_annotations(cls, annotations: Mapping[str, str]) -> TrainingWorkload:
        return cls(TrainingParams.from_annotations(annotations))

    def progress(self) -> dict[str, str]:
        return {ANN_STEP: str(self.step), ANN_CHECKPOINT_STEP: str(self.checkpoint_step)}

    @staticmethod
    def loss(step: int) -> float:
        """A deterministic, decreasing loss curve with a little jitter."""
        jitter = ((step * 2654435761) % 1000) / 1000.0 * 0.02
        return 0.3 + 2.2 * math.exp(-step / 200.0) + jitter

    def _step_time(self, step: int) -> datetime:
        assert self.started_at is not None
        return self.started_at + timedelta(seconds=(step - self.params.resume_step) * self.params.step_seconds)

    def _step_due(self, now: datetime) -> int:
        """The last step completed by ``now`` (before the ``steps_total`` cap)."""
        assert self.started_at is not None
        elapsed = (now - self.started_at).total_seconds()
        return self.params.resume_step + int(math.floor(elapsed / self.params.step_seconds + 1e-9))

    def _on_step(self, step: int, at: datetime) -> list[LogLine]:
        ts = rfc3339_millis(at)
        lines = [LogLine(at, f"{ts} step={step} loss={self.loss(step):.4f}")]
        every = self.params.checkpoint_every
        if every and step % every == 0:
            self.checkpoint_step = step
            lines.append(LogLine(at, f"{ts} checkpoint step={step}"))
        return lines

    def _on_start(self, now: datetime) -> list[LogLine]:
        p = self.params
        ts = rfc3339_millis(now)
        lines = [
            LogLine(
                now,
                f"{ts} starting training steps_total={p.steps_total} step_seconds={p.step_seconds:g} "
                f"checkpoint_every={p.checkpoint_every}",
            )
        ]
        if p.resume_step:
            lines.append(LogLine(now, f"{ts} resuming from checkpoint step={p.resume_step}"))
        return lines + self._advance(now)

    def _advance(self, now: datetime) -> list[LogLine]:
        due = self._step_due(now)
        total = self.params.steps_total
        if total:
            due = min(due, total)
        due = min(due, self.step + MAX_STEPS_PER_ADVANCE)
        lines: list[LogLine] = []
        while self.step < due:
            self.step += 1
            lines += self._on_step(self.step, self._step_time(self.step))
        if total and self.step >= total:
            at = self._step_time(self.step) if self.step > self.params.resume_step else now
            lines.append(LogLine(at, f"{rfc3339_millis(at)} training complete step={self.step}"))
            self.exit = Exit.of(self.params.exit_code, at)
        return lines


WorkloadFactory = Callable[[Mapping[str, str]], Workload]

WORKLOADS: dict[str, WorkloadFactory] = {
    IdleWorkload.kind: IdleWorkload.from_annotations,
    TrainingWorkload.kind: TrainingWorkload.from_annotations,
}
"""Workload kinds by the value of the ``firedrill.dev/workload`` annotation."""


def workload_for(annotations: Mapping[str, str] | None) -> Workload:
    """The workload a pod with these annotations runs.

    Raises :class:`WorkloadConfigError` for an unknown kind or a bad parameter.
    """
    annotations = annotations or {}
    kind = (annotations.get(ANN_WORKLOAD) or IdleWorkload.kind).strip()
    factory = WORKLOADS.get(kind)
    if factory is None:
        raise WorkloadConfigError(f"unknown workload {kind!r} (known: {', '.join(sorted(WORKLOADS))})")
    return factory(annotations)
