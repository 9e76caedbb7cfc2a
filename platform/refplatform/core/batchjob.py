"""The ``batch/v1`` Job controller's decisions, as a function of one Job, its pods and the time: pure.

Upstream's behaviour (``pkg/controller/job``), for what training stacks use:

- **Pods**: ``parallelism`` at a time until ``completions`` succeed (NonIndexed), or one pod per index
  ``0..completions-1`` until every index succeeded (Indexed).  Without ``completions``, a work queue: once a pod
  succeeded no new ones start, and the Job completes when none is left running.
- **Failures**: a pod counts as failed when its phase is Failed, or (``podReplacementPolicy:
  TerminatingOrFailed``, the default without a pod failure policy) as soon as it is being deleted, so its
  replacement does not wait for the old one to finish.  ``podFailurePolicy`` rules (``onExitCodes``,
  ``onPodConditions``) may fail the Job or the index at once, ignore the failure, or count it.
- **Back-off**: a failed index (with ``backoffLimitPerIndex``) or the Job (without) waits 10 s after its first
  failure before a replacement starts, doubling per further failure up to 10 minutes (``DefaultJobPodFailureBackOff``,
  ``MaxJobPodFailureBackOff``), from the failed pod's finish time.
- **Limits**: more counted failures than ``backoffLimit`` fail the Job (``BackoffLimitExceeded``); an index with
  more than ``backoffLimitPerIndex`` fails alone (``status.failedIndexes``) and the Job fails when every index is
  done and one failed (``FailedIndexes``), or at once past ``maxFailedIndexes``; ``activeDeadlineSeconds`` past
  ``status.startTime`` fails it (``DeadlineExceeded``).
- **Ends**: a Job that met its success criteria or failed first gets ``SuccessCriteriaMet``/``FailureTarget``,
  its remaining pods are deleted, and ``Complete``/``Failed`` follow once none is left running.
  ``suspend: true`` deletes the running pods and starts none (``Suspended``).

Counting is exactly once: the controller records a finished pod's uid in ``status.uncountedTerminatedPods``
together with its count, then removes the pod's ``batch.kubernetes.io/job-tracking`` finalizer; a pod without
the finalizer, or whose uid is already recorded, is never counted again.  The per-index failure count travels
on each replacement pod (``batch.kubernetes.io/job-index-failure-count``), as upstream.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]

TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
INDEX_FAILURE_COUNT = "batch.kubernetes.io/job-index-failure-count"
INDEX_IGNORED_FAILURE_COUNT = "batch.kubernetes.io/job-index-ignored-failure-count"
BACKOFF = 10.0
MAX_BACKOFF = 600.0
"""Seconds: upstream's DefaultJobPodFailureBackOff and MaxJobPodFailureBackOff."""


class Action(enum.Enum):
    FAIL_JOB = "FailJob"
    FAIL_INDEX = "FailIndex"
    IGNORE = "Ignore"
    COUNT = "Count"


@dataclass(frozen=True)
class PodView:
    """One pod of the Job, as the plan needs it."""

    name: str
    uid: str
    phase: str
    index: int | None
    deleting: bool
    tracked: bool
    """Still carries the job-tracking finalizer: not counted yet."""
    finished_at: float | None
    """Seconds since the epoch: its containers' last finish, else the instant its deletion was asked."""
    index_failures: int = 0
    index_ignored: int = 0
    exit_codes: tuple[tuple[str, int], ...] = ()
    """(container, exit code) of the containers that terminated."""
    conditions: tuple[tuple[str, str], ...] = ()
    """(type, status) of the pod's conditions."""
    ready: bool = False


@dataclass(frozen=True)
class NewPod:
    index: int | None
    index_failures: int = 0
    index_ignored: int = 0


