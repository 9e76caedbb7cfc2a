"""The load generator against the inference canary: the rate locust sustains, and the latency the harness adds.

Run on demand (not part of the test suite):

    python tests/bench/bench_load.py [--users 4,16,64] [--light-users 2] [--duration 10] [--reps 3]
                                     [--spawn-rate N] [--quick]

Every run starts a fresh real canary (``python -m drills.inference serve`` on a loopback port, configured fast:
``--ttft-seconds 0.005 --tpot-seconds 0.001 --max-batch 256 --max-queue 1024`` by default, so the canary itself
turns nobody away) and drives it with the real load generator (``drills.load.run.run_load``: locust headless in
its own process, ``InferenceUser`` only, closed loop, all users spawned in the first second unless
``--spawn-rate`` says otherwise). For each user count it prints the median over ``--reps`` runs of:

- answered requests per second (answered samples over the span from the first request's start to the last
  one's end), failed and lost requests (from the samples, docs/LOAD.md);
- the harness's added latency: per request, the TTFT the client measured minus the canary's own ``ttft_s`` for
  the same request id (its ``served`` log line), p50 / p95 / p99 over the run's requests;
- locust's request total (its JSON file) minus the canary's served counter (``/metrics``): 0 when nothing
  failed or was lost (a failed or lost request is in locust's total, not in the canary's served count; the
  bench checks that locust's total less its failures equals the canary's count, and every answered request id
  is one the canary logged as served);
- CPU seconds per 1,000 answered requests of the locust process and of the canary process (the machine's cores
  are shared by both, so this is what bounds the rate).

The highest user count whose every run had no failure and no loss is reported as sustained (and its rate);
the light row (``--light-users``) is the added latency without queueing. No budget is judged (the figures go to
docs/BENCHMARKS.md); exit code 1 only when a run cannot be made or locust and the canary disagree on what
was answered.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "platform")]

from drills.load.run import LoadSpec, LoadUser, Outcome, nearest_rank, run_load  # noqa: E402
from refplatform.cluster import ManagedProcess, wait_until  # noqa: E402


@dataclass(frozen=True)
class Run:
    """One locust run against one fresh canary."""

    users: int
    rate: float
    """Answered requests per second, first request's start to last one's end."""
    sent: int
    answered: int
    failed: int
    lost: int
    locust_requests: int
    locust_failures: int
    served: int
    """The canary's ``firedrill_inference_requests_served_total`` after the run."""
    gaps: list[float]
    """Per answered request: client TTFT minus the canary's logged ``ttft_s``, seconds."""
    unmatched: int
    """Answered samples whose request id has no ``served`` line."""
    locust_cpu: float
    canary_cpu: float
    errors: dict[str, int]
    """Why requests were not answered (the samples' ``error``), with counts."""
    canary_events: dict[str, int]
    """The canary's ``rejected`` and ``aborted`` lines, and the ``unfinished`` and ``received`` of its ``exit``
    line."""


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def served_total(url: str) -> int:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    values = [float(m.group(1)) for m in
              re.finditer(r"^firedrill_inference_requests_served_total(?:\{[^}]*\})? (\S+)$", text, re.M)]
    if not values:
        raise SystemExit(f"no firedrill_inference_requests_served_total in the canary's /metrics:\n{text[:300]}")
    return int(sum(values))


def run(users: int, args: argparse.Namespace, tmp: Path, n: int) -> Run:
    folder = tmp / f"u{users}-{n}"
    port_file = folder / "port"
    folder.mkdir(parents=True)
    canary = ManagedProcess.spawn("inference", [
        sys.executable, "-m", "drills.inference", "serve", "--host", "127.0.0.1", "--port", "0",
        "--port-file", str(port_file), "--ttft-seconds", f"{args.ttft:g}", "--tpot-seconds", f"{args.tpot:g}",
        "--max-batch", str(args.max_batch), "--max-queue", str(args.max_queue)], folder / "inference.log")
    try:
        wait_until(lambda: port_file.is_file() or not canary.alive(), 20, "the inference canary's port file")
        if not canary.alive():
            raise SystemExit(f"the canary exited {canary.popen.returncode}:\n{canary.tail()}")
        url = f"http://127.0.0.1:{int(port_file.read_text())}"
        cpu0 = children_cpu()
        result = run_load(LoadSpec(host=url, out_dir=folder / "load", users=users,
                                   spawn_rate=args.spawn_rate or users,
                                   duration_s=args.duration, max_tokens=args.max_tokens,
                                   user_classes=(LoadUser.INFERENCE,)))
        locust_cpu = children_cpu() - cpu0
        served = served_total(url)
    finally:
        cpu0 = children_cpu()
        code = canary.stop()
        canary_cpu = children_cpu() - cpu0
    if code != 143:
        raise SystemExit(f"the canary exited {code} on SIGTERM, not 143 (drained):\n{canary.tail()}")
    logged: dict[str, float] = {}
    canary_events = {"rejected": 0, "aborted": 0, "unfinished": 0}
    for line in canary.log_path.read_text().splitlines():
        if line.startswith("{"):
            event = json.loads(line)
            if event.get("event") == "served":
                logged[event["request_id"]] = float(event["ttft_s"])
            elif event.get("event") in ("rejected", "aborted"):
                canary_events[event["event"]] += 1
            elif event.get("event") == "exit":
                canary_events["unfinished"] = int(event.get("unfinished", 0))
                canary_events["received"] = int(event.get("received", 0))
    errors: dict[str, int] = {}
    for s in result.samples:
        if s.outcome is not Outcome.ANSWERED:
            key = f"{s.outcome.value}: {s.error}"
            errors[key] = errors.get(key, 0) + 1
    answered = [s for s in result.samples if s.outcome is Outcome.ANSWERED]
    gaps = [s.ttft_s - logged[s.request_id] for s in answered if s.ttft_s is not None and s.request_id in logged]
    span = (max(s.end_mono for s in answered) - min(s.start_mono for s in answered)) if answered else 0.0
    return Run(users, len(answered) / span if span > 0 else 0.0, result.totals.sent, result.totals.answered,
               result.totals.failed, result.totals.lost, result.locust.requests, result.locust.failures, served, gaps,
               sum(s.request_id not in logged for s in answered), locust_cpu, canary_cpu, errors, canary_events)


