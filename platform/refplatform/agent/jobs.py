"""Ranks of a job on this node: one shared poll per job, checkpoint records, fencing.

The :class:`JobCoordinator` is the I/O side of the training workload's
:class:`~refplatform.agent.workload.Gang` and
:class:`~refplatform.agent.workload.CheckpointLink`.  One thread, for every job
that has a rank on this node, every ``poll_interval`` seconds:

- lists the job's pods (``labelSelector=volcano.sh/job-name=<job>`` in the
  pod's namespace) and reads the Job: one poll per job per agent, however many
  of its ranks run here;
- writes rank 0's checkpoint record with the fenced JSON patch
  (:func:`~refplatform.agent.gang.checkpoint_patch`), retrying it while the API
  is unreachable.  A distributed checkpoint is complete only once every rank
  has saved its shard, so the record written is the newest checkpoint rank 0
  took that every other rank of its epoch has also published as its
  ``firedrill.dev/checkpoint-step`` (:func:`~refplatform.agent.gang.saved_by_all`):
  the record never claims steps a cut-off rank did not do.

Each rank gets a :class:`RankLink`.  Its gang is complete while every rank of
its epoch is Running and not terminating; a view older than ``stale_after``
(the poll failed: API unreachable, partition, or this process was frozen) is no
view at all, so the rank stalls.  It resumes from the Job's
``firedrill.dev/checkpoint-step`` read *after* it attached (never from a read
made before the rank existed).  It is fenced, for good, when the Job's epoch
(or any of the job's pods' epoch) is newer than its own, or when its checkpoint
write is refused with 422 and the Job, read again, shows a newer epoch.

Times are the injected clock's; an observation is stamped with the instant its
request was *sent* (the data is at least that fresh).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from refplatform.agent.clock import Clock
from refplatform.agent.gang import (
    RankSpec,
    checkpoint_patch,
    count_gang,
    job_checkpoint_step,
    job_epoch,
    saved_by_all,
    unfenced_checkpoint_patch,
)
from refplatform.agent.workload import Fence, GangStatus, RecordOutcome, StallKind
from refplatform.client import JSON_PATCH, ApiStatusError, ApiUnreachable, resource_path

__all__ = ["JobCoordinator", "RankLink"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]
DEFAULT_POLL = 0.5
STALE_POLLS = 3.0
"""The staleness bound, in poll intervals."""
KEEP_TAKEN = 256
"""Checkpoints rank 0 remembers while they wait to be recorded."""


class RankLink:
    """One rank's gang view and checkpoint link (implements both workload interfaces).  Thread-safe."""

    def __init__(self, coordinator: JobCoordinator, uid: str, spec: RankSpec, attach_seq: int) -> None:
        self.coordinator = coordinator
        self.uid = uid
        self.spec = spec
        self.attach_seq = attach_seq
        # Written by the coordinator's thread under its lock.
        self._resume: int | None = None
        self._fence: Fence | None = None
        self._taken: dict[int, datetime] = {}  # rank 0's checkpoints not yet recorded
        self._failed: set[int] = set()  # steps whose failed write was reported
        self._outcomes: list[RecordOutcome] = []
        self._since: datetime | None = None  # first observation of the current complete run
        self._last_complete: datetime | None = None
        self._broken_at: datetime | None = None  # first incomplete observation after it
        self._last_seen: datetime | None = None  # last successful observation at all
        self._last_count: str = ""

    # -- Gang --------------------------------------------------------------

    def status(self, now: datetime) -> GangStatus:
        c = self.coordinator
        with c._lock:
            since, last, broken, seen, count = (
                self._since, self._last_complete, self._broken_at, self._last_seen, self._last_count
            )
        window = None
        if since is not None and last is not None:
            until = last + c.stale_delta
            if broken is not None and broken < until:
                until = broken
            window = (since, until)
        if seen is None:
            return GangStatus(window, StallKind.STALE, "waiting for the first view of the gang")
        age = (now - seen).total_seconds()
        if age > c.stale_after:
            return GangStatus(window, StallKind.STALE, f"peer view stale (last poll {age:.1f}s ago)")
        return GangStatus(window, StallKind.PEERS, f"waiting for peers ({count})")

    # -- CheckpointLink ----------------------------------------------------

    def resume_step(self) -> int | None:
        with self.coordinator._lock:
            return self._resume

    def fence(self) -> Fence | None:
        with self.coordinator._lock:
            return self._fence

    def record(self, step: int, at: datetime) -> None:
        if self.spec.rank != 0:
            return
        with self.coordinator._lock:
            if self._fence is None:
                self._taken[step] = at
                for old in sorted(self._taken)[:-KEEP_TAKEN]:
                    del self._taken[old]
        self.coordinator.wake()

    def outcomes(self) -> list[RecordOutcome]:
        with self.coordinator._lock:
            out, self._outcomes = self._outcomes, []
        return out

    @property
    def pending(self) -> int | None:
        """The newest checkpoint waiting to be recorded, if any."""
        with self.coordinator._lock:
            return max(self._taken, default=None)


