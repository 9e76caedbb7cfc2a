"""The training canary on a Ray cluster: what a Ray job's entrypoint runs (issue 50).

    python -m drills.canary.raytrain train --name NAME --workers N --gpus G --cpus C --compute-seconds S \
        --checkpoint-every K --storage DIR --max-failures M [--steps-total T] [--placement-strategy SPREAD]
    python -m drills.canary.raytrain gang --name NAME --workers N --gpus G --compute-seconds S --steps-total T \
        --form placement-group|separate-actors

``train`` is a Ray Train v2 ``DataParallelTrainer`` of N workers that each reserve G GPUs and C CPUs.  Ray
Train restarts the whole worker group when a worker dies, up to M times, and hands it the last checkpoint it
registered.  ``gang`` is N plain actors of G GPUs each, asked as one placement group (Ray reserves them whole
or not at all) or as separate actors (Ray places what fits: a gang can run in part).

Every worker writes the canary's usual lines (:mod:`drills.canary.log`: one JSON object per line, on stdout,
flushed).  Ray sends them to the job's log, each prefixed with its worker, e.g. ``(RayTrainWorker pid=12)``,
sometimes in colour; a reader strips that and parses from the first ``{``.  Ray Train v2's print patch is off
in the workers, so each line appears once.  Only the ``train`` driver's own failure line is plain text:
``canary fit-failed <ExceptionType>: <message>``.

The module imports ``ray`` only inside functions, so it imports without Ray installed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from drills.canary.log import Event, EventLog

__all__ = ["GENERATION_FILE", "SNAPSHOT_FILE", "GangWorker", "checkpoint_dir_name", "main", "next_generation",
           "registered", "registered_step", "train_loop", "whole_state"]

GENERATION_FILE = "firedrill-generation"
"""In ``DIR/NAME``: the generation the newest worker group took (a counter, one more per group start)."""
SNAPSHOT_FILE = "checkpoint_manager_snapshot.json"
"""In ``DIR/NAME``: Ray Train v2's record of the checkpoints it registered (written by its controller)."""
STATE_FILE = "state.json"
"""In a checkpoint directory: ``{"step", "generation"}``."""
DIGEST_FILE = "digest"
"""In a checkpoint directory: ``sha256:<hex>`` of state.json's bytes."""
FINAL_WAIT_S = 10.0
"""At the end of a finite run, rank 0 waits at most this long for Ray to register the last checkpoint, so its
``checkpoint`` line can still come."""

# Ray's driver folds lines that differ only in their numbers ("[repeated 2x across cluster]").  A canary line
# is one word full of digits, which that rule never folds; turning the folding off keeps it so for any line.
_DRIVER_ENV = {"RAY_DEDUP_LOGS": "0"}
_WORKER_ENV = {"RAY_TRAIN_ENABLE_PRINT_PATCH": "0"}
"""Train v2 sends a worker's print to its logger as well as stdout (every line twice in the job's log): off."""


# --- what Ray registered ---------------------------------------------------------------------------------------
def experiment_dir(storage: str | os.PathLike[str], name: str) -> Path:
    """Where Ray Train keeps run ``name``'s checkpoints and records: ``DIR/NAME``."""
    return Path(storage) / name


def registered(storage: str | os.PathLike[str], name: str) -> dict[str, Any] | None:
    """The latest checkpoint Ray Train registered for run ``name``: ``{"checkpoint_dir_name", "metrics"}`` from
    its snapshot's ``latest_checkpoint_result``, i.e. the checkpoint a restarted worker group gets.  None when
    there is none yet, or the snapshot cannot be read now (Ray rewrites it in place, so a read can catch it half
    written; the next read will do)."""
    try:
        snapshot = json.loads((experiment_dir(storage, name) / SNAPSHOT_FILE).read_text())
    except (OSError, ValueError):
        return None
    latest = snapshot.get("latest_checkpoint_result") if isinstance(snapshot, dict) else None
    if not isinstance(latest, dict) or not isinstance(latest.get("metrics"), dict):
        return None
    return latest


