"""A GPU's way back on a live agent (docs/HEALING.md, "A GPU's way back"): an Xid takes GPU 0 out; removing it
starts a burn-in, and only once the burn-in passed does the GPU come back; a GPU that flaps or fails its diagnostic
is held until a person's ``firedrill.dev/clear-gpus``.

One real agent process (the tuned profile's ``--burn-in-seconds 2``, ``--flap-window 60``), no controllers: only
the agent's own reports are read.  Every wait has a deadline.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from refplatform.client import MERGE_PATCH, ApiStatusError, RestClient, resource_path
from refplatform.cluster import Cluster, ClusterSpec, wait_until

pytestmark = pytest.mark.integration

NODE = "gpu-node-0"
NODE_PATH = resource_path("", "v1", "nodes", None, NODE)
EVENTS = resource_path("", "v1", "events", "default")
DEADLINE = 20.0
XID = "firedrill.dev/inject-xid"
DIAG = "firedrill.dev/inject-diag"
CLEAR = "firedrill.dev/clear-gpus"
HEALTH = "firedrill.dev/gpu-health"


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[tuple[Cluster, RestClient]]:
    c = Cluster(ClusterSpec(tmp_path / "cluster", nodes=0, heartbeat=0.5, controllers=()))
    c.start_server()
    try:
        c.start_agent(NODE, gpus=2)
        with RestClient(c.url, c.token, ca_file=c.ca_file) as client:
            yield c, client
    finally:
        c.stop()


class Node:
    def __init__(self, cluster: Cluster, api: RestClient) -> None:
        self.cluster, self.api = cluster, api

    def read(self) -> dict[str, Any]:
        proc = self.cluster.agents[NODE]
        if proc.popen.poll() is not None:
            raise AssertionError(f"agent exited {proc.popen.returncode}:\n{proc.tail(40)}")
        return self.api.get(NODE_PATH)

    def annotate(self, **values: str | None) -> float:
        """Write annotations (None removes one) in one patch; the wall time just before it."""
        names = {"xid": XID, "diag": DIAG, "clear": CLEAR}
        at = time.time()
        self.api.patch(NODE_PATH, {"metadata": {"annotations": {names[k]: v for k, v in values.items()}}}, MERGE_PATCH)
        return at

    def wait(self, predicate: Any, what: str) -> dict[str, Any]:
        seen: list[dict[str, Any]] = []

        def check() -> bool:
            try:
                seen[:] = [self.read()]
            except ApiStatusError as err:  # not registered yet
                if not err.not_found:
                    raise
                return False
            return bool(predicate(seen[0]))

        wait_until(check, DEADLINE, what)
        return seen[0]


def allocatable(node: dict[str, Any]) -> int:
    return int(node["status"]["allocatable"]["nvidia.com/gpu"])


def health(node: dict[str, Any]) -> dict[str, Any]:
    return json.loads((node["metadata"].get("annotations") or {}).get(HEALTH) or "{}")


def state(node: dict[str, Any], gpu: int) -> str:
    return str(health(node).get("gpus", {}).get(str(gpu), {}).get("state", "in-service"))


def event_reasons(api: RestClient) -> list[str]:
    """The lifecycle's Events on the Node, in the order they happened."""
    events = [e for e in api.list(EVENTS)["items"]
              if e["involvedObject"].get("name") == NODE and e["reason"].startswith("Gpu")]
    return [e["reason"] for e in sorted(events, key=lambda e: e["eventTime"])]


def test_a_gpu_comes_back_only_after_its_burn_in_and_a_held_one_only_when_a_person_clears_it(
        platform: tuple[Cluster, RestClient]) -> None:
    cluster, api = platform
    node = Node(cluster, api)
    node.wait(lambda n: allocatable(n) == 2, "the node to register 2 GPUs")

    node.annotate(xid=json.dumps([{"id": "x1", "gpu": 0, "xid": 79}]))
    failed = node.wait(lambda n: allocatable(n) == 1, "the Xid to take GPU 0 out")
    assert state(failed, 0) == "failed" and failed["metadata"]["annotations"]["firedrill.dev/unhealthy-gpus"] == "0"

    removed = node.annotate(xid=None)
    seen: list[tuple[str, int]] = []

    def back(n: dict[str, Any]) -> bool:
        seen.append((state(n, 0), allocatable(n)))
        return allocatable(n) == 2

    returned = node.wait(back, "GPU 0 to return after its burn-in")
    returned_seen = time.time()
    assert ("burn-in", 1) in seen, f"never seen in burn-in and out of allocatable: {seen}"
    assert ("burn-in", 2) not in seen, f"allocatable before the burn-in ended: {seen}"
    (burn_in,) = health(returned)["burn_ins"]
    assert burn_in["gpu"] == 0 and burn_in["passed"] is True
    assert removed <= burn_in["started"] and burn_in["ended"] - burn_in["started"] >= 2.0
    assert burn_in["ended"] <= returned_seen and health(returned)["gpus"] == {}
    wait_until(lambda: sorted(event_reasons(api)) == ["GpuBurnInPassed", "GpuReturned"], DEADLINE,
               "the return's Events")  # one instant: their order is not told

    # GPU 0 fails again within the flap window; GPU 1 fails its diagnostic: both are held, out of service
    node.annotate(xid=json.dumps([{"id": "x2", "gpu": 0, "xid": 48}, {"id": "x3", "gpu": 1, "xid": 79}]),
                  diag=json.dumps([{"id": "d1", "gpu": 1, "result": "fail"}]))
    node.wait(lambda n: allocatable(n) == 0, "both GPUs out")
    node.annotate(xid=None)
    held = node.wait(lambda n: state(n, 0) == state(n, 1) == "held", "both GPUs held")
    assert allocatable(held) == 0
    assert health(held)["gpus"]["0"]["reason"].startswith("flapping: failed again")
    assert health(held)["gpus"]["1"]["reason"] == "burn-in failed: diagnostic failed (injected d1)"
    assert health(held)["burn_ins"][-1]["passed"] is False
    assert sorted(event_reasons(api)[2:]) == ["GpuBurnInFailed", "GpuHeld", "GpuHeld"]

    node.annotate(diag=None, clear="0,1")  # a person clears both holds
    cleared = node.wait(lambda n: CLEAR not in (n["metadata"].get("annotations") or {}), "the clear to be removed")
    assert allocatable(cleared) == 0  # each proves itself in a burn-in first
    whole = node.wait(lambda n: allocatable(n) == 2, "both GPUs back after their burn-ins")
    assert health(whole)["gpus"] == {} and [b["passed"] for b in health(whole)["burn_ins"][-2:]] == [True, True]
