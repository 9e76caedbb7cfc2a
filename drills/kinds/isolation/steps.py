"""The partition isolation drill's sentences (docs/STEPS.md, docs/PARTITIONING.md)."""

from __future__ import annotations


from collections.abc import Iterator, Sequence
from typing import Any

from drills.errors import PlaceholderError
from drills.kinds.isolation.drill import (MIG_PROFILES, MODEL_ALIASES, PROBES, IsolationDrill,
                                          parse_scope, partition_config, promise)
from drills.records.verdict import Comparison, Measurement, Threshold
from drills.scenario.context import ScenarioContext
from drills.scenario.vocabulary import Checked, Requires, placeholder, scenario_rule, step


def parse_outcome(text: str) -> str:
    """Who failed in a probe: 'only that tenant', 'every tenant on that GPU' or 'no tenant'."""
    return parse_scope(text)


parse_outcome.pattern = r".+"  # type: ignore[attr-defined]
placeholder("Outcome", parse_outcome, doc=(
    f"- `<model>`: {', '.join(f'`{m}`' for m in MIG_PROFILES)}, or an alias: "
    + ", ".join(f"`{a}` means `{c}`" for a, c in MODEL_ALIASES.items()) + ";",
    "- `<layout>`: a partitioning the model can hold (its MIG profiles: docs/PARTITIONING.md), as the",
    "  partitioned node's sentence below describes;",
    "- `<words>`: `only that tenant`, `every tenant on that GPU` or `no tenant`."))


def _isolation(drill: ScenarioContext) -> IsolationDrill:
    """The scenario's isolation drill, created on first use; the scenario's rollback undoes it."""
    return drill.drill(IsolationDrill)


MAX_NODE_GPUS, MAX_TENANTS = 16, 128


def _node_of(gpus: int, model: str, layout: str) -> dict[str, Any]:
    """The partition config of a partitioned node's sentence (the model must hold the layout, docs/PARTITIONING.md)."""
    if gpus > MAX_NODE_GPUS:
        raise PlaceholderError(str(gpus), f"a node of more than {MAX_NODE_GPUS} GPUs",
                               f"write 1 to {MAX_NODE_GPUS}", placeholder="gpus")
    return partition_config(layout, model)


def _node_of_one(model: str, layout: str) -> dict[str, Any]:
    return partition_config(layout, model)


def _tenant_cap(count: int) -> None:
    if count > MAX_TENANTS:
        raise PlaceholderError(str(count), f"more than {MAX_TENANTS} tenants", f"write 1 to {MAX_TENANTS}",
                               placeholder="count")


@step("Given", "a node of {gpus:Count} {model} GPUs partitioned as {layout}",
      "a node of 2 H200 GPUs partitioned as MIG 7 x 1g.18gb", check=_node_of)
def partitioned_node(drill: ScenarioContext, gpus: int, model: str, layout: str) -> None:
    """A node of that many GPUs of that model, partitioned as described: `MIG 7 x 1g.18gb` (one profile),
    `MIG 3g.71gb + 2g.35gb + 1g.18gb + 1g.18gb` (a mixed layout, every GPU), `time-slicing x 4` or
    `HAMi x 4` (tenants per GPU). Embedded platform: an extra node started so, stopped and deleted on
    rollback; add `(isolation not enforced)` for a node that claims the mode but behaves like time-slicing.
    Real cluster: the first node with the allow label whose labels and allocatable advertise that layout
    (docs/PARTITIONING.md, "What the node advertises"); none: INCONCLUSIVE, naming what it saw."""
    _node_of(gpus, model, layout)
    _isolation(drill).use_partitioned_node(gpus, model, layout)


@step("Given", "a node of one {model} GPU partitioned as {layout}",
      "a node of one H200 GPU partitioned as MIG 7 x 1g.18gb", check=_node_of_one)
def partitioned_node_one(drill: ScenarioContext, model: str, layout: str) -> None:
    """The same, with a single GPU (the layout descriptions are the same)."""
    _isolation(drill).use_partitioned_node(1, model, layout)


@step("Given", "a partitioned node", "a partitioned node")
def any_partitioned_node(drill: ScenarioContext) -> None:
    """A node the cluster already partitions: it carries the profile's allow label and
    `firedrill.dev/partition-mode` or NVIDIA's MIG or sharing labels; its layout is read from its labels
    and allocatable. None found: INCONCLUSIVE."""
    _isolation(drill).use_cluster_node()


@step("When", "every slice is filled with a tenant, up to {count:Count} tenants",
      "every slice is filled with a tenant, up to 7 tenants", check=_tenant_cap)
def fill_slices(drill: ScenarioContext, count: int) -> None:
    """Create idle probe tenants (pods asking for one slice each) on the node, up to that many; more than the
    node advertises checks that the scheduler refuses the surplus. The count actually running is measured,
    and each pod left Pending keeps the scheduler's FailedScheduling reason."""
    _tenant_cap(count)
    _isolation(drill).fill(count)


@step("When", "one tenant exceeds its memory share", "one tenant exceeds its memory share")
def memory_probe(drill: ScenarioContext) -> None:
    """One tenant is recreated using more memory than its slice has (`firedrill.dev/memory-mib`; on a real
    cluster its probe program allocates GPU memory until the driver refuses, docs/PROFILE.md); the killed
    tenants of an earlier probe are recreated first, so the probe starts from a full node."""
    _isolation(drill).run_probe("memory")