@dataclass
class Plan:
    create: list[NewPod] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    """Pods to delete: surplus, or every running pod of a Job that ended or was suspended."""
    untrack: list[str] = field(default_factory=list)
    """Pods whose finalizer to remove, after the status that counts them is written."""
    status: Obj = field(default_factory=dict)
    retry_in: float | None = None
    """Seconds until a back-off ends and the Job should be looked at again."""


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


@dataclass(frozen=True)
class Clock:
    """The instant of a plan, given by the caller (the core reads no clock)."""

    now: float
    """Seconds since the epoch."""
    stamp: str
    """The same instant in RFC 3339, for the status it writes."""
    started: float | None = None
    """``status.startTime`` of the Job in seconds since the epoch, when it has one."""


def intervals(indexes: Iterable[int]) -> str:
    """``0,1,2,5`` -> ``"0-2,5"``: how upstream writes completed and failed indexes."""
    out: list[str] = []
    run: list[int] = []
    for i in sorted(set(indexes)):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [i]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def parse_intervals(text: Any) -> set[int]:
    found: set[int] = set()
    for part in (text or "").split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        found.update(range(int(lo), int(hi or lo) + 1))
    return found


def backoff_remaining(failures: int, last_failure: float | None, now: float) -> float:
    """Seconds still to wait before a replacement, after ``failures`` counted failures (upstream's formula)."""
    if failures <= 0 or last_failure is None:
        return 0.0
    delay = BACKOFF
    for _ in range(1, failures):
        delay *= 2
        if delay >= MAX_BACKOFF:
            delay = MAX_BACKOFF
            break
    return max(0.0, delay - (now - last_failure))


def _exit_rule_matches(rule: Obj, pod: PodView) -> bool:
    req = rule.get("onExitCodes")
    if not isinstance(req, dict):
        return False
    values = set(req.get("values") or [])
    containers = [(c, code) for c, code in pod.exit_codes if req.get("containerName") in (None, c)]
    if req.get("operator") == "In":
        return any(code in values for _, code in containers)
    return any(code not in values and code != 0 for _, code in containers)  # NotIn: a failed exit not listed


def _condition_rule_matches(rule: Obj, pod: PodView) -> bool:
    wanted = rule.get("onPodConditions")
    if not isinstance(wanted, list):
        return False
    have = set(pod.conditions)
    return any((c.get("type"), c.get("status", "True")) in have for c in wanted if isinstance(c, dict))


def failure_action(policy: Obj | None, pod: PodView) -> Action:
    """What ``podFailurePolicy`` says of a failed pod: the first rule that matches, else Count."""
    for rule in (policy or {}).get("rules") or []:
        if isinstance(rule, dict) and (_exit_rule_matches(rule, pod) or _condition_rule_matches(rule, pod)):
            try:
                return Action(rule.get("action"))
            except ValueError:
                continue
    return Action.COUNT


def _has(status: Obj, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in status.get("conditions") or [])


def _condition(kind: str, reason: str, message: str, clock: Clock) -> Obj:
    stamp = clock.stamp
    return {"type": kind, "status": "True", "reason": reason, "message": message, "lastProbeTime": stamp,
            "lastTransitionTime": stamp}


