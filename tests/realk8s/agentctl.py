"""Faults on a refplatform agent that serves as a kubelet of the real control plane, for a target profile's
``fault.command_template`` (method ``command``): the way a customer's IPMI or cloud CLI pulls a host.

    python tests/realk8s/agentctl.py kill DATA_DIR NODE        SIGKILL the agent's process group (host crash)
    python tests/realk8s/agentctl.py hang DATA_DIR NODE        SIGSTOP the agent's process group (a hung host:
                                                               node and pods frozen, their sockets still open)
    python tests/realk8s/agentctl.py resume DATA_DIR NODE      SIGCONT the group: the hung host thaws
    python tests/realk8s/agentctl.py partition DATA_DIR NODE   SIGUSR1: API traffic stops, pods keep running
    python tests/realk8s/agentctl.py heal DATA_DIR NODE        SIGUSR2: the partition ends

The agent's pid comes from ``DATA_DIR/agents/NODE.json``, which the agent writes itself; only agents the
real-cluster tests started are ever signalled (their data folder is the test's own). The group actions
(kill, hang, resume) signal the process group the agent leads (it starts in a session of its own, with the
pods it runs), and refuse a pid that leads no group of its own. ``hang`` and ``resume`` exit 0 only once the
kernel shows the agent stopped (state ``T``) or running again, within ``STATE_TIMEOUT_S``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

ACTIONS = {"kill": signal.SIGKILL, "hang": signal.SIGSTOP, "resume": signal.SIGCONT,
           "partition": signal.SIGUSR1, "heal": signal.SIGUSR2}
GROUP_ACTIONS = ("kill", "hang", "resume")
STATE_TIMEOUT_S = 2.0
"""Seconds a stop or a continue may take to show in ``/proc/PID/stat`` (the kernel delivers it asynchronously)."""


def agent_pid(data_dir: Path, node: str) -> int:
    state = data_dir / "agents" / f"{node}.json"
    try:
        return int(json.loads(state.read_text())["pid"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SystemExit(f"agentctl: no agent state for node {node!r} in {state}: {exc}") from None


def process_state(pid: int) -> str:
    """The one-letter state of ``/proc/PID/stat`` (``T``: stopped), '' when the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rpartition(")")[2].split()[0]  # the command name, in parentheses, may hold spaces


def wait_state(pid: int, stopped: bool, timeout: float = STATE_TIMEOUT_S) -> bool:
    """Until the agent shows stopped (or not stopped), or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while (process_state(pid) == "T") != stopped:
        if time.monotonic() >= deadline or not process_state(pid):
            return False
        time.sleep(0.01)
    return True


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in ACTIONS:
        print(__doc__, file=sys.stderr)
        return 2
    action, data_dir, node = argv
    pid = agent_pid(Path(data_dir), node)
    try:
        if action in GROUP_ACTIONS:
            if os.getpgid(pid) != pid:
                print(f"agentctl: pid {pid} of node {node} leads no process group of its own; not signalled",
                      file=sys.stderr)
                return 1
            os.killpg(pid, ACTIONS[action])  # the agent leads its own session: its pods' processes go with it
        else:
            os.kill(pid, ACTIONS[action])
    except ProcessLookupError:
        print(f"agentctl: the agent of node {node} (pid {pid}) is not running", file=sys.stderr)
        return 1
    if action in ("hang", "resume") and not wait_state(pid, stopped=action == "hang"):
        print(f"agentctl: the agent of node {node} (pid {pid}) shows state {process_state(pid) or 'gone'!r} "
              f"{STATE_TIMEOUT_S:g} s after SIG{'STOP' if action == 'hang' else 'CONT'}", file=sys.stderr)
        return 1
    print(f"agentctl: {action} node {node} (agent pid {pid})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