def ms(values: list[float], q: float) -> float:
    return nearest_rank(values, q) * 1e3 if values else float("nan")


def row(label: str, runs: list[Run]) -> str:
    med = statistics.median
    answered = max(1, round(med([r.answered for r in runs])))
    return (f"{label:>12} {med([r.rate for r in runs]):8.0f} {med([r.answered for r in runs]):9.0f} "
            f"{med([r.failed for r in runs]):6.0f} {med([r.lost for r in runs]):5.0f} "
            f"{med([ms(r.gaps, 50) for r in runs]):8.2f} {med([ms(r.gaps, 95) for r in runs]):8.2f} "
            f"{med([ms(r.gaps, 99) for r in runs]):8.2f} "
            f"{max((r.locust_requests - r.served for r in runs), key=abs):9d} "
            f"{med([r.locust_cpu for r in runs]) / answered * 1e3:9.2f} "
            f"{med([r.canary_cpu for r in runs]) / answered * 1e3:9.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", default="4,16,64", help="user counts to step through, comma-separated")
    parser.add_argument("--light-users", type=int, default=2, help="the light load for the added latency")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of load per run")
    parser.add_argument("--reps", type=int, default=3, help="runs per user count (medians are printed)")
    parser.add_argument("--ttft", type=float, default=0.005, help="the canary's --ttft-seconds")
    parser.add_argument("--tpot", type=float, default=0.001, help="the canary's --tpot-seconds")
    parser.add_argument("--spawn-rate", type=float, default=0,
                        help="users started per second (0: all of them in the first second, a step of load)")
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--max-batch", type=int, default=256)
    parser.add_argument("--max-queue", type=int, default=1024)
    parser.add_argument("--quick", action="store_true", help="users 4,16, 4 s runs, one repetition")
    args = parser.parse_args()
    if args.quick:
        args.users, args.duration, args.reps = "4,16", 4.0, 1
    steps = [int(u) for u in args.users.split(",")]
    spawn = f"{args.spawn_rate:g}/s" if args.spawn_rate else "all at once"
    print(f"load generator against the inference canary: locust InferenceUser, closed loop, {args.duration:g} s "
          f"per run, {args.reps} run(s) per row (medians), users spawned {spawn}; canary ttft {args.ttft:g} s, "
          f"tpot {args.tpot:g} s, "
          f"{args.max_tokens} tokens, batch {args.max_batch}, queue {args.max_queue}; {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f} at start")
    print("added = client TTFT - canary ttft_s, same request id, ms; diff = locust's request total - the canary's "
          "served count (largest of the runs; failed and lost requests count in locust's total only); "
          "CPU = CPU seconds per 1,000 answered requests")
    print(f"{'users':>12} {'answ/s':>8} {'answered':>9} {'failed':>6} {'lost':>5} {'added50':>8} {'added95':>8} "
          f"{'added99':>8} {'diff':>9} {'CPU locst':>9} {'CPU canry':>9}")
    bad = 0
    sustained: tuple[int, float] | None = None
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-load-") as tmp:
        for label, users in [(f"{args.light_users} (light)", args.light_users), *((str(u), u) for u in steps)]:
            runs = [run(users, args, Path(tmp), n) for n in range(args.reps)]
            print(row(label, runs), flush=True)
            for r in runs:
                if r.errors:
                    print(f"  {users} users: not answered: {r.errors}; canary: {r.canary_events}")
                if r.locust_requests - r.locust_failures != r.served or r.unmatched:
                    bad += 1
                    print(f"  DISAGREE at {users} users: locust {r.locust_requests} requests, "
                          f"{r.locust_failures} failures; canary served {r.served}; "
                          f"{r.unmatched} answered ids not logged as served")
            if "light" not in label and all(r.failed == r.lost == 0 for r in runs):
                sustained = (users, statistics.median([r.rate for r in runs]))
    if sustained:
        print(f"sustained: {sustained[0]} users, {sustained[1]:.0f} answered requests/s with no failure and no loss")
    else:
        print("sustained: none of the steps ran without failures or losses")
    print(f"wall {time.monotonic() - started:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
