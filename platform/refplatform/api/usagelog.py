"""The API server's own usage accounting: every commit, observed and kept, folded into a tracker.

:class:`UsageRecorder` subscribes to the store's commits.  On the commit path
(under the store lock) it only takes the new changes and stamps them with the
injected clock; a background thread projects each change to the fields the
accounting reads (:func:`refplatform.core.usage.project`), drops projections
that did not change (a node's heartbeat, a pod's status rewrite), feeds the
rest to a :class:`~refplatform.core.usage.UsageTracker` and appends them to
``DATA_DIR/usage.sqlite3`` (one transaction per batch).  A restarted server
replays that file, then observes the store's current objects, so its history
survives restarts (a crash loses at most the batch in flight, and the replayed
state is corrected by the current objects).

A pod change that only moves its progress snapshot (the agent's annotations,
about once a second) is kept back while it merely extends the pod's last
activity sample at the same rates (steady training): the counters are
cumulative, so a replay that skips it but sees the next snapshot builds the
same history.  A held-back snapshot is written when the rates change after it,
when :data:`PROGRESS_PERSIST_SECONDS` passed since the pod's last written row,
before any Job change (an epoch change reads the ranks' snapshots) and at
close; steady training then costs a row every 30 s per pod instead of one a
second.

Readers (:meth:`report`, :meth:`pending_now`) first drain what is queued, so
an answer reflects every commit acknowledged before it.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from refplatform import jsoncodec
from refplatform.core.accounting import LeakReport, Window, account
from refplatform.core.usage import PROGRESS_ANNOTATIONS, Observation, PendingNow, Resource, UsageTracker, project
from refplatform.resources import EVENTS, NODES, PODGROUPS, PODS, VCJOBS
from refplatform.store import Change, ChangesCompacted, EventType, Store

__all__ = ["USAGE_FILE", "UsageRecorder"]

log = logging.getLogger("refplatform.api.usage")

USAGE_FILE = "usage.sqlite3"
PROGRESS_PERSIST_SECONDS = 30.0
"""A pod's progress-only changes are written to the file at most this often (the rest is kept in memory)."""
SCHEMA = """
CREATE TABLE IF NOT EXISTS observations (
    id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, resource TEXT NOT NULL,
    deleted INTEGER NOT NULL, data TEXT NOT NULL
);
"""
TYPES: dict[str, Resource] = {NODES.key: Resource.NODE, PODS.key: Resource.POD, VCJOBS.key: Resource.JOB,
                              EVENTS.key: Resource.EVENT, PODGROUPS.key: Resource.PODGROUP}


def _dumps(obj: Any) -> str:
    return jsoncodec.dumps(obj, sort_keys=True).decode()


