"""The fabric drill's judgement (docs/FABRIC.md): each link's bandwidth from the canary's own step lines, the node a
slow link is blamed on (a leaf's or rank 0's), the floor and the spread naming it, every GPU node's inventory
against its allocatable GPUs, and nccl-tests' output as a real cluster's test prints it."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from drills.errors import PlaceholderError
from drills.kinds.fabric.drill import FabricDrill
from drills.kinds.fabric.inventory import gpu_nodes, inventory
from drills.kinds.fabric.links import blame, links_of, node_bandwidths, shortfalls, text
from drills.kinds.fabric.nccltests import parse_nccl_tests
from drills.kinds.fabric.steps import parse_bandwidth
from drills.scenario.vocabulary import parse_percent
from drills.records.verdict import DrillInconclusive, DrillResult, Verdict
from drills.target.profile import FabricSettings, reference_profile
from drills.workloads.canarylog import CanaryLine, parse_line

FRAME = 262144
FAST, SLOW = 10e6, 2.5e6


def step(rank: int, n: int, node: str, recv: dict[int, tuple[int, float]], gen: str = "0") -> CanaryLine:
    line = parse_line(json.dumps({"seq": n * 10 + rank, "ts": "2027-01-15T08:00:00.000000Z", "event": "step",
                                  "rank": rank, "generation": gen, "step": n, "input_s": 0.0, "compute_s": 0.05,
                                  "comm_s": 0.06, "wall_s": 0.11,
                                  "recv": {str(p): [b, s] for p, (b, s) in recv.items()}}),
                      pod=f"pod-{rank}", uid=f"uid-{gen}-{rank}", node=node, mono=float(n), wall=float(n))
    assert line is not None
    return line


def star(links: dict[str, float], steps: int = 6, hub: str = "node-0") -> list[CanaryLine]:
    """A job of rank 0 on ``hub`` and one rank per other node: every rank logs its peers' frames timed at the
    bandwidth of the link between their nodes; rank 0's view of a fast leaf is untimed (it arrived whole)."""
    leaves = sorted(links)
    out = []
    for n in range(1, steps + 1):
        out.append(step(0, n, hub, {i + 1: ((FRAME, FRAME / bw) if bw < FAST else (0, 0.0))
                                    for i, bw in enumerate(links[leaf] for leaf in leaves)}))
        out += [step(i + 1, n, leaf, {0: (FRAME, FRAME / links[leaf])}) for i, leaf in enumerate(leaves)]
    return out


def test_each_link_is_timed_from_both_ends_after_the_warm_up() -> None:
    links = links_of(star({"node-1": FAST, "node-2": FAST, "node-3": SLOW}))
    assert set(links) == {("node-0", "node-1"), ("node-0", "node-2"), ("node-0", "node-3")}
    slow = links[("node-0", "node-3")]
    assert slow.totals.frames == 8  # steps 3..6, rank 3's and rank 0's view of it; steps 1 and 2 are warm-up
    assert slow.bandwidth == pytest.approx(SLOW)
    assert links[("node-0", "node-1")].totals.frames == 4  # rank 0's view arrived whole: not timed
    assert node_bandwidths(links.values()) == pytest.approx(
        {"node-0": FAST, "node-1": FAST, "node-2": FAST, "node-3": SLOW})


def test_a_link_whose_frames_mostly_arrive_whole_is_too_fast_to_time_not_slow() -> None:
    """Unpaced loopback (the upstream walk): frames arrive whole before their rank reads them, and the one a
    descheduled reader happened to split would read as 0.3 MB/s; most whole means the link outran the timing, so
    it has no figure (INCONCLUSIVE), never a slow one."""
    lines = [step(0, n, "node-0", {1: (0, 0.0)}) for n in range(1, 7)]
    lines += [step(1, n, "node-1", {0: (FRAME, 0.8) if n == 4 else (0, 0.0)}) for n in range(1, 7)]
    (link,) = links_of(lines).values()
    assert (link.totals.frames, link.totals.untimed) == (1, 7)
    assert link.bandwidth is None
    assert node_bandwidths([link]) == {"node-0": None, "node-1": None}


def test_a_slow_leaf_is_blamed_not_rank_0s_node_whose_other_links_are_fast() -> None:
    links = links_of(star({"node-1": FAST, "node-2": FAST, "node-3": SLOW})).values()
    assert blame(links, lambda link: (link.bandwidth or 0) < 5e6) == ["node-3"]


