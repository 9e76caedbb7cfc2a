"""Durable object store: SQLite in WAL mode, one global resourceVersion, a bounded change log.

Every write is one SQLite transaction that updates the object row, appends the
change to the ``changes`` table and bumps the global resourceVersion; the call
returns only after the transaction commits, so an acknowledged write survives
``kill -9`` of the server (WAL with ``synchronous=NORMAL`` is durable across a
process crash; ``Durability.FULL`` also fsyncs each commit, for power loss).

Reads are served from an in-memory copy of every object, loaded at start-up
and kept in step with each commit (the same role as the upstream apiserver's
watch cache).  Stored objects are never mutated in place: callers get shared
dicts and must copy before changing them.

Checkpoints (copying the WAL's pages into the database file, with an fsync of each) run on a
background thread with its own connection, every ``checkpoint_interval`` seconds, instead of inside
every ~1,000th commit: a commit is then only an append to the WAL, and the write path (the API
server's event loop) never waits for a checkpoint.  Durability is the WAL's, unchanged: a committed
transaction is in the WAL whether or not it has been checkpointed, and opening the store replays it.

The change log keeps the newest ``changelog_limit`` changes, on disk and in
memory, so a watch can resume from any resourceVersion still in it, across
server restarts too.  Older versions raise :class:`ChangesCompacted` (HTTP 410).
"""

from __future__ import annotations

import bisect
import json
import sqlite3
import threading
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from refplatform import jsoncodec
from refplatform.errors import RefPlatformError

Obj = dict[str, Any]
ObjKey = tuple[str, str]  # (namespace, name); namespace is "" for cluster-scoped objects

SCHEMA = """
CREATE TABLE IF NOT EXISTS objects (
    type TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
    rv INTEGER NOT NULL, data TEXT NOT NULL,
    PRIMARY KEY (type, namespace, name)
);
CREATE TABLE IF NOT EXISTS changes (
    rv INTEGER PRIMARY KEY, type TEXT NOT NULL, event TEXT NOT NULL,
    data TEXT NOT NULL, prev TEXT
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


class StoreError(RefPlatformError):
    """Root of the store's errors; the API server maps each to a Status."""


class ObjectNotFound(StoreError):
    """The object does not exist (HTTP 404 NotFound)."""


class ObjectExists(StoreError):
    """An object with that name already exists (HTTP 409 AlreadyExists)."""


class VersionConflict(StoreError):
    """The caller's resourceVersion or uid precondition is stale (HTTP 409 Conflict)."""


class ChangesCompacted(StoreError):
    """The requested resourceVersion has left the change log (HTTP 410 Gone)."""


class Durability(Enum):
    """How hard each commit is pushed to disk."""

    NORMAL = "normal"
    """WAL, ``synchronous=NORMAL``: survives a killed server process, may lose the last commits on power loss."""
    FULL = "full"
    """WAL, ``synchronous=FULL``: each commit is fsynced; survives power loss."""


class EventType(Enum):
    """Kinds of change, named as in a Kubernetes watch event."""

    ADDED = "ADDED"
    """The object was created."""
    MODIFIED = "MODIFIED"
    """The object was replaced by a newer version."""
    DELETED = "DELETED"
    """The object was removed; the change carries its last state."""


@dataclass(frozen=True)
class Change:
    """One committed change, as the watch machinery sees it."""

    rv: int
    type_key: str
    event: EventType
    obj: Obj
    prev: Obj | None



def _checkpoint_loop(path: Path, interval: float, stop: threading.Event, owner: Callable[[], Store | None]) -> None:
    """Every ``interval`` seconds, a PASSIVE checkpoint on a connection of its own: it copies what no reader
    still needs and never blocks the writer (SQLite runs it without holding the GIL).  Ends when the store is
    closed or gone."""
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    try:
        while not stop.wait(interval):
            if owner() is None:
                return
            try:
                db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            except sqlite3.Error:  # busy or closing: the next round checkpoints what this one did not
                continue
            store = owner()
            if store is not None:
                store.checkpoints += 1
            del store
        db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
    except sqlite3.Error:
        pass
    finally:
        db.close()


def _key(obj: Obj) -> ObjKey:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta["name"])


def _dumps(obj: Obj) -> str:
    return jsoncodec.dumps(obj, sort_keys=True).decode()


