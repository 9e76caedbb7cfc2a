"""The training canary under Slurm's own machinery (issue 47, item 2): a batch job whose step runs one canary rank
per node (``srun``), each reading its rank, world, generation, GPUs and node from what Slurm tells the task
(``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_RESTART_COUNT``, ``CUDA_VISIBLE_DEVICES``, ``SLURMD_NODENAME``),
meeting through a rendezvous file on the storage every node shares, checkpointing from rank 0.  When a node dies
under it, Slurm requeues the job and its ranks start again as the next generation and resume from the last
checkpoint: the truth is the canary's own lines, read from the step's per-task output files."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from drills.workloads.canarylog import CanaryEvent, CanaryLine, parse_line
from tests.realslurm.cluster import SlurmCluster, SlurmClusterSpec, running
from tests.realslurm.test_cluster import CRED_EXPIRE_S, SCHEDULING, TIMEOUT_S, job, submit, wait

pytestmark = pytest.mark.realslurm

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[SlurmCluster]:
    with running(SlurmClusterSpec(tmp_path / "slurm", nodes=3, gpus_per_node=4, slurmd_timeout=TIMEOUT_S,
                                  cred_expire=CRED_EXPIRE_S, scheduler_parameters=SCHEDULING)) as made:
        yield made


def canary_job(cluster: SlurmCluster, shared: Path) -> int:
    """Two ranks of 2 GPUs each, one per node, checkpointing every 5 steps on ``shared``; requeued on failure."""
    out = shared / "canary-%j-%t.log"
    script = (f"cd {REPO}\n"
              f"srun --output={out} --open-mode=append {sys.executable} -m drills.canary train "
              "--compute-seconds 0.05 --checkpoint-every 5 --peer-timeout 5\n")
    return submit(cluster, script, "--nodes=2", "--ntasks-per-node=1", "--gres=gpu:2", "--requeue",
                  f"--export=ALL,FIREDRILL_CHECKPOINT_DIR={shared / 'ckpt'},"
                  f"FIREDRILL_RENDEZVOUS_DIR={shared / 'rdv'}")


def lines(shared: Path) -> list[CanaryLine]:
    out = []
    for path in sorted(shared.glob("canary-*.log")):
        for text in path.read_text().splitlines():
            line = parse_line(text, pod=path.name, uid=path.name, node="", mono=0.0, wall=0.0)
            if line is not None:
                out.append(line)
    return out


def of(shared: Path, event: CanaryEvent, generation: str | None = None) -> list[CanaryLine]:
    return [ln for ln in lines(shared) if ln.event is event and (generation is None or ln.generation == generation)]


def test_the_canary_reads_what_slurm_tells_each_task_and_resumes_after_a_requeue(cluster: SlurmCluster) -> None:
    shared = cluster.root / "shared"
    (shared / "ckpt").mkdir(parents=True)
    (shared / "rdv").mkdir()
    job_id = canary_job(cluster, shared)
    wait(lambda: len(of(shared, CanaryEvent.CHECKPOINT, "0")) >= 2, 40, lambda: (job(cluster, job_id), lines(shared)))
    starts = of(shared, CanaryEvent.START, "0")
    assert sorted(ln.rank for ln in starts) == [0, 1], starts
    assert all(ln.fields["config"]["rank_from"] == "SLURM_PROCID" and ln.fields["gpus"] == ["0", "1"]
               for ln in starts), starts
    first_nodes = {ln.fields["config"]["node"] for ln in starts}
    assert len(first_nodes) == 2 and first_nodes <= set(cluster.spec.node_names()), starts
    victim = sorted(first_nodes)[0]
    before = max(ln.step or 0 for ln in of(shared, CanaryEvent.CHECKPOINT, "0"))
    cluster.kill_node(victim)
    wait(lambda: len(of(shared, CanaryEvent.RESUMED, "1")) >= 1, 60 + CRED_EXPIRE_S + 30,
         lambda: (job(cluster, job_id), cluster.node_states()))
    again = of(shared, CanaryEvent.START, "1")
    assert sorted(ln.rank for ln in again) == [0, 1], again
    assert victim not in {ln.fields["config"]["node"] for ln in again}, again
    resumed = int(of(shared, CanaryEvent.RESUMED, "1")[0].fields["from_step"])
    assert resumed >= before, (resumed, before)  # the newest checkpoint rank 0 logged before the kill, or later
    wait(lambda: any((ln.step or 0) > resumed for ln in of(shared, CanaryEvent.STEP, "1")), 20,
         lambda: lines(shared)[-5:])
    print(f"slurm canary: generation 0 on {sorted(first_nodes)}, {victim} killed after checkpoint {before}; "
          f"generation 1 on {sorted(ln.fields['config']['node'] for ln in again)} resumed from step {resumed}")
    cluster.run("scancel", str(job_id))