def registered_step(storage: str | os.PathLike[str], name: str) -> int | None:
    """The step of the latest checkpoint Ray Train registered for run ``name`` (None: none, or unreadable now)."""
    latest = registered(storage, name)
    step = latest["metrics"].get("step") if latest else None
    return step if isinstance(step, int) else None


def next_generation(storage: str | os.PathLike[str], name: str) -> int:
    """Take the next generation for a worker group that starts now: 0 for the first, then one more each time.
    The counter lives in ``DIR/NAME/firedrill-generation`` and is replaced atomically (a temporary file, then
    ``os.replace``).  Only rank 0 calls this."""
    where = experiment_dir(storage, name)
    where.mkdir(parents=True, exist_ok=True)
    counter = where / GENERATION_FILE
    try:
        generation = int(counter.read_text().strip()) + 1
    except (OSError, ValueError):
        generation = 0
    fd, tmp = tempfile.mkstemp(prefix=f".{GENERATION_FILE}-", dir=where)
    with os.fdopen(fd, "w") as f:
        f.write(f"{generation}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, counter)
    return generation


def checkpoint_dir_name(step: int, generation: int) -> str:
    """The name of step ``step``'s checkpoint directory under ``DIR/NAME`` (the ``file`` of its lines).  The
    generation is in it: a group that resumed from an older checkpoint writes a step again, in a new one."""
    return f"checkpoint-g{generation:04d}-s{step:010d}"


def _write_state(directory: Path, step: int, generation: int) -> str:
    """Write a checkpoint's state.json and its digest file; return the digest."""
    body = json.dumps({"step": step, "generation": generation}, sort_keys=True, separators=(",", ":")).encode()
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    (directory / STATE_FILE).write_bytes(body)
    (directory / DIGEST_FILE).write_text(digest + "\n")
    return digest


def whole_state(directory: Path) -> tuple[int, str | None]:
    """A checkpoint's step, and its digest when its state.json is whole (the digest beside it matches its bytes);
    None for a torn or unsigned one."""
    body = (directory / STATE_FILE).read_bytes()
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    said = directory / DIGEST_FILE
    whole = said.exists() and said.read_text().strip() == digest
    return int(json.loads(body)["step"]), digest if whole else None


# --- the train side (one Ray Train worker) ---------------------------------------------------------------------
def train_loop(config: dict[str, Any]) -> None:
    """One Ray Train worker's run: START, RESUMED, then a STEP line per step; every ``checkpoint_every`` steps a
    checkpoint reported to Ray (rank 0 writes it), whose CHECKPOINT line rank 0 writes once Ray registered it."""
    import ray
    import ray.train
    from ray.train.collective import broadcast_from_rank_zero

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    storage, name = config["storage"], config["name"]
    mine = next_generation(storage, name) if rank == 0 else None
    generation = int(broadcast_from_rank_zero(mine))
    log = EventLog(sys.stdout, rank, world, str(generation))
    log.emit(Event.START, pid=os.getpid(),
             config={"node_id": ray.get_runtime_context().get_node_id(), "job": name, "workers": config["workers"],
                     "gpus_per_worker": config["gpus"]},
             gpus=[str(g) for g in ray.get_gpu_ids()], cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))

    from_step, resumed_from = 0, None
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            from_step, digest = whole_state(Path(d))
        resumed_from = Path(checkpoint.path).name
        if rank == 0 and digest is not None:
            # Ray handed it over, so Ray registered it, and its bytes are whole: logged complete here too, for a
            # rank 0 that died between Ray registering it and its next look at Ray's record never logged it
            log.emit(Event.CHECKPOINT, step=from_step, file=resumed_from, digest=digest, seen="on resume")
    log.emit(Event.RESUMED, from_step=from_step, checkpoint=resumed_from, skipped=[])

    every, total, seconds = config["checkpoint_every"], config["steps_total"], config["compute_seconds"]
    pending: dict[int, tuple[str, str]] = {}  # rank 0: step -> (file, digest) reported, not yet registered

    def announce_registered() -> None:
        # rank 0, once a step: one read of Ray's snapshot, no wait
        if not pending:
            return
        step = registered_step(storage, name)
        covered = [s for s in pending if step is not None and s <= step]
        if covered:
            newest = max(covered)
            file, digest = pending[newest]
            log.emit(Event.CHECKPOINT, step=newest, file=file, digest=digest)
            for s in covered:
                del pending[s]

    step = from_step
    while total == 0 or step < total:
        n = step + 1
        t0 = time.monotonic()
        time.sleep(seconds)
        t1 = time.monotonic()
        comm_s = 0.0
        if every > 0 and n % every == 0:
            file = checkpoint_dir_name(n, generation)
            reported = None
            tmp = None
            if rank == 0:
                log.emit(Event.CHECKPOINT_BEGIN, step=n, file=file)
                tmp = Path(tempfile.mkdtemp(prefix="firedrill-ckpt-"))
                pending[n] = (file, _write_state(tmp, n, generation))
                time.sleep(config.get("checkpoint_seconds", 0.0))  # a slow store: the write takes this long
                reported = ray.train.Checkpoint.from_directory(str(tmp))
            t2 = time.monotonic()
            ray.train.report({"step": n, "generation": generation}, checkpoint=reported, checkpoint_dir_name=file)
            comm_s = time.monotonic() - t2
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)  # Ray copied it to DIR/NAME/<file>
        step = n
        log.emit(Event.STEP, step=n, input_s=0.0, compute_s=round(t1 - t0, 6), comm_s=round(comm_s, 6),
                 wall_s=round(time.monotonic() - t0, 6))
        if rank == 0:
            announce_registered()

    if rank == 0 and pending:  # the last checkpoint: Ray registers it within a poll or two
        deadline = time.monotonic() + FINAL_WAIT_S
        while pending and time.monotonic() < deadline:
            time.sleep(0.1)
            announce_registered()
    log.emit(Event.EXIT, code=0, reason="complete", step=step, message=f"reached step {total}")


