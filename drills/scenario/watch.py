"""The invariants, watched live through one scenario (:mod:`drills.scenario.invariants` is the pure part).

The harness watches the scenario's pods (the namespace of the target profile, labelled with the scenario's
run id), reads what each running GPU pod's workload says it was given from the first lines of its log
(``pods/log``, as any reader of a pod's log would), and asks the node once whether its partitioning promises
sharing. A breach FAILs the scenario at once with its evidence and halts it
(:meth:`~drills.records.verdict.DrillResult.halt`): the step that waits ends, no later step runs, and the
rollback runs as usual.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from drills.kube.driver import NODE, POD, KubeError
from drills.kube.flavors import run_selector
from drills.kube.logs import read_log_head
from drills.records.verdict import DrillResult
from drills.scenario.invariants import Breach, Identity, InvariantBook, identity_from_lines, node_shares_gpus, pod_view
from drills.target.connect import Target

__all__ = ["InvariantWatch", "report_breaches"]

log = logging.getLogger(__name__)
Obj = dict[str, Any]
POLL_SECONDS = 0.25
"""How often the reader looks for the identities of running GPU pods it does not know yet."""
IDENTITY_WAIT_SECONDS = 20.0
"""How long a running GPU pod's workload may take to say what it was given before it is counted silent."""
HEAD_BYTES = 16384
"""How much of a log's beginning is read for the identity line (the workloads write it first)."""
SETTLE_SECONDS = 3.0
"""At the verdict, how long a GPU pod that started running only just now is still given to say what it was
given: a scenario that ends the moment its pods run (a gang placed whole) is judged on their identities too."""


def report_breaches(found: list[Breach], breaches: list[Breach], result: DrillResult, timeline: Any) -> None:
    """New breaches of a scenario's invariants (``breaches``: those so far, which these join): each goes into the
    timeline, and the first of each invariant FAILs the scenario and halts it."""
    for breach in found:
        named = {b.invariant for b in breaches}
        breaches.append(breach)
        timeline.action("invariant broken", target=breach.invariant.value, detail=breach.message)
        if breach.invariant not in named:
            result.halt(f"{breach.invariant.value} broken: {breach.message}")


@dataclass
class InvariantWatch:
    """Watches one scenario's invariants from :meth:`start` to :meth:`stop`."""

    target: Target
    result: DrillResult
    run_id: str
    book: InvariantBook = field(default_factory=InvariantBook)
    breaches: list[Breach] = field(default_factory=list)
    silent: dict[str, str] = field(default_factory=dict)
    """Pods whose workload never said which GPUs it was given (by name): not checked, shown in the evidence."""
    _running_since: dict[str, float] = field(default_factory=dict)
    _names: dict[str, str] = field(default_factory=dict)
    _asking: set[str] = field(default_factory=set)
    """Nodes seen but not yet asked whether they promise sharing."""
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> InvariantWatch:
        namespace = self.target.profile.namespace
        self.target.driver.watch(POD, namespace, label_selector=run_selector(self.run_id), on_event=self._on_pod,
                                 record=False)
        self._thread = threading.Thread(target=self._read_identities, name=f"invariants-{self.run_id}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching (before the rollback, whose deletions prove nothing) and record what was watched.
        Unless the scenario already FAILed, pods that started running less than :data:`SETTLE_SECONDS` ago and
        have not yet said which GPUs they were given are waited for up to then, so a promise broken in the
        scenario's last second is still judged."""
        if self._stop.is_set():
            return
        self._settle()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            self.result.details["invariants"] = {
                "pods_watched": len(self._names),
                "identities": {self._names.get(uid, uid): list(i.gpus or ())
                               for uid, i in sorted(self.book.identities.items()) if i.gpus},
                "silent": dict(sorted(self.silent.items())),
                "breaches": [b.to_json() for b in self.breaches],
            }

    def _settle(self) -> None:
        clock = self.target.timeline.clock
        while self._thread is not None and self._thread.is_alive() and not self.result.halted:
            now = clock.mono()
            with self._lock:
                young = [self._running_since.get(p.uid, now) + SETTLE_SECONDS - now
                         for p in self.book.needs_identity()]
            wait = max((y for y in young if y > 0), default=0.0)
            if wait <= 0:
                return
            self._stop.wait(min(wait, POLL_SECONDS))

    # ------------------------------------------------------------------ the watch
    def _on_pod(self, event: str, pod: Obj) -> None:
        if self._stop.is_set():
            return
        view = pod_view(pod)
        if not view.uid:
            return
        with self._lock:
            self._names[view.uid] = view.name
            if event == "DELETED":
                self._report(self.book.gone(view.uid))
                return
            if view.running:
                self._running_since.setdefault(view.uid, self.target.timeline.clock.mono())
            if view.node and view.node not in self.book.sharing:
                self._asking.add(view.node)
            self._report(self.book.pod(view))

    # ------------------------------------------------------------------ the reader
    def _read_identities(self) -> None:
        namespace = self.target.profile.namespace
        while not self._stop.wait(POLL_SECONDS):
            with self._lock:
                nodes = sorted(self._asking - set(self.book.sharing))
                self._asking.clear()
                pending = self.book.needs_identity()
            for name in nodes:
                self._ask_node(name)
            for pod in pending:
                if self._stop.is_set():
                    return
                try:
                    head = read_log_head(self.target.driver, namespace, pod.name, HEAD_BYTES)
                except KubeError as exc:
                    log.debug("invariants: log of %s: %s", pod.name, exc)
                    head = ""
                found = identity_from_lines(head.splitlines())
                with self._lock:
                    if found is not None:
                        self._report(self.book.identity(pod.uid, found))
                    elif self.target.timeline.clock.mono() - self._running_since.get(pod.uid, 0.0) > \
                            IDENTITY_WAIT_SECONDS:
                        self.silent[pod.name] = (f"no identity line in the first {HEAD_BYTES} bytes of its log "
                                                 f"(or no log to read) within {IDENTITY_WAIT_SECONDS:g} s of running")
                        # a job's ranks are judged once all have spoken: this may be what they waited for
                        self._report(self.book.identity(pod.uid, Identity(None)))

    def _ask_node(self, name: str) -> None:
        try:
            node = self.target.driver.find(NODE, name)
        except KubeError as exc:
            log.debug("invariants: node %s: %s", name, exc)
            with self._lock:
                self._asking.add(name)  # ask again on the next round
            return
        if node is not None:
            with self._lock:
                self._report(self.book.node(name, node_shares_gpus(node)))

    def _report(self, found: list[Breach]) -> None:
        """Under the lock: the first breach FAILs the scenario and halts it; every breach goes into the evidence
        (``details.invariants``) and the timeline, and one of another invariant is a finding of its own too."""
        report_breaches(found, self.breaches, self.result, self.target.timeline)
