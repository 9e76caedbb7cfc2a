"""What one scenario carries from step to step: the target, the run id, the drills it started, the result."""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, field

from drills.baseline.drill import BaselineDrill
from drills.connect import Target
from drills.controlplane import ControlPlaneDrill
from drills.gang import GangDrill
from drills.governance import GovernanceDrill
from drills.isolation import IsolationDrill
from drills.leak.drill import LeakDrill
from drills.nodepull import NodePullDrill
from drills.serving import ServingDrill
from drills.verdict import DrillResult

log = logging.getLogger(__name__)


def new_run_id() -> str:
    """Short, DNS-safe and unique enough to label everything one scenario creates."""
    return "fd" + secrets.token_hex(3)


@dataclass
class ScenarioContext:
    target: Target
    result: DrillResult
    run_id: str = field(default_factory=new_run_id)
    gang: GangDrill | None = None
    node_pull: NodePullDrill | None = None
    isolation: IsolationDrill | None = None
    leak: LeakDrill | None = None
    serving: ServingDrill | None = None
    control_plane: ControlPlaneDrill | None = None
    baseline: BaselineDrill | None = None
    governance: GovernanceDrill | None = None

    def gang_drill(self) -> GangDrill:
        if self.gang is None:
            self.result.drill = "gang-submission"
            self.gang = GangDrill(self.target, self.result, self.run_id)
        return self.gang

    def node_pull_drill(self) -> NodePullDrill:
        if self.node_pull is None:
            self.result.drill = "node-pull"
            self.node_pull = NodePullDrill(self.target, self.result, self.run_id)
        return self.node_pull

    def isolation_drill(self) -> IsolationDrill:
        if self.isolation is None:
            self.result.drill = "partition-isolation"
            self.isolation = IsolationDrill(self.target, self.result, self.run_id)
        return self.isolation

    def leak_drill(self) -> LeakDrill:
        if self.leak is None:
            self.result.drill = "leak-identification"
            self.leak = LeakDrill(self.target, self.result, self.run_id)
        return self.leak

    def serving_drill(self) -> ServingDrill:
        if self.serving is None:
            self.result.drill = "serving"
            self.serving = ServingDrill(self.target, self.result, self.run_id)
        return self.serving

    def control_plane_drill(self) -> ControlPlaneDrill:
        if self.control_plane is None:
            self.result.drill = "control-plane"
            self.control_plane = ControlPlaneDrill(self.target, self.result, self.run_id)
        return self.control_plane

    def governance_drill(self) -> GovernanceDrill:
        if self.governance is None:
            self.result.drill = "governance"
            self.governance = GovernanceDrill(self.target, self.result, self.run_id)
        return self.governance

    def baseline_drill(self) -> BaselineDrill:
        if self.baseline is None:
            self.result.drill = "baseline-comparison"
            self.baseline = BaselineDrill(self.target, self.result, self.run_id)
        return self.baseline

    def loaded_drill(self) -> ServingDrill | ControlPlaneDrill:
        """The drill of this scenario that runs a load (the serving or the control-plane drill)."""
        drill = self.serving or self.control_plane
        if drill is None:
            raise ValueError("no load is running in this scenario; start one with 'steady load from <users> users "
                             "who retry ...' or 'steady control-plane load from <users> users ...'")
        return drill

    def rollback(self) -> None:
        """Every exit path ends here: undo faults, delete what the drills made, stop watching."""
        for drill in (self.baseline, self.governance, self.control_plane, self.serving, self.leak, self.isolation, self.node_pull,
                      self.gang):
            if drill is not None:
                try:
                    drill.rollback()
                except Exception as exc:  # noqa: BLE001 - rollback must reach every drill
                    log.warning("rollback failed: %s", exc)
        self.target.restore_all()
        self.target.driver.stop_watches()
