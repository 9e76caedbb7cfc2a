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

The training workload is one rank of a synchronous data-parallel job.  What it
needs from the outside world comes in through two small interfaces, so it stays
pure: a :class:`Gang` (may I step: is my whole gang Running, and is that view
fresh?) and a :class:`CheckpointLink` (where do I resume from, record my
checkpoints, have I been replaced?).  A pod outside a job trains alone
(:data:`ALONE`, :class:`LocalCheckpoints`).  The agent's implementations live
in :mod:`refplatform.agent.jobs`; ``docs/WORKLOAD.md`` is the user's guide.

Annotations read (all optional):

=======================================  ========  ==================================
``firedrill.dev/workload``               idle      ``idle`` or ``training``
``firedrill.dev/steps-total``            0         training: stop after N steps (0 = never)
``firedrill.dev/step-seconds``           0.5       training: wall seconds per step
``firedrill.dev/checkpoint-every``       10        training: checkpoint every N steps (0 = never)
``firedrill.dev/checkpoint-step``        0         training alone: resume from this step on restart
``firedrill.dev/input-stall-share``      0         training: share of each step spent waiting on input
``firedrill.dev/comm-stall-share``       0         training: share of each step stalled on communication
``firedrill.dev/rank``                   0         training in a job: global rank (0..world-size-1)
``firedrill.dev/world-size``             1         training in a job: ranks in the gang
``firedrill.dev/epoch``                  0         training in a job: the job's restart epoch
``firedrill.dev/run-seconds``            forever   idle: exit after N seconds
``firedrill.dev/exit-code``              0         the exit code of a natural end
=======================================  ========  ==================================

Published (by the agent, as pod annotations) for training, from
:meth:`Workload.progress`: ``firedrill.dev/step``,
``firedrill.dev/checkpoint-step``, ``firedrill.dev/input-stall-seconds``,
``firedrill.dev/comm-stall-seconds``, ``firedrill.dev/peer-wait-seconds``,
``firedrill.dev/stepped-seconds`` and ``firedrill.dev/progress-at``: one
snapshot whose cumulative counters are all exact at its ``progress-at`` (the
instant the last completed step completed), so the difference of two snapshots
of one container gives active seconds (stepped - input stall) and compute
seconds (stepped - input stall - comm stall) over the wall time between their
``progress-at`` instants.

