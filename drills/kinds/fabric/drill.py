"""The fabric drill: every GPU node shows the GPUs it was bought with, and a collective gets its bandwidth on each.

Two promises (docs/FABRIC.md):

- **Inventory.**  Every GPU node advertises (``status.allocatable``) the GPUs its inventory states
  (:mod:`drills.kinds.fabric.inventory`); a node short of one is named with both counts and where the inventory
  comes from.
- **Bandwidth.**  Steady state (a gang of the scenario's size runs a collective) -> act (the collective is
  measured on every node) -> judge (every node reaches the sentence's floor; none is more than the sentence's
  share below the median node) -> rollback (the gang deleted).  Truth comes from the workload: by default the
  training canary's own collective, whose ranks log, with every step, the bytes and seconds each peer's frame
  took to reach them (:mod:`drills.kinds.fabric.links`); on a real cluster whose profile names a bandwidth test
  (``fabric.bandwidth_test``, nccl-tests' ``all_reduce_perf``), that test's own bus bandwidth on each node
  (:mod:`drills.kinds.fabric.bandwidthtest`).  The result says which (``details.source``).

A slow node is named by the links that explain it (:func:`drills.kinds.fabric.links.blame`), never by the
platform's word: no Node label, annotation or Event enters the bandwidth verdict.  Too few timed frames to judge
a node by is INCONCLUSIVE, naming the node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from drills.kinds.fabric.bandwidthtest import BandwidthTestRun, NodeResult
from drills.kinds.fabric.inventory import NodeGpus, gpu_nodes, inventory
from drills.kinds.fabric.links import WARMUP_STEPS, Link, blame, describe, links_of, node_bandwidths, shortfalls, text
from drills.kube.driver import NODE
from drills.records.verdict import DrillInconclusive, Measurement
from drills.scenario.drill import Drill, register
from drills.target.access import CLUSTER, READ, Permission, grant
from drills.target.capacity import free_gpus_per_node
from drills.target.profile import TargetProfile
from drills.workloads.canarylog import CanaryEvent
from drills.workloads.training import TrainingRun, training_job_problem, training_permissions

__all__ = ["CANARY_SOURCE", "FabricDrill", "bandwidth_unit"]

PAYLOAD_BYTES = 256 << 10
"""What each rank contributes to each step's all-reduce: 26 ms on a 10 MB/s link, enough to time to a few %."""
MEASURE_STEPS = 20
"""Steps of every rank timed after its warm-up (two seconds or so on the reference platform)."""
MEASURE_TIMEOUT = 60.0
"""Seconds the measurement waits for them; a collective slower than that is judged on the steps it made."""
CANARY_SOURCE = ("the training canary's own all-reduce over TCP between its ranks (each rank's step lines: the "
                 "bytes and seconds of every peer's frame as it arrived)")
TEST_SOURCE = "the profile's bandwidth test ({command}): each node's nccl-tests 'Avg bus bandwidth'"
MISSING = "GPUs missing from the nodes' allocatable"
LOWEST = "lowest node collective bandwidth"
SPREAD = "largest shortfall below the median node"


def bandwidth_unit(floor: float) -> tuple[str, float]:
    """The unit a bandwidth threshold is shown in: GB/s from 1 GB/s up, else MB/s."""
    return ("GB/s", 1e9) if floor >= 1e9 else ("MB/s", 1e6)


