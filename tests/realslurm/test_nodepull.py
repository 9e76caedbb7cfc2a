"""The node-pull feature on a real Slurm (issue 47, Done-when 1 and 2): ``firedrill run --profile`` with a Slurm
profile runs the shipped scenario 5.1, its windows fitted to this cluster's tuning (``tests/realslurm/drill.py``),
against the distribution's slurmctld and slurmd.  The canary runs as a batch job of one task per node; a node is
killed with ``nodectl.py`` (its slurmd, step daemons and tasks SIGKILLed: a host crash) and every phase is timed
from the harness's own reads (``sinfo``, ``squeue``) and the canary's own lines:

- the node goes NOT_RESPONDING (detect), Slurm sets it DOWN and requeues the job (evict), the job runs again on
  the other nodes as the next generation (replace), the canary resumes from its last checkpoint (resume); the
  restore command powers the node on and it serves again (back in service): PASS, the invariants held;
- with ``JobRequeue=0`` the job ends NODE_FAIL and never comes back: FAIL at once, naming the job;
- scenario 5.2, the node cut off from slurmctld (``nodectl.py partition``): FAIL, split brain, since Slurm fences
  nothing it cannot reach; PASS at a site whose fence powers off a DOWN node (``tests/realslurm/fence.py``).
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.realslurm.cluster import SlurmCluster, SlurmClusterSpec, running
from tests.realslurm.drill import CLI, TUNED_WINDOWS, firedrill_run, kill_once_journaled, profile_yaml, scenario
from tests.realslurm.fence import FenceAgent
from tests.realslurm.test_cluster import MESSAGE_TIMEOUT_S, TUNED

pytestmark = pytest.mark.realslurm

PHASES = ("detect", "evict", "replace", "resume", "total")


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[SlurmCluster]:
    with running(SlurmClusterSpec(tmp_path / "slurm", nodes=3, gpus_per_node=4,
                                  job_requeue=getattr(request, "param", True), **TUNED)) as made:
        yield made


def test_a_node_pulled_under_the_canary_is_detected_requeued_and_resumed(cluster: SlurmCluster,
                                                                          tmp_path: Path) -> None:
    proc, (result,) = firedrill_run(cluster, tmp_path, scenario("node_pull.feature", "5.1", TUNED_WINDOWS))
    out = proc.stdout + proc.stderr
    measured = {m["name"]: m["value"] for m in result["measurements"]}
    print("node pull on slurm: " + ", ".join(f"{k} {v:.2f}" for k, v in measured.items() if v is not None))
    assert proc.returncode == 0 and result["verdict"] == "PASS", out
    assert all(measured[p] is not None and measured[p] > 0 for p in PHASES), measured
    assert measured["detect"] >= MESSAGE_TIMEOUT_S, measured  # the harness really waited for slurmctld's ping
    assert measured["lost steps"] <= 10 and measured["back in service"] is not None, measured
    fault = result["details"]["fault"]
    assert fault["confirmed"] and ("logged nothing" in fault["detail"] or "down" in fault["detail"]), fault
    # The invariants, from the canaries' own start lines: every rank named the GPUs Slurm bound to its step (by
    # index on its node), generation 0 and generation 1 each one world, and generation 1 off the pulled node.
    invariants = result["details"]["invariants"]
    assert invariants["breaches"] == [], invariants
    held = invariants["identities"]  # <job>.<generation>@<node>: the GPUs the job holds there, by its ranks
    assert sorted(key.split(".", 1)[1].split("@")[0] for key in held) == ["0", "0", "1", "1"], held
    assert all(len(gpus) == 4 and all(g.startswith(key.split("@")[1] + ":") for g in gpus)
               for key, gpus in held.items()), held
    after = {key.split("@")[1] for key in held if key.split(".", 1)[1].startswith("1@")}
    assert fault["node"] not in after and len(after) == 2, (fault, held)
    resumed = result["details"]["resume-point"]
    assert resumed["resumed_from"] == resumed["last_checkpoint_before_fault"] > 0, resumed


TORN_WINDOWS = {k: v for k, v in TUNED_WINDOWS.items() if "off the failed node" not in k and "at most" not in k}
"""Scenario 20.2's windows in CI, doubled as 5.1's are (it states no eviction or total window)."""


def test_a_node_pulled_mid_checkpoint_resumes_from_the_last_complete_one(cluster: SlurmCluster,
                                                                          tmp_path: Path) -> None:
    """Scenario 20.2 (issue 48): the node of rank 0 killed a third of the way into its canary's 3 s checkpoint write; the
    requeued job resumes from the last complete checkpoint, and the torn write never shows under a final name (the
    canary writes to a temporary file and renames it; the shared directory keeps the rename promise)."""
    proc, (result,) = firedrill_run(cluster, tmp_path, scenario("checkpoint_storage.feature", "20.2", TORN_WINDOWS),
                                    name="checkpoint_storage.feature")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and result["verdict"] == "PASS", out
    torn, resumed = result["details"]["torn"], result["details"]["resume-point"]
    assert not torn["completed"] and torn["began_before_fault_s"] < 3, torn  # the pull cut the write short
    assert resumed["resumed_from"] == resumed["last_checkpoint_before_fault"] < torn["step"], (resumed, torn)
    assert resumed["skipped"] == [], resumed


@pytest.mark.parametrize("cluster", [False], indirect=True, ids=["JobRequeue=0"])
def test_with_requeue_off_the_pull_fails_naming_the_job_that_never_came_back(cluster: SlurmCluster,
                                                                             tmp_path: Path) -> None:
    proc, (result,) = firedrill_run(cluster, tmp_path, scenario("node_pull.feature", "5.1", TUNED_WINDOWS))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and result["verdict"] == "FAIL", out
    assert "the canary job 1 ended NODE_FAIL (reason NodeDown) after node slurm-node-" in out, out
    assert "never ran again: Slurm did not requeue it" in out, out
    measured = {m["name"]: m["value"] for m in result["measurements"]}
    assert measured["detect"] is not None and measured.get("replace") is None, measured


def test_a_run_killed_mid_pull_is_refused_until_recover_restores_the_node_and_cancels_its_job(
        cluster: SlurmCluster, tmp_path: Path) -> None:
    """A run SIGKILLed once its fault is journaled (a CI timeout): nothing rolled back, the node dead, the canary
    job still on the cluster.  The next run's plan refuses, naming the fault and `firedrill recover`; recover runs
    the restore command and cancels the dead run's job; the node serves again and the plan goes ahead."""
    features = tmp_path / "features"
    features.mkdir()
    (features / "node_pull.feature").write_text(scenario("node_pull.feature", "5.1", TUNED_WINDOWS))
    profile = tmp_path / "profile.yaml"
    shared = tmp_path / "shared"
    shared.mkdir()
    profile.write_text(profile_yaml(cluster, shared))
    env = {**cluster.env(), "FIREDRILL_STATE_DIR": str(tmp_path / "state")}
    node = kill_once_journaled([*CLI, "run", "--profile", str(profile), "--features", str(features), "--reports",
                                str(tmp_path / "reports"), "--no-live"], env, tmp_path / "state",
                               tmp_path / "killed.log", platform="Slurm")
    assert [j for j in cluster.driver.jobs() if j.name.startswith("canary-") and not j.state.ended]
    plan = [*CLI, "run", "--dry-run", "--profile", str(profile), "--features", str(features)]
    refused = subprocess.run(plan, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 4 and f"on Slurm node {node}" in refused.stderr, refused.stdout + refused.stderr
    assert "firedrill recover" in refused.stderr, refused.stderr
    done = subprocess.run([*CLI, "recover", "--profile", str(profile)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"on Slurm node {node}" in done.stdout and "restore" in done.stdout, done.stdout
    assert re.search(r"undone: Slurm job \d+ canary-fd", done.stdout), done.stdout
    cluster.wait_nodes([node], ("IDLE",), 60)
    deadline = time.monotonic() + 30  # a cancelled job is COMPLETING while its steps are cleaned up
    while left := [j for j in cluster.driver.jobs() if j.name.startswith("canary-") and not j.state.ended]:
        assert time.monotonic() < deadline, left
        time.sleep(0.2)
    planned = subprocess.run(plan, env=env, capture_output=True, text=True, timeout=60)
    assert planned.returncode in (0, 3), planned.stdout + planned.stderr


PARTITION_WINDOWS = {"detects the failure within {} seconds": 10,
                     "runs again on healthy nodes within {} seconds of eviction": 20}
"""Scenario 5.2's windows in CI, doubled as 5.1's are (``tests/realslurm/drill.py``: ``TUNED_WINDOWS``)."""


def test_a_partitioned_node_s_rank_trains_on_beside_its_replacement_slurm_fences_nothing(tmp_path: Path) -> None:
    """Scenario 5.2 on stock Slurm: the node of the job's one worker is cut off from slurmctld while its task runs
    on (``nodectl.py partition``: its slurmd stopped, as a network partition leaves it). slurmctld sets it DOWN and
    requeues the job, which runs again on the spare node and resumes from its checkpoint, while the old task, out of
    its reach, trains on: Slurm has no fencing, so the promise FAILs, naming the old rank. Once the node is back,
    its slurmd kills the orphaned step."""
    spec = SlurmClusterSpec(tmp_path / "slurm", nodes=3, gpus_per_node=8, **TUNED)  # one pulled: 33 %, within 40 %
    with running(spec) as cluster:
        proc, (result,) = firedrill_run(cluster, tmp_path, scenario("node_pull.feature", "5.2", PARTITION_WINDOWS))
        out = proc.stdout + proc.stderr
        measured = {m["name"]: m["value"] for m in result["measurements"]}
        print("partition on slurm: " + ", ".join(f"{k} {v:.2f}" for k, v in measured.items() if v is not None))
        assert result["verdict"] == "FAIL", out
        assert any(f.startswith("split brain: rank 0 of the replaced job") and "generation 0" in f
                   for f in result["findings"]), result["findings"]
        assert measured["steps by replaced ranks after the resume"] > 0, measured
        assert all(measured[p] is not None for p in ("detect", "evict", "replace", "resume")), measured
        fault = result["details"]["fault"]
        assert "partition" in fault["command"], fault  # the one command was told which fault was asked for
        old = fault["node"]
        deadline = time.monotonic() + 30  # back in service, the node's slurmd kills the step it lost
        while [p for p in cluster.node_pids(old) if not _is_slurmd(p)]:
            assert time.monotonic() < deadline, cluster.node_pids(old)
            time.sleep(0.2)


def test_a_partitioned_node_is_fenced_at_a_site_that_powers_off_down_nodes(tmp_path: Path) -> None:
    """Scenario 5.2 at a site that fences (``tests/realslurm/fence.py``: a watcher powers off each node slurmctld sets
    DOWN, as a BMC's STONITH does): the same partition, and the old rank dies with its node before the requeued job
    resumes on the spare, so the promise PASSes; the restore command powers the node on and it serves again."""
    spec = SlurmClusterSpec(tmp_path / "slurm", nodes=3, gpus_per_node=8, **TUNED)
    with running(spec) as cluster, FenceAgent(cluster) as fence:
        proc, (result,) = firedrill_run(cluster, tmp_path, scenario("node_pull.feature", "5.2", PARTITION_WINDOWS))
        out = proc.stdout + proc.stderr
        measured = {m["name"]: m["value"] for m in result["measurements"]}
        print("partition on slurm, fenced: " + ", ".join(f"{k} {v:.2f}" for k, v in measured.items()
                                                         if v is not None))
        assert proc.returncode == 0 and result["verdict"] == "PASS", out
        assert measured["steps by replaced ranks after the resume"] == 0, measured
        assert all(measured[p] is not None for p in ("detect", "replace", "resume", "back in service")), measured
        old = result["details"]["fault"]["node"]
        assert [f.node for f in fence.fenced] == [old], fence.fenced  # the one node cut off, powered off once
        assert cluster.node_states()[old] & {"IDLE", "MIXED", "ALLOCATED"}, cluster.node_states()


def _is_slurmd(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "slurmd"
    except OSError:
        return True