def run_train(args: argparse.Namespace) -> int:
    """The ``train`` driver: start the trainer, wait for it; 0 when it finished, 1 (and one plain line) when not."""
    import ray
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    ray.init(log_to_driver=True)
    resources: dict[str, float] = {"CPU": args.cpus}
    if args.gpus > 0:
        resources["GPU"] = args.gpus
    trainer = DataParallelTrainer(
        train_loop,
        train_loop_config={"name": args.name, "storage": args.storage, "workers": args.workers, "gpus": args.gpus,
                           "compute_seconds": args.compute_seconds, "checkpoint_every": args.checkpoint_every,
                           "steps_total": args.steps_total, "checkpoint_seconds": args.checkpoint_seconds},
        scaling_config=ScalingConfig(num_workers=args.workers, use_gpu=args.gpus > 0, resources_per_worker=resources,
                                     placement_strategy=args.placement_strategy),
        run_config=RunConfig(name=args.name, storage_path=args.storage,
                             failure_config=FailureConfig(max_failures=args.max_failures),
                             worker_runtime_env={"env_vars": dict(_WORKER_ENV)}),
    )
    try:
        trainer.fit()
    except Exception as exc:  # the harness reads this line: the job failed, and why (on one line)
        print(f"canary fit-failed {type(exc).__name__}: {' '.join(str(exc).split())}", flush=True)
        return 1
    return 0


# --- the gang side (plain actors) ------------------------------------------------------------------------------
class GangWorker:
    """One member of a gang: a Ray actor of G GPUs that logs START, T steps and EXIT."""

    def __init__(self, name: str, rank: int, world: int) -> None:
        self.name, self.rank, self.world = name, rank, world

    def run(self, compute_seconds: float, steps_total: int) -> int:
        """START, then a STEP line every ``compute_seconds`` (``steps_total`` of them; 0: until stopped), then
        EXIT.  Returns the last step."""
        import ray

        log = EventLog(sys.stdout, self.rank, self.world, "0")
        log.emit(Event.START, pid=os.getpid(),
                 config={"node_id": ray.get_runtime_context().get_node_id(), "job": self.name},
                 gpus=[str(g) for g in ray.get_gpu_ids()], cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))
        step = 0
        while steps_total == 0 or step < steps_total:
            t0 = time.monotonic()
            time.sleep(compute_seconds)
            step += 1
            wall = round(time.monotonic() - t0, 6)
            log.emit(Event.STEP, step=step, input_s=0.0, compute_s=wall, comm_s=0.0, wall_s=wall)
        log.emit(Event.EXIT, code=0, reason="complete", step=step, message=f"reached step {steps_total}")
        return step


