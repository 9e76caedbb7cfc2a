"""The shipped features on a real Ray (issue 50, Done-when 1 and 2): ``firedrill run --profile`` with a Ray profile
against a head and four worker nodes of 8 declared GPUs, the GCS health check tuned.

- ``gang_submission.feature``, unedited: each gang a placement group of its workers' bundles, which Ray reserves
  whole or not at all: PASS, no partial hold, every rank on GPUs of its own;
- the same two-gangs scenario with the site's gangs asked as separate actors (``ray.gang_form: separate-actors``):
  FAIL, the gangs each holding part of the cluster;
- node pull (5.1): the canary as a Ray Train job, a node under it killed (``nodectl.py kill``: every process of
  the node's session SIGKILLed), detect = the node DEAD, evict = its Train workers dead, replace = a new worker
  group off the node, resume = the canary past its checkpoint, each timed: PASS; with ``max_failures: 0`` Ray
  Train gives up and the scenario FAILs naming the job that never came back;
- a short campaign of node kills, its effective training time from the canary's own lines;
- a run SIGKILLed once its node kill is journaled: the next run is refused until ``firedrill recover`` has
  started the node again and stopped the dead run's job.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.realray.cluster import TUNED, RayCluster, alive_node_ids
from tests.realray.drill import CLI, REPO, firedrill_run, profile_yaml, scenario
from tests.realslurm.drill import kill_once_journaled

pytestmark = pytest.mark.realray

PHASES = ("detect", "evict", "replace", "resume", "total")


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    with RayCluster(workers=4, gpus_per_worker=8, system_config=TUNED) as made:
        yield made


def measured(result: dict) -> dict:
    return {m["name"]: m["value"] for m in result["measurements"]}


def test_the_shipped_gang_feature_passes_unedited_with_every_rank_on_gpus_of_its_own(cluster: RayCluster,
                                                                                    tmp_path: Path) -> None:
    feature = (REPO / "features" / "gang_submission.feature").read_text()
    proc, results = firedrill_run(cluster, tmp_path, feature, name="gang_submission.feature")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and [r["verdict"] for r in results] == ["PASS"] * 3, out
    for result in results:
        assert measured(result)["partial-hold GPU-seconds"] == 0, (result["scenario"], measured(result))
        invariants = result["details"]["invariants"]  # no GPU served two running ranks at once
        assert invariants["breaches"] == [] and invariants["identities"], invariants
    one_gang = [g for named in results[0]["details"]["invariants"]["identities"].values() for g in named]
    assert len(one_gang) == 32 == len(set(one_gang)), one_gang  # 8 workers of 4 GPUs, each GPU once
    waiting = measured(results[2])["time until the waiting gang runs whole"]
    assert waiting >= 4, results[2]["measurements"]  # it really waited for the 5-second gang before it


def test_gangs_asked_as_separate_actors_fail_the_two_gangs_scenario_each_holding_part(cluster: RayCluster,
                                                                                      tmp_path: Path) -> None:
    proc, (result,) = firedrill_run(cluster, tmp_path, scenario("gang_submission.feature", "4.2"),
                                    name="gang_submission.feature", gang_form="separate-actors")
    assert result["verdict"] == "FAIL", proc.stdout + proc.stderr
    # a gang held GPUs with only part of its workers placed: the partial hold, or a deadlock where both did
    assert "partial-hold GPU-seconds" in result["error"] or "DEADLOCK" in result["error"], result["error"]
    held = {gang: hold["gpu_seconds"] for gang, hold in result["details"]["partial_hold"].items()}
    assert any(seconds > 0 for seconds in held.values()), held


def test_a_node_pulled_under_ray_train_is_detected_replaced_and_resumed(cluster: RayCluster, tmp_path: Path) -> None:
    proc, (result,) = firedrill_run(cluster, tmp_path, scenario("node_pull.feature", "5.1"))
    out = proc.stdout + proc.stderr
    values = measured(result)
    print("node pull on ray: " + ", ".join(f"{k} {v:.2f}" for k, v in values.items() if v is not None))
    assert proc.returncode == 0 and result["verdict"] == "PASS", out
    assert all(values[p] is not None and values[p] >= 0 for p in PHASES), values  # every phase measured
    # Ray marks a dead node's actors DEAD with it (evict 0), and a rank of the new group may step before the last
    # one starts (resume 0). Detect counts from the kill command's return: Ray Train's controller, polling every
    # 0.5 s, may see the broken connection a fraction of a second after it (0.12 s in one CI run), or before it
    # (0 s). Restarting the group takes time, and the record says who noticed first.
    assert values["replace"] > 0, values
    assert result["details"]["detected_by"] in ("the GCS marked the node DEAD",
                                                "Ray Train's controller found a worker gone (its log)"), result["details"]
    assert values["lost steps"] <= 10 and values["back in service"] is not None, values
    fault = result["details"]["fault"]
    assert fault["confirmed"] and fault["node"].startswith("w"), fault
    invariants = result["details"]["invariants"]
    assert invariants["breaches"] == [], invariants
    groups = sorted({uid.rsplit(".", 2)[1] for uid in invariants["identities"]})
    assert groups == ["0", "1"], invariants["identities"]  # the worker group Ray restarted, by its ranks' lines
    assert not any(g.startswith(fault["node"] + ":") for uid, gpus in invariants["identities"].items()
                   if uid.rsplit(".", 2)[1] == "1" for g in gpus)  # the new group is off the pulled node


def test_with_max_failures_0_ray_train_gives_up_and_node_pull_fails_naming_the_job(cluster: RayCluster,
                                                                                  tmp_path: Path) -> None:
    proc, (result,) = firedrill_run(cluster, tmp_path, scenario("node_pull.feature", "5.1"), max_failures=0)
    assert result["verdict"] == "FAIL", proc.stdout + proc.stderr
    finding = " ".join(result["findings"])
    assert "the canary job canary-fd" in finding and "ended FAILED" in finding, finding
    assert "never ran again" in finding and "max_failures is 0" in finding, finding


MIX = """\
name: node-kill-only
source: "the node-kill rows of mixes/llama3-405b.yaml, the part of it a real cluster's campaign injects"
faults:
  - kind: node-kill
    weight: 46