class Store:
    """The platform's single source of truth.  Thread-safe; every method is short."""

    def __init__(self, data_dir: Path, *, changelog_limit: int = 10_000,
                 durability: Durability = Durability.NORMAL, checkpoint_interval: float = 0.5) -> None:
        self.path = Path(data_dir) / "store.sqlite3"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.changelog_limit = changelog_limit
        self._lock = threading.RLock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={durability.value.upper()}")
        self._db.execute("PRAGMA wal_autocheckpoint=0")  # checkpoints run on the checkpointer thread
        self._db.executescript(SCHEMA)
        self._objects: dict[str, dict[ObjKey, Obj]] = {}
        self._log: list[Change] = []
        self._listeners: list[Callable[[], None]] = []
        self._load()
        self.checkpoints = 0
        """Checkpoints the background thread has run (each copies what the WAL holds into the database)."""
        self._stop_checkpoints = threading.Event()
        # The thread holds the store only weakly: a store dropped without close() stops its checkpointer.
        self._checkpointer = threading.Thread(target=_checkpoint_loop, name="store-checkpoint", daemon=True,
                                              args=(self.path, checkpoint_interval, self._stop_checkpoints,
                                                    weakref.ref(self)))
        self._checkpointer.start()

    # ----------------------------------------------------------------- start-up
    def _load(self) -> None:
        for type_key, data in self._db.execute("SELECT type, data FROM objects"):
            obj = json.loads(data)
            self._objects.setdefault(type_key, {})[_key(obj)] = obj
        # The newest version is the newest change's (the change log always keeps it), or the one written to
        # meta when the log was last trimmed, whichever is larger: a commit need not write meta as well.
        row = self._db.execute("SELECT value FROM meta WHERE key='rv'").fetchone()
        newest = self._db.execute("SELECT MAX(rv) FROM changes").fetchone()
        self._rv = max(int(row[0]) if row else 0, int(newest[0] or 0) if newest else 0)
        for rv, type_key, event, data, prev in self._db.execute(
                "SELECT rv, type, event, data, prev FROM changes ORDER BY rv"):
            self._log.append(Change(rv, type_key, EventType(event), json.loads(data),
                                    json.loads(prev) if prev else None))
        row = self._db.execute("SELECT value FROM meta WHERE key='compacted_rv'").fetchone()
        # Versions <= compacted_rv cannot be resumed from.  A fresh store has lost nothing.
        self._compacted_rv = int(row[0]) if row else 0
        if self._log and self._log[0].rv - 1 > self._compacted_rv:
            self._compacted_rv = self._log[0].rv - 1

    def close(self) -> None:
        self._stop_checkpoints.set()
        self._checkpointer.join(timeout=10)
        with self._lock:
            self._db.close()

    # -------------------------------------------------------------------- reads
    @property
    def resource_version(self) -> int:
        with self._lock:
            return self._rv

    def get(self, type_key: str, namespace: str, name: str) -> Obj:
        with self._lock:
            obj = self._objects.get(type_key, {}).get((namespace, name))
        if obj is None:
            raise ObjectNotFound(name)
        return obj

    def find(self, type_key: str, namespace: str, name: str) -> Obj | None:
        with self._lock:
            return self._objects.get(type_key, {}).get((namespace, name))

    def list(self, type_key: str, namespace: str | None = None) -> tuple[list[Obj], int]:
        """All objects of a type (in one namespace, or all), sorted by (namespace, name), and the list's RV."""
        with self._lock:
            objs = self._objects.get(type_key, {})
            if namespace is None:
                items = [objs[k] for k in sorted(objs)]
            else:
                items = [objs[k] for k in sorted(objs) if k[0] == namespace]
            return items, self._rv

    def count(self, type_key: str) -> int:
        with self._lock:
            return len(self._objects.get(type_key, {}))

    def changes_since(self, rv: int) -> list[Change]:
        """Every change with a resourceVersion above ``rv``, oldest first."""
        with self._lock:
            if rv < self._compacted_rv:
                raise ChangesCompacted(
                    f"too old resource version: {rv} ({self._compacted_rv + 1})")
            start = bisect.bisect_right(self._log, rv, key=lambda c: c.rv)
            return self._log[start:]

    def oldest_resumable(self) -> int:
        with self._lock:
            return self._compacted_rv

    # ------------------------------------------------------------------- writes
    def create(self, type_key: str, obj: Obj, *, now: str, uid: str | None = None) -> Obj:
        """Store a new object; fills uid (``uid`` when the caller already chose it), creationTimestamp and
        resourceVersion."""
        with self._lock:
            key = _key(obj)
            if key in self._objects.get(type_key, {}):
                raise ObjectExists(key[1])
            obj = jsoncodec.clone(obj)
            meta = obj.setdefault("metadata", {})
            meta["uid"] = uid or str(uuid.uuid4())
            meta["creationTimestamp"] = now
            meta.setdefault("generation", 1)
            return self._commit(type_key, EventType.ADDED, obj, None)

    def update(self, type_key: str, obj: Obj, *, expect_rv: str | None = None) -> Obj:
        """Replace an object.  With ``expect_rv``, fail with VersionConflict unless it is current."""
        with self._lock:
            key = _key(obj)
            current = self._objects.get(type_key, {}).get(key)
            if current is None:
                raise ObjectNotFound(key[1])
            if expect_rv and expect_rv != current["metadata"]["resourceVersion"]:
                raise VersionConflict(
                    f"the object has been modified; please apply your changes to the latest "
                    f"version and try again (have {expect_rv}, current {current['metadata']['resourceVersion']})")
            obj = jsoncodec.clone(obj)
            meta = obj.setdefault("metadata", {})
            for kept in ("uid", "creationTimestamp"):
                meta[kept] = current["metadata"][kept]
            return self._commit(type_key, EventType.MODIFIED, obj, current)

    def mutate(self, type_key: str, namespace: str, name: str,
               fn: Callable[[Obj], Obj | None]) -> Obj:
        """Read-modify-write under the store lock: ``fn`` gets a private copy and returns the new
        object (or None for "no change").  The basis for patches, status updates and bindings."""
        with self._lock:
            current = self.get(type_key, namespace, name)
            new = fn(jsoncodec.clone(current))
            if new is None or new == current:
                return current
            return self.update(type_key, new, expect_rv=current["metadata"]["resourceVersion"])

    def delete(self, type_key: str, namespace: str, name: str, *,
               uid: str | None = None, expect_rv: str | None = None) -> Obj:
        with self._lock:
            current = self.get(type_key, namespace, name)
            if uid and uid != current["metadata"].get("uid"):
                raise VersionConflict(
                    f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                    f"{current['metadata'].get('uid')}")
            if expect_rv and expect_rv != current["metadata"].get("resourceVersion"):
                raise VersionConflict(
                    f"Precondition failed: ResourceVersion in precondition: {expect_rv}, "
                    f"ResourceVersion in object meta: {current['metadata'].get('resourceVersion')}")
            last = jsoncodec.clone(current)
            return self._commit(type_key, EventType.DELETED, last, current)

    def _commit(self, type_key: str, event: EventType, obj: Obj, prev: Obj | None) -> Obj:
        rv = self._rv + 1
        obj["metadata"]["resourceVersion"] = str(rv)
        namespace, name = _key(obj)
        data = _dumps(obj)
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            if event is EventType.DELETED:
                db.execute("DELETE FROM objects WHERE type=? AND namespace=? AND name=?",
                           (type_key, namespace, name))
            else:
                db.execute("INSERT OR REPLACE INTO objects(type, namespace, name, rv, data) "
                           "VALUES (?,?,?,?,?)", (type_key, namespace, name, rv, data))
            db.execute("INSERT INTO changes(rv, type, event, data, prev) VALUES (?,?,?,?,?)",
                       (rv, type_key, event.value, data, _dumps(prev) if prev else None))
            trim_to = rv - self.changelog_limit
            if trim_to > self._compacted_rv and rv % 256 == 0:
                db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('rv', ?)", (str(rv),))
                db.execute("DELETE FROM changes WHERE rv <= ?", (trim_to,))
                db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('compacted_rv', ?)",
                           (str(trim_to),))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self._rv = rv
        objs = self._objects.setdefault(type_key, {})
        if event is EventType.DELETED:
            objs.pop((namespace, name), None)
        else:
            objs[(namespace, name)] = obj
        self._log.append(Change(rv, type_key, event, obj, prev))
        if trim_to > self._compacted_rv and rv % 256 == 0:
            self._compacted_rv = trim_to
            start = bisect.bisect_right(self._log, trim_to, key=lambda c: c.rv)
            del self._log[:start]
        for listener in self._listeners:
            listener()
        return obj

    # ------------------------------------------------------------ notifications
    def subscribe(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener()`` after every commit (under the store lock: keep it tiny)."""
        with self._lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)
        return unsubscribe