def test_a_slow_rank_0_node_slows_every_link_and_is_the_one_blamed() -> None:
    links = links_of(star({"node-1": SLOW, "node-2": SLOW, "node-3": SLOW}, hub="node-3x")).values()
    assert blame(links, lambda link: (link.bandwidth or 0) < 5e6) == ["node-3x"]


def test_two_nodes_and_one_slow_link_cannot_be_told_apart_so_both_are_named() -> None:
    links = links_of(star({"node-1": SLOW})).values()
    assert blame(links, lambda link: (link.bandwidth or 0) < 5e6) == ["node-0", "node-1"]


def test_shortfalls_are_against_the_median_node() -> None:
    median, short = shortfalls({"a": 10.0, "b": 9.0, "c": 10.0, "d": 2.5, "e": None})
    assert median == pytest.approx(9.5)
    assert short["d"] == pytest.approx(1 - 2.5 / 9.5) and short["a"] == 0.0 and "e" not in short
    assert text(2.455e6) == "2.46 MB/s" and text(152.3e9) == "152 GB/s" and text(None) == "never timed"


def drill_with(lines: list[CanaryLine]) -> FabricDrill:
    """A fabric drill that measured ``lines`` (no target: judging touches none)."""
    drill = FabricDrill(SimpleNamespace(), DrillResult("fabric"), "fdtest")  # type: ignore[arg-type]
    for line in lines:
        drill.canary.add(line)
    drill.links = links_of(lines)
    drill.figures = node_bandwidths(drill.links.values())
    drill.source, drill.measured = "the canary", True
    return drill


def test_the_floor_fails_naming_the_slow_leaf_and_its_links() -> None:
    drill = drill_with(star({"node-1": FAST, "node-2": FAST, "node-3": SLOW}))
    drill.judge_floor(5e6)
    assert drill.result.measurements["lowest node collective bandwidth"].value == pytest.approx(2.5)
    assert drill.result.findings == ["the collective bandwidth of node-3 is 2.5 MB/s, below the floor of 5 MB/s: its "
                                     "links carried to node-0 2.5 MB/s (the canary's own measurement)"]
    assert drill.result.verdict is Verdict.FAIL


def test_the_floor_names_a_slow_rank_0_node_as_the_one_every_link_crosses() -> None:
    drill = drill_with(star({"node-1": SLOW, "node-2": SLOW, "node-3": SLOW}, hub="node-9"))
    drill.judge_floor(5e6)
    (finding,) = drill.result.findings
    assert finding.startswith("the collective bandwidth of node-9 is 2.5 MB/s, below the floor of 5 MB/s: its links "
                              "carried to node-1 2.5 MB/s, to node-2 2.5 MB/s, to node-3 2.5 MB/s; it hosts rank 0")


def test_the_spread_fails_naming_the_node_behind_the_median_and_passes_an_even_fabric() -> None:
    drill = drill_with(star({"node-1": FAST, "node-2": FAST, "node-3": SLOW}))
    drill.judge_spread(0.3)
    assert drill.result.measurements["largest shortfall below the median node"].value == pytest.approx(75.0)
    assert drill.result.findings == ["the collective bandwidth of node-3 is 2.5 MB/s, 75% below the median node's "
                                     "10 MB/s: its links carried to node-0 2.5 MB/s (the canary's own measurement)"]
    even = drill_with(star({"node-1": FAST, "node-2": 9e6, "node-3": FAST}))
    even.judge_floor(5e6)
    even.judge_spread(0.3)
    assert even.result.findings == [] and even.result.verdict is Verdict.PASS


def test_nothing_measured_is_inconclusive_never_a_pass() -> None:
    drill = drill_with([])
    with pytest.raises(DrillInconclusive, match="no node's collective bandwidth was measured"):
        drill.judge_floor(5e6)


# --- inventory ---------------------------------------------------------------------------------------------

def node(name: str, capacity: int, allocatable: int, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.present": "true", **labels}},
            "status": {"capacity": {"nvidia.com/gpu": str(capacity)},
                       "allocatable": {"nvidia.com/gpu": str(allocatable)}}}


class Nodes:
    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self.nodes = nodes

    def list(self, res: Any) -> list[dict[str, Any]]:
        return self.nodes


def inventory_drill(nodes: list[dict[str, Any]], *, embedded: Any = None, gpus_per_node: int | None = None
                    ) -> FabricDrill:
    profile = replace(reference_profile(), fabric=FabricSettings(gpus_per_node=gpus_per_node))
    target = SimpleNamespace(driver=Nodes(nodes), profile=profile, embedded=embedded)
    return FabricDrill(target, DrillResult("fabric"), "fdtest")  # type: ignore[arg-type]


