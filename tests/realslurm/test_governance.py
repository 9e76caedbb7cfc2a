"""The governance feature on a real Slurm with accounting (issue 47, Done-when 1): ``firedrill run --profile`` of the
shipped ``governance.feature``, unedited, against two nodes of 4 GPUs with slurmdbd and MariaDB, a tenant Unix user
in account tenant-a with QOS tenant-gpu (``GrpTRES=gres/gpu=4``, ``DenyOnLimit``), a partition only tenant-b may
use and a QOS only root has (``tests/realslurm/cluster.py``: ``Accounting``).  The tenant's commands run through
``runuser``, its own uid; each refusal is found in slurmctld's log.  Quota, priority and change control PASS; the
access chain is INCONCLUSIVE, naming the node identity Slurm does not have.  With the tenant given the QOS it should
not have, and its QOS's GPU limit removed, priority and quota FAIL naming what got through."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.realslurm.cluster import Accounting, SlurmCluster, SlurmClusterSpec, missing_accounting_binaries, running
from tests.realslurm.drill import REPO, firedrill_run
from tests.realslurm.test_cluster import TUNED

pytestmark = [pytest.mark.realslurm,
              pytest.mark.skipif(bool(missing_accounting_binaries()) or shutil.which("runuser") is None,
                                 reason="needs mariadb-server, slurmdbd and runuser (.ci/run installs them)")]

FEATURE = (REPO / "features" / "governance.feature").read_text()
ACCOUNTING = Accounting()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[SlurmCluster]:
    with running(SlurmClusterSpec(tmp_path / "slurm", nodes=2, gpus_per_node=4, accounting=ACCOUNTING,
                                  **TUNED)) as made:
        yield made


def run_feature(cluster: SlurmCluster, work: Path) -> tuple[str, dict[str, dict[str, Any]]]:
    governance = ("governance:",
                  f"  tenant_command: [runuser, -u, {ACCOUNTING.tenant_user}, --]",
                  f"  tenant_qos: {ACCOUNTING.limited_qos}",
                  f"  other_partition: {ACCOUNTING.restricted_partition}",
                  f"  restricted_qos: {ACCOUNTING.withheld_qos}",
                  f"  controller_log: {cluster.log_path('slurmctld')}")
    proc, results = firedrill_run(cluster, work, FEATURE, name="governance.feature", extra_slurm=governance)
    return proc.stdout + proc.stderr, {r["scenario"].split(":")[0]: r for r in results}


def test_every_gate_stops_the_tenant_and_each_refusal_is_in_slurmctlds_log(cluster: SlurmCluster,
                                                                          tmp_path: Path) -> None:
    out, results = run_feature(cluster, tmp_path)
    print("governance on Slurm: " + "; ".join(f"{n}: {r['verdict']} ({r['seconds']:.1f} s)" for n, r in results.items()))
    verdicts = {name: r["verdict"] for name, r in results.items()}
    assert verdicts == {"Admission and quota": "PASS", "Admission and quota under concurrency": "PASS",
                        "Access": "INCONCLUSIVE", "Priority": "PASS", "Change control": "PASS"}, out
    assert any("Slurm has no such thing to drill" in f for f in results["Access"]["findings"]), results["Access"]
    for name in ("Admission and quota", "Priority", "Change control"):
        attempts = results[name]["details"]["governance"]["attempts"]
        assert attempts and all(a["gate"] == "refused" and a.get("record", {}).get("sha256") for a in attempts), \
            (name, attempts)
    change = results["Change control"]["details"]["governance"]["attempts"]
    assert [a["record"]["line"].split("] ", 1)[-1].split(" RPC")[0] for a in change] == [
        "error: Security violation, UPDATE_NODE", "error: Security violation, REQUEST_KILL_JOB",
        "error: Security violation, DELETE_NODE"], change
    burst = results["Admission and quota under concurrency"]["details"]["governance"]
    assert burst["burst"]["gpus_running_at_once"] <= 4, burst  # two jobs of 2 ran, the third was held
    assert any("Reason=QOSGrpGRES" in a.get("record", {}).get("line", "") for a in burst["attempts"]), burst


def test_a_tenant_given_too_much_fails_naming_what_got_through(cluster: SlurmCluster, tmp_path: Path) -> None:
    cluster.sacctmgr("modify", "user", ACCOUNTING.tenant_user, "set", f"qos+={ACCOUNTING.withheld_qos}")
    cluster.sacctmgr("modify", "qos", ACCOUNTING.limited_qos, "set", "GrpTRES=gres/gpu=-1")
    out, results = run_feature(cluster, tmp_path)
    assert results["Priority"]["verdict"] == "FAIL", out
    assert any(f"QOS {ACCOUNTING.withheld_qos}" in f and "let it through" in f
               for f in results["Priority"]["findings"]), results["Priority"]["findings"]
    assert results["Admission and quota"]["verdict"] == "FAIL", out
    assert any("has no GrpTRES limit on gres/gpu" in f for f in results["Admission and quota"]["findings"]), \
        results["Admission and quota"]["findings"]
    assert results["Change control"]["verdict"] == "PASS", out
