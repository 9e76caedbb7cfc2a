"""The job contract between the Volcano job controller and a training rank, as pure functions.

The job controller creates one pod per rank of a ``batch.volcano.sh/v1alpha1``
Job: label ``volcano.sh/job-name``, annotations ``firedrill.dev/rank``,
``firedrill.dev/world-size`` and ``firedrill.dev/epoch`` (the Job's restart
epoch, kept in the Job's own ``firedrill.dev/epoch`` annotation and increased on
every RestartJob).  Rank 0 records checkpoints on the Job
(``firedrill.dev/checkpoint-step``, ``firedrill.dev/checkpoint-time``) with a
JSON patch whose first operation tests the Job's epoch: a rank of an older epoch
gets 422 and its record is never written (fencing).

No I/O here: :mod:`refplatform.agent.jobs` does the polling and the writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from refplatform.agent.clock import micro_time
from refplatform.agent.errors import WorkloadConfigError
from refplatform.agent.workload import ANN_CHECKPOINT_STEP, ANN_EPOCH, rank_fields
from refplatform.client import resource_path

__all__ = [
    "ANN_CHECKPOINT_TIME",
    "GangCount",
    "LABEL_JOB",
    "RankSpec",
    "checkpoint_patch",
    "count_gang",
    "job_checkpoint_step",
    "job_epoch",
    "pod_epoch",
    "saved_by_all",
    "unfenced_checkpoint_patch",
]

Obj = dict[str, Any]

LABEL_JOB = "volcano.sh/job-name"
LABEL_TASK = "volcano.sh/task-spec"
ANN_CHECKPOINT_TIME = "firedrill.dev/checkpoint-time"
VOLCANO_BATCH = ("batch.volcano.sh", "v1alpha1", "jobs")


def _pointer(key: str) -> str:
    """A JSON pointer to ``metadata.annotations[key]`` (RFC 6901 escapes)."""
    return "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1")


def _annotations(obj: Obj) -> Mapping[str, Any]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def _as_int(raw: Any) -> int | None:
    try:
        return int(str(raw).strip())
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class RankSpec:
    """Which rank of which job (and epoch) a pod is."""

    namespace: str
    job: str
    rank: int
    world_size: int
    epoch: int

    @classmethod
    def from_pod(cls, pod: Obj) -> RankSpec | None:
        """The pod's place in its job; ``None`` for a pod outside any job (no ``volcano.sh/job-name`` label).

        Raises :class:`WorkloadConfigError` when the rank annotations are invalid.
        """
        meta = pod.get("metadata") or {}
        job = str((meta.get("labels") or {}).get(LABEL_JOB) or "").strip()
        if not job:
            return None
        rank, world_size, epoch = rank_fields(meta.get("annotations") or {})
        return cls(str(meta.get("namespace") or "default"), job, rank, world_size, epoch)

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.job)

    @property
    def job_path(self) -> str:
        group, version, plural = VOLCANO_BATCH
        return resource_path(group, version, plural, self.namespace, self.job)

    @property
    def selector(self) -> str:
        return f"{LABEL_JOB}={self.job}"


def job_epoch(job: Obj) -> int | None:
    """The Job's restart epoch (``None`` when the annotation is missing or not an integer)."""
    return _as_int(_annotations(job).get(ANN_EPOCH))


def job_checkpoint_step(job: Obj) -> int:
    """The step of the Job's checkpoint record (0: none yet)."""
    step = _as_int(_annotations(job).get(ANN_CHECKPOINT_STEP))
    return step if step is not None and step >= 0 else 0


def pod_epoch(pod: Obj) -> int | None:
    return _as_int(_annotations(pod).get(ANN_EPOCH))


