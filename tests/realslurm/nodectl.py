"""A power switch for the nodes of a real Slurm cluster of ``tests/realslurm`` (a site's BMC tool and firewall, for
a profile's fault command, which passes the fault the scenario names as ``{fault}``):

- ``nodectl.py ROOT kill NODE`` (or ``pull``) SIGKILLs exactly that node's ``slurmd``, step daemons and tasks (a host
  crash);
- ``nodectl.py ROOT partition NODE`` SIGSTOPs its ``slurmd`` alone: slurmctld hears nothing from the node while its
  tasks run on (a network partition between the node and its controller);
- ``nodectl.py ROOT hang NODE`` SIGSTOPs all of them (a hung host);
- ``nodectl.py ROOT restore NODE`` continues whatever is stopped and starts its ``slurmd`` again if it is gone.

ROOT is the folder the cluster was started in; nothing of another cluster, or of the machine, is touched."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.realslurm.cluster import SlurmCluster, SlurmError  # noqa: E402 - after the repository is importable


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nodectl.py", description=__doc__)
    parser.add_argument("root", type=Path, help="the folder the cluster was started in")
    parser.add_argument("action", choices=("kill", "pull", "partition", "hang", "restore"))
    parser.add_argument("node")
    args = parser.parse_args(argv)
    try:
        cluster = SlurmCluster.attach(args.root)
        if args.node not in cluster.spec.node_names():
            raise SlurmError(f"{args.node} is not a node of the cluster in {args.root} "
                             f"({', '.join(cluster.spec.node_names())})")
        if args.action in ("kill", "pull"):
            pids = cluster.kill_node(args.node)
            if not pids:
                raise SlurmError(f"{args.node} has no process running: it is down already")
            print(f"killed {args.node}: pids {' '.join(map(str, pids))}")
        elif args.action in ("partition", "hang"):
            pids = cluster.stop_node(args.node, daemon_only=args.action == "partition")
            if not pids:
                raise SlurmError(f"{args.node} has no process running: it is down already")
            print(f"stopped {args.node} ({args.action}): pids {' '.join(map(str, pids))}")
        else:
            if cluster.continue_node(args.node):
                print(f"continued {args.node}")
                return 0
            cluster.restore_node(args.node)
            print(f"started the slurmd of {args.node}")
    except SlurmError as exc:
        print(f"nodectl: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