def plan(job: Obj, pods: list[PodView], clock: Clock) -> Plan:  # noqa: C901 - one pass over upstream's rules
    spec, old = job.get("spec") or {}, job.get("status") or {}
    status: Obj = {k: v for k, v in old.items()}
    status.setdefault("conditions", [])
    out = Plan(status=status)
    indexed = spec.get("completionMode") == "Indexed"
    completions = spec.get("completions")
    parallelism = _int(spec.get("parallelism"), 1)
    per_index = spec.get("backoffLimitPerIndex")
    backoff_limit = _int(spec.get("backoffLimit"), 6 if per_index is None else 2**31 - 1)
    policy = spec.get("podFailurePolicy")
    only_failed = spec.get("podReplacementPolicy") == "Failed" or policy is not None

    uncounted = status.get("uncountedTerminatedPods") or {}
    recorded = set(uncounted.get("succeeded") or []) | set(uncounted.get("failed") or [])
    present = {p.uid for p in pods if p.tracked}
    recorded &= present  # a recorded pod whose finalizer is gone is done with
    new_failed, new_succeeded = list(uncounted.get("failed") or []), list(uncounted.get("succeeded") or [])
    new_failed = [u for u in new_failed if u in recorded]
    new_succeeded = [u for u in new_succeeded if u in recorded]
    completed = parse_intervals(status.get("completedIndexes"))
    failed_indexes = parse_intervals(status.get("failedIndexes"))
    fail_job: tuple[str, str] | None = None
    now = clock.now
    last_failure: dict[int | None, PodView] = {}

    def is_failed(p: PodView) -> bool:
        return p.phase == "Failed" or (not only_failed and p.deleting and p.phase != "Succeeded")

    for p in pods:
        if is_failed(p) and (p.finished_at is not None):
            key = p.index if indexed else None
            if key not in last_failure or (last_failure[key].finished_at or now) < p.finished_at:
                last_failure[key] = p
        if not p.tracked or p.uid in recorded:
            if p.tracked:
                out.untrack.append(p.name)
            continue
        if p.phase == "Succeeded":
            status["succeeded"] = _int(status.get("succeeded"), 0) + 1
            new_succeeded.append(p.uid)
            if indexed and p.index is not None:
                completed.add(p.index)
            out.untrack.append(p.name)
        elif is_failed(p):
            action = failure_action(policy, p) if policy is not None else Action.COUNT
            if action is not Action.IGNORE:
                status["failed"] = _int(status.get("failed"), 0) + 1
            new_failed.append(p.uid)
            out.untrack.append(p.name)
            if action is Action.FAIL_JOB:
                fail_job = ("PodFailurePolicy", f"Pod {p.name} failed and the pod failure policy fails the Job")
            elif indexed and p.index is not None and per_index is not None and (
                    action is Action.FAIL_INDEX or
                    (action is Action.COUNT and p.index_failures + 1 > _int(per_index, 0))):
                failed_indexes.add(p.index)
    status["uncountedTerminatedPods"] = {"succeeded": new_succeeded, "failed": new_failed}
    if indexed:
        status["completedIndexes"] = intervals(completed)
        if per_index is not None:
            status["failedIndexes"] = intervals(failed_indexes)

    running = [p for p in pods if p.phase not in ("Succeeded", "Failed") and not p.deleting]
    terminating = [p for p in pods if p.deleting and p.phase not in ("Succeeded", "Failed")]
    status["active"] = len(running)
    status["ready"] = sum(1 for p in running if p.ready)
    status["terminating"] = len(terminating)
    if status.get("startTime") is None and not spec.get("suspend"):
        status["startTime"] = clock.stamp

    # -- has it ended?
    ended = _has(status, "Complete") or _has(status, "Failed")
    target = "SuccessCriteriaMet" if _has(status, "SuccessCriteriaMet") else \
        "FailureTarget" if _has(status, "FailureTarget") else None
    if not ended and target is None:
        deadline = spec.get("activeDeadlineSeconds")
        started = clock.started
        max_failed = spec.get("maxFailedIndexes")
        if fail_job is None and _int(status.get("failed"), 0) > backoff_limit:
            fail_job = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
        if fail_job is None and isinstance(deadline, int) and started is not None and \
                now - started >= deadline:
            fail_job = ("DeadlineExceeded", "Job was active longer than specified deadline")
        if fail_job is None and isinstance(max_failed, int) and len(failed_indexes) > max_failed:
            fail_job = ("MaxFailedIndexesExceeded", "Job has exceeded the specified maximal number of failed indexes")
        if indexed:
            done = completed | failed_indexes
            all_done = isinstance(completions, int) and done >= set(range(completions))
            if fail_job is None and all_done and failed_indexes:
                fail_job = ("FailedIndexes", "Job has failed indexes")
            elif fail_job is None and all_done:
                target = "SuccessCriteriaMet"
        elif isinstance(completions, int):
            if _int(status.get("succeeded"), 0) >= completions:
                target = "SuccessCriteriaMet"
        elif _int(status.get("succeeded"), 0) > 0 and not running:
            target = "SuccessCriteriaMet"
        if fail_job is not None:
            target = "FailureTarget"
            status["conditions"].append(_condition("FailureTarget", *fail_job, clock))
        elif target == "SuccessCriteriaMet":
            status["conditions"].append(_condition("SuccessCriteriaMet", "CompletionsReached",
                                                   "Reached expected number of succeeded pods", clock))
    if ended or target is not None:
        out.delete = [p.name for p in running]
        if target is not None and not ended and not running and not terminating:
            final = "Complete" if target == "SuccessCriteriaMet" else "Failed"
            reason = next(c for c in status["conditions"] if c["type"] == target)
            status["conditions"].append(_condition(final, reason["reason"], reason["message"], clock))
            if final == "Complete":
                status["completionTime"] = clock.stamp
        return out

    # -- suspended?
    suspended = _has(status, "Suspended")
    if spec.get("suspend"):
        out.delete = [p.name for p in running]
        if not suspended:
            status["conditions"].append(_condition("Suspended", "JobSuspended", "Job suspended", clock))
        return out
    if suspended:
        status["conditions"] = [c for c in status["conditions"] if c.get("type") != "Suspended"]
        status["conditions"].append({**_condition("Suspended", "JobResumed", "Job resumed", clock), "status": "False"})

    # -- which pods to start
    blocking = running + terminating if only_failed else running
    waits: list[float] = []
    held: set[str] = set()
    """The last failed pod of an index (or of the Job) still waiting out its back-off keeps its finalizer: it
    carries the failure count and finish time the replacement needs (upstream's delayed deletion)."""
    if indexed:
        if not isinstance(completions, int):
            return out
        busy = {p.index for p in blocking}
        seen_dupe: set[int | None] = set()
        for p in sorted(running, key=lambda p: p.name):
            if p.index is None or p.index >= completions or p.index in completed or p.index in seen_dupe:
                out.delete.append(p.name)
            seen_dupe.add(p.index)
        room = parallelism - len(running)
        for index in range(completions):
            if room <= 0:
                break
            if index in busy or index in completed or index in failed_indexes:
                continue
            last = last_failure.get(index)
            failures = (last.index_failures + last.index_ignored + 1) if last else 0
            wait = backoff_remaining(failures, last.finished_at if last else None, now)
            if wait > 0 and last is not None:
                waits.append(wait)
                held.add(last.name)
                continue
            counted, ignored = (last.index_failures, last.index_ignored) if last else (0, 0)
            if last is not None:
                action = failure_action(policy, last) if policy is not None else Action.COUNT
                counted, ignored = (counted, ignored + 1) if action is Action.IGNORE else (counted + 1, ignored)
            out.create.append(NewPod(index, counted, ignored))
            room -= 1
    else:
        remaining = (completions - _int(status.get("succeeded"), 0)) if isinstance(completions, int) else \
            (0 if _int(status.get("succeeded"), 0) > 0 else parallelism)
        want = max(0, min(parallelism, remaining))
        have = len(blocking)
        if have > want:
            out.delete += [p.name for p in sorted(running, key=lambda p: p.name)[:have - want]]
        elif have < want:
            last = last_failure.get(None)
            wait = backoff_remaining(_int(status.get("failed"), 0), last.finished_at if last else None, now)
            if wait > 0 and last is not None:
                waits.append(wait)
                held.add(last.name)
            else:
                out.create += [NewPod(None)] * (want - have)
    out.retry_in = min(waits) if waits else None
    out.untrack = [name for name in out.untrack if name not in held]
    return out
