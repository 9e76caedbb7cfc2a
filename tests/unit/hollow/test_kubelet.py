"""The hollow kubelet's decisions and its retry of a write that got no answer."""

from __future__ import annotations

import threading
import time
from typing import Any

from refplatform.client import ApiUnreachable
from refplatform.hollow.kubelet import HollowKubelet

Obj = dict[str, Any]


class FlakyNode:
    """A node's client whose first ``drops`` writes get no answer (a keep-alive connection the server closed)."""

    def __init__(self, drops: int) -> None:
        self.drops = drops
        self.writes: list[tuple[str, str]] = []
        self.done = threading.Event()

    def _write(self, verb: str, path: str) -> Obj:
        if self.drops > 0:
            self.drops -= 1
            raise ApiUnreachable(path, "Remote end closed connection without response")
        self.writes.append((verb, path))
        self.done.set()
        return {}

    def patch(self, path: str, body: Obj, content_type: str = "") -> Obj:
        assert body["status"]["phase"] == "Running"
        return self._write("patch", path)

    def delete(self, path: str, body: Obj | None = None) -> Obj:
        assert body is not None and body["preconditions"]["uid"] == "u1"
        return self._write("delete", path)


def pod(node: str | None, phase: str = "Pending", deleting: bool = False) -> Obj:
    meta: Obj = {"name": "p", "namespace": "default", "uid": "u1"}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": phase}}


def kubelet(node: FlakyNode) -> HollowKubelet:
    return HollowKubelet(node, {"n0": node}, workers=1)  # type: ignore[arg-type]


def test_a_bound_pod_is_started_as_its_node_even_after_a_dropped_connection() -> None:
    node = FlakyNode(drops=2)
    k = kubelet(node)
    try:
        assert k.handle("ADDED", pod("n0")) == "start"
        assert node.done.wait(5)
        deadline = time.monotonic() + 5
        while k.started < 1:  # the counter follows the write
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert node.writes == [("patch", "/api/v1/namespaces/default/pods/p/status")]
        assert k.failures == 0
        assert k.handle("MODIFIED", pod("n0")) is None  # reported once
    finally:
        k.stop()


def test_only_its_own_pending_pods_and_their_deletions_concern_it() -> None:
    node = FlakyNode(drops=0)
    k = kubelet(node)
    try:
        assert k.handle("ADDED", pod(None)) is None  # not bound
        assert k.handle("ADDED", pod("n9")) is None  # another node's
        assert k.handle("ADDED", pod("n0", phase="Running")) is None  # already running
        assert k.handle("MODIFIED", pod("n0", phase="Running", deleting=True)) == "delete"
        assert node.done.wait(5)
        assert node.writes == [("delete", "/api/v1/namespaces/default/pods/p")]
    finally:
        k.stop()