def run_gang(args: argparse.Namespace) -> int:
    """The ``gang`` driver: N named actors, as one placement group or one by one; waits for every run."""
    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    ray.init(log_to_driver=True)
    actor = ray.remote(num_cpus=0, num_gpus=args.gpus)(GangWorker)
    group = None
    if args.form == "placement-group":  # asked whole; not waited for here, the members wait with it
        group = placement_group([{"GPU": args.gpus}] * args.workers, strategy="PACK", name=args.name)
    members = []
    for rank in range(args.workers):
        options: dict[str, Any] = {"name": f"{args.name}-worker-{rank}"}
        if group is not None:
            options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                placement_group=group, placement_group_bundle_index=rank)
        members.append(actor.options(**options).remote(args.name, rank, args.workers))
    ray.get([m.run.remote(args.compute_seconds, args.steps_total) for m in members])
    return 0


# --- the command line ------------------------------------------------------------------------------------------
def parse(argv: Sequence[str]) -> argparse.Namespace:
    """The command line: ``train`` or ``gang`` and their options (a whole number of GPUs stays an int)."""
    ap = argparse.ArgumentParser(prog="python -m drills.canary.raytrain",
                                 description="The training canary as a Ray job's entrypoint.")
    sub = ap.add_subparsers(dest="mode", required=True)
    train = sub.add_parser("train", help="a Ray Train v2 data-parallel canary")
    gang = sub.add_parser("gang", help="a gang of plain actors")
    for p in (train, gang):
        p.add_argument("--name", required=True, help="the run's name (Ray Train's run, the gang's actors)")
        p.add_argument("--workers", type=int, required=True, help="how many ranks")
        p.add_argument("--gpus", type=float, required=True, help="GPUs per rank")
        p.add_argument("--compute-seconds", type=float, required=True, help="each step sleeps this long")
    train.add_argument("--cpus", type=float, required=True, help="CPUs per rank")
    train.add_argument("--checkpoint-every", type=int, required=True, help="a checkpoint every K steps (0: none)")
    train.add_argument("--storage", required=True, help="Ray Train's storage path (every node must see it)")
    train.add_argument("--max-failures", type=int, required=True, help="worker-group restarts Ray Train allows")
    train.add_argument("--steps-total", type=int, default=0, help="stop after this step (0: until stopped)")
    train.add_argument("--checkpoint-seconds", type=float, default=0.0,
                       help="rank 0's checkpoint write takes this long (between checkpoint-begin and its report)")
    train.add_argument("--placement-strategy", default="PACK", help="Ray Train's placement strategy")
    gang.add_argument("--steps-total", type=int, required=True, help="steps per rank (0: until stopped)")
    gang.add_argument("--form", choices=("placement-group", "separate-actors"), required=True,
                      help="one placement group (reserved whole) or separate actors (placed one by one)")
    args = ap.parse_args(argv)
    if args.gpus == int(args.gpus):
        args.gpus = int(args.gpus)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``train`` or ``gang`` driver; its exit code."""
    args = parse(sys.argv[1:] if argv is None else argv)
    for key, value in _DRIVER_ENV.items():  # before `ray` is imported: it reads them once
        os.environ.setdefault(key, value)
    return run_train(args) if args.mode == "train" else run_gang(args)


if __name__ == "__main__":
    # run as `python -m`: call the imported module's main, so Ray sends the loop and the actor class to the
    # workers by reference (drills.canary.raytrain.train_loop), not as copies of __main__'s
    from drills.canary import raytrain

    sys.exit(raytrain.main())