Transitions only the workload knows (a training rank's ``Resumed`` and
``Fenced``) come out of :meth:`Workload.take_events` as :class:`WorkloadEvent` objects,
each stamped with the instant it happened; the agent records them as core/v1
Events on the pod (:mod:`refplatform.agent.events`).
"""

from __future__ import annotations

import enum
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import ClassVar, Protocol

from refplatform.agent.clock import rfc3339_millis
from refplatform.agent.errors import WorkloadConfigError

__all__ = [
    "ALONE",
    "ANN_CHECKPOINT_EVERY",
    "ANN_CHECKPOINT_STEP",
    "ANN_COMM_STALL_SECONDS",
    "ANN_COMM_STALL_SHARE",
    "ANN_EPOCH",
    "ANN_EXIT_CODE",
    "ANN_INPUT_STALL_SECONDS",
    "ANN_INPUT_STALL_SHARE",
    "ANN_PEER_WAIT_SECONDS",
    "ANN_PROGRESS_AT",
    "ANN_RANK",
    "ANN_RUN_SECONDS",
    "ANN_STEP",
    "ANN_STEP_SECONDS",
    "ANN_STEPPED_SECONDS",
    "ANN_STEPS_TOTAL",
    "ANN_WORKLOAD",
    "ANN_WORLD_SIZE",
    "CheckpointLink",
    "Exit",
    "FENCED_EXIT",
    "FENCED_REASON",
    "Fence",
    "Gang",
    "GangStatus",
    "IdleWorkload",
    "LocalCheckpoints",
    "LogLine",
    "RESUMED_REASON",
    "RecordOutcome",
    "StallKind",
    "TrainingParams",
    "TrainingWorkload",
    "WORKLOADS",
    "Workload",
    "WorkloadEvent",
    "rank_fields",
    "workload_for",
    "workload_kind",
]

ANN_WORKLOAD = "firedrill.dev/workload"
ANN_STEPS_TOTAL = "firedrill.dev/steps-total"
ANN_STEP_SECONDS = "firedrill.dev/step-seconds"
ANN_CHECKPOINT_EVERY = "firedrill.dev/checkpoint-every"
ANN_RUN_SECONDS = "firedrill.dev/run-seconds"
ANN_EXIT_CODE = "firedrill.dev/exit-code"
ANN_INPUT_STALL_SHARE = "firedrill.dev/input-stall-share"
ANN_COMM_STALL_SHARE = "firedrill.dev/comm-stall-share"
# Set by the job controller on each rank's pod.
ANN_RANK = "firedrill.dev/rank"
ANN_WORLD_SIZE = "firedrill.dev/world-size"
ANN_EPOCH = "firedrill.dev/epoch"
# Published by the agent.
ANN_STEP = "firedrill.dev/step"
ANN_CHECKPOINT_STEP = "firedrill.dev/checkpoint-step"
ANN_INPUT_STALL_SECONDS = "firedrill.dev/input-stall-seconds"
ANN_COMM_STALL_SECONDS = "firedrill.dev/comm-stall-seconds"
ANN_PEER_WAIT_SECONDS = "firedrill.dev/peer-wait-seconds"
ANN_STEPPED_SECONDS = "firedrill.dev/stepped-seconds"
ANN_PROGRESS_AT = "firedrill.dev/progress-at"

# Exit code of a workload stopped by SIGTERM (128 + 15), as a shell reports it.
SIGTERM_EXIT = 143
# Exit code and reason of a rank that learned it was replaced (EX_TEMPFAIL: the job goes on without it).
FENCED_EXIT = 75
FENCED_REASON = "Fenced"
# Reason of the event a rank reports when it completes the first step beyond the checkpoint it resumed from.
RESUMED_REASON = "Resumed"
# Never emit more than this many steps in one advance (a long-stalled agent catches up over several calls).
MAX_STEPS_PER_ADVANCE = 10_000


@dataclass(frozen=True)
class LogLine:
    """One line of container output, with the instant it was written."""

    time: datetime
    text: str


@dataclass(frozen=True)
class WorkloadEvent:
    """A transition the workload reports to the agent, stamped with the instant it happened.

    The agent records it as a core/v1 Event on the pod (``type`` ``Normal`` or ``Warning``).
    """

    at: datetime
    type: str
    reason: str
    message: str


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
        self.killed = False
        """Whether :meth:`stop` ended it (SIGTERM), rather than its own end."""
        self._events: list[WorkloadEvent] = []

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
            self.killed = True
        return lines

    def take_events(self) -> list[WorkloadEvent]:
        """The transitions reported since the last call, oldest first (the agent records them as Events)."""
        out, self._events = self._events, []
        return out

    def _event(self, at: datetime, event_type: str, reason: str, message: str) -> None:
        self._events.append(WorkloadEvent(at, event_type, reason, message))

    def progress(self) -> dict[str, str]:
        """Pod annotations that publish the workload's progress (none by default)."""
        return {}

    def thaw(self, now: datetime) -> None:
        """The whole process was frozen (SIGSTOP) until ``now``.  Default: time just passed."""
        return None

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
    def from_annotations(cls, annotations: Mapping[str, str], *_links: object) -> IdleWorkload:
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
    """Wall seconds one step takes while the gang is complete (stalls included)."""
    checkpoint_every: int = 10
    """Checkpoint every N steps; 0 = never."""
    resume_step: int = 0
    """Training alone: start from this checkpointed step (a restarted container resumes)."""
    exit_code: int = 0
    input_stall_share: float = 0.0
    """Share of each step's wall time spent waiting on the input pipeline (allocated, idle)."""
    comm_stall_share: float = 0.0
    """Share of each step's wall time stalled on non-overlapped communication (active, waiting)."""
    rank: int = 0
    world_size: int = 1
    epoch: int = 0

    @classmethod
    def from_annotations(cls, annotations: Mapping[str, str]) -> TrainingParams:
        step_seconds = _float(annotations, ANN_STEP_SECONDS, 0.5)
        assert step_seconds is not None
        rank, world_size, epoch = rank_fields(annotations)
        params = cls(
            steps_total=_int(annotations, ANN_STEPS_TOTAL, 0),
            step_seconds=step_seconds,
            checkpoint_every=_int(annotations, ANN_CHECKPOINT_EVERY, 10),
            resume_step=_int(annotations, ANN_CHECKPOINT_STEP, 0),
            exit_code=_int(annotations, ANN_EXIT_CODE, 0),
            input_stall_share=_share(annotations, ANN_INPUT_STALL_SHARE),
            comm_stall_share=_share(annotations, ANN_COMM_STALL_SHARE),
            rank=rank,
            world_size=world_size,
            epoch=epoch,
        )
        if params.input_stall_share + params.comm_stall_share > 1.0 + 1e-9:
            raise WorkloadConfigError(
                f"{ANN_INPUT_STALL_SHARE} + {ANN_COMM_STALL_SHARE} = "
                f"{params.input_stall_share + params.comm_stall_share:g} exceeds 1 (they are shares of one step)"
            )
        return params


