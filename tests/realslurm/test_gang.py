"""The gang feature on a real Slurm (issue 47, Done-when 1): ``firedrill run --profile`` of the shipped
``gang_submission.feature``, unedited, against four nodes of 8 GPUs.  Each gang is one batch job of N tasks of G
GPUs (``--ntasks --gpus-per-task``); its workers are canary ranks that rendezvous and step together, and a worker
runs when its rank says it started.  Slurm allocates a job's nodes together: every gang runs whole, the two gangs
over half the cluster each run one after the other without a deadlock, a waiting gang holds nothing: PASS, each
rank on GPUs of its own (the invariants, from the ranks' start lines).  The run reads the cluster through its
slurmrestd (``slurm.rest``, a JSON Web Token), as a site that serves the REST API sets it; every other test of the
suite reads with ``squeue --json`` and ``sinfo --json``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.realslurm.cluster import CGROUP_ROOT, SlurmCluster, SlurmClusterSpec, running
from tests.realslurm.drill import REPO, firedrill_run
from tests.realslurm.test_cluster import TUNED

pytestmark = pytest.mark.realslurm


CONSTRAINED = Path(CGROUP_ROOT, "devices", "devices.allow").exists()
"""Devices constrained as production sites run them, where this machine can (cgroup v1): each task is then told its
GPUs renumbered from 0, and GPU exclusivity must still hold between jobs, not be cried over tasks of one job."""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[SlurmCluster]:
    with running(SlurmClusterSpec(tmp_path / "slurm", nodes=4, gpus_per_node=8, constrain_devices=CONSTRAINED,
                                  rest=True, **TUNED)) as made:
        yield made


def test_the_shipped_gang_feature_passes_unedited_with_every_rank_on_gpus_of_its_own(cluster: SlurmCluster,
                                                                                    tmp_path: Path) -> None:
    feature = (REPO / "features" / "gang_submission.feature").read_text()
    proc, results = firedrill_run(cluster, tmp_path, feature, name="gang_submission.feature", rest=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and [r["verdict"] for r in results] == ["PASS"] * 3, out
    for result in results:
        measured = {m["name"]: m["value"] for m in result["measurements"]}
        assert measured["partial-hold GPU-seconds"] == 0, (result["scenario"], measured)
        invariants = result["details"]["invariants"]  # no GPU served two running ranks at once
        assert invariants["breaches"] == [] and invariants["identities"], invariants
    one_gang = [g for named in results[0]["details"]["invariants"]["identities"].values() for g in named]
    assert len(one_gang) == 32 == len(set(one_gang)), one_gang  # the job's 8 GPUs on each of its 4 nodes, once
    placed = results[0]["details"]["bind_report"]
    assert len(placed) == 8 and all(p["node"].startswith("slurm-node-") and "," not in p["node"]
                                    for p in placed.values()), placed  # each worker where its rank said it runs
    waiting = {m["name"]: m["value"] for m in results[2]["measurements"]}["time until the waiting gang runs whole"]
    assert waiting >= 4, results[2]["measurements"]  # it really waited for the 5-second gang before it
