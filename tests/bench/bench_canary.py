"""The training canary's own cost: wall time and CPU per step and per rank when it is asked to do nothing.

    python tests/bench/bench_canary.py [--steps 2000] [--ranks 1,2,4,8] [--payload-bytes 4096]

For each world size, starts that many ranks (``python -m drills.canary train``, file rendezvous on a temporary
directory, no checkpoints) with zero compute, input and communication seconds, runs ``--steps`` steps, and
prints:

- the median of the ranks' own ``wall_s`` per step (the canary's monotonic measurement: the all-reduce over
  loopback TCP, the step line, the device bookkeeping);
- the job's steps per second (first step line to last, rank 0);
- CPU seconds (user + system, from ``wait4``) per step per rank: rank 0, and the mean of the others, with the
  same world's one-step run subtracted so interpreter start-up is not counted.

Whatever the canary spends here is time a drill's step is longer than asked.  No budget is judged (the figures
go to docs/BENCHMARKS.md); exit code 1 only when a run fails.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Run:
    cpu: list[float]
    """CPU seconds of each rank, by rank."""
    step_walls: list[float]
    """Every rank's ``wall_s`` of every step."""
    rate: float
    """Rank 0's steps per second, first step line to last."""


def run(world: int, steps: int, payload: int, tmp: Path) -> Run:
    env = {**os.environ, "WORLD_SIZE": str(world), "FIREDRILL_RENDEZVOUS_DIR": str(tmp / "rdv"),
           "FIREDRILL_GENERATION": f"w{world}s{steps}",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    for name in ("MASTER_ADDR", "MASTER_PORT", "FIREDRILL_CHECKPOINT_DIR", "FIREDRILL_DEVICE_SOCKET"):
        env.pop(name, None)
    argv = [sys.executable, "-m", "drills.canary", "train", "--steps-total", str(steps), "--compute-seconds", "0",
            "--input-seconds", "0", "--comm-seconds", "0", "--checkpoint-every", "0", "--payload-bytes",
            str(payload), "--stall-after", "30", "--peer-timeout", "120", "--rendezvous-timeout", "60"]
    procs = []
    for rank in range(world):
        out = open(tmp / f"rank{rank}-{world}-{steps}.jsonl", "w")
        procs.append((subprocess.Popen(argv, env={**env, "RANK": str(rank)}, stdout=out), out))
    cpu = []
    for proc, out in procs:
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.close()
        if proc.returncode != 0:
            raise SystemExit(f"a rank of {world} exited {proc.returncode}; see {out.name}")
        cpu.append(usage.ru_utime + usage.ru_stime)
    walls: list[float] = []
    rate = 0.0
    for rank in range(world):
        lines = [json.loads(t) for t in (tmp / f"rank{rank}-{world}-{steps}.jsonl").read_text().splitlines()]
        step_lines = [line for line in lines if line["event"] == "step"]
        walls += [line["wall_s"] for line in step_lines]
        if rank == 0 and len(step_lines) > 1:
            first, last = (dt.datetime.strptime(x["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()
                           for x in (step_lines[0], step_lines[-1]))
            rate = (len(step_lines) - 1) / (last - first) if last > first else float("inf")
    return Run(cpu, walls, rate)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--ranks", default="1,2,4,8", help="world sizes, comma-separated")
    parser.add_argument("--payload-bytes", type=int, default=4096)
    args = parser.parse_args()
    worlds = [int(w) for w in args.ranks.split(",")]
    print(f"canary overhead: {args.steps} steps, zero compute/input/comm seconds, "
          f"{args.payload_bytes} B all-reduce, file rendezvous, no checkpoints; {os.cpu_count()} CPUs")
    print(f"{'ranks':>5} {'median wall/step':>17} {'steps/s':>8} {'CPU/step rank 0':>16} {'CPU/step others':>16}")
    with tempfile.TemporaryDirectory(prefix="bench-canary-") as tmp:
        for world in worlds:
            base = run(world, 1, args.payload_bytes, Path(tmp))
            full = run(world, args.steps, args.payload_bytes, Path(tmp))
            per = [(c - b) / (args.steps - 1) for c, b in zip(full.cpu, base.cpu, strict=True)]
            others = f"{statistics.mean(per[1:]) * 1e6:12.0f} us" if world > 1 else f"{'-':>15}"
            print(f"{world:>5} {statistics.median(full.step_walls) * 1e6:14.0f} us {full.rate:8.0f} "
                  f"{per[0] * 1e6:13.0f} us {others}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
