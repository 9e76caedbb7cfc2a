"""Faults on a refplatform agent that serves as a kubelet of the real control plane, for a target profile's
``fault.command_template`` (method ``command``): the way a customer's IPMI or cloud CLI pulls a host.

    python tests/realk8s/agentctl.py kill DATA_DIR NODE        SIGKILL the agent's process group (host crash)
    python tests/realk8s/agentctl.py partition DATA_DIR NODE   SIGUSR1: API traffic stops, pods keep running
    python tests/realk8s/agentctl.py heal DATA_DIR NODE        SIGUSR2: the partition ends

The agent's pid comes from ``DATA_DIR/agents/NODE.json``, which the agent writes itself; only agents the
real-cluster tests started are ever signalled (their data folder is the test's own).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

ACTIONS = {"kill": signal.SIGKILL, "partition": signal.SIGUSR1, "heal": signal.SIGUSR2}


def agent_pid(data_dir: Path, node: str) -> int:
    state = data_dir / "agents" / f"{node}.json"
    try:
        return int(json.loads(state.read_text())["pid"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SystemExit(f"agentctl: no agent state for node {node!r} in {state}: {exc}") from None


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in ACTIONS:
        print(__doc__, file=sys.stderr)
        return 2
    action, data_dir, node = argv
    pid = agent_pid(Path(data_dir), node)
    try:
        if action == "kill":
            os.killpg(pid, ACTIONS[action])  # the agent leads its own session: its pods' processes go with it
        else:
            os.kill(pid, ACTIONS[action])
    except ProcessLookupError:
        print(f"agentctl: the agent of node {node} (pid {pid}) is not running", file=sys.stderr)
        return 1
    print(f"agentctl: {action} node {node} (agent pid {pid})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
