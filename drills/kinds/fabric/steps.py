"""The fabric drill's sentences (docs/STEPS.md, docs/FABRIC.md)."""

from __future__ import annotations

import re

from drills.errors import PlaceholderError
from drills.kinds.fabric.drill import LOWEST, MISSING, SPREAD, FabricDrill, bandwidth_unit
from drills.records.verdict import Comparison, Threshold
from drills.scenario.context import ScenarioContext
from drills.scenario.vocabulary import Requires, parse_percent, placeholder, step

UNITS = {"B/s": 1.0, "kB/s": 1e3, "KB/s": 1e3, "MB/s": 1e6, "GB/s": 1e9, "TB/s": 1e12,
         "KiB/s": 1024.0, "MiB/s": 1024.0 ** 2, "GiB/s": 1024.0 ** 3,
         "kb/s": 1e3 / 8, "Kb/s": 1e3 / 8, "Mb/s": 1e6 / 8, "Gb/s": 1e9 / 8, "Tb/s": 1e12 / 8,
         "kbit/s": 1e3 / 8, "Mbit/s": 1e6 / 8, "Gbit/s": 1e9 / 8, "Tbit/s": 1e12 / 8}
"""Bytes per second per unit, as written: decimal bytes (nccl-tests' GB/s is 10^9 bytes), binary bytes (GiB/s),
or bits (Gb/s, Gbit/s), as links are rated."""


def parse_bandwidth(text: str) -> float:
    """'5 MB/s', '150 GB/s', '400 Gb/s' (bits), '1.5 GiB/s' -> bytes per second; more than zero."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]+/s)\s*", text)
    if not m:
        raise PlaceholderError(text, "not a bandwidth", "write a number and a unit, e.g. '150 GB/s' or '5 MB/s'")
    number, unit = float(m.group(1)), m.group(2)
    if unit not in UNITS:
        raise PlaceholderError(text, f"unknown unit {unit!r}", "write bytes per second as B/s, kB/s, MB/s, GB/s, "
                                                             "TB/s, MiB/s or GiB/s, or bits as Mb/s, Gb/s")
    if number <= 0:
        raise PlaceholderError(text, "a bandwidth of zero", "write more than zero, e.g. '150 GB/s'")
    return number * UNITS[unit]


parse_bandwidth.pattern = r"\d+(?:\.\d+)?\s*[A-Za-z]+/s"  # type: ignore[attr-defined]


placeholder("Bandwidth", parse_bandwidth, doc=(
    "- `<floor>`: a bandwidth above zero, bytes per second in decimal units (`5 MB/s`, `150 GB/s`, as",
    "  nccl-tests' GB/s) or binary ones (`1.5 GiB/s`), or bits as links are rated (`400 Gb/s`);",))
placeholder("Percent", parse_percent, doc=(
    "- `<margin>`: a percentage above 0 % and below 100 % (`30 %`);",))

GANG = "fabric-gang"
MEASURED = "fabric-measured"
NEEDS_GANG = Requires((GANG,), "no gang runs a collective before this sentence",
                      "put 'Given a gang of 4 workers with 8 GPUs each runs a collective' before it")
NEEDS_MEASURE = Requires((MEASURED,), "the collective is not measured before this sentence",
                         "put 'When the collective's bandwidth is measured on every node' before it")


def _fabric(drill: ScenarioContext) -> FabricDrill:
    return drill.drill(FabricDrill)


@step("Then", "every GPU node advertises the GPUs its inventory states",
      "every GPU node advertises the GPUs its inventory states")
def inventory_advertised(drill: ScenarioContext) -> None:
    """Each GPU node's ``status.allocatable`` holds every GPU of its inventory: on the reference platform the
    cluster's own shape, on a real cluster the profile's ``fabric.gpus_per_node`` or, without it, GPU Feature
    Discovery's ``nvidia.com/gpu.count`` label. A node short of one (7 of 8) FAILs, named with both counts."""
    _fabric(drill).check_inventory()
    drill.result.check(Threshold(MISSING, 0.0, "GPUs"))


@step("Given", "a gang of {workers:Workers} with {gpus:Gpus} each runs a collective",
      "a gang of 4 workers with 8 GPUs each runs a collective", sets=(GANG,))
def gang_collective(drill: ScenarioContext, workers: int, gpus: int) -> None:
    """Start the gang whose collective is measured: the training canary (an all-reduce every step, through rank 0,
    over TCP), or on a real cluster whose profile names ``fabric.bandwidth_test`` that test on each worker's node."""
    _fabric(drill).start_gang(workers, gpus)


@step("When", "the collective's bandwidth is measured on every node",
      "the collective's bandwidth is measured on every node", requires=(NEEDS_GANG,), sets=(MEASURED,))
def collective_measured(drill: ScenarioContext) -> None:
    """Time the collective on every node: 20 steps of every rank's own ``recv`` lines (bytes and seconds of each
    peer's frame as it arrived), or each node's bandwidth test to its end."""
    _fabric(drill).measure()


@step("Then", "every node's collective bandwidth is at least {floor:Bandwidth}",
      "every node's collective bandwidth is at least 150 GB/s", requires=(NEEDS_MEASURE,))
def floor_reached(drill: ScenarioContext, floor: float) -> None:
    """Each node's collective bandwidth (the fastest of its timed links: a link runs at its slower end; or its
    test's bus bandwidth) reaches the floor; a node below it FAILs, named with the links that show it."""
    _fabric(drill).judge_floor(floor)
    unit, scale = bandwidth_unit(floor)
    drill.result.check(Threshold(LOWEST, floor / scale, unit, Comparison.AT_LEAST))


@step("Then", "no node's collective bandwidth is more than {margin:Percent} below the median node's",
      "no node's collective bandwidth is more than 30 % below the median node's", requires=(NEEDS_MEASURE,))
def none_behind(drill: ScenarioContext, margin: float) -> None:
    """No node lags the others: each node's collective bandwidth is at most that share below the median node's;
    the node that lags FAILs, named (a slow link is blamed on the node none of whose links is fast)."""
    _fabric(drill).judge_spread(margin)
    drill.result.check(Threshold(SPREAD, margin * 100, "%"))