@register
@dataclass
class FabricDrill(TrainingRun, Drill):
    """The inventory of every GPU node, and the collective bandwidth of each node of a gang."""

    kind: ClassVar[str] = "fabric"
    step_seconds: float = 0.05
    nodes_checked: list[NodeGpus] = field(default_factory=list)
    links: dict[tuple[str, str], Link] = field(default_factory=dict)
    figures: dict[str, float | None] = field(default_factory=dict)
    """Each node's collective bandwidth, bytes per second (None: not measured)."""
    source: str = ""
    tests: BandwidthTestRun | None = None
    measured: bool = False

    @classmethod
    def unsupported(cls, profile: TargetProfile, *, reference: bool) -> str | None:
        if not reference and profile.fabric.bandwidth_test is not None:
            return None
        return training_job_problem(profile)

    @classmethod
    def permissions(cls, profile: TargetProfile) -> list[Permission]:
        out = grant(CLUSTER, "", "nodes", READ, "fabric: every GPU node's advertised GPUs and GPU Feature Discovery "
                                                "labels")
        if profile.fabric.bandwidth_test is None:
            return out + training_permissions(profile, "fabric: the canary's collective, timed on every link")
        ns, why = profile.namespace, "fabric: the profile's bandwidth test on each node"
        return (out + grant(ns, "", "pods", ("get", "list", "create", "delete"), why)
                + grant(ns, "", "pods", ("get",), f"{why}: its output, the truth", subresource="log"))

    # ------------------------------------------------------------ inventory
    def _stated(self, name: str) -> tuple[int | None, str]:
        embedded = self.target.embedded
        if embedded is not None and not embedded.real_gpus:
            own = {f"{embedded.node_prefix}-{i}" for i in range(embedded.nodes + embedded.spares)}
            if name in own:
                return embedded.gpus_per_node, (f"the reference cluster's shape: {embedded.gpus_per_node} GPUs a "
                                                "node, as the harness started it")
        stated = self.target.profile.fabric.gpus_per_node
        if stated is not None:
            return stated, "the profile's fabric.gpus_per_node"
        return None, ""

    def _own_nodes(self) -> list[str]:
        embedded = self.target.embedded
        if embedded is None:
            return []
        return [f"{embedded.node_prefix}-{i}" for i in range(embedded.nodes + embedded.spares)]

    def check_inventory(self) -> None:
        """Every GPU node against its inventory: a node short of GPUs FAILs, named; one no source gives an
        inventory for is INCONCLUSIVE, naming the profile field that would."""
        gpu = self.target.profile.gpu_resource
        nodes = gpu_nodes(self.target.driver.list(NODE), gpu, self._own_nodes())
        if not nodes:
            raise DrillInconclusive(f"no node of the cluster is a GPU node (none carries GPU Feature Discovery's "
                                    f"nvidia.com/gpu.present label or registers {gpu}), so no inventory can be checked")
        self.nodes_checked = inventory(nodes, gpu, self._stated)
        self.result.details["inventory"] = [
            {"node": n.node, "inventory": n.inventory, "source": n.source, "capacity": n.capacity,
             "allocatable": n.allocatable, **({"partitioned": n.partitioned} if n.partitioned else {})}
            for n in self.nodes_checked]
        unknown = [n.node for n in self.nodes_checked if n.inventory is None and not n.partitioned]
        compared = [n for n in self.nodes_checked if n.inventory is not None and not n.partitioned]
        self.result.measure(Measurement(MISSING, float(sum(n.missing for n in compared)) if compared else None,
                                        "GPUs", note=f"{len(compared)} GPU node(s) compared with their inventory"))
        for n in compared:
            if n.missing:
                self.result.fail(n.finding())
        if unknown:
            self.result.inconclusive(f"no inventory states the GPUs of {', '.join(unknown)} (the node carries no "
                                     "nvidia.com/gpu.count label): set fabric.gpus_per_node in the target profile "
                                     "(docs/PROFILE.md)")

    # ---------------------------------------------------------- steady state
    def start_gang(self, workers: int, gpus: int) -> None:
        """Start the gang whose collective is measured: the profile's bandwidth test on a real cluster that names
        one, else the training canary (no checkpoints; a payload large enough to time)."""
        test = self.target.profile.fabric.bandwidth_test
        if test is not None and self.target.embedded is None:
            free = free_gpus_per_node(self.target)
            room = sum(1 for g in free.values() if g >= gpus)
            if room < workers:  # one test pod per node: it could never run on every worker's node
                raise DrillInconclusive(f"{room} node(s) have {gpus} GPUs free for the bandwidth test, not {workers} "
                                        f"(free GPUs per schedulable node: {free or 'none'}); free capacity, or lower "
                                        "the numbers in your copy of the feature")
            self.source = TEST_SOURCE.format(command=" ".join(test.command))
            self.tests = BandwidthTestRun(self.target.driver, test, self.run_id, self.target.profile.namespace)
            self.tests.start(workers, gpus, self.target.profile.gpu_resource)
            return
        self.source = CANARY_SOURCE
        self.start_canary(workers, gpus, 0, payload_bytes=PAYLOAD_BYTES)

    # ----------------------------------------------------------------- act
    def measure(self) -> None:
        """Measure every node's collective bandwidth: wait for the canary's timed steps (or the tests' end)."""
        self.result.details["source"] = self.source
        if self.tests is not None:
            self._measure_tests(self.tests)
        elif self.spec is not None:
            self._measure_canary()
        self.measured = True

    def _measure_canary(self) -> None:
        def timed_steps() -> dict[int, int]:
            count: dict[int, int] = {}
            for ln in self.canary.of(CanaryEvent.STEP):
                if (ln.step or 0) > WARMUP_STEPS:
                    count[ln.rank] = count.get(ln.rank, 0) + 1
            return count

        assert self.spec is not None
        workers = self.spec.workers
        self._wait(lambda: len(timed_steps()) >= workers and min(timed_steps().values()) >= MEASURE_STEPS,
                   MEASURE_TIMEOUT)
        lines = self.canary.snapshot()
        self.links = links_of(lines)
        self.figures = node_bandwidths(self.links.values())
        steps = timed_steps()
        if not any(ln.fields.get("recv") is not None for ln in lines if ln.event is CanaryEvent.STEP):
            raise DrillInconclusive("the canary's step lines carry no 'recv' (bytes and seconds per peer): its image "
                                    "predates the measurement; rebuild it from drills/canary (docs/WORKLOAD.md)")
        self.result.details["links"] = [
            {"nodes": list(link.nodes), "bytes": link.totals.bytes, "seconds": round(link.totals.seconds, 6),
             "frames": link.totals.frames, "bandwidth": link.bandwidth} for link in self.links.values()]
        self.result.details["steps_timed"] = {str(r): n for r, n in sorted(steps.items())}
        self._record_figures()
        untimed = [link for link in self.links.values() if link.bandwidth is None]
        if untimed:
            raise DrillInconclusive(
                "the collective's frames on the link(s) "
                + ", ".join(f"{k.a}-{k.b} ({k.totals.untimed} of {k.totals.untimed + k.totals.frames} whole)"
                            for k in untimed) + " "
                "arrived whole before their ranks read them, too fast for the canary to time (the few it timed "
                "would measure a rank's scheduling, not the link), so their nodes' bandwidth is unknown; set "
                "fabric.bandwidth_test to an NCCL test (docs/FABRIC.md)")

    def _measure_tests(self, tests: BandwidthTestRun) -> None:
        pods, ended = tests.wait()
        if not ended:
            raise DrillInconclusive(f"the bandwidth test had not ended on every node within "
                                    f"{tests.test.timeout_seconds:g} s (fabric.bandwidth_test.timeout_seconds); pods: "
                                    + ", ".join(f"{p['metadata']['name']}={(p.get('status') or {}).get('phase')}"
                                                for p in pods))
        found: list[NodeResult] = tests.results(pods)
        self.figures = {r.node: (r.run.avg_busbw if r.run is not None and r.problem is None else None)
                        for r in found}
        self.result.details["tests"] = [
            {"node": r.node, "pod": r.pod, "phase": r.phase, "problem": r.problem,
             "avg_busbw": r.run.avg_busbw if r.run else None,
             "largest": ({"size": r.run.largest.size, "busbw": r.run.largest.busbw}
                         if r.run and r.run.largest else None),
             "busbw": {str(row.size): row.busbw for row in r.run.rows} if r.run else {}} for r in found]
        self._record_figures()
        bad = [r for r in found if r.problem is not None]
        if bad:
            raise DrillInconclusive("the bandwidth test measured nothing on " + "; ".join(
                f"{r.node or r.pod}: {r.problem}" for r in bad))

    def _record_figures(self) -> None:
        self.result.details["nodes"] = {n: v for n, v in self.figures.items()}

    # --------------------------------------------------------------- judge
    def _ready(self) -> bool:
        if not self.measured:
            return False
        if not self.figures:
            raise DrillInconclusive("no node's collective bandwidth was measured")
        return True

    def _why(self, node: str) -> str:
        if not self.links:
            return "its own bandwidth test"
        hub = {ln.node for ln in self.canary.of(CanaryEvent.STEP) if ln.rank == 0 and ln.node}
        relay = ("; it hosts rank 0, through which every rank's bytes pass, so every link is as slow as its own"
                 if node in hub and len(self.links) > 1 else "")
        return f"its links carried {describe(node, self.links.values())}{relay}"

    def judge_floor(self, floor: float) -> None:
        """Every node's collective bandwidth reaches ``floor`` (bytes per second); a node below it is named, with the
        links that show it."""
        if not self._ready():
            return
        unit, scale = bandwidth_unit(floor)
        known = {n: v for n, v in self.figures.items() if v is not None}
        lowest = min(known.values(), default=None)
        where = ", ".join(n for n, v in known.items() if v == lowest)
        self.result.measure(Measurement(LOWEST, None if lowest is None else lowest / scale, unit,
                                        note=f"{text(lowest)} on {where or 'no node'} ({self.source})"))
        if self.links:
            named = blame(self.links.values(), lambda link: (link.bandwidth or 0.0) < floor)
        else:
            named = [n for n, v in known.items() if v < floor]
        for node in named:
            self.result.fail(f"the collective bandwidth of {node} is {text(self.figures.get(node))}, below the floor "
                             f"of {text(floor)}: {self._why(node)} ({self._source_short()})")

    def judge_spread(self, share: float) -> None:
        """No node's collective bandwidth is more than ``share`` (a fraction) below the median node's; the node
        that is is named."""
        if not self._ready():
            return
        median, short = shortfalls(self.figures)
        worst = max(short.values(), default=None)
        self.result.measure(Measurement(SPREAD, None if worst is None else worst * 100, "%",
                                        note=f"the median node's collective bandwidth: {text(median)}"))
        if median is None:
            return
        behind = {n for n, s in short.items() if s > share}
        if self.links:
            named = [n for n in blame(self.links.values(),
                                      lambda link: (link.bandwidth or 0.0) < median * (1 - share)) if n in behind]
            named = named or sorted(behind)
        else:
            named = sorted(behind)
        for node in named:
            self.result.fail(f"the collective bandwidth of {node} is {text(self.figures.get(node))}, "
                             f"{short[node]:.0%} below the median node's {text(median)}: {self._why(node)} "
                             f"({self._source_short()})")

    def _source_short(self) -> str:
        return "the canary's own measurement" if self.tests is None else "its nccl-tests output"

    # ------------------------------------------------------------ rollback
    def rollback(self) -> None:
        """Delete the test pods (a real cluster's test), then what :class:`TrainingRun` made; never raises."""
        if self.tests is not None:
            problems = self.tests.delete()
            if problems:
                self.result.details.setdefault("rollback", []).extend(problems)
        if self.spec is not None:
            super().rollback()
