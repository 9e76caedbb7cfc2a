"""The accelerator access feature on a real Slurm (issue 47, Done-when 1 and 2): ``firedrill run --profile`` of the
shipped ``accelerator_access.feature``, unedited, against a node of 4 simulated GPUs.  Each probe is a batch job on
that node; Slurm tells it its GPUs (``SLURM_STEP_GPUS``), and whether it can open the others is the kernel's
answer: with ``ConstrainDevices=yes`` (task/cgroup) every scenario PASSes; with devices unconstrained (task/none,
which the site's slurm.conf may well say) every job reaches every GPU of the node, and the feature FAILs naming the
job and the GPUs it could open that it was not given."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.realslurm.cluster import CGROUP_ROOT, SlurmCluster, SlurmClusterSpec, running
from tests.realslurm.drill import REPO, firedrill_run
from tests.realslurm.test_cluster import TUNED

pytestmark = [pytest.mark.realslurm,
              pytest.mark.skipif(not Path(CGROUP_ROOT, "devices", "devices.allow").exists(),
                                 reason="this machine has no cgroup v1 devices controller, which Slurm 22.05's "
                                        "task/cgroup confines devices with")]

FEATURE = (REPO / "features" / "accelerator_access.feature").read_text()


@pytest.fixture(params=[True, False], ids=["constrained", "unconstrained"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SlurmCluster]:
    spec = SlurmClusterSpec(tmp_path / "slurm", nodes=1, gpus_per_node=4, constrain_devices=request.param, **TUNED)
    with running(spec) as made:
        yield made


def run_feature(cluster: SlurmCluster, work: Path) -> tuple[str, dict[str, dict[str, Any]]]:
    devices = f"{cluster.root / 'dev'}/{{node}}"  # each simulated node's GPU files, as gres.conf names them
    proc, results = firedrill_run(cluster, work, FEATURE, name="accelerator_access.feature",
                                  extra_slurm=(f"device_dir: {devices}",))
    return proc.stdout + proc.stderr, {r["scenario"]: r for r in results}


def test_a_job_reaches_only_its_own_gpus_where_slurm_constrains_devices_and_every_one_where_not(
        cluster: SlurmCluster, tmp_path: Path) -> None:
    out, results = run_feature(cluster, tmp_path)
    verdicts = {name: r["verdict"] for name, r in results.items()}
    print("accelerator access on Slurm, " + ("constrained" if cluster.spec.constrain_devices else "unconstrained")
          + ": " + "; ".join(f"{n}: {r['verdict']} ({r['seconds']:.1f} s)" for n, r in results.items()))
    (none, two, side) = results.values()
    if cluster.spec.constrain_devices:
        assert set(verdicts.values()) == {"PASS"}, out
        # the job of 2 GPUs was told the node's indexes, and opened exactly those
        (job,) = two["details"]["access"]["pods"].values()
        assert job["requested"] == 2 and sorted(job["last"]["opened"]) == ["nvidia0", "nvidia1"], job
        assert job["last"]["visible"] == "0,1", job
        jobs = side["details"]["access"]["pods"]
        assert sorted(j["last"]["visible"] for j in jobs.values()) == ["0", "1"], jobs
        return
    assert list(verdicts.values()) == ["FAIL"] * 3, out
    # the job that asked for no GPU reached all four
    assert any("requested no GPU but opened 4 GPUs: nvidia0, nvidia1, nvidia2, nvidia3" in f
               for f in none["findings"]), none["findings"]
    assert any("requested 2 GPUs but sees 4 GPUs: 4 GPUs whose open passed the device cgroup" in f
               and "SLURM_STEP_GPUS=0,1" in f for f in two["findings"]), two["findings"]
    # side by side, each job opened the GPU the other was given: named, with both jobs and the node
    crossing = [f for f in side["findings"] if "which job" in f and "holds" in f]
    assert len(crossing) == 2 and all("on node slurm-node-0 opened nvidia" in f for f in crossing), side["findings"]
