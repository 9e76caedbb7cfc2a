"""``firedrill recover``: undo what dead runs left on a cluster, from their fault journals.

A run that died (SIGKILL, OOM, a lost CI runner) left intents without closures in its journal
(:mod:`drills.target.journal`).  Recovery reads each of them, newest first, and runs its undo steps: the rendered
restore command, the deletion of what the run created, the re-creation of a Node it deleted.  Every step is
idempotent (an object already gone, a Node already back), so recovering twice, or after the fault expired on its
own, is fine.  A step no command can take (a kubelet to restart by hand when the profile has no restore template)
counts as done only when the node it concerns is Ready and schedulable again; until then it is reported with what a
person must do, and the journal keeps it open.

The same reading tells a new run whether it may start (:func:`leftovers`): a verdict judged on a cluster a dead
run left broken is worse than none.  What a run leaves on the cluster itself (:mod:`drills.target.marks`: a journal
lost with its CI runner cannot name it) is removed by :func:`sweep`.
"""

from __future__ import annotations

import os
import shlex
import signal
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import Any

from drills.kube.driver import NODE, RESOURCES, KubeError
from drills.target.faults import FaultError, run_command
from drills.target.journal import (Action, JournalState, Undo, UndoKind, close_in, journals_for, process_alive,
                                   read_journal)
from drills.target.marks import Mark
from drills.target.safety import is_ready

__all__ = ["Leftover", "Outcome", "Recovered", "Swept", "left_broken", "leftovers", "recover", "sweep"]

RECOVERED_BY = "recovered by firedrill recover"


class Outcome(str, Enum):
    UNDONE = "undone"
    """Every undo step ran (or found its work already done)."""
    NEEDS_PERSON = "needs a person"
    """A step no command can take, and the node is not back yet; the journal keeps it open."""
    FAILED = "failed"
    """A step failed (a restore command's exit code, an API error); the journal keeps it open."""
    WOULD_UNDO = "would undo"
    """``--dry-run``: what would be done."""


@dataclass(frozen=True)
class Recovered:
    """What recovery did (or would do) about one intent."""

    run: str
    action: Action
    outcome: Outcome
    detail: str

    def line(self) -> str:
        return f"{self.outcome.value}: {self.action.what} (run {self.run}, {self.action.at:%Y-%m-%d %H:%M:%S} UTC): " \
               f"{self.detail}"


@dataclass(frozen=True)
class Leftover:
    """A journal of a run against this cluster with faults it never undid."""

    state: JournalState

    @property
    def running(self) -> bool:
        return self.state.running

    def lines(self) -> list[str]:
        who = (f"run {self.state.run} (still running, pid {self.state.pid})" if self.running else
               f"run {self.state.run} (its process is gone)")
        out = [f"{who}, journal {self.state.path}:"]
        for action in self.state.unfinished:
            steps = "; ".join(u.describe() for u in action.undo) or "nothing to run"
            expiry = (f"; it undoes itself by {action.undo_by:%Y-%m-%d %H:%M:%S} UTC"
                      if action.expires_by_itself and action.undo_by is not None else "")
            out.append(f"  - {action.what} at {action.at:%Y-%m-%d %H:%M:%S} UTC; undo: {steps}{expiry}")
        return out


def leftovers(server: str, driver: Any = None, root: Path | None = None,
              now: datetime | None = None, serving: Callable[[str], bool] | None = None) -> list[Leftover]:
    """The journals against the cluster at ``server`` that still hold faults nobody undid.  With ``driver`` (the
    cluster's, connected) or ``serving`` (whether a node serves: a Slurm cluster's), a dead run's fault whose node
    serves again is closed when only a person could undo it (someone, or the platform, brought it back) or when it
    was to undo itself and its instant has passed (``now``: the clock that instant is judged against)."""
    found = []
    moment = now or datetime.now(timezone.utc)
    if serving is None and driver is not None:
        serving = lambda name: _node_serving(driver, name)  # noqa: E731 - the Kubernetes rule, read through driver
    for state in journals_for(server, root):
        if serving is not None and not state.running:
            for action in state.unfinished:
                by_hand = bool(action.undo) and all(u.kind is UndoKind.BY_HAND for u in action.undo)
                expired = action.expires_by_itself and action.undo_by is not None and action.undo_by <= moment
                if (by_hand or expired) and action.subject and serving(action.subject):
                    close_in(state.path, action.id, f"node {action.subject} was Ready and schedulable again when "
                                                    "the next run checked" + (
                                                        f", after the fault's own expiry ({action.undo_by:%H:%M:%S} "
                                                        "UTC)" if expired else ""))
            state = read_journal(state.path)
        if state.unfinished:
            found.append(Leftover(state))
    return found


