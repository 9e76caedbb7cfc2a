"""A power switch for the worker nodes of a real Ray cluster of ``tests/realray`` (a site's BMC tool, for a
profile's fault command, which passes the fault the scenario names as ``{fault}``):

- ``nodectl.py ROOT kill NODE`` (or ``pull``) SIGKILLs every process of the node's session (its launcher, raylet, agents and
  workers), again until none is left: a host crash;
- ``nodectl.py ROOT hang NODE`` SIGSTOPs all of them: a hung host;
- ``nodectl.py ROOT restore NODE`` continues a hung node's processes if they are alive, else starts the node again
  (same name, GPUs and resources; Ray gives it a new node id) and waits until it is ALIVE;
- ``nodectl.py ROOT partition NODE`` is refused (exit 2): every node here shares 127.0.0.1, and stopping part of a
  node is not a partition.

ROOT is the folder the cluster was started in; only the sessions its state file (``cluster.json``) records are
signalled, nothing of another cluster or of the machine. The head is never pulled. It needs no ``ray`` package:
the main Python runs it."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.realray.cluster import (  # noqa: E402 - after the repository is importable
    alive_node_ids, process_state, read_state, relaunch, session_pids, signal_session)

RESTORE_TIMEOUT = 60.0


class NodeError(Exception):
    """What nodectl.py says on stderr before it exits non-zero."""


def _dead(dashboard: str, node_id: str | None) -> bool:
    """True when the state API lists `node_id` as DEAD (the GCS gave up on it)."""
    if not node_id:
        return False
    try:
        with urllib.request.urlopen(dashboard + "/api/v0/nodes?detail=1&limit=1000", timeout=5) as r:
            nodes = json.load(r)["data"]["result"]["result"]
    except OSError:
        return False
    return any(n["node_id"] == node_id and n["state"] == "DEAD" for n in nodes)


def restore(root: Path, name: str, entry: dict, dashboard: str) -> str:
    """Continue the node if its processes live and it comes back ALIVE, else start it again; what was done."""
    sid = entry["session"]
    deadline = time.monotonic() + RESTORE_TIMEOUT
    if session_pids(sid):
        signal_session(sid, signal.SIGCONT)
        # ALIVE again, or the GCS declared it dead while it hung: its raylet then exits, and the node is started anew
        while time.monotonic() < deadline:
            if not session_pids(sid):
                break
            if entry.get("node_id") in (_alive(dashboard, name) or []):
                return f"continued {name} (node {entry['node_id'][:12]} ALIVE)"
            if _dead(dashboard, entry.get("node_id")):
                time.sleep(2)  # a raylet told it is dead exits by itself; what is left is killed
                signal_session(sid, signal.SIGKILL)
                break
            time.sleep(0.3)
        else:
            raise NodeError(f"{name} was continued but is not ALIVE within {RESTORE_TIMEOUT:.0f} s")
    _, node_id = relaunch(root, name, timeout=max(5.0, deadline - time.monotonic()))
    return f"started {name} again: node {node_id[:12]} ALIVE"


def _alive(dashboard: str, name: str) -> list[str] | None:
    try:
        return alive_node_ids(dashboard, name)
    except OSError:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nodectl.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path, help="the folder the cluster was started in")
    parser.add_argument("action", choices=("kill", "pull", "hang", "restore", "partition"))
    parser.add_argument("node")
    args = parser.parse_args(argv)
    if args.action == "partition":
        print("nodectl: a loopback Ray cluster cannot be partitioned here: every node shares 127.0.0.1 with the "
              "GCS and the other nodes, so no link of one node can be cut (use kill or hang)", file=sys.stderr)
        return 2
    try:
        try:
            state = read_state(args.root)
        except RuntimeError as exc:
            raise NodeError(str(exc)) from None
        entry = state.get("nodes", {}).get(args.node)
        if entry is None:
            raise NodeError(f"{args.node} is not a node of the cluster in {args.root} "
                            f"({', '.join(state.get('nodes', {}))})")
        if entry["head"]:
            raise NodeError("the head holds the GCS; it is never pulled")
        sid = entry["session"]
        if args.action in ("kill", "pull"):  # "pull": a scenario that names no fault (a host crash)
            pids = signal_session(sid, signal.SIGKILL)
            if not pids:
                raise NodeError(f"{args.node} has no process running: it is down already")
            if session_pids(sid):
                raise NodeError(f"{args.node}: processes left after SIGKILL: {session_pids(sid)}")
            print(f"killed {args.node}: pids {' '.join(map(str, pids))}")
        elif args.action == "hang":
            pids = signal_session(sid, signal.SIGSTOP)
            if not session_pids(sid):
                raise NodeError(f"{args.node} has no process running: it is down already")
            running = [pid for pid in session_pids(sid) if process_state(pid) not in ("T", "t")]
            if running:
                raise NodeError(f"{args.node}: processes still running after SIGSTOP: {running}")
            print(f"stopped {args.node} (hang): pids {' '.join(map(str, pids))}")
        else:
            print(restore(args.root, args.node, entry, state["dashboard"]))
    except (NodeError, RuntimeError) as exc:
        print(f"nodectl: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
