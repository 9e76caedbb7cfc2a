"""The accelerator access drill's sentences (docs/STEPS.md, docs/ACCESS.md)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from drills.errors import PlaceholderError
from drills.kinds.access.drill import AccessDrill
from drills.kinds.access.slurm import SlurmAccessDrill  # noqa: F401 - its Slurm side, registered on import
from drills.scenario.context import ScenarioContext
from drills.scenario.vocabulary import Checked, Requires, placeholder, scenario_rule, step

MAX_PODS = 16
NODE, PODS, TRIED = "access_node", "access_pods", "access_tried"


def parse_gpu_count(text: str) -> int:
    """'no GPU', '0 GPUs', '1 GPU', '2 GPUs' -> the count, 0 or more."""
    words = " ".join(text.split()).lower()
    if words in ("no gpu", "no gpus"):
        return 0
    m = re.fullmatch(r"([-+]?\d+) gpus?", words)
    if not m or int(m.group(1)) < 0:
        raise PlaceholderError(text, "not a number of GPUs of 0 or more",
                               "write e.g. 'no GPU', '0 GPUs', '1 GPU' or '2 GPUs'")
    return int(m.group(1))


parse_gpu_count.pattern = r"(?:[Nn]o|[-+]?\d+) GPUs?"  # type: ignore[attr-defined]
placeholder("GpuCount", parse_gpu_count, doc=(
    "- `<limit>` of the accelerator access sentences: a number of GPUs that may be none: `no GPU`, `0 GPUs`,",
    "  `1 GPU`, `2 GPUs`;"))


def _access(drill: ScenarioContext) -> AccessDrill:
    return drill.drill(AccessDrill)


def _pod_cap(count: int) -> None:
    if count > MAX_PODS:
        raise PlaceholderError(str(count), f"more than {MAX_PODS} probe pods on one node", f"write 2 to {MAX_PODS}",
                               placeholder="count")


NEEDS_NODE = Requires((NODE,), "no node was chosen for the probe pods",
                      "put 'Given a GPU node with at least 2 GPUs free' before it")
NEEDS_PODS = Requires((PODS,), "no probe pod runs yet, so there is nothing to judge",
                      "put 'When a pod that requests 2 GPUs runs on that node' (or another probe pod sentence) "
                      "before it")
NEEDS_TRIED = Requires((TRIED,), "the pods have not tried each other's GPUs yet",
                       "put 'When each pod tries to open the GPUs the others hold' before it")


@step("Given", "a GPU node with at least {count:Gpus} free", "a GPU node with at least 2 GPUs free",
      sets=(NODE,))
def gpu_node(drill: ScenarioContext, count: int) -> None:
    """The first node (by name) of whole GPUs with at least that many free: schedulable, Ready, and neither
    partitioned (MIG) nor shared by promise (time-slicing, MPS, `nvidia.com/gpu.replicas`), since there pods
    reaching one GPU is the promise. None: INCONCLUSIVE, naming the free GPUs per node."""
    _access(drill).use_node(count)


@step("When", "a pod that requests no GPU runs on that node, asking for every GPU as CUDA images do",
      "a pod that requests no GPU runs on that node, asking for every GPU as CUDA images do",
      requires=(NEEDS_NODE,), sets=(PODS,))
def pod_without_gpu(drill: ScenarioContext) -> None:
    """A probe pod on that node that requests no GPU while its environment says `NVIDIA_VISIBLE_DEVICES=all`, as
    every CUDA base image sets it (the leak of NVIDIA/k8s-device-plugin#61 and #1605). It runs until it has reported
    what it sees and can open; one that never reports is INCONCLUSIVE, naming why."""
    _access(drill).start([0], ask_all=True)


@step("When", "a pod that requests {gpus:Gpus} runs on that node", "a pod that requests 2 GPUs runs on that node",
      requires=(NEEDS_NODE,), sets=(PODS,))
def pod_with_gpus(drill: ScenarioContext, gpus: int) -> None:
    """A probe pod on that node requesting that many GPUs (the profile's `gpu_resource`)."""
    _access(drill).start([gpus])


@step("When", "{count:Count} pods that request {gpus:Gpus} each run side by side on that node",
      "2 pods that request 1 GPU each run side by side on that node", check=lambda count, gpus: _pod_cap(count),
      requires=(NEEDS_NODE,), sets=(PODS,))
def pods_side_by_side(drill: ScenarioContext, count: int, gpus: int) -> None:
    """That many probe pods on that node at once, each requesting that many GPUs."""
    _pod_cap(count)
    _access(drill).start([gpus] * count)


@step("When", "each pod tries to open the GPUs the others hold", "each pod tries to open the GPUs the others hold",
      requires=(NEEDS_PODS,), sets=(TRIED,))
def try_each_other(drill: ScenarioContext) -> None:
    """Each probe pod tries to open every GPU of the node (`nvidia0` up to the node's GPU count) every half second;
    this waits until each has made a round of attempts begun after every other pod reported holding its GPUs
    (both on one node, so one clock), at most 15 seconds."""
    _access(drill).try_each_other()


@step("Then", "the pod sees at most {limit:GpuCount}", "the pod sees at most 0 GPUs", requires=(NEEDS_PODS,))
def sees_at_most(drill: ScenarioContext, limit: int) -> None:
    """No probe pod of the scenario sees more GPUs than that in any of its rounds: its GPU device nodes
    (`/dev/nvidiaN`), the devices it could open, or NVML's count, whichever is more. A pod over it FAILs naming
    its node, the devices and their identities, and its `NVIDIA_VISIBLE_DEVICES`."""
    _access(drill).judge_seen(limit)


@step("Then", "the pod can open at most {limit:GpuCount}", "the pod can open at most 0 GPUs",
      requires=(NEEDS_PODS,))
def opens_at_most(drill: ScenarioContext, limit: int) -> None:
    """No probe pod of the scenario opened more of its node's GPUs than that (a real `open()` of the device node;
    on a real node also of a node the probe made itself where its `/dev` lacked one, so only the device cgroup
    could refuse it)."""
    _access(drill).judge_opened(limit)


@step("Then", "each pod sees exactly the GPUs it requested, by identity",
      "each pod sees exactly the GPUs it requested, by identity", requires=(NEEDS_PODS,))
def sees_its_own(drill: ScenarioContext) -> None:
    """Each probe pod sees as many GPUs as it requested, and they are the ones it was told it holds
    (`NVIDIA_VISIBLE_DEVICES`, or the device plugin's `volume-mounts` entries): by UUID, read from NVML (or, on the
    reference platform, from the device node), or by number where the variable names indexes. A pod whose GPUs'
    identities cannot be read is INCONCLUSIVE for that part, naming what to install."""
    _access(drill).judge_own()


@step("Then", "no pod opens a GPU another pod holds", "no pod opens a GPU another pod holds", requires=(NEEDS_TRIED,))
def no_crossing(drill: ScenarioContext) -> None:
    """For each pair of probe pods: in its first round begun after the other held its GPUs, neither opened any of
    them, and it tried every one. A pod that did FAILs naming both pods, the node, the devices and who was given
    what."""
    _access(drill).judge_crossings()


@scenario_rule
def _enough_free(steps: Sequence[Checked]) -> Iterator[tuple[int, PlaceholderError]]:
    """The node's free GPUs must cover every probe pod's request, and trying each other's GPUs needs two pods."""
    free: int | None = None
    wanted = pods = 0
    for i, st in enumerate(steps):
        values = st.values
        if st.step == gpu_node.__name__:
            free, wanted, pods = values["count"], 0, 0
        elif st.step in (pod_without_gpu.__name__, pod_with_gpus.__name__, pods_side_by_side.__name__):
            count = values.get("count", 1)
            wanted += count * values.get("gpus", 0)
            pods += count
            if free is not None and wanted > free:
                yield i, PlaceholderError(str(wanted), f"the probe pods request {wanted} GPUs but the node is only "
                                          f"required to have {free} free", f"write 'at least {wanted} GPUs free' in "
                                          "the Given sentence, or request fewer", placeholder="gpus")
        elif st.step == try_each_other.__name__ and pods < 2:
            yield i, PlaceholderError(st.text or st.step, f"{pods} probe pod(s) run, so no pod holds GPUs another "
                                      "could try", "start two pods or more first ('When 2 pods that request 1 GPU "
                                      "each run side by side on that node')")
