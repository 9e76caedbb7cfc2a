"""The power switch of the Ray suite (tests/realray/nodectl.py), run as a profile's fault command runs it: another
process, the main Python (no `ray` package), the cluster's root and a node's name.

One tuned cluster (a head, two worker nodes of 8 declared GPUs): the state file names every node's session; a
killed node is DEAD within the tuned health check with none of its processes left, and restore starts it again as
a new Ray node of the same name and resources; a hung node continued in time keeps its node id; the head is
refused; the cluster's own restart gives a new node id; and stopping the cluster leaves no process of any session
it or nodectl.py started."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.realray.cluster import (TUNED, ALLOW_RESOURCE, RayCluster, node_resource, process_state, read_state,
                                   session_pids)

pytestmark = pytest.mark.realray

GPUS = 8
NODECTL = Path(__file__).with_name("nodectl.py")
MAIN_PYTHON = getattr(sys, "_base_executable", sys.executable)  # the interpreter the Ray venv was made from


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    with RayCluster(workers=2, gpus_per_worker=GPUS, system_config=TUNED) as c:
        yield c


def nodectl(cluster: RayCluster, action: str, node: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([MAIN_PYTHON, str(NODECTL), str(cluster.root), action, node], capture_output=True,
                          text=True, timeout=90, stdin=subprocess.DEVNULL)


def by_id(cluster: RayCluster) -> dict[str, dict]:
    return {n["node_id"]: n for n in cluster.list_nodes()}


def entry(cluster: RayCluster, name: str) -> dict:
    return read_state(cluster.root)["nodes"][name]


def test_worker_nodes_carry_the_firedrill_resource_and_the_state_file_names_each_session(cluster: RayCluster) -> None:
    nodes = by_id(cluster)
    state = read_state(cluster.root)
    assert state["dashboard"] == cluster.dashboard_url and set(state["nodes"]) == {"head", "w1", "w2"}
    for node in cluster.nodes.values():
        saved = state["nodes"][node.name]
        assert saved["head"] == node.head and saved["session"] == node.sid == saved["launcher_pid"]
        assert saved["sessions"] == [node.sid] and saved["node_id"] == node.node_id
        assert saved["argv"] and saved["env"]["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"
        resources = nodes[node.node_id]["resources_total"]
        if node.head:
            assert ALLOW_RESOURCE not in resources
        else:
            assert resources[ALLOW_RESOURCE] == 1 and resources[node_resource(node.name)] == 1


def test_the_head_is_refused_and_a_partition_is_not_pretended(cluster: RayCluster) -> None:
    head = cluster.nodes["head"]
    for action in ("kill", "hang", "restore"):
        done = nodectl(cluster, action, "head")
        assert done.returncode == 1 and "the head holds the GCS; it is never pulled" in done.stderr, done
    done = nodectl(cluster, "partition", "w1")
    assert done.returncode == 2 and "cannot be partitioned" in done.stderr, done
    done = nodectl(cluster, "kill", "w9")
    assert done.returncode == 1 and "w9 is not a node" in done.stderr, done
    assert all(process_state(pid) not in ("T", "t") for pid in head.group_pids())
    assert all(n["state"] == "ALIVE" for n in cluster.list_nodes())


def test_kill_leaves_none_of_the_nodes_processes_and_it_is_dead_within_the_tuned_bound(cluster: RayCluster) -> None:
    victim = cluster.nodes["w1"]
    sid, node_id = victim.sid, victim.node_id
    assert session_pids(sid)
    t0 = time.monotonic()
    done = nodectl(cluster, "kill", "w1")
    assert done.returncode == 0, done.stderr
    assert session_pids(sid) == []
    dead = cluster.wait_node_state(node_id, "DEAD", timeout=cluster.detect_bound_s())
    print(f"w1 DEAD {time.monotonic() - t0:.2f} s after nodectl kill (bound {cluster.detect_bound_s():.1f} s)")
    assert "health check" in (dead.get("state_message") or "")
    assert by_id(cluster)[cluster.nodes["w2"].node_id]["state"] == "ALIVE"
    again = nodectl(cluster, "kill", "w1")
    assert again.returncode == 1 and "down already" in again.stderr


def test_restore_starts_a_killed_node_again_as_a_new_ray_node(cluster: RayCluster) -> None:
    old = entry(cluster, "w1")
    t0 = time.monotonic()
    done = nodectl(cluster, "restore", "w1")
    assert done.returncode == 0, done.stderr
    print(f"w1 ALIVE again {time.monotonic() - t0:.2f} s after nodectl restore: {done.stdout.strip()}")
    new = entry(cluster, "w1")
    assert new["session"] != old["session"] and new["sessions"] == [*old["sessions"], new["session"]]
    assert new["node_id"] and new["node_id"] != old["node_id"] and session_pids(new["session"])
    nodes = by_id(cluster)
    seen = nodes[new["node_id"]]
    assert seen["state"] == "ALIVE" and seen["node_name"] == "w1" and not seen["is_head_node"]
    assert seen["resources_total"]["GPU"] == GPUS and seen["resources_total"][ALLOW_RESOURCE] == 1
    assert seen["resources_total"][node_resource("w1")] == 1
    assert nodes[old["node_id"]]["state"] == "DEAD"  # the GCS keeps the old id
    cluster.reload()
    assert cluster.nodes["w1"].sid == new["session"] and cluster.nodes["w1"].node_id == new["node_id"]


def test_a_hung_node_continued_in_time_keeps_its_node_id(cluster: RayCluster) -> None:
    saved = entry(cluster, "w1")  # the node nodectl.py started: a session this process did not start
    done = nodectl(cluster, "hang", "w1")
    assert done.returncode == 0, done.stderr
    pids = session_pids(saved["session"])
    assert pids and all(process_state(pid) in ("T", "t") for pid in pids)
    done = nodectl(cluster, "restore", "w1")
    assert done.returncode == 0 and "continued" in done.stdout, (done.stdout, done.stderr)
    assert all(process_state(pid) not in ("T", "t") for pid in session_pids(saved["session"]))
    assert entry(cluster, "w1")["session"] == saved["session"]
    deadline = time.monotonic() + 3.0  # past the tuned checks of a node that missed some while stopped
    while time.monotonic() < deadline:
        assert by_id(cluster)[saved["node_id"]]["state"] == "ALIVE"
        time.sleep(0.2)


def test_the_cluster_restarts_a_killed_node_with_a_new_node_id(cluster: RayCluster) -> None:
    node = cluster.nodes["w2"]
    old_id, old_sid = node.node_id, node.sid
    cluster.kill("w2")
    assert session_pids(old_sid) == []
    new_id = cluster.restart("w2")
    assert new_id != old_id and cluster.nodes["w2"].node_id == new_id and cluster.nodes["w2"].sid != old_sid
    seen = by_id(cluster)[new_id]
    assert seen["state"] == "ALIVE" and seen["resources_total"][ALLOW_RESOURCE] == 1
    assert entry(cluster, "w2")["sessions"] == [old_sid, cluster.nodes["w2"].sid]


def test_stop_leaves_no_process_of_any_session_of_the_cluster(cluster: RayCluster) -> None:
    sessions = [sid for e in read_state(cluster.root)["nodes"].values() for sid in e["sessions"]]
    assert len(sessions) == 5  # head, w1 twice (once by nodectl.py), w2 twice
    assert set(cluster.sessions()) == set(sessions)
    cluster.stop()
    assert {sid: session_pids(sid) for sid in sessions if session_pids(sid)} == {}
    assert not cluster.root.exists()
