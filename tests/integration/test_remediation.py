"""The remediation budget on a live ``tuned`` platform: a fleet-wide GpuFault does not drain the fleet.

4 nodes + 1 spare (a budget of 1: 25 % of 5 nodes, at least 1).  Three nodes get a fault injected at once
(``firedrill.dev/inject-health``); their agents post ``GpuFault=True``; the healer quarantines exactly one, trips
the breaker (ConfigMap ``kube-system/firedrill-remediation``) and holds the other two (``RemediationHeld``, a
``RemediationHalted`` Event each).  The faults are removed and the breaker reset by deleting the ConfigMap: the
quarantined node returns to the pool and the conditions clear, and nothing else was ever quarantined.
Waits on conditions with deadlines; never sleeps.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from refplatform.client import ApiStatusError, ApiUnreachable, RestClient, resource_path
from refplatform.cluster import Cluster, ClusterSpec, wait_until

pytestmark = pytest.mark.integration

Obj = dict[str, Any]
NODES = resource_path("", "v1", "nodes")
EVENTS = resource_path("", "v1", "events", "default")
BREAKER = resource_path("", "v1", "configmaps", "kube-system", "firedrill-remediation")
DEADLINE = 30.0
QUARANTINE = "firedrill.dev/quarantine"


def wait(what: str, predicate: Any, timeout: float = DEADLINE) -> None:
    def check() -> bool:
        try:
            return bool(predicate())
        except (ApiStatusError, ApiUnreachable, KeyError):
            return False
    wait_until(check, timeout, what, interval=0.1)


def status_of(node: Obj, ctype: str) -> str:
    return next((c.get("status", "") for c in (node.get("status") or {}).get("conditions") or []
                 if c.get("type") == ctype), "")


def labels(node: Obj) -> dict[str, str]:
    return (node.get("metadata") or {}).get("labels") or {}


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[tuple[Cluster, RestClient]]:
    cluster = Cluster(ClusterSpec(tmp_path / "c", nodes=4, spares=1, gpus_per_node=8, profile="tuned"))
    cluster.start()
    api = RestClient(cluster.url, cluster.token, ca_file=cluster.ca_file)
    try:
        cluster.wait_ready(30)
        yield cluster, api
    finally:
        api.close()
        cluster.stop()


def test_a_fleet_fault_quarantines_the_budget_trips_the_breaker_and_a_reset_brings_everything_back(
        platform: tuple[Cluster, RestClient]) -> None:
    cluster, api = platform
    faulty = cluster.spec.node_names()[:3]
    spare = cluster.spec.spare_names()[0]

    def nodes() -> dict[str, Obj]:
        return {n["metadata"]["name"]: n for n in api.list(NODES)["items"]}

    def inject(value: str | None) -> None:
        for name in faulty:
            api.patch(f"{NODES}/{name}", {"metadata": {"annotations": {"firedrill.dev/inject-health": value}}})

    inject(json.dumps([{"id": "storm-1", "reason": "XidStorm", "message": "Xid 79 on every GPU (injected)",
                        "until": time.time() + 300}]))
    wait("the breaker tripped", lambda: api.get(BREAKER)["data"]["state"] == "Tripped")
    wait("the two nodes left alone held", lambda: sum(status_of(n, "RemediationHeld") == "True"
                                                      for n in nodes().values()) == 2)
    now = nodes()
    gone = sorted(name for name, n in now.items() if labels(n).get(QUARANTINE))
    # Which one depends on whose agent reported first (each posts at its own beat); exactly one, of the three.
    assert len(gone) == 1 and gone[0] in faulty and labels(now[gone[0]])[QUARANTINE] == "gpu-fault"
    assert labels(now[spare]).get("firedrill.dev/spare") is None  # the spare was released for it
    first = gone[0]
    left = [n for n in faulty if n != first]
    data = api.get(BREAKER)["data"]
    assert data["nodesLeftAlone"] == ",".join(left)
    assert data["reason"] == "3 nodes reported GpuFault within 600 s; the budget is 1 (25 % of 5 nodes, at least 1)"
    for name in left:
        assert status_of(now[name], "GpuFault") == "True" and status_of(now[name], "Ready") == "True"
    halted = sorted(e["involvedObject"]["name"] for e in api.list(EVENTS)["items"]
                    if e["reason"] == "RemediationHalted")
    assert halted == left

    # A person clears the fault, then resets the breaker.
    inject(None)
    wait("GpuFault False on every faulty node", lambda: all(status_of(nodes()[n], "GpuFault") == "False"
                                                            for n in faulty))
    api.delete(BREAKER)
    wait("the quarantined node back in the spare pool",
         lambda: labels(nodes()[first]).get("firedrill.dev/spare") == "true" and QUARANTINE not in labels(nodes()[first]))
    wait("RemediationHeld cleared", lambda: not any(status_of(n, "RemediationHeld") == "True"
                                                    for n in nodes().values()))
    quarantines = [e["involvedObject"]["name"] for e in api.list(EVENTS)["items"] if e["reason"] == "NodeQuarantined"]
    assert quarantines == [first] and not any(QUARANTINE in labels(n) for n in nodes().values())
    with pytest.raises(ApiStatusError):
        api.get(BREAKER)  # the reset stands: nothing tripped it again
