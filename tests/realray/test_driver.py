"""The Ray driver (drills.ray) against a real Ray 2.60 cluster on loopback: every read and act the Ray target will
use, over HTTP alone (the harness's machine needs no ray package).

One cluster with the GCS health check tuned (a head, two worker nodes of 8 declared GPUs): its nodes as the driver
reads them; a job submitted through the driver that reserves a gang of both workers' GPUs, whose placement group,
actors, status and output the driver reads back; a gang too large for the cluster, PENDING with no bundle placed;
a worker node killed, DEAD with Ray's reason."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from drills.ray.driver import RayDriver
from drills.ray.state import ActorState, JobStatus, PlacementState, RayError
from tests.realray.cluster import TUNED, RayCluster, until

pytestmark = pytest.mark.realray

GPUS = 8
GANG_JOB = """\
import sys, time
import ray
from ray.util.placement_group import placement_group
ray.init()
bundles = int(sys.argv[1])
pg = placement_group([{{"GPU": {gpus}}}] * bundles, strategy="STRICT_SPREAD", name=sys.argv[2])
if not pg.wait(timeout_seconds=float(sys.argv[3])):
    print("gang-pending", sys.argv[2], flush=True)
    time.sleep(30)
    sys.exit(3)
@ray.remote(num_gpus={gpus}, num_cpus=0)
class Rank:
    def where(self):
        return ray.get_runtime_context().get_node_id(), ray.get_gpu_ids()
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
ranks = [Rank.options(name=f"{{sys.argv[2]}}-{{i}}", scheduling_strategy=PlacementGroupSchedulingStrategy(
    placement_group=pg, placement_group_bundle_index=i)).remote() for i in range(bundles)]
for i, r in enumerate(ranks):
    node, gpus = ray.get(r.where.remote())
    print("rank", i, "node", node, "gpus", len(gpus), flush=True)
time.sleep(float(sys.argv[4]))
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    with RayCluster(workers=2, gpus_per_worker=GPUS, system_config=TUNED) as c:
        (c.root / "gang_job.py").write_text(GANG_JOB.format(gpus=GPUS))
        yield c


@pytest.fixture(scope="module")
def driver(cluster: RayCluster) -> Iterator[RayDriver]:
    d = RayDriver(cluster.dashboard_url)
    try:
        yield d
    finally:
        d.close()


def submit_gang(driver: RayDriver, cluster: RayCluster, bundles: int, name: str, wait_s: float, hold_s: float) -> str:
    return driver.submit(f"{sys.executable} {cluster.root / 'gang_job.py'} {bundles} {name} {wait_s} {hold_s}",
                         runtime_env={"env_vars": cluster.env})


def test_the_driver_reads_every_node_with_its_gpus(cluster: RayCluster, driver: RayDriver) -> None:
    nodes = {n.node_id: n for n in driver.nodes()}
    assert set(nodes) == {n.node_id for n in cluster.nodes.values()}
    for node in cluster.nodes.values():
        seen = nodes[node.node_id]
        assert seen.alive and seen.head == node.head and seen.gpus == node.num_gpus and seen.ip == "127.0.0.1"


def test_a_gang_job_through_the_driver_is_reserved_whole_and_its_ranks_and_output_read_back(
        cluster: RayCluster, driver: RayDriver) -> None:
    job = submit_gang(driver, cluster, 2, "gang-whole", 30, 4)
    group = until(lambda: [g for g in driver.placement_groups(name="gang-whole") if g.state is PlacementState.CREATED],
                  60, "the gang's placement group CREATED")[0]
    workers = {n.node_id for n in cluster.nodes.values() if not n.head}
    assert {b.node_id for b in group.placed} == workers and all(b.resources == {"GPU": GPUS} for b in group.bundles)
    def alive_ranks() -> list:
        ranks = [a for a in driver.actors(class_name="Rank")
                 if a.state is ActorState.ALIVE and a.name.startswith("gang-whole")]
        return ranks if len(ranks) == 2 else []
    ranks = until(alive_ranks, 60, "both ranks ALIVE")
    assert {a.node_id for a in ranks} <= workers
    until(lambda: driver.job(job).status.finished, 60, "the job finished")
    assert driver.job(job).status is JobStatus.SUCCEEDED, driver.job(job)
    logs = driver.job_logs(job)
    for node in workers:
        assert f"node {node} gpus {GPUS}" in logs, logs[-2000:]


def test_a_gang_larger_than_the_cluster_is_pending_with_nothing_placed(cluster: RayCluster,
                                                                      driver: RayDriver) -> None:
    job = submit_gang(driver, cluster, 3, "gang-too-big", 5, 0)
    group = until(lambda: driver.placement_groups(name="gang-too-big"), 60, "the gang known to the GCS")[0]
    assert group.state is PlacementState.PENDING and group.placed == () and len(group.bundles) == 3
    until(lambda: "gang-pending gang-too-big" in driver.job_logs(job), 30, "the job saying its gang waits")
    assert driver.stop(job) is True
    until(lambda: driver.job(job).status.finished, 30, "the stopped job finished")
    assert driver.job(job).status is JobStatus.STOPPED


def test_an_unknown_job_is_an_error_naming_the_request(driver: RayDriver) -> None:
    with pytest.raises(RayError, match=r"GET http://127\.0\.0\.1:\d+/api/jobs/no-such-job: 404"):
        driver.job("no-such-job")


def test_a_killed_worker_node_reads_dead_with_rays_reason(cluster: RayCluster, driver: RayDriver) -> None:
    victim = next(n for n in cluster.nodes.values() if not n.head)
    cluster.kill(victim.name)
    dead = until(lambda: next((n for n in driver.nodes() if n.node_id == victim.node_id and not n.alive), None),
                 cluster.detect_bound_s() + 2, "the killed node DEAD")
    assert "health check failed" in dead.state_message and dead.end_time_ms is not None
    assert [n.alive for n in driver.nodes() if n.node_id != victim.node_id] == [True, True]
