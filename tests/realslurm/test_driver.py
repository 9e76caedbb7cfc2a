"""The harness's Slurm driver (drills/slurm) against the real Slurm: it submits a batch job, reads it and the
nodes as slurmctld reports them, cancels it, and says what went wrong, naming the command, when slurmctld is
not there; through the cluster's slurmrestd it reads the same jobs and nodes, and names a token slurmrestd
refuses and an API version it does not serve."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from drills.slurm.driver import SlurmDriver
from drills.slurm.rest import SlurmRest
from drills.slurm.state import JobState, NodeFlag, SlurmError
from tests.realslurm.cluster import REST_USER, SlurmCluster, SlurmClusterSpec, running
from tests.realslurm.test_cluster import SCHEDULING

pytestmark = pytest.mark.realslurm


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    with running(SlurmClusterSpec(tmp_path_factory.mktemp("slurm-driver"), nodes=2, gpus_per_node=4,
                                  scheduler_parameters=SCHEDULING, rest=True)) as made:
        yield made


def test_submit_read_and_cancel_a_job(cluster: SlurmCluster) -> None:
    driver = cluster.driver
    job_id = driver.submit("#!/bin/bash\nsrun sleep 60\n", ["--nodes=2", "--gres=gpu:3", "--requeue",
                                                             f"--output={cluster.root}/driver-%j.out"])
    deadline = time.monotonic() + 20
    while (job := driver.job(job_id)) is None or job.state is not JobState.RUNNING:
        assert time.monotonic() < deadline, job
        time.sleep(0.2)
    assert job.nodes == tuple(cluster.spec.node_names()) and job.gres_per_node == 3 and job.requeue
    nodes = {n.name: n for n in driver.nodes()}
    assert all(n.gpus == 4 and n.gpus_used == 3 and NodeFlag.MIXED in n.flags for n in nodes.values()), nodes
    driver.cancel(job_id)
    deadline = time.monotonic() + 20
    while (job := driver.job(job_id)) is not None and not job.state.ended:
        assert time.monotonic() < deadline, job
        time.sleep(0.2)
    assert job is None or job.state is JobState.CANCELLED


def test_a_controller_that_is_not_there_is_named_with_the_command(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=nowhere\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort=1\n"
                    "AuthType=auth/none\nMessageTimeout=1\nNodeName=n0 CPUs=1\nPartitionName=p Nodes=n0\n")
    with pytest.raises(SlurmError, match=rf"squeue --json answered with errors: Failed while looking for jobs "
                                         rf"\(slurm_load_jobs\) \(SLURM_CONF={conf}\): is slurmctld up"):
        SlurmDriver(conf=conf, timeout=20).jobs()


def through_rest(cluster: SlurmCluster, token: str | None = None, api: str = "v0.0.38") -> SlurmDriver:
    return SlurmDriver(conf=cluster.conf, workdir=cluster.root,
                       rest=SlurmRest(cluster.rest_url, REST_USER, token or cluster.rest_token(), api=api))


def test_slurmrestd_reads_the_jobs_and_nodes_the_commands_read(cluster: SlurmCluster) -> None:
    commands, rest = cluster.driver, through_rest(cluster)
    job_id = commands.submit("#!/bin/bash\nsrun sleep 60\n", ["--nodes=1", "--gres=gpu:2", "--requeue",
                                                               f"--output={cluster.root}/rest-%j.out"])
    try:
        deadline = time.monotonic() + 20
        while (job := rest.job(job_id)) is None or job.state is not JobState.RUNNING:
            assert time.monotonic() < deadline, job
            time.sleep(0.2)
        assert job.gres_per_node == 2 and job.requeue and len(job.nodes) == 1, job
        assert rest.jobs() == commands.jobs() and rest.nodes() == commands.nodes()
        assert {n.name: n.gpus_used for n in rest.nodes()}[job.nodes[0]] == 2
    finally:
        commands.cancel(job_id)
        rest.close()


def test_a_token_slurmrestd_refuses_and_an_api_it_does_not_serve_are_named(cluster: SlurmCluster) -> None:
    refused = through_rest(cluster, token="not-a-token")
    with pytest.raises(SlurmError, match=r"500, Failed while looking for jobs \(Unspecified error\), said through "
                                         r"slurmrestd: the token in \$FIREDRILL_SLURM_JWT may have expired or not be "
                                         r"nobody's \(mint a new one: scontrol token username=nobody "
                                         r"lifespan=SECONDS\)"):
        refused.jobs()
    other = through_rest(cluster, api="v0.0.36")
    with pytest.raises(SlurmError, match=r"/slurm/v0.0.36/nodes: 404: this slurmrestd does not serve "
                                         r"openapi/v0.0.36"):
        other.nodes()