EMBEDDED = SimpleNamespace(real_gpus=False, node_prefix="gpu-node", nodes=4, spares=1, gpus_per_node=8)


def test_a_node_that_shows_7_of_its_8_gpus_fails_named_with_both_counts() -> None:
    drill = inventory_drill([node(f"gpu-node-{i}", 8, 8) for i in range(3)] + [node("gpu-node-3", 7, 7)],
                            embedded=EMBEDDED)
    drill.check_inventory()
    assert drill.result.findings == [
        "gpu-node-3 advertises 7 of the 8 GPUs its inventory states (the reference cluster's shape: 8 GPUs a node, "
        "as the harness started it): capacity 7, allocatable 7"]
    assert drill.result.measurements["GPUs missing from the nodes' allocatable"].value == 1.0


def test_a_gpu_out_of_allocatable_counts_and_the_profiles_count_beats_the_nodes_own_label() -> None:
    drill = inventory_drill([node("a", 8, 8, **{"nvidia.com/gpu.count": "8"}),
                             node("b", 8, 6, **{"nvidia.com/gpu.count": "6"})], gpus_per_node=8)
    drill.check_inventory()
    assert drill.result.findings == ["b advertises 6 of the 8 GPUs its inventory states (the profile's "
                                     "fabric.gpus_per_node): capacity 8, allocatable 6"]


def test_without_a_stated_count_the_gfd_label_is_the_inventory_and_a_node_with_none_is_inconclusive() -> None:
    drill = inventory_drill([node("a", 8, 8, **{"nvidia.com/gpu.count": "8"}), node("b", 8, 8)])
    drill.check_inventory()
    assert drill.result.verdict is Verdict.INCONCLUSIVE
    assert drill.result.findings == ["no inventory states the GPUs of b (the node carries no nvidia.com/gpu.count "
                                     "label): set fabric.gpus_per_node in the target profile (docs/PROFILE.md)"]


def test_a_partitioned_node_is_listed_not_compared_and_a_cpu_node_is_no_gpu_node() -> None:
    mig = node("mig", 56, 56, **{"nvidia.com/mig.strategy": "single"})
    cpu = {"metadata": {"name": "cpu", "labels": {}}, "status": {"capacity": {"cpu": "8"}}}
    nodes = gpu_nodes([mig, cpu], "nvidia.com/gpu")
    (only,) = inventory(nodes, "nvidia.com/gpu", lambda name: (8, "stated"))
    assert (only.node, only.partitioned, only.missing) == ("mig", "mig.strategy=single", 0)


# --- nccl-tests --------------------------------------------------------------------------------------------

NCCL_OUTPUT = """\
# nThread 1 nGpus 8 minBytes 536870912 maxBytes 4294967296 step: 2(factor) warmup iters: 5 iters: 20 \
agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  41207 on   h100-a07 device  0 [0x18] NVIDIA H100 80GB HBM3
#  Rank  7 Group  0 Pid  41207 on   h100-a07 device  7 [0xdb] NVIDIA H100 80GB HBM3
h100-a07:41207:41207 [0] NCCL INFO Bootstrap : Using eth0:10.1.4.7<0>
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
   536870912     134217728     float     sum      -1   2961.4  181.29  317.26      0   2958.0  181.50  317.63      0
  1073741824     268435456     float     sum      -1   5716.2  187.84  328.72      0   5720.9  187.69  328.45      0
  2147483648     536870912     float     sum      -1    11262  190.68  333.69      0    11270  190.55  333.46      0
  4294967296    1073741824     float     sum      -1    22391  191.82  335.68      0    22405  191.70  335.47      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 328.757
#
"""


def test_nccl_tests_output_gives_its_average_and_per_size_bus_bandwidth() -> None:
    run = parse_nccl_tests(NCCL_OUTPUT)
    assert run.avg_busbw == pytest.approx(328.757e9)
    assert [r.size for r in run.rows] == [536870912, 1073741824, 2147483648, 4294967296]
    assert run.largest is not None and run.largest.busbw == pytest.approx(335.68e9)
    assert run.rows[0].busbw_in_place == pytest.approx(317.63e9)
    assert run.problem is None and run.out_of_bounds == 0