@dataclass(frozen=True)
class GangCount:
    """One look at a job's pods from the point of view of one epoch."""

    ready_ranks: frozenset[int]
    """Ranks of the epoch whose pod is Running, not terminating and not marked not-ready."""
    world_size: int
    epoch: int
    newest_epoch: int | None
    """The highest epoch any of the job's pods carries."""

    @property
    def complete(self) -> bool:
        return len(self.ready_ranks) >= self.world_size

    def describe(self) -> str:
        return f"{len(self.ready_ranks)}/{self.world_size} ranks of epoch {self.epoch} running"


def _pod_ready(pod: Obj) -> bool:
    """Running, not terminating, and not marked ``Ready=False`` (what a node lifecycle controller does to pods of an unreachable node)."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    if meta.get("deletionTimestamp") or status.get("phase") != "Running":
        return False
    for cond in status.get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "Ready" and cond.get("status") == "False":
            return False
    return True


def count_gang(pods: Iterable[Obj], epoch: int, world_size: int) -> GangCount:
    """Which ranks of ``epoch`` are up, among a job's pods (as listed by ``volcano.sh/job-name``)."""
    ready: set[int] = set()
    newest: int | None = None
    for pod in pods:
        e = pod_epoch(pod)
        e = 0 if e is None else e
        newest = e if newest is None else max(newest, e)
        if e != epoch or not _pod_ready(pod):
            continue
        try:
            rank, world, _ = rank_fields(_annotations(pod))
        except WorkloadConfigError:
            continue
        if world == world_size:
            ready.add(rank)
    return GangCount(frozenset(ready), world_size, epoch, newest)


def saved_by_all(pods: Iterable[Obj], epoch: int, world_size: int, me: int) -> int | None:
    """The newest checkpoint step every rank of ``epoch`` other than ``me`` has published (``firedrill.dev/checkpoint-step``).

    ``None`` while some rank has published none (or has no pod): a distributed
    checkpoint is complete only when every rank has saved its shard, so rank 0
    records nothing newer than this.  A gang of one needs no one (a very large step).
    """
    saved: dict[int, int] = {}
    for pod in pods:
        e = pod_epoch(pod)
        if (0 if e is None else e) != epoch:
            continue
        try:
            rank, world, _ = rank_fields(_annotations(pod))
        except WorkloadConfigError:
            continue
        step = _as_int(_annotations(pod).get(ANN_CHECKPOINT_STEP))
        if world != world_size or rank == me or step is None:
            continue
        saved[rank] = max(saved.get(rank, step), step)
    others = [r for r in range(world_size) if r != me]
    if any(r not in saved for r in others):
        return None
    return min((saved[r] for r in others), default=2**62)


def checkpoint_patch(epoch: int, step: int, at: datetime) -> list[Obj]:
    """The fenced JSON patch (``application/json-patch+json``) rank 0 of ``epoch`` sends to its Job."""
    return [
        {"op": "test", "path": _pointer(ANN_EPOCH), "value": str(epoch)},
        {"op": "add", "path": _pointer(ANN_CHECKPOINT_STEP), "value": str(step)},
        {"op": "add", "path": _pointer(ANN_CHECKPOINT_TIME), "value": micro_time(at)},
    ]


def unfenced_checkpoint_patch(job: Obj, step: int, at: datetime) -> list[Obj]:
    """For a Job that carries no epoch yet (epoch 0 implied): fenced on the ``resourceVersion`` read instead.

    A job controller that later sets or raises the epoch changes the
    resourceVersion, so this write still cannot land after a restart.
    """
    meta = job.get("metadata") or {}
    ops: list[Obj] = [{"op": "test", "path": "/metadata/resourceVersion", "value": str(meta.get("resourceVersion") or "")}]
    if not isinstance(meta.get("annotations"), dict):
        ops.append({"op": "add", "path": "/metadata/annotations", "value": {}})
    ops += [
        {"op": "add", "path": _pointer(ANN_CHECKPOINT_STEP), "value": str(step)},
        {"op": "add", "path": _pointer(ANN_CHECKPOINT_TIME), "value": micro_time(at)},
    ]
    return ops