class UsageRecorder:
    """Observes a :class:`Store` for the leak report; ``data_dir`` None keeps nothing on disk."""

    def __init__(self, store: Store, data_dir: Path | None, clock: Callable[[], float] = time.time,
                 flush_interval: float = 0.25) -> None:
        self.store = store
        self.clock = clock
        self.flush_interval = flush_interval
        self.tracker = UsageTracker()
        self._lock = threading.Lock()
        self._queue: deque[tuple[list[Change], float]] = deque()
        self._resync = False
        self._last: dict[tuple[Resource, str, str], str] = {}
        self._shape: dict[tuple[Resource, str, str], str] = {}  # a pod's last written projection, sans progress
        self._written_at: dict[tuple[Resource, str, str], float] = {}
        self._deferred: dict[tuple[Resource, str, str], tuple[float, str, int, str]] = {}
        self._rv = 0
        self._db: sqlite3.Connection | None = None
        if data_dir is not None:
            self._db = sqlite3.connect(Path(data_dir) / USAGE_FILE, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(SCHEMA)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._unsubscribe: Callable[[], None] | None = None

    # ------------------------------------------------------------------ life
    def start(self) -> UsageRecorder:
        """Replay the file, subscribe, observe the current objects, start the writer thread."""
        with self._lock:
            replayed = self._replay()
            with self.store._lock:  # noqa: SLF001 - subscribe and read the version atomically
                self._rv = self.store.resource_version
                self._unsubscribe = self.store.subscribe(self._on_commit)
            self._observe_current(self.clock())
        log.info("usage accounting: replayed %d observations", replayed)
        self._thread = threading.Thread(target=self._run, name="usage-recorder", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            self._drain()
            self._write(list(self._deferred.values()))
            self._deferred.clear()
            if self._db is not None:
                self._db.close()
                self._db = None

    # ------------------------------------------------------------ commit path
    def _on_commit(self) -> None:
        """Under the store lock: take the new changes and the instant; nothing else."""
        try:
            changes = self.store.changes_since(self._rv)
        except ChangesCompacted:
            self._resync = True
            return
        if changes:
            self._rv = changes[-1].rv
            self._queue.append((changes, self.clock()))

    # ---------------------------------------------------------------- worker
    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.flush_interval)
            try:
                with self._lock:
                    self._drain()
            except Exception:  # noqa: BLE001 - accounting must never take the API server down
                log.exception("usage accounting: a batch of observations failed")

    def _drain(self) -> None:
        rows: list[tuple[float, str, int, str]] = []
        while self._queue:
            changes, at = self._queue.popleft()
            for ch in changes:
                resource = TYPES.get(ch.type_key)
                if resource is not None:
                    self._feed(resource, ch.obj, ch.event is EventType.DELETED, at, rows)
        if self._resync:
            self._resync = False
            with self.store._lock:  # noqa: SLF001
                self._rv = self.store.resource_version
            self._observe_current(self.clock(), rows)
        self._write(rows)

    def _feed(self, resource: Resource, obj: dict[str, Any], deleted: bool, at: float,
              rows: list[tuple[float, str, int, str]] | None) -> None:
        proj = project(resource, obj)
        if proj is None:
            return
        meta = proj["metadata"]
        key = (resource, meta.get("namespace", ""), meta.get("name", ""))
        data = _dumps(proj)
        if deleted:
            if self._last.pop(key, None) is None:
                return
        elif self._last.get(key) == data:
            return
        else:
            self._last[key] = data
        merged = self.tracker.observe(Observation(resource, proj, deleted, at))
        if rows is not None:
            self._persist(key, proj, (at, resource.value, int(deleted), data), rows, merged)

    def _persist(self, key: tuple[Resource, str, str], proj: dict[str, Any], row: tuple[float, str, int, str],
                 rows: list[tuple[float, str, int, str]], merged: bool) -> None:
        resource, at, deleted = key[0], row[0], row[2]
        if resource is Resource.JOB:  # an epoch change reads the ranks' snapshots: they go first
            rows.extend(self._deferred.values())
            self._deferred.clear()
        if resource is not Resource.POD:
            rows.append(row)
            return
        anns = proj["metadata"].get("annotations") or {}
        shape = _dumps({**proj, "metadata": {**proj["metadata"], "annotations": {
            k: v for k, v in anns.items() if k not in PROGRESS_ANNOTATIONS}}})
        # A snapshot held back is superseded when this one extended its sample; otherwise it marks where the
        # rates changed (or something else did) and is written first.
        held = self._deferred.pop(key, None)
        if held is not None and not merged:
            rows.append(held)
            self._written_at[key] = held[0]
        if not deleted and self._shape.get(key) == shape and \
                at - self._written_at.get(key, float("-inf")) < PROGRESS_PERSIST_SECONDS:
            self._deferred[key] = row  # only the progress moved: held back
            return
        rows.append(row)
        if deleted:
            self._shape.pop(key, None)
            self._written_at.pop(key, None)
        else:
            self._shape[key] = shape
            self._written_at[key] = at

    def _write(self, rows: list[tuple[float, str, int, str]]) -> None:
        if not rows or self._db is None:
            return
        db = self._db
        db.execute("BEGIN")
        try:
            db.executemany("INSERT INTO observations(at, resource, deleted, data) VALUES (?,?,?,?)", rows)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _replay(self) -> int:
        if self._db is None:
            return 0
        n = 0
        for at, resource, deleted, data in self._db.execute(
                "SELECT at, resource, deleted, data FROM observations ORDER BY id"):
            self._feed(Resource(resource), json.loads(data), bool(deleted), at, None)
            n += 1
        return n

    def _observe_current(self, at: float, rows: list[tuple[float, str, int, str]] | None = None) -> None:
        """Bring the tracker to the store's current state: objects that changed or appeared while nobody was
        looking are observed now, and those that vanished are observed deleted now."""
        own = rows if rows is not None else []
        present: set[tuple[Resource, str, str]] = set()
        for type_key, resource in TYPES.items():
            items, _ = self.store.list(type_key)
            for obj in items:
                meta = obj.get("metadata") or {}
                present.add((resource, meta.get("namespace") or "", meta.get("name") or ""))
                self._feed(resource, obj, False, at, own)
        for key in [k for k in self._last if k not in present]:
            resource, namespace, name = key
            gone = json.loads(self._last[key])
            self._feed(resource, gone, True, at, own)
        if rows is None:
            self._write(own)

    # ----------------------------------------------------------------- reads
    def now(self) -> float:
        return self.clock()

    def report(self, window: Window) -> LeakReport:
        """The leak report over ``window`` (which should not end after :meth:`now`)."""
        with self._lock:
            self._drain()
            history = self.tracker.history(self.clock(), window)
        return account(window, history)

    def pending_now(self) -> list[PendingNow]:
        with self._lock:
            self._drain()
            return self.tracker.pending_now()

    def gpus_now(self) -> tuple[int, int]:
        with self._lock:
            self._drain()
            return self.tracker.gpus_now()
