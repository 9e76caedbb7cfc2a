"""Start one Ray node (`ray start ... --block`) that addresses loopback only.

Run with the Ray suite's interpreter: `python tests/realray/raynode.py start --head ...`; the arguments are
`ray`'s own CLI arguments.

Why a launcher and not the `ray` script: Ray 2.60 on Linux rewrites 127.0.0.1 and `localhost` to the
address it would use to reach the internet (`resolve_ip_for_localhost` in `ray._private.services`, which asks
the routing table for a public address), both for `--node-ip-address` and for the head's address a worker
node joins; the GCS, the raylets and the agents are then told to reach each other on the machine's external
address. The switch that keeps loopback (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`, which makes every Ray process
answer 127.0.0.1 for its own address) also makes `ray start --address` refuse to start a worker node. So:
every process of the node inherits `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` (the raylet's workers, the job
supervisor and a job's driver then stay on loopback too), and only this launcher lifts the refusal and keeps
a loopback address as given.
"""

import os
import sys

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from ray._private import ray_constants, services  # noqa: E402
from ray._common.network_utils import is_localhost  # noqa: E402

_resolve = services.resolve_ip_for_localhost


def _keep_loopback(host):
    if host and is_localhost(host):
        return "127.0.0.1"
    return _resolve(host)


services.resolve_ip_for_localhost = _keep_loopback
ray_constants.ENABLE_RAY_CLUSTER = True  # lets `ray start --address` add a node; the children still answer loopback

from ray.scripts.scripts import main  # noqa: E402

if __name__ == "__main__":
    sys.argv[0] = "ray"
    sys.exit(main())
