"""The real Slurm the drills will meet (issue 47, item 4): it starts in about a second, declares simulated GPUs as
GRES that Slurm binds and names to each step, and behaves as a site's Slurm when a node dies under a job: the node
goes DOWN after ``SlurmdTimeout``, a requeueable batch job runs again on the other nodes, and with requeue off it
ends ``NODE_FAIL``.  These are the facts the Slurm target driver will time and judge."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.realslurm.cluster import SlurmCluster, SlurmClusterSpec, running

pytestmark = pytest.mark.realslurm

TIMEOUT_S = 5
"""A tuned ``SlurmdTimeout`` (upstream 300 s): a silent node is set DOWN after this long without an answer; slurmctld
pings on its own cycle, so this cluster sees a killed node NOT_RESPONDING after about 13 s and DOWN after 26 s."""
CRED_EXPIRE_S = 10
"""A tuned ``AuthInfo=cred_expire`` (upstream 120 s): how long slurmctld holds a requeued batch job before it may
start again."""
SCHEDULING = "bf_interval=1,sched_interval=2"
"""Tuned scheduling loops (upstream: backfill every 30 s, the main loop every 60 s), so an eligible job starts in
seconds."""


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[SlurmCluster]:
    requeue = getattr(request, "param", True)
    with running(SlurmClusterSpec(tmp_path / "slurm", nodes=3, gpus_per_node=4, slurmd_timeout=TIMEOUT_S,
                                  job_requeue=requeue, cred_expire=CRED_EXPIRE_S,
                                  scheduler_parameters=SCHEDULING)) as made:
        yield made


def submit(cluster: SlurmCluster, script: str, *options: str) -> int:
    path = cluster.root / f"job-{time.monotonic_ns()}.sh"
    path.write_text("#!/bin/bash\n" + script)
    out = cluster.run("sbatch", "--parsable", f"--output={cluster.root}/out-%j.txt", *options, str(path))
    return int(out.stdout.strip().split(";")[0])


def job(cluster: SlurmCluster, job_id: int) -> dict[str, Any]:
    (found,) = [j for j in cluster.json("squeue")["jobs"] if j["job_id"] == job_id]
    return found


def wait(predicate: Callable[[], bool], timeout: float, what: Callable[[], object]) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what()}"
        time.sleep(0.2)


def output(cluster: SlurmCluster, job_id: int) -> str:
    path = cluster.root / f"out-{job_id}.txt"
    return path.read_text() if path.exists() else ""


def test_every_node_is_up_with_its_gpus_declared(cluster: SlurmCluster) -> None:
    nodes = {n["name"]: n for n in cluster.json("sinfo")["nodes"]}
    assert sorted(nodes) == cluster.spec.node_names()
    assert {n["gres"] for n in nodes.values()} == {"gpu:4"}
    assert all(n["state"] == "idle" for n in nodes.values()), nodes


def test_each_step_is_told_its_rank_and_the_gpus_it_holds(cluster: SlurmCluster) -> None:
    job_id = submit(cluster, 'srun bash -c \'echo "rank=$SLURM_PROCID/$SLURM_NTASKS node=$SLURMD_NODENAME '
                             'cvd=$CUDA_VISIBLE_DEVICES step=$SLURM_STEP_GPUS"\'\n',
                    "--nodes=2", "--ntasks-per-node=1", "--gres=gpu:2")
    wait(lambda: job(cluster, job_id)["job_state"] == "COMPLETED", 20, lambda: job(cluster, job_id))
    lines = sorted(output(cluster, job_id).split())
    ranks = sorted(line for line in lines if line.startswith("rank="))
    assert ranks == ["rank=0/2", "rank=1/2"], lines
    assert lines.count("cvd=0,1") == 2 and lines.count("step=0,1") == 2, lines


def test_a_node_that_dies_goes_down_and_a_requeueable_job_runs_again_elsewhere(cluster: SlurmCluster) -> None:
    job_id = submit(cluster, 'srun bash -c \'echo "start restart=${SLURM_RESTART_COUNT:-0} node=$SLURMD_NODENAME"; '
                             "sleep 600'\n", "--nodes=2", "--ntasks-per-node=1", "--gres=gpu:2", "--requeue")
    wait(lambda: output(cluster, job_id).count("start restart=0") == 2, 20, lambda: job(cluster, job_id))
    first = job(cluster, job_id)["nodes"]
    victim = cluster.spec.node_names()[0] if "0" in first else cluster.spec.node_names()[1]
    killed = cluster.kill_node(victim)
    assert killed, f"no process of {victim} found"
    t0 = time.monotonic()
    wait(lambda: "DOWN" in cluster.node_states()[victim], 60, cluster.node_states)
    down_s = time.monotonic() - t0
    wait(lambda: output(cluster, job_id).count("restart=1") == 2, CRED_EXPIRE_S + 30, lambda: (job(cluster, job_id),
                                                                                 output(cluster, job_id)))
    again = job(cluster, job_id)
    assert again["job_state"] == "RUNNING" and again["restart_cnt"] == 1, again
    assert victim not in again["nodes"], again
    print(f"slurm: {victim} DOWN {down_s:.1f} s after its processes were killed (SlurmdTimeout={TIMEOUT_S}); "
          f"job {job_id} running again on {again['nodes']} {time.monotonic() - t0:.1f} s after the kill")
    cluster.restore_node(victim)
    cluster.wait_nodes([victim], ("IDLE", "MIXED", "ALLOCATED"), 30)
    cluster.run("scancel", str(job_id))


@pytest.mark.parametrize("cluster", [False], indirect=True, ids=["JobRequeue=0"])
def test_with_requeue_off_a_job_on_a_dead_node_ends_node_fail(cluster: SlurmCluster) -> None:
    job_id = submit(cluster, "srun sleep 600\n", "--nodes=2", "--ntasks-per-node=1", "--gres=gpu:2")
    wait(lambda: job(cluster, job_id)["job_state"] == "RUNNING", 20, lambda: job(cluster, job_id))
    victim = sorted(cluster.spec.node_names())[0]
    if victim not in job(cluster, job_id)["nodes"]:
        victim = cluster.spec.node_names()[1]
    cluster.kill_node(victim)
    wait(lambda: job(cluster, job_id)["job_state"] == "NODE_FAIL", 60, lambda: job(cluster, job_id))
    assert job(cluster, job_id)["restart_cnt"] == 0
