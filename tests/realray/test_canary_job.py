"""The canary's job side on a real Ray 2.60 cluster (issue 50): ``python -m drills.canary.raytrain`` as a job's
entrypoint, submitted and read back through the Ray driver (drills.ray.driver) over HTTP.

One cluster (a head, three worker nodes of 8 declared GPUs, the GCS health check tuned) for, in this order:
a Ray Train canary of 2 x 8 GPUs that runs to its last step, its lines read back from the job's log, each once,
and every ``checkpoint`` line one Ray had already registered; a gang of 2 x 8 GPUs asked as one placement group;
then a Ray Train canary whose rank 1 loses its node mid-run, restarted by Ray Train on the spare node as
generation 1 and resuming at or after the last checkpoint the canary logged."""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from drills.canary.raytrain import registered, registered_step
from drills.ray.driver import RayDriver
from drills.ray.state import JobStatus, PlacementState
from tests.realray.cluster import TUNED, RayCluster, until

pytestmark = pytest.mark.realray

GPUS = 8
ANSI = re.compile(r"\x1b\[[0-9;]*m")
PREFIX = re.compile(r"^\((\w+) pid=\d+(?:, ip=[^)]*)?\) ")


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    with RayCluster(workers=3, gpus_per_worker=GPUS, system_config=TUNED) as c:
        yield c


@pytest.fixture(scope="module")
def driver(cluster: RayCluster) -> Iterator[RayDriver]:
    d = RayDriver(cluster.dashboard_url)
    try:
        yield d
    finally:
        d.close()


def canary_lines(logs: str) -> list[dict]:
    """The canary's lines in a job's log, in order: Ray's worker prefix and colours stripped, each parsed from its
    ``{``.  A worker line that starts with ``{`` and is not a JSON object fails the test (a torn or merged line);
    Ray's own lines, which can hold a ``{`` further in (``Reporting training result ...``), are not the canary's."""
    out = []
    for raw in logs.splitlines():
        line = ANSI.sub("", raw)
        m = PREFIX.match(line)
        rest = line[m.end():] if m else line
        if not rest.startswith("{"):
            continue
        parsed = json.loads(rest)  # raises: the line did not parse
        assert isinstance(parsed, dict) and {"seq", "event", "rank", "generation"} <= parsed.keys(), raw
        out.append(parsed)
    return out


def each_once(lines: list[dict]) -> None:
    """Every process's lines arrived once each, none missing: its ``seq`` runs 1, 2, 3, ..."""
    by_process: dict[tuple, list[int]] = {}
    for e in lines:
        by_process.setdefault((e["generation"], e["rank"]), []).append(e["seq"])
    for process, seqs in by_process.items():
        assert sorted(seqs) == list(range(1, len(seqs) + 1)), f"{process}: lines lost or repeated: {sorted(seqs)}"


def train_job(driver: RayDriver, cluster: RayCluster, name: str, storage: str, steps: int, max_failures: int) -> str:
    return driver.submit(f"{sys.executable} -m drills.canary.raytrain train --name {name} --workers 2 --gpus {GPUS} "
                         f"--cpus 1 --compute-seconds 0.1 --checkpoint-every 5 --storage {storage} "
                         f"--max-failures {max_failures} --steps-total {steps} --placement-strategy SPREAD",
                         runtime_env={"env_vars": cluster.env})


def test_a_train_canary_runs_to_its_last_step_and_logs_only_checkpoints_ray_registered(
        cluster: RayCluster, driver: RayDriver, tmp_path: Path) -> None:
    storage, name = str(tmp_path), "canary-a"
    job = train_job(driver, cluster, name, storage, steps=30, max_failures=0)
    ahead = []

    def finished() -> bool:
        # the log first, then the snapshot: a checkpoint line already logged must be in the snapshot read after it
        lines = canary_lines(driver.job_logs(job))
        latest = until(lambda: registered(storage, name) or not any(e["event"] == "checkpoint" for e in lines),
                       5, "Ray's checkpoint snapshot readable")
        step = latest["metrics"]["step"] if isinstance(latest, dict) else None
        ahead.extend(e for e in lines if e["event"] == "checkpoint" and (step is None or e["step"] > step))
        return driver.job(job).status.finished

    until(finished, 90, "the canary job finished", poll=0.5)
    assert not ahead, f"checkpoint lines ahead of what Ray had registered: {ahead}"
    assert driver.job(job).status is JobStatus.SUCCEEDED, driver.job_logs(job)[-3000:]
    lines = canary_lines(driver.job_logs(job))
    each_once(lines)
    starts = {e["rank"]: e for e in lines if e["event"] == "start"}
    assert set(starts) == {0, 1} and {e["generation"] for e in lines} == {"0"}
    workers = {n.node_id for n in cluster.nodes.values() if not n.head}
    nodes = {e["config"]["node_id"] for e in starts.values()}
    assert len(nodes) == 2 and nodes <= workers
    assert all(len(e["gpus"]) == GPUS and e["config"]["gpus_per_worker"] == GPUS for e in starts.values())
    assert [e["step"] for e in lines if e["event"] == "step" and e["rank"] == 0] == list(range(1, 31))
    checkpoints = [e for e in lines if e["event"] == "checkpoint"]
    snapshot_dirs = {r["checkpoint_dir_name"] for r in
                     json.loads((Path(storage, name) / "checkpoint_manager_snapshot.json").read_text())[
                         "checkpoint_results"]}
    assert checkpoints and all(e["file"] in snapshot_dirs and e["digest"].startswith("sha256:") for e in checkpoints)
    assert registered_step(storage, name) == 30
    assert sorted(e["rank"] for e in lines if e["event"] == "exit" and e["reason"] == "complete") == [0, 1]


