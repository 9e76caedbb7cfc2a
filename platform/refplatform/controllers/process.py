"""The controller-manager process: ``python -m refplatform.controllers``.

Starts the chosen controllers over shared informers and runs until SIGTERM.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from refplatform import core
from refplatform.client import RestClient
from refplatform.controllers.manager import Controller, ControllerManager
from refplatform.controllers.scheduler import SchedulerController

log = logging.getLogger("refplatform.controllers")


def _scheduler(client: RestClient, args: argparse.Namespace) -> Controller:
    config = core.SchedulerConfig(profile=core.Profile(args.scheduler_profile), placement=args.placement)
    return SchedulerController(client, config)


FACTORIES: dict[str, Callable[[RestClient, argparse.Namespace], Controller]] = {
    "scheduler": _scheduler,
}
"""Every controller this process can run, by name (``--controllers`` picks among them)."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m refplatform.controllers",
        description="Run the reference platform's controllers (scheduler, ...) against its API server.")
    p.add_argument("--api", required=True, metavar="URL", help="API server URL, e.g. https://127.0.0.1:6443")
    p.add_argument("--token-file", type=Path, help="file holding a cluster-admin bearer token")
    p.add_argument("--ca-file", type=Path, help="CA certificate that signed the API server's certificate")
    p.add_argument("--controllers", default=",".join(FACTORIES),
                   help=f"comma-separated controllers to run (default: all of {', '.join(FACTORIES)})")
    p.add_argument("--scheduler-profile", choices=[p.value for p in core.Profile], default=core.Profile.GANG.value,
                   help="gang: all-or-nothing gangs (default); no-gang: bind pods one by one (the deadlock baseline)")
    p.add_argument("--placement", choices=sorted(core.PLACEMENT_POLICIES), default="best-fit",
                   help="node choice among those that fit (default best-fit)")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s controllers %(levelname)s %(name)s %(message)s")
    names = [n.strip() for n in args.controllers.split(",") if n.strip()]
    unknown = [n for n in names if n not in FACTORIES]
    if unknown:
        print(f"error: unknown controller(s) {', '.join(unknown)}; known: {', '.join(FACTORIES)}", file=sys.stderr)
        return 2
    token = args.token_file.read_text().strip() if args.token_file else None
    client = RestClient(args.api, token, ca_file=args.ca_file, maxsize=16, user_agent="refplatform-controllers")
    manager = ControllerManager(client, [FACTORIES[n](client, args) for n in names])
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: manager.stop())
    manager.start()
    manager.wait()
    client.close()
    return 0
