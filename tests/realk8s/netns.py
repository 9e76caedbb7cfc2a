"""Run a command in network and PID namespaces of its own, for tests whose pods need routable addresses.

Upstream's EndpointSlice controller refuses loopback pod IPs, and this machine may not touch any network but
loopback.  ``unshare --net --pid`` gives a command a network namespace the test owns: its ``lo`` is brought up
and given a range (``10.244.0.1/16``: every address of it is then local to the namespace, so the agents hand
them to pods, pods bind them, and nothing outside the namespace is ever addressed).  Nothing is left behind on
any exit path: the namespace lives only as long as its processes, and they all die with the PID namespace's
first process (``--kill-child`` kills it when ``unshare`` itself is killed, e.g. by a test's timeout).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

LO_RANGE = "10.244.0.1/16"
"""The range given to the namespace's ``lo``."""
POD_RANGE = "10.244.{index}.0/24"
"""Agent ``i``'s pod range inside it (the first host of each, 10.244.i.1, is the node's own and never a pod's)."""


def unavailable() -> str:
    """Why this machine cannot make namespaces for a test ('' when it can)."""
    if os.geteuid() != 0:
        return "creating network namespaces needs root (CI runs as root)"
    for tool in ("unshare", "ip"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return ""


def run_in_own_namespaces(argv: Sequence[str], *, cwd: Path, timeout: float,
                          lo_addresses: Sequence[str] = (LO_RANGE,)) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` (from ``cwd``) in fresh network and PID namespaces whose ``lo`` is up with ``lo_addresses``."""
    setup = " && ".join(["ip link set lo up", *(f"ip addr add {a} dev lo" for a in lo_addresses)])
    # sh stays the namespace's first process (it reaps orphans); when the command ends, sh ends and the
    # kernel kills whatever the command left running in the namespace.
    cmd = ["unshare", "--net", "--pid", "--fork", "--mount-proc", "--kill-child",
           "sh", "-c", f'{setup} && "$@"', "netns", *argv]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