def _share(annotations: Mapping[str, str], key: str) -> float:
    raw = annotations.get(key)
    if raw is None or str(raw).strip() == "":
        return 0.0
    try:
        value = float(str(raw).strip())
    except ValueError:
        raise WorkloadConfigError(f"annotation {key}={raw!r} is not a number") from None
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise WorkloadConfigError(f"annotation {key}={raw!r} must be a share between 0 and 1")
    return value


def rank_fields(annotations: Mapping[str, str]) -> tuple[int, int, int]:
    """``(rank, world_size, epoch)`` from the job controller's annotations (defaults 0, 1, 0)."""
    world_size = _int(annotations, ANN_WORLD_SIZE, 1, minimum=1)
    rank = _int(annotations, ANN_RANK, 0)
    if rank >= world_size:
        raise WorkloadConfigError(f"annotation {ANN_RANK}={rank} is not below {ANN_WORLD_SIZE}={world_size}")
    return rank, world_size, _int(annotations, ANN_EPOCH, 0)


# -- what a rank needs from outside: peers and checkpoint storage -------------------------------


class StallKind(enum.Enum):
    """Why a rank is not stepping."""

    PEERS = "peers"
    """The last view of the gang shows fewer than world-size ranks Running and not terminating."""
    STALE = "stale"
    """The view of the gang is older than the staleness bound (the API is unreachable, or we were frozen)."""


@dataclass(frozen=True)
class GangStatus:
    """What a rank knows about its gang, asked at one instant.

    ``window`` is the stretch of time over which the gang is known complete: from
    the first of the current run of observations that saw every rank Running,
    to the last such observation plus the staleness bound (cut short by a later
    observation that saw the gang broken).  A rank steps only inside it; when
    ``window`` is ``None`` or ends before the instant asked about, ``kind`` and
    ``reason`` say why it stalls.
    """

    window: tuple[datetime, datetime] | None
    kind: StallKind = StallKind.PEERS
    reason: str = ""


class Gang(Protocol):
    """A rank's view of its peers (the agent polls the API; tests script it)."""

    def status(self, now: datetime) -> GangStatus: ...


_DAWN = datetime.min.replace(tzinfo=UTC)
_DOOM = datetime.max.replace(tzinfo=UTC)


class _Alone:
    """A gang of one: always complete."""

    def status(self, now: datetime) -> GangStatus:
        return GangStatus((_DAWN, _DOOM))


ALONE: Gang = _Alone()
"""The gang of a pod that is not part of a job."""


@dataclass(frozen=True)
class Fence:
    """This rank was replaced: its job restarted at a newer epoch."""

    job_epoch: int
    """The job's epoch, newer than the rank's."""
    how: str
    """How the rank learned it (e.g. ``checkpoint record refused``)."""


@dataclass(frozen=True)
class RecordOutcome:
    """The result of writing one checkpoint record (rank 0)."""

    step: int
    at: datetime
    error: str | None = None
    """``None``: written.  Otherwise why not (reported once per step; the write is retried)."""


class CheckpointLink(Protocol):
    """A rank's checkpoint storage.  Never blocks: I/O happens elsewhere, results come back here."""

    def resume_step(self) -> int | None:
        """The step to resume from, once read (``None``: still reading)."""
        ...

    def fence(self) -> Fence | None:
        """Set once the rank learned it was replaced."""
        ...

    def record(self, step: int, at: datetime) -> None:
        """Rank 0: write the checkpoint record for ``step`` (asynchronously; the newest one wins)."""
        ...

    def outcomes(self) -> list[RecordOutcome]:
        """Results of record writes since the last call."""
        ...