def left_broken(found: list[Leftover], recover_command: str, marks: Iterable[Mark] = ()) -> str:
    """Why a run does not start on this cluster, what was left (by the journals, and on the cluster itself), and
    the command that undoes it."""
    marks = list(marks)
    lines = ["this cluster may still carry faults that an earlier run injected and never undid; a verdict judged "
             "on it would judge that run's damage, so nothing was started:"]
    for leftover in found:
        lines += ["  " + line for line in leftover.lines()]
    if marks:
        lines.append("  on the cluster itself, what only a Firedrill run leaves (no run against it is going on here):")
        lines += [f"  - {m.what}; undo: {m.undo.describe()}" for m in marks]
    if marks or any(not f.running for f in found):
        lines.append(f"undo them with: {recover_command}   (add --dry-run to see the steps first; docs/SAFETY.md)")
    if any(f.running for f in found):
        lines.append("a run that is still going undoes its own faults when it ends; wait for it")
    return "\n".join(lines)


def recover(driver: Any, states: Iterable[JournalState], *, dry_run: bool = False,
            timeout: float = 120.0, serving: Callable[[str], bool] | None = None) -> list[Recovered]:
    """Undo every unfinished intent of ``states`` (journals of runs that are not running), newest journal and
    newest intent first, writing a closure for each one undone.  ``driver``: the cluster's
    :class:`~drills.kube.driver.KubeDriver` (None on a Slurm cluster, whose faults are undone by command);
    ``timeout``: seconds a restore command may take; ``serving``: whether a node serves again (default: the
    Node is Ready and schedulable), which closes a step only a person could take."""
    serving = serving or (lambda name: _node_serving(driver, name))
    done: list[Recovered] = []
    for state in sorted(states, key=lambda s: s.path.stat().st_mtime, reverse=True):
        if state.running:
            continue
        for action in state.unfinished:
            if dry_run:
                done.append(Recovered(state.run, action, Outcome.WOULD_UNDO,
                                      "; ".join(u.describe() for u in action.undo) or "close it (nothing to run)"))
                continue
            outcome, detail = _undo(driver, action, timeout, serving)
            if outcome is Outcome.UNDONE:
                close_in(state.path, action.id, f"{RECOVERED_BY}: {detail}")
            done.append(Recovered(state.run, action, outcome, detail))
    return done


@dataclass(frozen=True)
class Swept:
    """What recovery did (or would do) about one mark a run left on the cluster (:mod:`drills.target.marks`)."""

    mark: Mark
    outcome: Outcome
    detail: str

    def line(self) -> str:
        return f"{self.outcome.value}: {self.mark.what} (found on the cluster): {self.detail}"


def sweep(driver: Any, marks: Iterable[Mark], *, dry_run: bool = False, timeout: float = 30.0) -> list[Swept]:
    """Remove each mark a dead run left on the cluster: delete its objects, take back its annotations and
    taints.  Idempotent (an object gone meanwhile is fine)."""
    done = []
    for mark in marks:
        if dry_run:
            done.append(Swept(mark, Outcome.WOULD_UNDO, mark.undo.describe()))
            continue
        try:
            outcome, detail = _step(driver, "", mark.undo, timeout)
        except KubeError as exc:
            outcome, detail = Outcome.FAILED, f"{mark.undo.describe()}: the API server answered {exc}"
        done.append(Swept(mark, outcome, detail))
    return done