@dataclass
class _JobState:
    spec: RankSpec  # any rank's spec: namespace, job, paths
    links: dict[str, RankLink] = field(default_factory=dict)
    next_poll: float = 0.0
    polls_started: int = 0
    job: Obj | None = None
    """The Job as last read (``None``: not read yet, or it does not exist)."""
    pods: list[Obj] = field(default_factory=list)
    forbidden: bool = False
    """The API refused this node the job's pods (said once in the log)."""


class JobCoordinator:
    """Polls the jobs of this node's ranks and writes their checkpoint records.  ``start()``, then ``stop()``."""

    def __init__(
        self,
        client: Any,
        clock: Clock,
        *,
        poll_interval: float = DEFAULT_POLL,
        stale_after: float | None = None,
    ) -> None:
        """``client``: a RestClient (gated by the partition); ``stale_after``: the staleness bound (default 3 polls)."""
        self.client = client
        self.clock = clock
        self.poll_interval = poll_interval
        self.stale_after = STALE_POLLS * poll_interval if stale_after is None else stale_after
        self.stale_delta = timedelta(seconds=self.stale_after)
        self._lock = threading.Lock()
        self._jobs: dict[tuple[str, str], _JobState] = {}
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.polls = 0
        """Successful polls, all jobs together."""

    # -- ranks -------------------------------------------------------------

    def attach(self, uid: str, spec: RankSpec) -> RankLink:
        """A rank starts on this node: poll its job (now, then every interval) until it detaches."""
        with self._lock:
            state = self._jobs.get(spec.key)
            if state is None:
                state = self._jobs[spec.key] = _JobState(spec)
            link = RankLink(self, uid, spec, state.polls_started)
            state.links[uid] = link
            state.next_poll = 0.0  # its resume point needs a fresh read
        self.wake()
        return link

    def detach(self, uid: str) -> None:
        with self._lock:
            for key, state in list(self._jobs.items()):
                if state.links.pop(uid, None) is not None and not state.links:
                    del self._jobs[key]

    def jobs(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self._jobs)

    # -- thread ------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="job-poll", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def wake(self) -> None:
        """Poll due jobs and write pending records now (a new rank, a record, a healed partition)."""
        self._wake.set()

    def poll_now(self) -> None:
        """Make every job due at once (e.g. after a partition heals)."""
        with self._lock:
            for state in self._jobs.values():
                state.next_poll = 0.0
        self.wake()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                delay = self.run_once()
            except Exception:  # the loop must survive anything; a bug shows in the log
                log.exception("job poll pass failed")
                delay = self.poll_interval
            self._wake.wait(delay)
            self._wake.clear()

    def run_once(self) -> float:
        """Poll the jobs that are due, then write the records their views allow; returns seconds until the next poll."""
        with self._lock:
            states = list(self._jobs.values())
        mono = time.monotonic()
        for state in states:
            if mono >= state.next_poll:
                state.next_poll = mono + self.poll_interval
                self._poll(state)
        for state in states:
            self._write_records(state)
        with self._lock:
            due = [s.next_poll for s in self._jobs.values()]
            retry = any(link._taken for s in self._jobs.values() for link in s.links.values())
        wait = min(due, default=mono + self.poll_interval) - time.monotonic()
        if retry:
            wait = min(wait, self.poll_interval)
        return max(0.0, wait)

    # -- polls -------------------------------------------------------------

    def _poll(self, state: _JobState) -> None:
        spec = state.spec
        with self._lock:
            state.polls_started += 1
            ticket = state.polls_started
        observed = self.clock.now()
        job: Obj | None = None
        try:
            listed = self.client.list(resource_path("", "v1", "pods", spec.namespace), {"labelSelector": spec.selector})
            try:
                job = self.client.get(spec.job_path)
            except ApiStatusError as err:
                if not err.not_found:
                    raise
        except (ApiStatusError, ApiUnreachable) as err:
            if isinstance(err, ApiStatusError) and err.code == 403 and not state.forbidden:
                # A real kube-apiserver lets a node list only its own pods (Node authorizer): a simulated rank
                # cannot see its gang there and stalls.  Real clusters run the canary (processes) instead.
                state.forbidden = True
                log.warning("job %s/%s: this node may not list the job's pods (%s); its simulated training ranks "
                            "stall (run the training canary as processes instead)", spec.namespace, spec.job,
                            err.message or err.reason)
            log.debug("poll of job %s/%s failed: %s", spec.namespace, spec.job, err)
            return
        pods = [p for p in listed.get("items") or [] if isinstance(p, dict)]
        self.polls += 1
        with self._lock:
            state.job, state.pods = job, pods
            epoch_now = job_epoch(job) if job is not None else None
            for link in state.links.values():
                self._observe(link, state, ticket, epoch_now, observed)

    def _observe(self, link: RankLink, state: _JobState, ticket: int, epoch_now: int | None, observed: datetime) -> None:
        """Fold one observation into a rank's view (under the lock)."""
        spec = link.spec
        count = count_gang(state.pods, spec.epoch, spec.world_size)
        link._last_seen = observed
        link._last_count = count.describe()
        if count.complete:
            gap = link._last_complete is not None and observed - link._last_complete > self.stale_delta
            if link._since is None or link._broken_at is not None or gap:
                link._since = observed  # a new run of complete views: nothing vouches for the time before it
            link._last_complete = observed
            link._broken_at = None
        elif link._since is not None and link._broken_at is None:
            link._broken_at = observed
        newer = max(e for e in (epoch_now, count.newest_epoch, spec.epoch) if e is not None)
        if newer > spec.epoch and link._fence is None:
            how = "the Job's epoch is newer" if epoch_now == newer else "pods of a newer epoch exist"
            self._fence(link, newer, how)
        if link._resume is None and ticket > link.attach_seq:  # a read sent after the rank attached
            link._resume = job_checkpoint_step(state.job) if state.job is not None else 0

    def _fence(self, link: RankLink, epoch: int, how: str) -> None:
        link._fence = Fence(epoch, how)
        link._taken.clear()
        log.warning(
            "job %s/%s: rank %d of epoch %d fenced (job at epoch %d: %s)",
            link.spec.namespace, link.spec.job, link.spec.rank, link.spec.epoch, epoch, how,
        )

    # -- checkpoint records --------------------------------------------------

    def _write_records(self, state: _JobState) -> None:
        todo: list[tuple[RankLink, int, datetime]] = []
        with self._lock:
            for link in state.links.values():
                if not link._taken or link._fence is not None:
                    continue
                spec = link.spec
                barrier = saved_by_all(state.pods, spec.epoch, spec.world_size, spec.rank)
                ready = [s for s in link._taken if barrier is not None and s <= barrier]
                if ready:
                    step = max(ready)
                    todo.append((link, step, link._taken[step]))
        for link, step, at in todo:
            error = self._write(link, step, at)
            with self._lock:
                if link._fence is not None:
                    continue
                if error is None or error == _DROPPED:
                    for old in [s for s in link._taken if s <= step]:
                        del link._taken[old]
                if error is None:
                    link._outcomes.append(RecordOutcome(step, self.clock.now()))
                elif step not in link._failed:
                    link._failed.add(step)
                    link._outcomes.append(RecordOutcome(step, self.clock.now(), error))

    def _write(self, link: RankLink, step: int, at: datetime) -> str | None:
        """One attempt; ``None`` when written, else why not (the checkpoint stays pending unless fenced or dropped)."""
        spec = link.spec
        try:
            self.client.patch(spec.job_path, checkpoint_patch(spec.epoch, step, at), JSON_PATCH)
            log.info("job %s/%s: checkpoint record step=%d written (epoch %d)", spec.namespace, spec.job, step, spec.epoch)
            return None
        except ApiUnreachable as err:
            return f"API unreachable ({err.cause})"
        except ApiStatusError as err:
            if err.not_found:
                return _DROPPED
            if err.code != 422:
                return f"{err.code} {err.reason}"
        # 422: the epoch test failed.  Read the Job to learn why.
        try:
            job = self.client.get(spec.job_path)
        except (ApiStatusError, ApiUnreachable) as err:
            return f"fence test failed and the Job could not be read: {err}"
        epoch = job_epoch(job)
        if epoch is not None and epoch > spec.epoch:
            with self._lock:
                self._fence(link, epoch, "checkpoint record refused (422)")
            return "fenced"
        if epoch is None and spec.epoch == 0:
            # A Job without an epoch annotation: epoch 0 implied.  Fence on its resourceVersion instead.
            try:
                self.client.patch(spec.job_path, unfenced_checkpoint_patch(job, step, at), JSON_PATCH)
                return None
            except (ApiStatusError, ApiUnreachable) as err:
                return f"write to a Job without an epoch failed: {err}"
        return f"the Job's epoch is {epoch}, not this rank's {spec.epoch}"


_DROPPED = "the Job does not exist"