class LocalCheckpoints:
    """Checkpoints of a pod that trains alone: the resume step comes from its own annotation; nothing is recorded."""

    def __init__(self, resume_step: int = 0) -> None:
        self._resume = resume_step

    def resume_step(self) -> int | None:
        return self._resume

    def fence(self) -> Fence | None:
        return None

    def record(self, step: int, at: datetime) -> None:
        return None

    def outcomes(self) -> list[RecordOutcome]:
        return []


_US = timedelta(microseconds=1)


def _us(delta: timedelta) -> int:
    return delta // _US


def _secs(us: int) -> str:
    return f"{us / 1e6:.3f}"


class TrainingWorkload(Workload):
    """One rank of a synchronous data-parallel training job, on a clock.

    Work accrues only while the :class:`Gang` is known complete; a step takes
    ``step_seconds`` of such time (``input_stall_share`` of it waiting on input,
    ``comm_stall_share`` of it stalled on communication, the rest computing).
    Each step logs ``<ts> step=<s> loss=<x>`` at the instant it completed; every
    ``checkpoint_every``-th step also ``<ts> checkpoint step=<s>``, and rank 0
    hands the record to its :class:`CheckpointLink`.  Before the first step the
    rank waits for its resume point (``resumed from checkpoint step=N``).  When
    the link reports a :class:`Fence`, the rank logs ``fenced: ...`` and exits
    :data:`FENCED_EXIT` with reason ``Fenced`` at once.  With ``steps_total`` it
    exits ``exit_code`` (default 0) once that step is done.  A pod outside a job
    trains alone (:data:`ALONE`), stepping on time alone as it always did.

    Events (:meth:`take_events`): ``Resumed`` (Normal) at the instant the first
    step beyond the resume point completed (also from checkpoint 0, so every
    start that steps has one), ``Fenced`` (Warning) at the instant the rank
    learned it was replaced.
    """

    kind = "training"

    def __init__(
        self,
        params: TrainingParams | None = None,
        gang: Gang | None = None,
        checkpoints: CheckpointLink | None = None,
    ) -> None:
        super().__init__()
        self.params = params or TrainingParams()
        if self.params.steps_total and self.params.resume_step > self.params.steps_total:
            raise WorkloadConfigError(
                f"resume step {self.params.resume_step} is beyond steps-total {self.params.steps_total}"
            )
        self.gang = gang or ALONE
        self.in_job = gang is not None
        self.checkpoints = checkpoints or LocalCheckpoints(self.params.resume_step)
        self.step = self.params.resume_step
        self.checkpoint_step = self.params.resume_step
        self.resumed_from: int | None = None
        self.resumed_at: datetime | None = None
        """When the first step beyond :attr:`resumed_from` completed."""
        self._step_us = max(1, round(self.params.step_seconds * 1e6))
        self._input_us = round(self.params.input_stall_share * self._step_us)
        self._comm_us = round(self.params.comm_stall_share * self._step_us)
        self._cursor: datetime | None = None  # time accounted up to
        self._work_us = 0  # work done on the current step
        self.input_stall_us = 0
        self.comm_stall_us = 0
        self.stepped_us = 0
        """Wall time of the steps completed by this container (stalls inside a step included)."""
        self.peer_wait_us = 0
        """Time the rank could not step (gang incomplete, view stale), up to the last :meth:`advance`."""
        self.progress_at: datetime | None = None
        """The instant the published counters are exact at: the last completed step's, else the resume instant."""
        self._peer_wait_at_progress_us = 0  # peer_wait_us as of progress_at
        self._stall: StallKind | None = None
        self._stall_reason = ""
        self._stall_since: datetime | None = None

    @classmethod
    def from_annotations(
        cls, annotations: Mapping[str, str], gang: Gang | None = None, checkpoints: CheckpointLink | None = None
    ) -> TrainingWorkload:
        return cls(TrainingParams.from_annotations(annotations), gang, checkpoints)

    @property
    def stalled(self) -> StallKind | None:
        """Why the rank is not stepping now (``None``: stepping, or not yet resumed)."""
        return self._stall

    def progress(self) -> dict[str, str]:
        """One consistent snapshot: every cumulative counter is exact at ``firedrill.dev/progress-at``.

        ``progress-at`` is the instant the last completed step completed (before
        the first one: the instant the rank resumed, or started while it still
        reads its resume point; all counters are 0 then).  Peer wait is counted
        up to that instant too, so between two snapshots of one container
        ``Δprogress-at = Δstepped + Δpeer-wait`` plus any time the process was
        frozen.
        """
        at = self.progress_at or self.started_at
        out = {
            ANN_STEP: str(self.step),
            ANN_CHECKPOINT_STEP: str(self.checkpoint_step),
            ANN_INPUT_STALL_SECONDS: _secs(self.input_stall_us),
            ANN_COMM_STALL_SECONDS: _secs(self.comm_stall_us),
            ANN_PEER_WAIT_SECONDS: _secs(self._peer_wait_at_progress_us),
            ANN_STEPPED_SECONDS: _secs(self.stepped_us),
        }
        if at is not None:
            out[ANN_PROGRESS_AT] = rfc3339_millis(at)
        return out

    @staticmethod
    def loss(step: int) -> float:
        """A deterministic, decreasing loss curve with a little jitter."""
        jitter = ((step * 2654435761) % 1000) / 1000.0 * 0.02
        return 0.3 + 2.2 * math.exp(-step / 200.0) + jitter

    def thaw(self, now: datetime) -> None:
        """The process was frozen (SIGSTOP) until ``now``: no work was done meanwhile."""
        if self.running and self._cursor is not None and now > self._cursor:
            self._cursor = now

    # -- the loop ----------------------------------------------------------

    def _on_start(self, now: datetime) -> list[LogLine]:
        p = self.params
        text = (
            f"starting training steps_total={p.steps_total} step_seconds={p.step_seconds:g} "
            f"checkpoint_every={p.checkpoint_every}"
        )
        if self.in_job:
            text += f" rank={p.rank} world_size={p.world_size} epoch={p.epoch}"
        if p.input_stall_share or p.comm_stall_share:
            text += f" input_stall_share={p.input_stall_share:g} comm_stall_share={p.comm_stall_share:g}"
        self._cursor = now
        return [LogLine(now, f"{rfc3339_millis(now)} {text}")] + self._advance(now)

    def _advance(self, now: datetime) -> list[LogLine]:
        assert self._cursor is not None
        lines = self._record_outcomes()
        fence = self.checkpoints.fence()
        if fence is not None:
            return lines + self._fenced(fence, max(now, self._cursor))
        if self.resumed_from is None:
            resume = self.checkpoints.resume_step()
            if resume is None:  # still reading the checkpoint record
                self._cursor = max(self._cursor, now)
                return lines
            lines += self._resume(resume, max(self._cursor, now))
            if self.exit is not None:
                return lines
        if now < self._cursor:
            return lines
        status = self.gang.status(now)
        start = self._cursor
        end = start  # where work stopped accruing
        complete_now = False
        if status.window is not None:
            since, until = status.window
            complete_now = since <= now < until
            a, b = max(start, since), min(now, until)
            if b > a:
                if self._stall is not None:
                    stalled_for = (a - (self._stall_since or a)).total_seconds()
                    lines.append(self._line(a, f"stepping resumed after {stalled_for:.1f}s stalled"))
                    self._stall, self._stall_since = None, None
                self.peer_wait_us += _us(a - start)
                capped_at = self._accrue(a, b, lines)
                if self.exit is not None:
                    return lines
                if capped_at is not None:  # too many steps for one call: the rest next time
                    self._cursor = capped_at
                    return lines
                end = b
        if not complete_now:
            # Log a new stall, a new kind of stall, or new peer counts (not every tick of a stale view's age).
            if self._stall is not status.kind or (status.kind is StallKind.PEERS and status.reason != self._stall_reason):
                lines.append(self._line(end, f"stalled: {status.reason}"))
                if self._stall is None:
                    self._stall_since = end
                self._stall, self._stall_reason = status.kind, status.reason
        self.peer_wait_us += _us(now - end)
        self._cursor = now
        return lines

    def _accrue(self, a: datetime, b: datetime, lines: list[LogLine]) -> datetime | None:
        """Do the work of ``[a, b]``; returns the instant it stopped early (the per-call cap), else ``None``."""
        available = _us(b - a)
        t = a
        emitted = 0
        total = self.params.steps_total
        while True:
            need = self._step_us - self._work_us
            if need > available:
                self._work_us += available
                return None
            available -= need
            t += timedelta(microseconds=need)
            self._work_us = 0
            self.step += 1
            emitted += 1
            if self.resumed_at is None and self.resumed_from is not None and self.step == self.resumed_from + 1:
                self.resumed_at = t
                self._event(t, "Normal", RESUMED_REASON,
                            f"Resumed training at step {self.step} beyond checkpoint {self.resumed_from}")
            self.input_stall_us += self._input_us
            self.comm_stall_us += self._comm_us
            self.stepped_us += self._step_us
            self.progress_at = t
            self._peer_wait_at_progress_us = self.peer_wait_us  # wait before ``a`` is in; [a, t] was work
            lines += self._on_step(self.step, t)
            if total and self.step >= total:
                lines.append(self._line(t, f"training complete step={self.step}"))
                self.exit = Exit.of(self.params.exit_code, t)
                return None
            if emitted >= MAX_STEPS_PER_ADVANCE:
                return t

    def _on_step(self, step: int, at: datetime) -> list[LogLine]:
        ts = rfc3339_millis(at)
        lines = [LogLine(at, f"{ts} step={step} loss={self.loss(step):.4f}")]
        every = self.params.checkpoint_every
        if every and step % every == 0:
            self.checkpoint_step = step
            lines.append(LogLine(at, f"{ts} checkpoint step={step}"))
            if self.params.rank == 0:
                self.checkpoints.record(step, at)
        return lines

    def _resume(self, step: int, now: datetime) -> list[LogLine]:
        self.resumed_from = step
        self.step = self.checkpoint_step = step
        self._work_us = 0
        self._cursor = now
        self.progress_at = now  # counters are 0 here: peer wait counts from the resume point on
        lines = [self._line(now, f"resumed from checkpoint step={step}")]
        total = self.params.steps_total
        if total and step >= total:
            lines.append(self._line(now, f"training complete step={step}"))
            self.exit = Exit.of(self.params.exit_code, now)
        return lines

    def _record_outcomes(self) -> list[LogLine]:
        lines = []
        for o in self.checkpoints.outcomes():
            if o.error is None:
                lines.append(self._line(o.at, f"checkpoint record step={o.step} written"))
            else:
                lines.append(self._line(o.at, f"checkpoint record step={o.step} failed: {o.error}"))
        return lines

    def _fenced(self, fence: Fence, now: datetime) -> list[LogLine]:
        p = self.params
        text = f"fenced: job restarted at epoch {fence.job_epoch}; rank {p.rank} of epoch {p.epoch} stops"
        self.exit = Exit(FENCED_EXIT, FENCED_REASON, now, f"{text} ({fence.how})")
        self._event(now, "Warning", FENCED_REASON, self.exit.message)
        return [self._line(now, text)]

    @staticmethod
    def _line(at: datetime, text: str) -> LogLine:
        return LogLine(at, f"{rfc3339_millis(at)} {text}")