def test_a_gang_as_one_placement_group_runs_whole(cluster: RayCluster, driver: RayDriver) -> None:
    job = driver.submit(f"{sys.executable} -m drills.canary.raytrain gang --name gang-c --workers 2 --gpus {GPUS} "
                        "--compute-seconds 0.1 --steps-total 30 --form placement-group",
                        runtime_env={"env_vars": cluster.env})
    group = until(lambda: [g for g in driver.placement_groups(name="gang-c") if g.state is PlacementState.CREATED],
                  60, "the gang's placement group CREATED")[0]
    until(lambda: driver.job(job).status.finished, 60, "the gang job finished", poll=0.5)
    assert driver.job(job).status is JobStatus.SUCCEEDED, driver.job_logs(job)[-3000:]
    lines = canary_lines(driver.job_logs(job))
    each_once(lines)
    starts = {e["rank"]: e for e in lines if e["event"] == "start"}
    assert set(starts) == {0, 1} and all(len(e["gpus"]) == GPUS for e in starts.values())
    assert {e["config"]["node_id"] for e in starts.values()} == {b.node_id for b in group.placed}
    assert len(group.placed) == 2 and all(b.resources == {"GPU": GPUS} for b in group.bundles)
    assert sorted(e["rank"] for e in lines if e["event"] == "exit" and e["code"] == 0) == [0, 1]


def test_a_train_canary_whose_node_dies_restarts_and_resumes_at_or_after_its_last_checkpoint(
        cluster: RayCluster, driver: RayDriver, tmp_path: Path) -> None:
    storage, name = str(tmp_path), "canary-b"
    job = train_job(driver, cluster, name, storage, steps=40, max_failures=1)
    lines = until(lambda: (lambda ls: ls if any(e["event"] == "checkpoint" for e in ls) else None)(
        canary_lines(driver.job_logs(job))), 90, "a checkpoint line", poll=0.3)
    rank1 = next(e for e in lines if e["event"] == "start" and e["rank"] == 1)["config"]["node_id"]
    victim = next(n for n in cluster.nodes.values() if n.node_id == rank1)
    logged = max(e["step"] for e in lines if e["event"] == "checkpoint")
    killed = time.monotonic()
    cluster.kill(victim.name)

    def restarted() -> list[dict]:
        new = [e for e in canary_lines(driver.job_logs(job)) if e["event"] in ("start", "resumed")
               and e["generation"] == "1"]
        return new if len(new) == 4 else []

    new = until(restarted, 90, "both ranks started again as generation 1", poll=0.5)
    print(f"[canary] killed {victim.name} after checkpoint line {logged}; generation 1 up "
          f"{time.monotonic() - killed:.1f} s later", flush=True)
    assert rank1 not in {e["config"]["node_id"] for e in new if e["event"] == "start"}
    until(lambda: driver.job(job).status.finished, 60, "the restarted canary finished", poll=0.5)
    assert driver.job(job).status is JobStatus.SUCCEEDED, driver.job_logs(job)[-3000:]
    lines = canary_lines(driver.job_logs(job))
    # the honesty check: no checkpoint the canary called durable before the restart is lost by it
    logged = max([logged] + [e["step"] for e in lines if e["event"] == "checkpoint" and e["generation"] == "0"])
    resumed = [e for e in lines if e["event"] == "resumed" and e["generation"] == "1"]
    assert sorted(e["rank"] for e in resumed) == [0, 1]
    assert all(e["from_step"] >= logged and e["checkpoint"] for e in resumed), (logged, resumed)
    assert len({e["from_step"] for e in resumed}) == 1
    print(f"[canary] checkpoint lines of generation 0 up to step {logged}; resumed from {resumed[0]['from_step']}",
          flush=True)
    assert [e["step"] for e in lines if e["event"] == "step" and e["rank"] == 0 and e["generation"] == "1"] == list(
        range(resumed[0]["from_step"] + 1, 41))
