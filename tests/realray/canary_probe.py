"""Prototype (issue 50, not wired into the harness): the training canary's shape under Ray's own machinery.

    .venv-ray/bin/python tests/realray/canary_probe.py [--max-failures 2] [--no-kill]

The harness side (this script run plainly) starts a loopback cluster (tests/realray/cluster.py: a head and
three worker nodes of 8 declared GPUs, the GCS health check tuned), submits the canary through the Job
Submission API, reads the job's logs back through that API until both ranks are past a reported checkpoint,
SIGKILLs the node that rank 1 runs on, and watches: the node marked DEAD, a new generation of the worker group,
each rank resuming from the last reported checkpoint, the job's final status. Recovery is Ray Train's alone.

The job side (`--job`, what the entrypoint runs on the head) is a Ray Train v2 `DataParallelTrainer` (no torch:
ray[train] is enough) of 2 workers each reserving {GPU: 8} in Ray Train's placement group, with
`FailureConfig(max_failures=...)`; the per-worker loop prints one `canary ...` line per event: its rank, the
world size, its node, the GPUs Ray assigned (`ray.get_gpu_ids()` and CUDA_VISIBLE_DEVICES), its generation
(one more than the checkpoint it resumed from says) and its steps, and reports a checkpoint through
`ray.train.report(..., checkpoint=...)` every few steps; `ray.train.get_checkpoint()` says where to resume.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

STEPS, EVERY, STEP_S = 40, 5, 0.5


# --- job side ------------------------------------------------------------------------------------------------
def train_loop(config: dict) -> None:
    import ray
    import ray.train

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    node = ray.get_runtime_context().get_node_id()
    start, generation = 0, 1
    ckpt = ray.train.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            state = json.loads(Path(d, "state.json").read_text())
        start, generation = state["step"] + 1, state["generation"] + 1

    def say(event: str, **kv) -> None:
        fields = " ".join(f"{k}={v}" for k, v in kv.items())
        print(f"canary {event} rank={rank} world={world} generation={generation} {fields}", flush=True)

    say("start", node=node[:12], gpus=",".join(str(g) for g in ray.get_gpu_ids()), cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        resume_from=(start - 1 if ckpt else "none"))
    for step in range(start, config["steps"]):
        time.sleep(config["step_s"])
        say("step", step=step)
        if (step + 1) % config["every"] == 0 or step + 1 == config["steps"]:
            checkpoint = None
            if rank == 0:  # one copy of the state: rank 0 writes it, every rank reports (a barrier in Ray Train)
                tmp = tempfile.mkdtemp(prefix="canary-ckpt-")
                Path(tmp, "state.json").write_text(json.dumps({"step": step, "generation": generation}))
                checkpoint = ray.train.Checkpoint.from_directory(tmp)
            ray.train.report({"step": step, "generation": generation}, checkpoint=checkpoint)
            say("checkpoint", step=step)
    say("done", step=config["steps"] - 1)


def job(args: argparse.Namespace) -> None:
    import ray
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    ray.init(log_to_driver=True)
    trainer = DataParallelTrainer(
        train_loop,
        train_loop_config={"steps": STEPS, "every": EVERY, "step_s": STEP_S},
        scaling_config=ScalingConfig(num_workers=2, use_gpu=True, resources_per_worker={"GPU": 8, "CPU": 1},
                                     placement_strategy="SPREAD"),
        run_config=RunConfig(name="canary", storage_path=args.storage,
                             failure_config=FailureConfig(max_failures=args.max_failures),
                             # Train v2 sends a worker's print to its logger as well as to stdout: each line
                             # twice in the job's log; without the patch, once
                             worker_runtime_env={"env_vars": {"RAY_TRAIN_ENABLE_PRINT_PATCH": "0"}}),
    )
    try:
        result = trainer.fit()
    except Exception as exc:  # the harness reads this line: the job FAILED and why
        print(f"canary fit-failed {type(exc).__name__}: {exc}", flush=True)
        raise
    print(f"canary fit-done metrics={result.metrics} checkpoint={result.checkpoint is not None}", flush=True)


# --- harness side --------------------------------------------------------------------------------------------
LINE = re.compile(r"canary (\w+) rank=(\d+) world=(\d+) generation=(\d+)(.*)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def events(logs: str) -> list[dict]:
    """The canary's lines in the job's log, each once: the log carries a worker's line with Ray's prefix
    `(RayTrainWorker pid=..., ip=...)` and, in colour, twice (see docs/RAY.md)."""
    out, seen = [], set()
    for m in LINE.finditer(ANSI.sub("", logs)):
        if m.group(0) in seen:
            continue
        seen.add(m.group(0))
        kv = dict(re.findall(r"(\w+)=(\S+)", m.group(5)))
        out.append({"event": m.group(1), "rank": int(m.group(2)), "world": int(m.group(3)),
                    "generation": int(m.group(4)), **kv})
    return out


def harness(args: argparse.Namespace) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    from cluster import RayCluster
    from ray.job_submission import JobStatus, JobSubmissionClient

    tuned = {"health_check_initial_delay_ms": 1000, "health_check_period_ms": 1000,
             "health_check_timeout_ms": 1000, "health_check_failure_threshold": 3}
    storage = tempfile.mkdtemp(prefix="fdray-canary-")
    with RayCluster(workers=3, gpus_per_worker=8, system_config=tuned) as c:
        client = JobSubmissionClient(c.dashboard_url)
        entry = f"{sys.executable} {Path(__file__).resolve()} --job --storage {storage} --max-failures {args.max_failures}"
        job_id = client.submit_job(entrypoint=entry, runtime_env={"env_vars": {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}})
        t0 = time.monotonic()
        print(f"submitted {job_id}", flush=True)

        def wait(cond, timeout, what):
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                logs = client.get_job_logs(job_id)
                Path(storage, "job.log").write_text(logs)
                got = cond(events(logs))
                if got:
                    return got
                if client.get_job_status(job_id) in (JobStatus.FAILED, JobStatus.STOPPED, JobStatus.SUCCEEDED):
                    got = cond(events(client.get_job_logs(job_id)))
                    if not got:
                        print(f"{time.monotonic() - t0:6.1f} s  job {client.get_job_status(job_id)} before {what}")
                    return got
                time.sleep(0.5)
            print(client.get_job_logs(job_id)[-4000:])
            raise SystemExit(f"not within {timeout} s: {what}")

        starts = wait(lambda ev: [e for e in ev if e["event"] == "start"] if
                      len({e["rank"] for e in ev if e["event"] == "start"}) == 2 else None, 120, "both ranks started")
        for e in starts:
            print(f"{time.monotonic() - t0:6.1f} s  {e}")
        wait(lambda ev: [e for e in ev if e["event"] == "checkpoint" and int(e["step"]) >= 2 * EVERY - 1], 120,
             "a second checkpoint reported")
        victim_node = next(e["node"] for e in starts if e["rank"] == 1)
        victim = next((n for n in c.nodes.values() if n.node_id and n.node_id.startswith(victim_node)), None)
        if args.no_kill or victim is None or victim.head:
            print(f"no kill ({'asked' if args.no_kill else 'rank 1 is not on a worker node'})")
        else:
            last_ckpt = max(int(e["step"]) for e in events(client.get_job_logs(job_id)) if e["event"] == "checkpoint")
            tk = time.monotonic()
            c.kill(victim.name)
            print(f"{tk - t0:6.1f} s  killed {victim.name} (node {victim.node_id[:12]}, rank 1's) after checkpoint step {last_ckpt}")
            c.wait_node_state(victim.node_id, "DEAD", timeout=c.detect_bound_s() + 5)
            print(f"{time.monotonic() - t0:6.1f} s  {victim.name} DEAD ({time.monotonic() - tk:.2f} s after the kill)")
            restarted = wait(lambda ev: [e for e in ev if e["event"] == "start" and e["generation"] > 1] if
                             len({e["rank"] for e in ev if e["event"] == "start" and e["generation"] > 1}) == 2 else None,
                             120, "the worker group restarted (both ranks, generation 2)")
            for e in restarted or []:
                print(f"{time.monotonic() - t0:6.1f} s  {e}  ({time.monotonic() - tk:.1f} s after the kill)")
        deadline = time.monotonic() + 120
        while client.get_job_status(job_id) not in (JobStatus.FAILED, JobStatus.STOPPED, JobStatus.SUCCEEDED):
            if time.monotonic() > deadline:
                raise SystemExit("the job never ended")
            time.sleep(1)
        status = client.get_job_status(job_id)
        logs = client.get_job_logs(job_id)
        print(f"{time.monotonic() - t0:6.1f} s  job {status}")
        for line in logs.splitlines():
            if "canary fit-" in line or "canary done" in line or line.startswith(("ray.train.", "The actor died")):
                print("   ", line[:300])
        Path(storage, "job.log").write_text(logs)
        print(f"job log kept at {storage}/job.log")
        return 0 if status == JobStatus.SUCCEEDED else 1


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--job", action="store_true", help="run the Ray Train job (the entrypoint's side)")
    ap.add_argument("--storage", help="Ray Train's storage_path (the job side)")
    ap.add_argument("--max-failures", type=int, default=2)
    ap.add_argument("--no-kill", action="store_true")
    args = ap.parse_args()
    if args.job:
        job(args)
        return 0
    return harness(args)


if __name__ == "__main__":
    sys.exit(main())