@step("When", "one tenant's slice takes a contained fault", "one tenant's slice takes a contained fault")
def contained_probe(drill: ScenarioContext) -> None:
    """A contained ECC error (Xid 94) on one tenant's slice (its MIG instance; its GPU otherwise), injected
    through the Node annotation `firedrill.dev/inject-xid` (real clusters: the profile's
    `fault.xid.command_template`, behind the safety checks; without one the probe is INCONCLUSIVE)."""
    _isolation(drill).run_probe("contained")


GPU_RESET = "gpu-reset"
"""What the reset-class fault sets, and the sentence judging its GPU's slices requires."""
AFTER_RESET = Requires((GPU_RESET,), "no GPU took a reset-class fault before this step, so no slice had to leave "
                       "service", "put 'When its GPU takes a reset-class fault' before it")


@step("When", "its GPU takes a reset-class fault", "its GPU takes a reset-class fault", sets=(GPU_RESET,))
def reset_probe(drill: ScenarioContext) -> None:
    """A reset-class fault (Xid 79, the GPU fell off the bus) on the GPU of one tenant, injected as the
    contained fault is."""
    _isolation(drill).run_probe("reset")


@step("Then", "{count:Count} tenants are running", "7 tenants are running")
def tenants_running(drill: ScenarioContext, count: int) -> None:
    """Exactly that many probe tenants run on the node: fewer means slices the node advertises could not be
    used, more means the scheduler overcommitted the node."""
    drill.result.check(Threshold("tenants running", float(count), "tenants", Comparison.AT_LEAST))
    drill.result.check(Threshold("tenants running", float(count), "tenants", Comparison.AT_MOST))


@step("Then", "the other {count:Count} tenants are refused by the scheduler",
      "the other 2 tenants are refused by the scheduler")
def tenants_refused(drill: ScenarioContext, count: int) -> None:
    """That many tenants stay Pending, unbound, each with the scheduler's FailedScheduling reason."""
    iso = _isolation(drill)
    refused = iso.pending
    drill.result.measure(Measurement("tenants refused", float(len(refused)), "tenants",
                                     note="; ".join(f"{t}: {r}" for t, r in sorted(refused.items()))))
    drill.result.check(Threshold("tenants refused", float(count), "tenants", Comparison.AT_LEAST))
    drill.result.check(Threshold("tenants refused", float(count), "tenants", Comparison.AT_MOST))
    silent = [t for t, r in refused.items() if not r or r.startswith("left Pending")]
    if silent:
        drill.result.fail(f"the scheduler left {', '.join(sorted(silent))} Pending without saying why "
                          "(no FailedScheduling Event)")


@step("Then", "the tenants affected are {words:Outcome}", "the tenants affected are only that tenant")
def tenants_affected(drill: ScenarioContext, words: str) -> None:
    """Who failed in the last probe: `only that tenant`, `every tenant on that GPU` or `no tenant`. The words
    must be what the contract (docs/PARTITIONING.md) promises for the node's mode; any other tenant that
    failed escaped isolation (FAIL, named), and one that should have failed but survived is named too."""
    _isolation(drill).judge_last(words)


@step("Then", "every slice of that GPU is out of service within {limit:Duration}",
      "every slice of that GPU is out of service within 3 seconds", requires=(AFTER_RESET,))
def slices_out_of_service(drill: ScenarioContext, limit: float) -> None:
    """Within that time of the reset-class fault, every slice of the GPU it hit (each MIG instance, time-slicing
    replica or HAMi vGPU on it, whichever tenant saw the fault) has left the node's allocatable, and none returns
    while the fault stands: judged from the node's allocatable, watched from the fault on, what every scheduler
    honours. FAIL names the node, the GPU and the slices still allocatable (and the tenants still running on it).
    Which slices are that GPU's is read from the allocatable alone, each kind's count over the node's GPUs; a node
    whose counts do not divide evenly does not say, and the step is INCONCLUSIVE naming it (so is a real cluster's
    fault that no tenant felt and no slice left for: the injection is unconfirmed)."""
    _isolation(drill).judge_slices(limit)
    drill.result.check(Threshold("slices out of service", limit, "s"))


PROBE_STEPS = {memory_probe.__name__: "memory", contained_probe.__name__: "contained", reset_probe.__name__: "reset"}


@scenario_rule
def _probe_outcome_promised(steps: Sequence[Checked]) -> Iterator[tuple[int, PlaceholderError]]:
    """Values an earlier step decides, checked before anything runs: the tenants affected must follow a probe
    and, on a node this scenario partitions, be what the contract promises for that probe in that mode
    (docs/PARTITIONING.md)."""
    mode: str | None = None
    probe: str | None = None
    for i, st in enumerate(steps):
        values = st.values
        if st.step in (partitioned_node.__name__, partitioned_node_one.__name__):
            mode = partition_config(values["layout"], values["model"])["mode"]
        elif st.step == any_partitioned_node.__name__:
            mode = None  # read from the cluster's node when the scenario runs
        elif st.step in PROBE_STEPS:
            probe = PROBE_STEPS[st.step]
        elif st.step == tenants_affected.__name__:
            if probe is None:
                yield i, PlaceholderError(values["words"], "no probe before this step, so nothing to judge",
                                          "put 'When one tenant exceeds its memory share', 'When one tenant's "
                                          "slice takes a contained fault' or 'When its GPU takes a reset-class "
                                          "fault' before it", placeholder="words")
            elif mode is not None and values["words"] != (promised := promise(mode, probe)):
                yield i, PlaceholderError(values["words"], f"after '{PROBES[probe].title}' on a {mode} node the "
                                          f"contract promises {promised!r} (docs/PARTITIONING.md)",
                                          f"write '{promised}'", placeholder="words")
