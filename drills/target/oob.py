"""Out-of-band control of a cluster that ``firedrill up`` runs: the reference platform's BMC.

A run can drill such a cluster from another process (``firedrill run --kubeconfig DATA_DIR/kubeconfig --profile
P``, docs/SAFETY.md).  That run did not start the node agents, so it must not signal them; the ``firedrill up``
supervisor did.  The supervisor keeps a desk in its data directory: ``firedrill node NODE ACTION`` (a profile's
``fault.command_template`` and ``restore_template``) leaves a request there, one JSON file written whole, and waits
for the supervisor's answer.  A fault may carry an expiry (``--expire-seconds``, the profile's
``{expire_seconds}``): the supervisor undoes it at that instant on its own, so the cluster heals even when the run
that faulted it was SIGKILLed and nobody runs ``firedrill recover``.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from drills.errors import FiredrillError
from drills.target.faults import FaultError, FaultRecord, ReferenceFaults
from drills.target.profile import FaultMethod

__all__ = ["Desk", "OobAction", "OobAnswer", "OobError", "OobRequest", "ask", "desk_dir"]

log = logging.getLogger(__name__)

REQUESTS, ANSWERS = "requests", "answers"


class OobError(FiredrillError):
    """A request to the out-of-band desk could not be made, or was never answered; the message says why."""


class OobAction(Enum):
    """What ``firedrill node`` asks of a node: a fault of the reference platform, or its undo."""

    KILL = "kill"
    HANG = "hang"
    PARTITION = "partition"
    RESTORE = "restore"

    @property
    def method(self) -> FaultMethod | None:
        return None if self is OobAction.RESTORE else FaultMethod(self.value)


@dataclass(frozen=True, slots=True)
class OobRequest:
    """One request on the desk: an action on a node, and for a fault, how long it may stand."""

    id: str
    node: str
    action: OobAction
    expire_seconds: float | None = None

    def to_json(self) -> str:
        return json.dumps({"id": self.id, "node": self.node, "action": self.action.value,
                           "expireSeconds": self.expire_seconds})

    @classmethod
    def from_json(cls, text: str, where: str) -> "OobRequest":
        try:
            raw = json.loads(text)
            expire = raw.get("expireSeconds")
            request = cls(str(raw["id"]), str(raw["node"]), OobAction(raw["action"]),
                          None if expire is None else float(expire))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise OobError(f"{where}: not a request of `firedrill node` ({exc})") from None
        if request.expire_seconds is not None and request.expire_seconds <= 0:
            raise OobError(f"{where}: expireSeconds {request.expire_seconds:g} must be above 0")
        return request


@dataclass(frozen=True, slots=True)
class OobAnswer:
    ok: bool
    detail: str


def desk_dir(data_dir: Path) -> Path:
    return Path(data_dir) / "oob"


def _write_whole(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that a reader sees none of it or all of it (a rename after an fsync)."""
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def ask(data_dir: Path, node: str, action: OobAction, expire_seconds: float | None = None, *,
        supervisor_alive: Callable[[], bool], timeout: float = 15.0,
        sleep: Callable[[float], None] = time.sleep) -> OobAnswer:
    """Leave a request on the desk of the ``firedrill up`` running on ``data_dir`` and wait for its answer.

    Raises :class:`OobError` when no supervisor runs there or none answered within ``timeout`` seconds (then the
    request is taken back if it was not read yet, so it cannot act later)."""
    if not supervisor_alive():
        raise OobError(f"no `firedrill up` is running on {data_dir}: start it, or point --data-dir at its data "
                       "directory")
    desk = desk_dir(data_dir)
    (desk / REQUESTS).mkdir(parents=True, exist_ok=True)
    (desk / ANSWERS).mkdir(parents=True, exist_ok=True)
    request = OobRequest(uuid.uuid4().hex[:12], node, action, expire_seconds)
    asked = desk / REQUESTS / f"{request.id}.json"
    answer = desk / ANSWERS / f"{request.id}.json"
    _write_whole(asked, request.to_json())
    deadline = time.monotonic() + timeout
    while not answer.exists():
        if time.monotonic() >= deadline or not supervisor_alive():
            try:
                asked.unlink()
            except FileNotFoundError:  # read meanwhile: its answer may still come; say so
                raise OobError(f"the supervisor on {data_dir} took the request ({action.value} {node}) but did not "
                               f"answer within {timeout:g} s; see its logs") from None
            raise OobError(f"the supervisor on {data_dir} did not take the request ({action.value} {node}) within "
                           f"{timeout:g} s; is `firedrill up` still running there?")
        sleep(0.02)
    raw = json.loads(answer.read_text())
    answer.unlink(missing_ok=True)
    return OobAnswer(bool(raw.get("ok")), str(raw.get("detail", "")))


