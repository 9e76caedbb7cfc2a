"""The real Slurm the drills meet (issue 47, item 4): it starts in about a second and declares simulated GPUs as
GRES that Slurm binds and names to each step.  How it behaves when a node dies under a job (the node DOWN after
``SlurmdTimeout``, the job requeued, or ``NODE_FAIL`` with requeue off) is what the node-pull drill times and judges
on it (``test_nodepull.py``)."""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.realslurm.cluster import SlurmCluster, SlurmClusterSpec, running

pytestmark = pytest.mark.realslurm

TIMEOUT_S = 1
"""A tuned ``SlurmdTimeout`` (upstream 300 s): a node silent this long is set DOWN; slurmctld pings every node about
every third of it."""
MESSAGE_TIMEOUT_S = 1
"""A tuned ``MessageTimeout`` (upstream 10 s): how long slurmctld waits for a ping's answer before the node is not
responding.  With upstream's 10 s no node is seen down sooner than 10 s, whatever ``SlurmdTimeout`` says."""
CRED_EXPIRE_S = 5
"""A tuned ``AuthInfo=cred_expire`` (upstream 120 s; 5 is the least slurmctld accepts): how long it holds a requeued
batch job before it may start again."""
SCHEDULING = "bf_interval=1,sched_interval=1"
"""Tuned scheduling loops (upstream: backfill every 30 s, the main loop every 60 s), so an eligible job starts in
seconds."""
TUNED = {"slurmd_timeout": TIMEOUT_S, "message_timeout": MESSAGE_TIMEOUT_S, "cred_expire": CRED_EXPIRE_S,
         "scheduler_parameters": SCHEDULING}
"""The settings a site tunes for fast healing, as the node-pull drill meets them (docs/SLURM.md)."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    with running(SlurmClusterSpec(tmp_path_factory.mktemp("slurm"), nodes=3, gpus_per_node=4, **TUNED)) as made:
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


@pytest.mark.skipif(not Path("/sys/fs/cgroup/devices/devices.allow").exists(),
                    reason="this machine has no cgroup v1 devices controller at /sys/fs/cgroup/devices, which Slurm "
                           "22.05's task/cgroup confines devices with")
def test_with_constrained_devices_a_step_opens_only_the_gpus_it_was_given(tmp_path: Path) -> None:
    """``ConstrainDevices=yes`` (task/cgroup, the devices controller of cgroup v1) works on this machine's Slurm:
    a step given GPUs 0 and 1 of a node reaches their device files (ENXIO: the cgroup let the open through, and no
    driver answers a simulated GPU) and is refused the others (EPERM: the cgroup).  The accelerator access drill's
    Slurm side will judge this (docs/SLURM.md, "Not yet")."""
    spec = SlurmClusterSpec(tmp_path / "slurm", nodes=1, gpus_per_node=4, constrain_devices=True, **TUNED)
    with running(spec) as made:
        devices = made.gpu_files(made.spec.node_names()[0])[0].parent
        probe = ("import errno, os\n"
                 f"d = {str(devices)!r}\n"
                 "def tried(n):\n"
                 "    try:\n"
                 "        os.close(os.open(os.path.join(d, n), os.O_RDWR))\n"
                 "        return 'opened'\n"
                 "    except OSError as e:\n"
                 "        return errno.errorcode[e.errno]\n"
                 "print('opens', os.environ.get('CUDA_VISIBLE_DEVICES'), "
                 "' '.join(n + '=' + tried(n) for n in sorted(os.listdir(d))))\n")
        job_id = submit(made, f"srun python3 -c {shlex.quote(probe)}\n", "--nodes=1", "--gres=gpu:2")
        wait(lambda: job(made, job_id)["job_state"] == "COMPLETED", 30, lambda: (job(made, job_id),
                                                                                 output(made, job_id)))
        said = output(made, job_id).split()
        assert said[:2] == ["opens", "0,1"], said
        assert said[2:] == ["nvidia0=ENXIO", "nvidia1=ENXIO", "nvidia2=EPERM", "nvidia3=EPERM"], said