def test_a_test_that_did_not_finish_or_summed_wrong_measured_nothing() -> None:
    unfinished = parse_nccl_tests(NCCL_OUTPUT.split("# Out of bounds")[0])
    assert unfinished.problem is not None and "did not finish" in unfinished.problem
    wrong = parse_nccl_tests(NCCL_OUTPUT.replace("335.68      0", "335.68      3"))
    assert wrong.problem is not None and "3 wrong value(s)" in wrong.problem
    assert parse_nccl_tests("NCCL WARN no GPU").problem is not None


def test_a_threshold_is_written_as_a_bandwidth_and_a_margin_as_a_percentage() -> None:
    assert parse_bandwidth("150 GB/s") == 150e9 and parse_bandwidth("400 Gb/s") == 50e9
    assert parse_bandwidth("5 MB/s") == 5e6 and parse_bandwidth("1.5 GiB/s") == 1.5 * 1024 ** 3
    assert parse_percent("30 %") == pytest.approx(0.3)
    for bad in ("5 mb/s", "0 GB/s", "fast"):
        with pytest.raises(PlaceholderError):
            parse_bandwidth(bad)
    with pytest.raises(PlaceholderError):
        parse_percent("100 %")


def test_a_real_clusters_bandwidth_test_runs_once_per_node_holding_the_workers_gpus() -> None:
    from drills.kinds.fabric.bandwidthtest import TEST_LABEL, test_pods
    from drills.target.profile import BandwidthTest

    test = BandwidthTest("nccl-tests:2.14", ("all_reduce_perf", "-b", "1G", "-e", "4G", "-f", "2", "-g", "8"))
    pods = test_pods(test, "fd1234", "drills", 2, 8, "nvidia.com/gpu")
    assert [p["metadata"]["name"] for p in pods] == ["fabric-fd1234-0", "fabric-fd1234-1"]
    spec = pods[0]["spec"]
    (apart,) = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert apart == {"labelSelector": {"matchLabels": {TEST_LABEL: "fd1234"}}, "topologyKey": "kubernetes.io/hostname"}
    (container,) = spec["containers"]
    assert container["command"] == list(test.command) and container["resources"] == {"limits": {"nvidia.com/gpu": "8"}}
    assert spec["restartPolicy"] == "Never"


class Cluster:
    """A real cluster's API as the bandwidth test path sees it: three free nodes of 8 GPUs; every pod created
    runs at once on the next free node and succeeds (the scheduler and kubelets, faked: no real one runs here)."""

    def __init__(self) -> None:
        self.nodes = [node(f"h100-{i}", 8, 8) for i in range(3)]
        for n in self.nodes:
            n["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        self.pods: list[dict[str, Any]] = []
        self.deleted: list[str] = []

    def list(self, res: Any, namespace: str | None = None, label_selector: str | None = None) -> list[Any]:
        return self.nodes if res.kind == "Node" else self.pods

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        obj = {**obj, "spec": {**obj["spec"], "nodeName": f"h100-{len(self.pods)}"}, "status": {"phase": "Succeeded"}}
        self.pods.append(obj)
        return obj

    def delete(self, res: Any, name: str, namespace: str | None = None, grace_seconds: int | None = None) -> None:
        self.deleted.append(name)


def test_on_a_real_cluster_each_nodes_nccl_tests_bus_bandwidth_is_judged_and_its_pods_deleted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from drills.kinds.fabric import bandwidthtest
    from drills.target.profile import BandwidthTest

    outputs = {"fabric-fdtest-0": NCCL_OUTPUT, "fabric-fdtest-1": NCCL_OUTPUT.replace("328.757", "112.400"),
               "fabric-fdtest-2": NCCL_OUTPUT}
    monkeypatch.setattr(bandwidthtest, "read_log_head", lambda driver, ns, name, limit: outputs[name])
    profile = replace(reference_profile(), fabric=FabricSettings(8, BandwidthTest("nccl", ("all_reduce_perf",))))
    cluster = Cluster()
    drill = FabricDrill(SimpleNamespace(driver=cluster, profile=profile, embedded=None),  # type: ignore[arg-type]
                        DrillResult("fabric"), "fdtest")
    drill.start_gang(3, 8)
    drill.measure()
    drill.judge_floor(150e9)
    assert drill.result.details["source"].startswith("the profile's bandwidth test (all_reduce_perf)")
    assert drill.result.findings == ["the collective bandwidth of h100-1 is 112 GB/s, below the floor of 150 GB/s: "
                                     "its own bandwidth test (its nccl-tests output)"]
    drill.rollback()
    assert cluster.deleted == ["fabric-fdtest-0", "fabric-fdtest-1", "fabric-fdtest-2"]
