"""Pulling the node of one rank where the platform names no pods (Slurm, Ray): the rank is the one that said, in
its own start line, that it runs on that node; the node is pulled with the profile's command; the fault is
confirmed by the workload (that rank falls silent) or by the platform (the node shows down)."""

from __future__ import annotations

from typing import Any, ClassVar

from drills.records.verdict import DrillInconclusive
from drills.target.profile import FaultMethod
from drills.workloads.training import Instant

__all__ = ["RankPull", "SILENCE_S"]

SILENCE_S = 2.0
"""A rank that logged nothing for this long after the fault acted is taken as gone with its node: a live rank logs
a step every step time, or ``stalled`` every second while it waits on a lost peer."""


class RankPull:
    """Mixed into a :class:`~drills.workloads.training.TrainingRun` whose ranks are ``<job>.<generation>.<rank>``
    and whose ``rank_nodes`` say where each runs; the subclass says when the pulled node showed down and what it
    notes of the job at the fault."""

    DOWN_SAID: ClassVar[str] = "the node shows down"
    """How the confirmation says the platform saw the node down."""

    def _down_at(self) -> Instant | None:
        raise NotImplementedError

    def _note_fault(self, node: str, generation: str) -> None:
        """Under the lock, just before the fault: what the run must remember of the job (its restarts, its worker
        group, the node's id)."""
        raise NotImplementedError

    def pull(self: Any, rank: int, method: FaultMethod, asked: FaultMethod | None = None) -> None:
        assert self.spec is not None, "start the canary job first"
        with self._cond:
            generation = self._generation()
            uid = next((u for u in self._stepping() if u.endswith(f".{generation}.{rank}")), None)
            node = self.rank_nodes.get(uid or "")
            if uid is None or not node:
                raise DrillInconclusive(f"worker {rank} of the canary job is not training, or never said which "
                                        f"node it runs on; {self._pod_summary()}")
            self._mark_before_fault()
            self._note_fault(node, generation)
        self.pulled = node
        try:
            record = self.target.pull(node, method, self.run_id, asked)
        except Exception as exc:  # a fault refused by the safety checks or a command that could not run
            raise DrillInconclusive(f"node {node} (worker {rank}) could not be pulled: {exc}") from None
        details = {"node": node, "method": method.value, "rank": rank, "command": record.detail}
        if record.confirmed:
            confirmed, why = self._confirm(uid, record.acted_at or self.target.timeline.clock.mono())
        else:
            confirmed, why = False, f"the fault command failed: {record.detail}"
        with self._cond:
            details.update(confirmed=confirmed, detail=why)
            self.result.details["fault"] = details
            if not confirmed:
                self.result.inconclusive(f"the {method.value} fault on {node} could not be confirmed ({why}); no "
                                         "timing is claimed")
                return
            clock = self.target.timeline.clock
            acted = record.acted_at if record.acted_at is not None else clock.mono()
            self._stamp("fault", Instant(acted, clock.wall() - (clock.mono() - acted)))
            self._advance()

    def _confirm(self: Any, uid: str, acted: float) -> tuple[bool, str]:
        """The fault took: the rank on the node fell silent for :data:`SILENCE_S`, or the node shows down, within
        the profile's ``fault.timeout_seconds`` of the act."""
        clock = self.target.timeline.clock
        timeout = self.target.profile.fault.timeout_seconds

        def silent() -> bool:
            last = max((ln.mono for ln in self.canary.snapshot() if ln.uid == uid), default=acted)
            return clock.mono() - max(last, acted) >= SILENCE_S or self._down_at() is not None
        if self._wait(silent, timeout):
            return True, (self.DOWN_SAID if self._down_at() is not None else
                          f"rank {uid} logged nothing for {SILENCE_S:g} s after the command (its own output)")
        return False, f"rank {uid} kept logging for {timeout:g} s after the command, and the node never showed down"
