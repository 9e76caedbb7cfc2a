"""The real Ray cluster itself (issue 50): what a Ray target will build its drills on, checked on Ray 2.60.

A module cluster (a head without GPUs, three worker nodes of 8 declared GPUs each) for the placement-group
checks, read both through a driver (`ray.init`, this process) and through the state API over HTTP; and a
cluster of its own for the node kill, with the GCS health check tuned, read over HTTP alone (what a harness
without the `ray` package sees)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.realray.cluster import TUNED, RayCluster, until

pytestmark = pytest.mark.realray

WORKERS, GPUS = 3, 8


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    with RayCluster(workers=WORKERS, gpus_per_worker=GPUS) as c:
        yield c


@pytest.fixture(scope="module")
def ray_driver(cluster: RayCluster):
    import ray

    ray.init(address=cluster.gcs_address, logging_level="ERROR", log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


def stays(cond, for_s: float, what: str, poll: float = 0.2) -> None:
    """`cond` holds at every look for `for_s` seconds (a bounded watch: what must NOT happen)."""
    deadline = time.monotonic() + for_s
    while time.monotonic() < deadline:
        assert cond(), what
        time.sleep(poll)


def placed(table: dict) -> dict:
    """The bundles a placement group holds on a node (Ray 2.60 lists an unplaced bundle with node id '')."""
    return {bundle: node for bundle, node in table["bundles_to_node_id"].items() if node}


def free_gpus(ray) -> float:
    return ray.available_resources().get("GPU", 0.0)


def worker_ids(cluster: RayCluster) -> set[str]:
    return {n.node_id for n in cluster.nodes.values() if not n.head}


def test_the_cluster_comes_up_with_its_declared_gpus(cluster: RayCluster, ray_driver) -> None:
    nodes = {n["node_id"]: n for n in cluster.list_nodes()}
    assert len(nodes) == WORKERS + 1 and all(n["state"] == "ALIVE" for n in nodes.values())
    assert {n["node_ip"] for n in nodes.values()} == {"127.0.0.1"}
    for node in cluster.nodes.values():
        seen = nodes[node.node_id]
        assert seen["resources_total"].get("GPU", 0) == node.num_gpus
        assert seen["is_head_node"] == node.head
        assert node.raylet_pid() is not None, f"{node.name}: no raylet in its process group"
    assert ray_driver.cluster_resources()["GPU"] == WORKERS * GPUS
    until(lambda: free_gpus(ray_driver) == WORKERS * GPUS, 10, "every GPU free")


@pytest.mark.parametrize("strategy", ["STRICT_SPREAD", "PACK"])
def test_a_gang_of_one_bundle_per_node_is_reserved_whole(cluster: RayCluster, ray_driver, strategy: str) -> None:
    from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group

    pg = placement_group([{"GPU": GPUS}] * WORKERS, strategy=strategy, name=f"gang-{strategy}")
    try:
        assert pg.wait(timeout_seconds=30), f"{strategy} gang of {WORKERS} x {GPUS} GPUs never ready"
        table = placement_group_table(pg)
        assert table["state"] == "CREATED"
        assert set(placed(table).values()) == worker_ids(cluster) and len(placed(table)) == WORKERS  # one bundle on each worker
        assert free_gpus(ray_driver) == 0
    finally:
        remove_placement_group(pg)
    until(lambda: free_gpus(ray_driver) == WORKERS * GPUS, 10, "the gang's GPUs back once it is removed")


@pytest.mark.parametrize("strategy", ["STRICT_SPREAD", "PACK"])
def test_a_gang_larger_than_the_cluster_stays_pending_with_nothing_reserved(cluster: RayCluster, ray_driver,
                                                                            strategy: str) -> None:
    from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group

    pg = placement_group([{"GPU": GPUS}] * (WORKERS + 1), strategy=strategy, name=f"too-big-{strategy}")
    try:
        until(lambda: placement_group_table(pg).get("state") == "PENDING", 10, "the gang known to the GCS")
        stays(lambda: placement_group_table(pg)["state"] == "PENDING" and free_gpus(ray_driver) == WORKERS * GPUS,
              3.0, "a gang that cannot fit reserved part of the cluster")
        assert not pg.wait(timeout_seconds=0.5)
        assert placed(placement_group_table(pg)) == {}
        via_http = cluster.get("/api/v0/placement_groups?detail=1&limit=100")["data"]["result"]["result"]
        assert [g["state"] for g in via_http if g["placement_group_id"] == pg.id.hex()] == ["PENDING"]
    finally:
        remove_placement_group(pg)


def test_two_gangs_each_over_half_the_cluster_one_runs_the_other_waits_whole(cluster: RayCluster,
                                                                           ray_driver) -> None:
    from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group

    half = WORKERS // 2 + 1  # each gang wants more than half the workers: both cannot run at once
    a = placement_group([{"GPU": GPUS}] * half, strategy="STRICT_SPREAD", name="gang-a")
    b = placement_group([{"GPU": GPUS}] * half, strategy="STRICT_SPREAD", name="gang-b")
    try:
        until(lambda: any(placement_group_table(g)["state"] == "CREATED" for g in (a, b)), 30, "one gang ready")
        stays(lambda: sorted(placement_group_table(g)["state"] for g in (a, b)) == ["CREATED", "PENDING"],
              2.0, "both gangs ready at once, or neither")
        first, second = (a, b) if placement_group_table(a)["state"] == "CREATED" else (b, a)
        assert placed(placement_group_table(second)) == {}  # no partial reservation
        assert free_gpus(ray_driver) == (WORKERS - half) * GPUS
        remove_placement_group(first)
        assert second.wait(timeout_seconds=30), "the waiting gang never ran once the first was gone (deadlock)"
        assert len(set(placed(placement_group_table(second)).values())) == half
    finally:
        for g in (a, b):
            remove_placement_group(g)
    until(lambda: free_gpus(ray_driver) == WORKERS * GPUS, 10, "every GPU free again")


def test_gangs_asked_as_separate_actors_are_reserved_in_part(cluster: RayCluster, ray_driver) -> None:
    """The defect the two-gangs scenario must catch (issue 50): two gangs of 2 x {GPU: 8} asked as 4 separate actors
    instead of two placement groups. 3 nodes hold 3 of them, so whatever the order, one gang is whole and the other
    holds a node's GPUs while its second member waits: a partial reservation no placement group makes."""
    from ray.util.state import list_actors

    @ray_driver.remote(num_gpus=GPUS, num_cpus=0)
    class Member:
        def node(self) -> str:
            return ray_driver.get_runtime_context().get_node_id()

    members = {f"{gang}{i}": Member.options(name=f"sep-{gang}{i}").remote() for i in range(2) for gang in "AB"}
    try:
        def states() -> dict[str, str]:
            return {a["name"].removeprefix("sep-"): a["state"]
                    for a in list_actors(limit=1000)  # (a class defined in a function is named by its qualname)
                    if (a["name"] or "").startswith("sep-") and a["state"] != "DEAD"}

        until(lambda: list(states().values()).count("ALIVE") == WORKERS, 30, "3 of the 4 members placed")
        stays(lambda: list(states().values()).count("ALIVE") == WORKERS and free_gpus(ray_driver) == 0, 2.0,
              "the 4th member placed, or a GPU freed")
        alive = {name for name, state in states().items() if state == "ALIVE"}
        partial = [g for g in "AB" if len({f"{g}0", f"{g}1"} & alive) == 1]
        assert len(partial) == 1, f"placed: {sorted(alive)}"
        holder = next(m for name, m in members.items() if name.startswith(partial[0]) and name in alive)
        assert ray_driver.get(holder.node.remote(), timeout=10) in worker_ids(cluster)  # GPUs held by half a gang
    finally:
        for m in members.values():
            ray_driver.kill(m)
    until(lambda: free_gpus(ray_driver) == WORKERS * GPUS, 15, "every GPU free again")


