"""The node-pull drill on the training canary, against a live embedded platform (issue 12).

- The canary runs as real processes, children of its node's agent, and `kubectl logs` shows its JSON lines.
- A node pulled about 10 steps after a checkpoint (checkpoints every 20 steps): the drill measures about 10
  lost steps from the canary's own log, not the 0 the platform's cadence would suggest.
- With the `lose-checkpoint` defect the same drill FAILs, naming the resume step and the lost checkpoint.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from drills.kinds.nodepull.drill import NodePullDrill
from drills.records.verdict import DrillResult, Verdict
from drills.target.connect import Target, embedded_target
from drills.target.profile import FaultMethod
from drills.workloads.canarylog import CanaryEvent

pytestmark = pytest.mark.integration

CHECKPOINT_EVERY = 20
AFTER = 10
"""Steps past a checkpoint at which the node is pulled."""


def ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])


@pytest.fixture(params=[(), ("lose-checkpoint",)], ids=["honest", "lose-checkpoint"])
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    t = embedded_target(nodes=2, spares=1, defects=request.param)
    try:
        yield t
    finally:
        t.close()


def pull_between_checkpoints(drill: NodePullDrill) -> int:
    """Wait for a checkpoint, then for AFTER more steps; pull rank 0's node; return the checkpoint step."""
    drill.wait_checkpoint(60)
    base = max(drill.canary.checkpoints())
    assert drill._wait(lambda: drill.canary.last_step_before(float("inf")) >= base + AFTER, 30)
    drill.pull(0, FaultMethod.KILL)
    return base


def test_lost_steps_come_from_the_canary_and_a_lost_checkpoint_fails(target: Target) -> None:
    result = DrillResult("node-pull")
    drill = NodePullDrill(target, result, "np1", step_seconds=0.05)
    try:
        drill.start_canary(2, 4, CHECKPOINT_EVERY)
        # the canary runs as real processes under its node's agent
        starts = drill.canary.of(CanaryEvent.START)
        assert starts, "no canary start line was followed"
        agents = {name: proc.pid for name, proc in target.embedded.cluster.agents.items()}  # type: ignore[union-attr]
        for line in starts:
            pid = int(line.fields["pid"])
            assert ppid(pid) == agents[line.node], f"{line.pod} (pid {pid}) is not a child of {line.node}'s agent"
        if shutil.which("kubectl"):
            out = subprocess.run(["kubectl", "--kubeconfig", str(target.embedded.kubeconfig), "logs",  # type: ignore[union-attr]
                                  starts[0].pod], capture_output=True, text=True, timeout=30, check=True).stdout
            events = [json.loads(ln)["event"] for ln in out.splitlines() if ln.startswith("{")]
            assert events[0] == "start" and "step" in events
        base = pull_between_checkpoints(drill)
        drill.observe_until("resume", 60)
        assert "resume" in drill.instants, result.findings
        assert drill.resumption is not None
        lost = result.measurements["lost steps"].value if "lost steps" in result.measurements else None
        if target.defects:
            assert result.verdict is Verdict.FAIL
            assert drill.resumption.from_step == 0
            assert any(f"training resumed from step 0, but checkpoint {drill.checkpoint_at_fault} was complete "
                       "before the fault" in f for f in result.findings), result.findings
        else:
            assert result.verdict is Verdict.PASS, result.findings
            assert drill.resumption.from_step == drill.checkpoint_at_fault == base
            assert lost is not None and AFTER <= lost <= AFTER + 6, (lost, drill.step_at_fault, base)
    finally:
        drill.rollback()
        target.driver.stop_watches()
