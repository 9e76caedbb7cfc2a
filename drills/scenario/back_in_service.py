"""Back in service: the nodes a scenario's fault touched give the service they gave before it, within a time.

The phase comes after the promise about the workload: the harness undoes every fault the scenario still holds
(a pulled node powered on, a partition healed, as its rollback would), then times until every node the fault
touched, and that was in service when the scenario began, is back in that service (:mod:`drills.target.service`:
Ready, not cordoned, no repelling taint it did not have, every GPU it had allocatable).  A fault of the control
plane touches every node.  A node not back in time FAILs the scenario, naming the node and what keeps it out:
a healer that returns nodes still cordoned is not a healed cluster, whatever the workload did.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from drills.errors import FiredrillError
from drills.records.verdict import DrillResult, Measurement, Threshold
from drills.target.connect import Target
from drills.target.faults import CONTROL_PLANE
from drills.target.service import describe, not_back

PHASE = "back in service"
FAULTED = "faulted"
"""What a sentence that faults nodes (or the control plane) sets, and the back-in-service sentence requires."""
POLL_S = 0.2


def judge_back_in_service(target: Target, result: DrillResult, limit: float,
                          wait: Callable[[float], object] = lambda s: threading.Event().wait(s)) -> Measurement:
    """Undo the scenario's faults, then wait for every node they touched to be back in service, ``limit`` seconds
    from the moment the undo began; the measurement and its threshold go into ``result``, and a node still out
    FAILs it, named.  A node whose fault has no undo (a profile without ``fault.restore_template``) is not
    judged: INCONCLUSIVE, saying so."""
    before = target.service_before
    touched = set(before) if CONTROL_PLANE in target.touched else target.touched - {CONTROL_PLANE}
    nodes = sorted(n for n in touched if n in before and before[n].serving)
    result.details["back_in_service"] = {"nodes": nodes}
    if not nodes:
        result.inconclusive("no node in service when the scenario began was touched by its fault, so none had to "
                            "come back")
        return result.measure(Measurement(PHASE, None, "s", note="no node touched"))
    stuck = sorted({r.node for r in target.faults_done if r.undo is None} & set(nodes))
    if stuck:  # a fault only a person can undo (no fault.restore_template): nobody brings the node back here
        result.inconclusive(f"{', '.join(stuck)} cannot be brought back by the harness (its fault has no undo: set "
                            "fault.restore_template in the target profile), so whether the platform returns "
                            f"{'it' if len(stuck) == 1 else 'them'} to service is not judged")
        nodes = [n for n in nodes if n not in stuck]
        result.details["back_in_service"] = {"nodes": nodes, "not_judged": stuck}
        if not nodes:
            return result.measure(Measurement(PHASE, None, "s", note="no fault of the scenario can be undone"))
    clock = target.timeline.clock
    start = clock.mono()  # the undo's own time counts: a power-on tool that waits for its host is the repair
    target.restore_all("undone by the run, before its back-in-service phase")
    deadline = start + limit
    missing: dict[str, list[str]] = {}
    while True:
        result.raise_if_halted()
        try:
            now = target.service_now()
        except FiredrillError as exc:  # the API server, or slurmctld, did not answer
            missing = {n: [f"unread ({exc})"] for n in nodes}
        else:
            missing = not_back(before, now, nodes)
        if not missing:
            took = clock.mono() - start
            target.timeline.action("back in service", target=",".join(nodes), seconds=round(took, 3))
            measured = result.measure(Measurement(PHASE, took, "s", note=", ".join(nodes)))
            result.check(Threshold(PHASE, limit, "s"))
            return measured
        if clock.mono() >= deadline:
            break
        wait(min(POLL_S, max(0.0, deadline - clock.mono())))
    result.details["back_in_service"]["missing"] = missing
    result.fail(f"not back in service {limit:g} s after the fault was undone: {describe(missing)}")
    measured = result.measure(Measurement(PHASE, None, "s", note="not back: " + describe(missing)))
    result.check(Threshold(PHASE, limit, "s"))
    return measured


__all__ = ["FAULTED", "PHASE", "judge_back_in_service"]
