"""Topology through a fault: a training gang asked to stay inside one rack loses a node, and its job is restarted;
does the restarted gang stay inside one rack too?

A scheduler that honours the request only at a gang's first placement passes every scenario that places a gang
once.  This kind is the node pull's training run (:class:`drills.workloads.training.TrainingRun`: the canary job,
the pull, detect -> evict -> replace -> resume from the harness's watches and the canary's own log) with the job
asking for one domain of a node label, judged on where the job's pods run: at the start, and again for the pods
made after the fault (the new incarnation, told apart by UID from every pod that existed before it).  A pod of
the new incarnation bound in another domain than its mates FAILs at once, naming the domains and which pod went
where; "runs again inside one rack" is the replace instant (every rank Running on a healthy node) with all of
them inside one domain.  Each node's domain is the harness's own reading of the node's label (its node watch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from drills.kinds.topology.domains import Level, Spread, spread
from drills.kinds.topology.drill import FLAVOR_PROBLEMS
from drills.records.verdict import Measurement
from drills.scenario.drill import Drill, register
from drills.target.access import Permission
from drills.target.profile import TargetProfile
from drills.workloads.training import TERMINAL, TrainingRun, training_job_problem, training_permissions

__all__ = ["SETTLE_S", "TopologyRestartDrill"]

SETTLE_S = 2.0
"""Seconds a finding waits for the rest of a spread incarnation to be bound, so that it names every pod."""


@register
@dataclass
class TopologyRestartDrill(TrainingRun, Drill):
    """The node pull under a training job that must stay inside one domain of a node label."""

    kind: ClassVar[str] = "topology-restart"
    needs_whole_cluster: ClassVar[str] = ("which domain has room for a restarted gang depends on every node of the "
                                          "cluster")

    @classmethod
    def unsupported(cls, profile: TargetProfile, *, reference: bool) -> str | None:
        problem = training_job_problem(profile)
        if problem is not None or reference:
            return problem
        return FLAVOR_PROBLEMS.get(profile.flavor)

    @classmethod
    def permissions(cls, profile: TargetProfile) -> list[Permission]:
        return training_permissions(profile, "topology after a fault")

    level: Level | None = None
    label: str | None = None
    crossed: Spread | None = None
    """The new incarnation's pods as first seen spread over more than one domain."""

    # ------------------------------------------------------------- act
    def start_inside_one(self, workers: int, gpus: int, checkpoint_every: int, level: Level, label: str) -> None:
        """Start the canary job asking to stay inside one domain of ``label``; a first placement already spread
        over domains FAILs, naming them (the promise holds from the start)."""
        self.level, self.label = level, label
        self.start_canary(workers, gpus, checkpoint_every, required_topology=label)
        with self._cond:
            first = self._spread(lambda uid: True)
            self.result.details["placement_before_fault"] = self._where(first)
            if first.placed and not first.inside_one:
                self.result.fail(first.crossing(self._name()) + ", at its first placement")

    # --------------------------------------------------------- observe
    def _domain_of(self) -> dict[str, str | None]:
        assert self.label is not None
        return {name: ((node.get("metadata") or {}).get("labels") or {}).get(self.label)
                for name, node in self.nodes.items()}

    def _spread(self, keep: Any) -> Spread:
        """Under the lock: where the job's bound, live pods whose UID ``keep`` accepts run, domain by domain."""
        assert self.level is not None and self.label is not None
        nodes_of = {name: (pod.get("spec") or {}).get("nodeName") for name, pod in self.pods.items()
                    if keep(pod["metadata"]["uid"]) and not pod["metadata"].get("deletionTimestamp")
                    and (pod.get("status") or {}).get("phase") not in TERMINAL}
        return spread(self.level, self.label, nodes_of, self._domain_of())

    def _after_fault(self) -> Spread:
        return self._spread(lambda uid: uid not in self.before_fault)

    def _advance(self) -> None:
        super()._advance()
        if self.label is not None and self.crossed is None and "fault" in self.instants:
            now = self._after_fault()
            if now.placed and not now.inside_one:
                self.crossed = now

    def _name(self) -> str:
        return self.spec.name if self.spec is not None else "?"

    @staticmethod
    def _where(found: Spread) -> dict[str, Any]:
        return {p.pod: {"node": p.node, "domain": p.domain} for p in found.placed}

    @staticmethod
    def again_name(level: Level) -> str:
        """The measurement: ``time until the job runs again inside one rack``."""
        return f"time until the job runs again inside one {level.value}"

    def judge_inside_one_again(self, limit: float) -> Measurement | None:
        """From the fault: every rank of the new incarnation Running on a healthy node (the replace instant), all
        inside one domain.  A pod of it bound in a second domain FAILs at once, naming where each went; a job that
        never runs whole again within ``limit`` and its grace ends the scenario (every later phase needs it)."""
        assert self.level is not None
        if "fault" not in self.instants:
            return None  # the act recorded why nothing is timed
        name = self.again_name(self.level)
        allowed = limit + self._grace(limit)
        began = self.instants["fault"].mono
        clock = self.target.timeline.clock
        self._wait(lambda: "replace" in self.instants or self.crossed is not None
                   or clock.mono() >= began + allowed, allowed * 2)
        if self.crossed is not None:
            assert self.spec is not None
            self._wait(lambda: len(self._after_fault().placed) >= self.spec.min_available, SETTLE_S)
        with self._cond:
            if self.crossed is not None:
                seen = self.crossed.widest(self._after_fault())
                self.result.details["placement_after_fault"] = self._where(seen)
                self.result.fail(f"after the fault on {self.pulled}, the restarted {seen.crossing(self._name())}")
                return self.result.measure(Measurement(name, None, "s",
                                                       note=f"it spread over {', '.join(seen.domains)}"))
            now = self._after_fault()
            self.result.details["placement_after_fault"] = self._where(now)
            replaced = self.instants.get("replace")
            if replaced is None:
                assert self.spec is not None
                measured = self.result.measure(Measurement(
                    name, None, "s", note=f"{len(now.placed)} of {self.spec.min_available} new pods placed after "
                    f"{allowed:g} s"))
                self.result.halt(f"the job never ran again whole within {allowed:g} s of the fault on {self.pulled} "
                                 f"({limit:g} s promised and {allowed - limit:g} s of grace): "
                                 f"{len(now.placed)} of its {self.spec.min_available} new pods were placed"
                                 + (f" ({now.where()})" if now.placed else "")
                                 + f"; pods: {self._pod_summary()}")
                return measured
            return self.result.measure(Measurement(name, replaced.mono - began, "s"))