WorkloadFactory = Callable[[Mapping[str, str], "Gang | None", "CheckpointLink | None"], Workload]
"""Builds a workload from a pod's annotations and, for a rank of a job, its gang and checkpoint links."""

WORKLOADS: dict[str, WorkloadFactory] = {
    IdleWorkload.kind: IdleWorkload.from_annotations,
    TrainingWorkload.kind: TrainingWorkload.from_annotations,
}
"""Workload kinds by the value of the ``firedrill.dev/workload`` annotation."""


def workload_kind(annotations: Mapping[str, str] | None) -> str:
    """The kind named by ``firedrill.dev/workload`` (``idle`` without it)."""
    return ((annotations or {}).get(ANN_WORKLOAD) or IdleWorkload.kind).strip()


def workload_for(
    annotations: Mapping[str, str] | None,
    gang: Gang | None = None,
    checkpoints: CheckpointLink | None = None,
) -> Workload:
    """The workload a pod with these annotations runs.

    ``gang`` and ``checkpoints`` link a rank of a job to its peers and its
    checkpoint record (without them a training pod trains alone).  Raises
    :class:`WorkloadConfigError` for an unknown kind or a bad parameter.
    """
    annotations = annotations or {}
    kind = workload_kind(annotations)
    factory = WORKLOADS.get(kind)
    if factory is None:
        raise WorkloadConfigError(f"unknown workload {kind!r} (known: {', '.join(sorted(WORKLOADS))})")
    return factory(annotations, gang, checkpoints)