"""
CAMPAIGN = """\
Feature: Goodput on a real Ray
  @clause:15.9
  Scenario: A two-worker Ray Train job keeps training while nodes die
    Given a canary training job of 2 workers with 4 GPUs each, checkpointing every 5 steps
    And the job has written a checkpoint within 60 seconds
    And the campaign's seed is 3
    When faults from the {mix} mix arrive every 20 seconds on average for 40 seconds
    Then effective training time is at least 20 %
    And every fault is recovered automatically within 30 seconds
    And at most 10 steps are lost per fault
"""


def test_a_campaign_of_node_kills_is_measured_on_ray(cluster: RayCluster, tmp_path: Path) -> None:
    mix = tmp_path / "node-kill-only.yaml"
    mix.write_text(MIX)
    proc, (result,) = firedrill_run(cluster, tmp_path, CAMPAIGN.format(mix=mix), name="campaign.feature")
    out = proc.stdout + proc.stderr
    campaign = result["details"]["campaign"]
    values = measured(result)
    print(f"campaign on ray: {result['verdict']}; " + ", ".join(f"{k} {v:.2f}" for k, v in values.items()
                                                                 if v is not None))
    assert proc.returncode == 0 and result["verdict"] == "PASS", out
    injected = [f for f in campaign["faults"] if not f.get("skipped")]
    assert injected and campaign["recovered"] == len(injected), campaign["faults"]
    assert 20 <= values["effective training time"] < 100, values  # the node losses cost training time
    assert result["details"]["invariants"]["breaches"] == [], result["details"]["invariants"]


def drill_jobs_running(cluster: RayCluster) -> list[str]:
    """The drills' Ray jobs still running (the Job Submission API's list)."""
    return [j["submission_id"] for j in cluster.get("/api/jobs/") if (j.get("submission_id") or "").startswith(
        ("canary-fd", "gang-")) and j["status"] in ("PENDING", "RUNNING")]


def test_a_run_killed_mid_pull_is_refused_until_recover_restores_the_node_and_stops_its_job(cluster: RayCluster,
                                                                                          tmp_path: Path) -> None:
    """A run SIGKILLed once its fault is journaled (a CI timeout, a lost runner): nothing rolled back, the node dead,
    the canary job still running on the cluster (Ray Train carries it on without the node). The next run's plan
    refuses, naming the fault and `firedrill recover`; recover runs the restore command and stops the dead run's
    job; the node serves again and the plan goes ahead."""
    features = tmp_path / "features"
    features.mkdir()
    (features / "node_pull.feature").write_text(scenario("node_pull.feature", "5.1"))
    storage = tmp_path / "storage"
    storage.mkdir()
    profile = tmp_path / "profile.yaml"
    profile.write_text(profile_yaml(cluster, storage))
    env = {**cluster.env, "FIREDRILL_STATE_DIR": str(tmp_path / "state")}
    node = kill_once_journaled([*CLI, "run", "--profile", str(profile), "--features", str(features), "--reports",
                                str(tmp_path / "reports"), "--no-live"], env, tmp_path / "state",
                               tmp_path / "killed.log", platform="Ray", timeout=180)
    assert drill_jobs_running(cluster), "the dead run's canary job should still run"
    plan = [*CLI, "run", "--dry-run", "--profile", str(profile), "--features", str(features)]
    refused = subprocess.run(plan, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 4 and f"on Ray node {node}" in refused.stderr, refused.stdout + refused.stderr
    assert "firedrill recover" in refused.stderr, refused.stderr
    done = subprocess.run([*CLI, "recover", "--profile", str(profile)], env=env, capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"on Ray node {node}" in done.stdout and "restore" in done.stdout, done.stdout
    assert re.search(r"undone: Ray job canary-fd[0-9a-f]+", done.stdout), done.stdout
    assert alive_node_ids(cluster.dashboard_url, node), f"node {node} is not ALIVE after recover"
    deadline = time.monotonic() + 30  # a stopped job is STOPPED once its driver has exited
    while left := drill_jobs_running(cluster):
        assert time.monotonic() < deadline, left
        time.sleep(0.2)
    planned = subprocess.run(plan, env=env, capture_output=True, text=True, timeout=60)
    assert planned.returncode in (0, 3), planned.stdout + planned.stderr
