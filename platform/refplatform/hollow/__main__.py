"""``python -m refplatform.hollow``: run a fleet of hollow nodes against an API server until SIGTERM."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time
from pathlib import Path

from refplatform.hollow.errors import HollowError
from refplatform.hollow.fleet import FleetSpec, HollowFleet
from refplatform.hollow.tokens import read_node_tokens
from refplatform.profiles import DEFAULT_PROFILE, PROFILES, get_profile


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m refplatform.hollow",
        description="Simulate many GPU nodes in one process (kubemark-style hollow nodes): real Node and Lease "
                    "objects, each written with its own node identity; the pods bound to them are reported "
                    "Running through pods/status; no process runs for a pod.")
    p.add_argument("--api", required=True, metavar="URL", help="API server URL, e.g. https://127.0.0.1:6443")
    p.add_argument("--node-tokens-file", type=Path, required=True,
                   help="YAML 'nodes: {<node>: <token>}' (mode 0600), written by refplatform.hollow.launch; "
                        "the fleet's nodes are the ones named there")
    p.add_argument("--ca-file", type=Path, help="CA certificate that signed the API server's certificate")
    p.add_argument("--nodes", type=int, help="simulate only the first N nodes of the tokens file (default: all)")
    p.add_argument("--gpus", type=int, default=8, help="GPUs per node (default 8)")
    p.add_argument("--gpu-model", default="H100-80GB", help="simulated GPU model (default H100-80GB)")
    p.add_argument("--profile", choices=sorted(PROFILES), default=DEFAULT_PROFILE,
                   help="healing profile whose heartbeat the nodes keep (default %(default)s)")
    p.add_argument("--heartbeat", type=float, metavar="SECONDS", help="override the profile's heartbeat")
    p.add_argument("--workers", type=int, default=8, help="threads for heartbeats, and as many for pod writes")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s hollow %(levelname)s %(name)s: %(message)s")
    try:
        tokens = read_node_tokens(args.node_tokens_file)
        if args.nodes is not None:
            if not 0 < args.nodes <= len(tokens):
                raise HollowError(f"--nodes {args.nodes}: the tokens file {args.node_tokens_file} names "
                                  f"{len(tokens)} node(s); give 1..{len(tokens)}")
            tokens = dict(sorted(tokens.items())[:args.nodes])
        heartbeat = args.heartbeat if args.heartbeat is not None else get_profile(args.profile).heartbeat
        fleet = HollowFleet(FleetSpec(api=args.api, tokens=tokens, ca_file=args.ca_file, gpus=args.gpus,
                                      gpu_model=args.gpu_model, heartbeat=heartbeat, workers=args.workers))
    except HollowError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    def on_signal(signum: int, _frame: object) -> None:
        fleet.stop_event.set()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log = logging.getLogger("refplatform.hollow")
    if not fleet.start():
        fleet.stop()
        return 0
    log.info("%d hollow nodes up (heartbeat %.1fs)", len(fleet.nodes), heartbeat)
    last = time.monotonic()
    while not fleet.stop_event.wait(1.0):
        if time.monotonic() - last >= 30:
            last = time.monotonic()
            log.info("beats %d (failed %d, late %d); pods started %d, deleted %d, write failures %d",
                     fleet.wheel.beats, fleet.wheel.failures, fleet.wheel.late, fleet.kubelet.started,
                     fleet.kubelet.deleted, fleet.kubelet.failures)
    fleet.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
