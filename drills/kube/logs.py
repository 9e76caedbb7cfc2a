"""Follow pods' logs through the API (``pods/NAME/log?follow=true``) while a drill runs.

A real node takes its logs with it: once it is pulled, nothing can be read
from it any more.  So the harness follows each rank's log from the moment the
pod runs, one thread per pod, and hands every line to a callback stamped with
the harness's clocks at receipt.  A stream that ends (the container exited,
the node died, the API server dropped it) is opened again while the pod with
that uid still exists and is not finished; repeats are the reader's to drop
(the canary numbers its lines).  A pod replaced under the same name (a Volcano
Job reuses rank names across restarts) is never mistaken for the old one: the
follower checks the uid before each reconnect and stops when it changed.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import urllib3

from drills.kube.driver import POD, KubeDriver, KubeError, _lines
from drills.kube.timeline import Clock

__all__ = ["LogFollower", "LogLine", "read_log_head"]

log = logging.getLogger(__name__)
Obj = dict[str, Any]
_TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True)
class LogLine:
    """One line of a pod's log as the harness received it."""

    namespace: str
    pod: str
    uid: str
    node: str
    text: str
    mono: float
    wall: float


@dataclass
class _Follow:
    namespace: str
    name: str
    uid: str
    node: str
    container: str | None
    stop: threading.Event = field(default_factory=threading.Event)
    wake: threading.Event = field(default_factory=threading.Event)
    """Set when the pod changed (or on stop): a log that could not be opened is tried again at once."""
    response: Any = None
    thread: threading.Thread | None = None


class LogFollower:
    """Follows the logs of the pods it is given until :meth:`stop`."""

    def __init__(self, driver: KubeDriver, on_line: Callable[[LogLine], None], clock: Clock, *,
                 read_timeout: float = 30.0, retry_interval: float = 0.2) -> None:
        self.driver = driver
        self.on_line = on_line
        self.clock = clock
        self.read_timeout = read_timeout
        self.retry_interval = retry_interval
        self._follows: dict[str, _Follow] = {}
        self._lock = threading.Lock()
        self._stopped = False

    def follow(self, pod: Obj, container: str | None = None) -> bool:
        """Start following ``pod`` (once per uid; only once it is bound to a node); True if it started now.

        Called again for a pod already followed (the caller's watch saw it change, say its container start), it
        cuts short the wait before the next try to open a log that could not be opened yet, so the stream opens
        when the container runs rather than up to ``retry_interval`` later (the lines already written are read
        from the start either way; what the wait costs is the instant they are received)."""
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        uid, node = str(meta.get("uid") or ""), str(spec.get("nodeName") or "")
        if not uid or not node:
            return False
        with self._lock:
            if self._stopped:
                return False
            if uid in self._follows:
                self._follows[uid].wake.set()
                return False
            f = _Follow(str(meta.get("namespace") or "default"), str(meta["name"]), uid, node, container)
            f.thread = threading.Thread(target=self._run, args=(f,), name=f"logs-{f.name}", daemon=True)
            self._follows[uid] = f
        f.thread.start()
        return True

    def following(self) -> set[str]:
        with self._lock:
            return {uid for uid, f in self._follows.items() if f.thread is not None and f.thread.is_alive()}

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            follows = list(self._follows.values())
        for f in follows:
            f.stop.set()
            f.wake.set()
            if f.response is not None:
                try:
                    f.response.shutdown()  # unblocks a read waiting on a quiet log
                except (AttributeError, OSError):
                    pass
        for f in follows:
            if f.thread is not None:
                f.thread.join(timeout=10)

    # ------------------------------------------------------------------ the thread
    def _run(self, f: _Follow) -> None:
        query: dict[str, Any] = {"follow": "true"}
        if f.container:
            query["container"] = f.container
        path = POD.path(f.namespace, f.name, "log")
        while not f.stop.is_set():
            state = self._state(f)
            if state is _State.GONE:
                return
            try:
                resp = self.driver._request_once("GET", path, None,
                                                 query if state is _State.LIVE else {**query, "follow": "false"},
                                                 "application/json", timeout=self.read_timeout, stream=True)
            except KubeError as exc:  # not running yet, or the node's log endpoint is gone
                log.debug("log of %s/%s: %s", f.namespace, f.name, exc)
                self._pause(f)
                continue
            f.response = resp.response
            try:
                for raw in _lines(resp.response):
                    if f.stop.is_set():
                        break
                    self.on_line(LogLine(f.namespace, f.name, f.uid, f.node, raw.decode(errors="replace"),
                                         self.clock.mono(), self.clock.wall()))
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                if not f.stop.is_set():
                    log.debug("log stream of %s/%s ended: %s", f.namespace, f.name, exc)
            finally:
                f.response = None
                resp.response.release_conn()
            if state is _State.FINISHED:
                return  # its whole log has been read once more; nothing can follow
            self._pause(f)

    def _pause(self, f: _Follow) -> None:
        """Wait ``retry_interval`` before opening the log again, or less when the pod changed or we stop."""
        f.wake.wait(self.retry_interval)
        f.wake.clear()

    def _state(self, f: _Follow) -> "_State":
        try:
            pod = self.driver.find(POD, f.name, f.namespace)
        except KubeError:
            return _State.LIVE  # the API is unsure; try the log again
        if pod is None or (pod.get("metadata") or {}).get("uid") != f.uid:
            return _State.GONE
        return _State.FINISHED if (pod.get("status") or {}).get("phase") in _TERMINAL else _State.LIVE


def read_log_head(driver: KubeDriver, namespace: str, name: str, limit_bytes: int,
                  container: str | None = None, timeout: float = 5.0) -> str:
    """The beginning of a pod's log, at most ``limit_bytes`` of it (``pods/NAME/log?limitBytes=``, no follow);
    :class:`KubeError` when it cannot be read within ``timeout`` seconds (not running yet, or its node is gone
    or frozen)."""
    query: dict[str, Any] = {"limitBytes": limit_bytes}
    if container:
        query["container"] = container
    resp = driver._request_once("GET", POD.path(namespace, name, "log"), None, query, "application/json",
                                timeout=timeout, stream=True)
    try:
        return resp.response.read(limit_bytes).decode(errors="replace")
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise KubeError(f"log of {namespace}/{name}: {exc}") from None
    finally:
        resp.response.release_conn()


class _State(enum.Enum):
    """What a follower found when it looked the pod up before (re)opening its log."""

    LIVE = "live"
    """The pod exists and has not finished: follow its log."""
    FINISHED = "finished"
    """It ended: read its log once more, then stop."""
    GONE = "gone"
    """Deleted, or replaced by a pod of the same name: stop."""
