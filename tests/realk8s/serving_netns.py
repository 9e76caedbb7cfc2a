"""The serving feature on the upstream control plane, inside a network namespace of its own.

    python -m tests.realk8s.serving_netns BIN_DIR WORK OUT.json

Run by ``tests/realk8s/test_serving.py`` through ``tests/realk8s/netns.py``, never on the host's network:
it starts the real control plane, four reference agents whose pods get addresses of the namespace's
``10.244.0.0/16`` (which upstream's EndpointSlice controller accepts, unlike loopback ones), the stand-in
load balancer, and one ``firedrill run`` of the shipped feature, unedited, every scenario (``CLAUSES``), with
``hang`` standing in as ``agentctl.py hang``/``resume`` of the test's own agents; then writes what the test
checks (the run's exit code, output and scenarios, the load balancer's log of the backends it followed, the
agents the kernel still shows stopped) to ``OUT.json`` and stops everything it started.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.realk8s.agentctl import process_state
from tests.realk8s.netns import POD_RANGE
from tests.realk8s.test_native_nodepull import start_pull_cluster
from tests.realk8s.test_serving import firedrill_run, load_balancer

CLAUSES = ("9.1", "9.2", "9.3", "9.4")
"""Every scenario of the shipped feature, in one ``firedrill run`` on one cluster."""


def main(argv: list[str]) -> int:
    bin_dir, work, out = (Path(a) for a in argv)
    made = start_pull_cluster(bin_dir, work / "cluster", (), pod_range=POD_RANGE)
    try:
        with load_balancer(made, work) as lb_log:
            proc, scenarios = firedrill_run(made, work / "run", clauses=CLAUSES, hang=True)
            stopped = sorted(name for name, agent in made.agents.agents.items() if process_state(agent.pid) == "T")
            out.write_text(json.dumps({"returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr,
                                       "scenarios": scenarios, "load_balancer_log": lb_log.read_text(),
                                       "agents_stopped": stopped}))
    finally:
        made.agents.close()
        made.cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