def test_a_killed_raylet_is_marked_dead_within_the_tuned_health_check() -> None:
    with RayCluster(workers=2, gpus_per_worker=GPUS, system_config=TUNED) as c:
        victim, bystander = c.nodes["w1"], c.nodes["w2"]
        raylet = victim.raylet_pid()
        assert raylet is not None
        t0 = time.monotonic()
        c.kill(victim.name)
        dead = c.wait_node_state(victim.node_id, "DEAD", timeout=c.detect_bound_s())
        detect = time.monotonic() - t0
        assert "health check" in (dead.get("state_message") or ""), dead.get("state_message")
        assert not victim.alive(), "the raylet's process group outlived the kill"
        assert c.node_state(bystander.node_id)["state"] == "ALIVE"
        alive_gpus = sum(n["resources_total"].get("GPU", 0) for n in c.list_nodes() if n["state"] == "ALIVE")
        assert alive_gpus == GPUS
        print(f"node {victim.node_id[:12]} DEAD {detect:.2f} s after SIGKILL (bound {c.detect_bound_s():.1f} s)")


def test_a_job_submitted_over_plain_http_runs_and_its_output_comes_back(cluster: RayCluster) -> None:
    """What a harness without the `ray` package does: POST /api/jobs/, read the job's actor and node through the
    state API, read the job's output through the Jobs API's logs."""
    import json
    import sys
    import urllib.request

    def call(method: str, path: str, body: dict | None = None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(cluster.dashboard_url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.load(resp)

    code = ("import ray, time; ray.init()\n"
            "@ray.remote(num_gpus=8)\n"
            "class Probe:\n"
            "    def where(self): return ray.get_runtime_context().get_node_id(), ray.get_gpu_ids()\n"
            "p = Probe.remote(); node, gpus = ray.get(p.where.remote())\n"
            "print('probe-on', node, len(gpus), flush=True); time.sleep(3)\n")
    script = cluster.root / "probe_job.py"
    script.write_text(code)
    job_id = call("POST", "/api/jobs/", {"entrypoint": f"{sys.executable} {script}"})["submission_id"]

    def probe_actor():
        actors = call("GET", "/api/v0/actors?detail=1&limit=100&filter_keys=class_name&filter_predicates=%3D"
                             "&filter_values=Probe")["data"]["result"]["result"]
        return [a for a in actors if a["state"] == "ALIVE"]

    (actor,) = until(probe_actor, 60, "the job's actor ALIVE")
    assert actor["node_id"] in worker_ids(cluster)  # 8 GPUs: only a worker node has them
    until(lambda: call("GET", f"/api/jobs/{job_id}")["status"] == "SUCCEEDED", 60, "the job SUCCEEDED")
    logs = call("GET", f"/api/jobs/{job_id}/logs")["logs"]
    assert f"probe-on {actor['node_id']} 8" in logs, logs[-2000:]