@dataclass(slots=True)
class Standing:
    """A fault the desk made that has not been undone: its record (with the undo) and when it expires."""

    record: FaultRecord
    expires_at: float | None


class Desk:
    """The supervisor's side: takes each request left on the desk, acts on its own agents, answers, and undoes
    every fault whose expiry has come.  ``poll()`` from the supervisor's loop; nothing here runs by itself."""

    def __init__(self, data_dir: Path, faults: ReferenceFaults, restart: Callable[[str], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.dir = desk_dir(data_dir)
        (self.dir / REQUESTS).mkdir(parents=True, exist_ok=True)
        (self.dir / ANSWERS).mkdir(parents=True, exist_ok=True)
        self.faults = faults
        self.restart = restart
        self.clock = clock
        self.standing: dict[str, Standing] = {}

    def poll(self) -> None:
        for path in sorted((self.dir / REQUESTS).glob("*.json")):
            try:
                request = OobRequest.from_json(path.read_text(), str(path))
            except (OSError, OobError) as exc:
                log.warning("out-of-band desk: %s", exc)
                path.unlink(missing_ok=True)
                continue
            path.unlink(missing_ok=True)
            answer = self.take(request)
            _write_whole(self.dir / ANSWERS / f"{request.id}.json",
                         json.dumps({"ok": answer.ok, "detail": answer.detail}))
        self.expire()

    def take(self, request: OobRequest) -> OobAnswer:
        node = request.node
        if request.action is OobAction.RESTORE:
            return self._restore(node, "restored on request")
        if node in self.standing:
            return OobAnswer(False, f"node {node} already has a fault standing "
                                    f"({self.standing[node].record.method.value}); restore it first")
        method = request.action.method
        assert method is not None
        try:
            record = self.faults.inject(node, method)
        except FaultError as exc:
            return OobAnswer(False, str(exc))
        expires_at = None if request.expire_seconds is None else self.clock() + request.expire_seconds
        self.standing[node] = Standing(record, expires_at)
        until = "" if expires_at is None else f"; it undoes itself in {request.expire_seconds:g} s"
        log.info("out-of-band desk: %s node %s (%s)%s", method.value, node, record.detail, until)
        return OobAnswer(record.confirmed, f"{method.value} node {node}: {record.detail}{until}")

    def expire(self) -> None:
        now = self.clock()
        for node, standing in list(self.standing.items()):
            if standing.expires_at is not None and now >= standing.expires_at:
                answer = self._restore(node, "expired")
                log.info("out-of-band desk: %s", answer.detail)

    def _restore(self, node: str, why: str) -> OobAnswer:
        standing = self.standing.pop(node, None)
        try:
            if standing is not None and standing.record.undo is not None:
                standing.record.undo()
                return OobAnswer(True, f"node {node}'s {standing.record.method.value} undone ({why})")
            self.restart(node)  # nothing of ours stands: start the agent again if it is down (idempotent)
        except (FaultError, OSError) as exc:
            return OobAnswer(False, f"node {node} could not be restored: {exc}")
        return OobAnswer(True, f"node {node}: no fault of the desk stood; its agent runs ({why})")

    def undo_all(self) -> None:
        """Undo every fault still standing (the supervisor stops: a frozen agent could not)."""
        for node in list(self.standing):
            log.info("out-of-band desk: %s", self._restore(node, "the supervisor stops").detail)

