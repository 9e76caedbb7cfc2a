"""What a cluster drilled without a Kubernetes API (Slurm, Ray) shares as a target: its nodes pulled with the
profile's own command, written down before it acts and undone on every exit path, the blast radius checked first,
and each node's service before a scenario and now (:mod:`drills.target.slurmtarget`, :mod:`drills.target.raytarget`
add how each reads its nodes)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from drills.errors import FiredrillError
from drills.kube.timeline import Timeline
from drills.target.faults import FaultError, FaultRecord, FaultRecords, run_command
from drills.target.journal import Undo, UndoKind
from drills.target.profile import FaultMethod, SafetySettings, TargetProfile
from drills.target.service import NodeService, describe, not_back

__all__ = ["CommandTarget", "check_share"]


def check_share(node: str, pulled: set[str], gpus: Mapping[str, int], safety: SafetySettings) -> None:
    """Refuse pulling ``node`` when, with the faults standing (``pulled``), it faults more nodes than
    ``safety.max_nodes`` or takes out more than ``safety.max_gpu_share`` of the GPUs (``gpus``: per node)."""
    out = pulled | {node}
    if len(out) > safety.max_nodes:
        raise FaultError(f"pulling {node} would fault {len(out)} nodes at once ({', '.join(sorted(out))}), "
                         f"over safety.max_nodes ({safety.max_nodes})")
    total = sum(gpus.values()) or 1
    share = sum(gpus.get(n, 0) for n in out) / total
    if share > safety.max_gpu_share:
        raise FaultError(f"pulling {node} would take {share:.0%} of the cluster's GPUs out, over "
                         f"safety.max_gpu_share ({safety.max_gpu_share:.0%})")


@dataclass
class CommandTarget(FaultRecords):
    """A cluster whose nodes the profile's command pulls; a subclass says how its nodes are read."""

    PLATFORM: ClassVar[str] = ""
    """How a fault names the cluster's kind ("Slurm", "Ray")."""

    driver: Any = None
    profile: TargetProfile | None = None
    timeline: Timeline = field(default_factory=Timeline)
    touched: set[str] = field(default_factory=set)
    service_before: dict[str, NodeService] = field(default_factory=dict)
    service_at_first: dict[str, NodeService] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    keep_measuring: float = 0.0
    embedded: None = None
    """Never the embedded platform: the same question the Kubernetes target answers."""
    fingerprint: None = None
    access_checked: None = None
    defects: tuple[str, ...] = ()

    def service_now(self) -> dict[str, NodeService]:
        """Every node's service as it stands (raises the driver's error when the cluster does not answer)."""
        raise NotImplementedError

    def _check_blast_radius(self, node: str) -> None:
        """Raise FaultError when ``node`` may not be pulled now (safety)."""
        raise NotImplementedError

    # ------------------------------------------------------------- service
    def note_service(self) -> None:
        self.service_before = self.service_now()
        if not self.service_at_first:
            self.service_at_first = self.service_before

    def not_given_back(self) -> str:
        if not self.service_at_first:
            return ""
        try:
            return describe(not_back(self.service_at_first, self.service_now()))
        except FiredrillError:
            return ""

    # ------------------------------------------------------------- faults
    def pull(self, node: str, method: FaultMethod, run_id: str = "", asked: FaultMethod | None = None) -> FaultRecord:
        """Run the profile's fault command on ``node``, written down first; the record says whether the command
        acted (its exit status): the drill confirms the fault from the workload (the rank there falls silent).
        ``asked``: the fault the scenario names (the command's ``{fault}``)."""
        assert self.profile is not None
        if method is not FaultMethod.COMMAND:
            raise FaultError(f"a {self.PLATFORM} node is pulled with the profile's command, not {method.value}")
        self._check_blast_radius(node)
        command = self.profile.fault.command_for(node, asked)
        restore = self.profile.fault.restore_for(node, asked)
        undo = (Undo(UndoKind.COMMAND, argv=tuple(shlex.split(restore))),) if restore else (Undo(
            UndoKind.BY_HAND, note=f"undo '{command}' on node {node} by hand: the profile has no restore_template"),)
        intent = "" if self.journal is None else self.journal.intend_fault(
            f"{method.value} on {self.PLATFORM} node {node}: {command}", node, method, undo,
            self.profile.fault.expire_seconds)
        self.touched.add(node)
        record = run_command(command, node, self.profile.fault.timeout_seconds)
        record.acted_at = self.timeline.clock.mono()
        record.journal_id = intent
        if restore:
            record.undo = lambda: self._restore(restore, node)
        self.faults_done.append(record)
        self.timeline.action("fault", target=node, method=method.value, command=command, confirmed=record.confirmed)
        return record

    def _restore(self, command: str, node: str) -> None:
        assert self.profile is not None
        done = run_command(command, node, self.profile.fault.timeout_seconds)
        if not done.confirmed:
            raise FaultError(f"the restore command for node {node} failed: {done.detail}")

    def _pulled_now(self) -> set[str]:
        return {r.node for r in self.faults_done}

    def restore_roles(self) -> None:
        """Nothing: a node is never touched beyond its fault's own undo."""

    def settle_gpus(self, nodes: list[str] | None = None, timeout: float = 15.0) -> None:
        """Nothing: no GPU fault is injected on such a cluster."""

    def stop_watches(self) -> None:
        """Nothing: the drills poll the cluster themselves and stop on their own."""

    def close(self) -> None:
        self.restore_all()
        if self.driver is not None:
            self.driver.close()