def _undo(driver: Any, action: Action, timeout: float, serving: Callable[[str], bool]) -> tuple[Outcome, str]:
    said: list[str] = []
    for step in action.undo:
        try:
            outcome, detail = _step(driver, action.subject, step, timeout, serving)
        except KubeError as exc:
            return Outcome.FAILED, f"{step.describe()}: the API server answered {exc}"
        said.append(detail)
        if outcome is not Outcome.UNDONE:
            return outcome, "; ".join(said)
    return Outcome.UNDONE, "; ".join(said) or "nothing to run"


def _step(driver: Any, subject: str, step: Undo, timeout: float,
          serving: Callable[[str], bool] | None = None) -> tuple[Outcome, str]:
    if step.kind is UndoKind.COMMAND:
        try:
            ran = run_command(shlex.join(step.argv), subject, timeout)
        except FaultError as exc:
            return Outcome.FAILED, str(exc)
        if not ran.confirmed:
            return Outcome.FAILED, f"'{step.describe()}' failed: {ran.detail}"
        return Outcome.UNDONE, f"ran '{step.describe()}'"
    if step.kind is UndoKind.DELETE:
        res = RESOURCES.get((step.api_version, step.object_kind))
        if res is None:
            return Outcome.FAILED, f"cannot delete a {step.object_kind} of {step.api_version}: unknown kind"
        gone = driver.delete(res, step.name, step.namespace, grace_seconds=0) is None
        return Outcome.UNDONE, (f"{step.object_kind} {step.name} was already gone" if gone else
                                f"deleted {step.object_kind} {step.name}")
    if step.kind is UndoKind.PATCH:
        res = RESOURCES.get((step.api_version, step.object_kind))
        if res is None:
            return Outcome.FAILED, f"cannot patch a {step.object_kind} of {step.api_version}: unknown kind"
        if driver.find(res, step.name, step.namespace) is None:
            return Outcome.UNDONE, f"{step.object_kind} {step.name} is gone"
        driver.patch(res, step.name, dict(step.manifest or {}), step.namespace)
        return Outcome.UNDONE, f"patched {step.object_kind} {step.name}"
    if step.kind is UndoKind.RECREATE:
        if step.manifest is None:
            return Outcome.FAILED, f"the journal holds no manifest to recreate {step.object_kind} {step.name}"
        res = RESOURCES.get((str(step.manifest.get("apiVersion")), str(step.manifest.get("kind"))))
        if res is not None and driver.find(res, step.name) is not None:
            return Outcome.UNDONE, f"{step.object_kind} {step.name} exists again"
        driver.create(dict(step.manifest))
        return Outcome.UNDONE, f"recreated {step.object_kind} {step.name}"
    if step.kind is UndoKind.SIGNAL:
        sent = []
        for pid, start in step.pids:
            if process_alive(pid, start):  # the very process the run signalled, not a recycled pid
                try:
                    os.killpg(pid, step.signal)
                except ProcessLookupError:
                    continue
                sent.append(str(pid))
        name = signal.Signals(step.signal).name
        return Outcome.UNDONE, (f"sent {name} to {', '.join(sent)}" if sent else
                                "the processes it stopped are gone (they ended with their run)")
    # BY_HAND: done once the node it concerns serves again
    if subject and (serving or (lambda name: _node_serving(driver, name)))(subject):
        return Outcome.UNDONE, f"node {subject} serves again"
    return Outcome.NEEDS_PERSON, step.note


def _node_serving(driver: Any, name: str) -> bool:
    node = driver.find(NODE, name)
    if node is None:
        return False
    return is_ready(node) and not (node.get("spec") or {}).get("unschedulable")


def settle(states: Iterable[JournalState]) -> list[Path]:
    """Move every journal whose intents are all closed into ``done/`` beside it (kept as a record, no longer
    looked at by :func:`leftovers`); the paths moved."""
    moved = []
    for state in states:
        fresh = read_journal(state.path)
        if fresh.unfinished or fresh.running:
            continue
        target = state.path.parent / "done" / state.path.name
        target.parent.mkdir(exist_ok=True)
        os.replace(state.path, target)
        moved.append(target)
    return moved
