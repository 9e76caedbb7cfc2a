"""Ray's own view of a cluster, as its state API (``/api/v0/...``) and Job Submission API (``/api/jobs/``) answer,
parsed into typed records.

Every list of the state API comes wrapped as ``{"result": true, "msg": "", "data": {"result": {"total": N,
"result": [...]}}}`` (Ray 2.60, docs/RAY.md); :func:`state_rows` unwraps it and says what was wrong when it is not
that shape.  The records keep what the drills judge: a node's liveness and GPUs, an actor's node and state, a
placement group's bundles and where each was placed (a bundle not placed has node id ``""``), a job's status.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from drills.errors import FiredrillError

__all__ = ["ActorState", "Bundle", "JobStatus", "PlacementGroup", "PlacementState", "RayActor", "RayError", "RayJob",
           "RayNode", "parse_actors", "parse_job", "parse_nodes", "parse_placement_groups", "state_rows"]

Obj = dict[str, Any]


class RayError(FiredrillError):
    """A Ray API failed or answered what the harness cannot read; the message names the request and why."""


class ActorState(enum.Enum):
    """An actor's state (the state API's ``state``)."""

    DEPENDENCIES_UNREADY = "DEPENDENCIES_UNREADY"
    PENDING_CREATION = "PENDING_CREATION"
    ALIVE = "ALIVE"
    RESTARTING = "RESTARTING"
    DEAD = "DEAD"
    UNKNOWN = "UNKNOWN"
    """A state this version of the harness does not know (a newer Ray's)."""


class PlacementState(enum.Enum):
    """A placement group's state: ``CREATED`` holds every bundle; ``PENDING`` holds none."""

    PENDING = "PENDING"
    PREPARED = "PREPARED"
    CREATED = "CREATED"
    REMOVED = "REMOVED"
    RESCHEDULING = "RESCHEDULING"
    UNKNOWN = "UNKNOWN"


class JobStatus(enum.Enum):
    """A submitted job's status (the Job Submission API's ``status``)."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    STOPPED = "STOPPED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    UNKNOWN = "UNKNOWN"

    @property
    def finished(self) -> bool:
        return self in (JobStatus.STOPPED, JobStatus.SUCCEEDED, JobStatus.FAILED)


def _enum(kind: type[enum.Enum], value: Any) -> Any:
    try:
        return kind(str(value))
    except ValueError:
        return kind("UNKNOWN")


@dataclass(frozen=True)
class RayNode:
    """One node as the GCS knows it."""

    node_id: str
    name: str
    """``--node-name`` (Ray uses the node's address when none was given)."""
    ip: str
    alive: bool
    """``state`` ``ALIVE``; ``DEAD`` once the GCS's health checks gave up on it."""
    head: bool
    resources: Mapping[str, float] = field(default_factory=dict)
    """``resources_total``: what the node declared (``GPU``, ``CPU``, custom resources)."""
    labels: Mapping[str, str] = field(default_factory=dict)
    state_message: str = ""
    """Why a node is DEAD, in Ray's words ("health check failed due to missing too many heartbeats")."""
    end_time_ms: int | None = None
    """When the GCS marked it DEAD (epoch ms), if it did."""

    @property
    def gpus(self) -> int:
        return int(self.resources.get("GPU", 0))


@dataclass(frozen=True)
class RayActor:
    actor_id: str
    name: str
    class_name: str
    state: ActorState
    node_id: str
    """The node it runs (or ran) on; ``""`` before it was placed."""
    pid: int | None = None
    death_cause: str = ""
    gpus: float = 0.0
    """The GPUs it asked for (``required_resources``); an actor in a placement group takes them from its bundle."""
    placement_group_id: str = ""


@dataclass(frozen=True)
class Bundle:
    resources: Mapping[str, float]
    node_id: str
    """Where it is reserved; ``""`` while it is not."""


@dataclass(frozen=True)
class PlacementGroup:
    group_id: str
    name: str
    state: PlacementState
    strategy: str
    bundles: tuple[Bundle, ...]

    @property
    def placed(self) -> tuple[Bundle, ...]:
        return tuple(b for b in self.bundles if b.node_id)


@dataclass(frozen=True)
class RayJob:
    submission_id: str
    status: JobStatus
    message: str = ""
    entrypoint: str = ""
    error_type: str = ""


def state_rows(doc: Any, what: str) -> list[Obj]:
    """The rows of a state API answer about ``what`` (``nodes``, ``actors``...)."""
    if not isinstance(doc, Mapping):
        raise RayError(f"the state API's {what} answer is a {type(doc).__name__}, not an object")
    if doc.get("result") is False:
        raise RayError(f"the state API refused to list {what}: {doc.get('msg') or 'no reason given'}")
    try:
        rows = doc["data"]["result"]["result"]
    except (KeyError, TypeError):
        raise RayError(f"the state API's {what} answer has no data.result.result list (keys: "
                       f"{', '.join(sorted(map(str, doc))) or 'none'}): is this Ray 2.x's dashboard?") from None
    if not isinstance(rows, list) or not all(isinstance(r, Mapping) for r in rows):
        raise RayError(f"the state API's {what} are not a list of objects")
    return [dict(r) for r in rows]


def _resources(raw: Any) -> dict[str, float]:
    if not isinstance(raw, Mapping):
        return {}
    out = {}
    for key, value in raw.items():
        try:
            out[str(key)] = float(value)
        except (TypeError, ValueError):
            continue
    return out


def parse_nodes(doc: Any) -> list[RayNode]:
    nodes = []
    for row in state_rows(doc, "nodes"):
        end = row.get("end_time_ms")
        nodes.append(RayNode(node_id=str(row.get("node_id") or ""), name=str(row.get("node_name") or ""),
                             ip=str(row.get("node_ip") or ""), alive=row.get("state") == "ALIVE",
                             head=bool(row.get("is_head_node")), resources=_resources(row.get("resources_total")),
                             labels={str(k): str(v) for k, v in (row.get("labels") or {}).items()},
                             state_message=str(row.get("state_message") or ""),
                             end_time_ms=int(end) if isinstance(end, (int, float)) and end else None))
    return nodes


def parse_actors(doc: Any) -> list[RayActor]:
    actors = []
    for row in state_rows(doc, "actors"):
        pid = row.get("pid")
        cause = row.get("death_cause") or {}
        said = ""
        if isinstance(cause, Mapping):
            ctx = next((v for v in cause.values() if isinstance(v, Mapping)), {})
            said = str(ctx.get("error_message") or "")
        actors.append(RayActor(actor_id=str(row.get("actor_id") or ""), name=str(row.get("name") or ""),
                               class_name=str(row.get("class_name") or ""),
                               state=_enum(ActorState, row.get("state")), node_id=str(row.get("node_id") or ""),
                               pid=int(pid) if isinstance(pid, int) and pid > 0 else None, death_cause=said,
                               gpus=_resources(row.get("required_resources")).get("GPU", 0.0),
                               placement_group_id=str(row.get("placement_group_id") or "")))
    return actors


def parse_placement_groups(doc: Any) -> list[PlacementGroup]:
    groups = []
    for row in state_rows(doc, "placement groups"):
        bundles = tuple(Bundle(_resources(b.get("unit_resources")), str(b.get("node_id") or ""))
                        for b in row.get("bundles") or [] if isinstance(b, Mapping))
        groups.append(PlacementGroup(group_id=str(row.get("placement_group_id") or ""),
                                     name=str(row.get("name") or ""), state=_enum(PlacementState, row.get("state")),
                                     strategy=str(row.get("strategy") or ""), bundles=bundles))
    return groups


def parse_job(doc: Any) -> RayJob:
    """One job of the Job Submission API (``GET /api/jobs/<id>``)."""
    if not isinstance(doc, Mapping) or not doc.get("submission_id") and not doc.get("job_id"):
        raise RayError(f"the Job Submission API's answer names no job: {str(doc)[:200]}")
    return RayJob(submission_id=str(doc.get("submission_id") or doc.get("job_id")),
                  status=_enum(JobStatus, doc.get("status")), message=str(doc.get("message") or ""),
                  entrypoint=str(doc.get("entrypoint") or ""), error_type=str(doc.get("error_type") or ""))
