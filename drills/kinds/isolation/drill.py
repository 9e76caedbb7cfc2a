"""The partition isolation drill: when one tenant of a partitioned GPU misbehaves or faults, who else fails?

Steady state before (a node partitioned in a known mode, its layout read back
from its labels and allocatable, docs/PARTITIONING.md) -> act (fill every slice
with an idle probe tenant, up to an agreed count; then one probe at a time: a
tenant exceeds its memory share, a tenant's slice takes a contained fault
(Xid 94), its GPU takes a reset-class fault (Xid 79)) -> observe (which tenants
failed, with the pod's reason) -> steady state after (the killed tenants are
recreated so every probe starts from a full node) -> rollback (every probe pod
deleted, the injection annotation removed, an embedded partitioned node
stopped and deleted).

The outcome is a matrix tenant x probe -> survived / failed, compared with what
the node's mode promises (the contract's table): a tenant that failed although
the mode promises it survives has *escaped* isolation, and the scenario FAILs
naming it; so does a tenant that survived a fault the mode says must kill it.
Probes that cannot be performed (a real cluster with no injection method) are
INCONCLUSIVE, never PASS.

On a real cluster the scenario's partitioned node is one the cluster already has: the partitioned node's
sentence picks the first node carrying the allow label whose labels and allocatable advertise the layout the
sentence describes (model, GPU count, mode, MIG profiles or tenants per GPU), and is INCONCLUSIVE naming the
layout when none does.  A node whose GPUs are simulated (the reference agent serving as a kubelet, labelled
``firedrill.dev/simulated-gpus=true``) is drilled as on the embedded platform: the tenants are canaries, the
agent's simulated GPUs decide who fails, and only the Xid comes from the profile's template.

On a real GPU the tenant program is the probe (:mod:`drills.workloads.probe`): each
tenant pod runs it in ``canary_image``; it holds GPU memory through the CUDA
driver API and reports through its pod log, which the drill follows through
``pods/log``.  The memory probe's victim really allocates, until the driver
refuses; who failed is what the tenants' own logs say (and any pod that failed
or vanished).  An Xid is injected by the profile's own template
``fault.xid.command_template`` (``{node} {gpu} {instance} {xid}``, the GPU and
MIG instance read by the victim's probe), only behind the same safety checks
as a node fault (allow label, not control plane, Ready, ``max_nodes``,
``max_gpu_share``).  Where a tenant holds no GPU memory (no driver library in
the image's container) nothing can be shown: INCONCLUSIVE, naming what to fix.

After a reset-class fault the node's allocatable is judged too (issue 49, "Health on shared GPUs"): watched from
the first injection on, every slice of the faulted GPU (each MIG instance, time-slicing replica or HAMi vGPU on
it) must leave it, as every scheduler honours allocatable, and stay out while the fault stands.  Which slices are
that GPU's is read from the allocatable alone: the node's count of each slice kind over its GPU count (a node
whose counts do not divide evenly does not say, and the judgement is INCONCLUSIVE naming it).  A probe's Xid
stands until the next probe starts or the rollback: the drill then repairs it (the embedded platform: removes the
injection and waits for the node's slices to be whole again; a real cluster: every tenant deleted, then the
profile's restore command), so the sentences after a probe judge the platform with its fault standing.

The pure parts (layout discovery, the promise table, judging a probe, the slices of a GPU still allocatable) are
functions of plain dicts, tested without a cluster.
"""

from __future__ import annotations

import enum
import json
import logging
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from drills.errors import PlaceholderError
from drills.kube.driver import EVENT, NODE, POD, KubeError
from drills.kube.flavors import RUN_LABEL, run_selector
from drills.kube.logs import LogFollower, LogLine
from drills.records.verdict import DrillInconclusive
from drills.records.verdict import Measurement
from drills.scenario.drill import Drill, register
from drills.target.faults import FaultError, FaultRecord
from drills.target.access import CLUSTER, Permission, grant
from drills.target.profile import TargetProfile
from drills.target.xid import inject_by_command
from drills.workloads.probe import ProbeEvent, ProbeReport, parse_probe_line, probe_pod, tenant_args

log = logging.getLogger(__name__)
Obj = dict[str, Any]

MODE_LABEL = "firedrill.dev/partition-mode"
ENFORCED_LABEL = "firedrill.dev/isolation-enforced"
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
SHARING_LABEL = "nvidia.com/gpu.sharing-strategy"
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
PRODUCT_LABEL = "nvidia.com/gpu.product"
COUNT_LABEL = "nvidia.com/gpu.count"
MEMORY_LABEL = "nvidia.com/gpu.memory"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
DEVICES_ANNOTATION = "firedrill.dev/devices"
MEMORY_ANNOTATION = "firedrill.dev/memory-mib"
TENANT_LABEL = "firedrill.dev/tenant"
GPU = "nvidia.com/gpu"
GPU_SHARED = "nvidia.com/gpu.shared"
GPUMEM = "nvidia.com/gpumem"
MIG_PREFIX = "nvidia.com/mig-"
SIMULATED_LABEL = "firedrill.dev/simulated-gpus"
"""The reference agent's label on its Node when its GPUs are simulated (``true``)."""
MODES = ("none", "mig-single", "mig-mixed", "time-slicing", "hami")
PROFILE_RE = re.compile(r"^(\d+)g\.(\d+)gb(\+me)?$")

# -------------------------------------------------------------------------- the promise (contract table)

ONLY_IT = "only that tenant"
EVERY_ON_GPU = "every tenant on that GPU"
NO_TENANT = "no tenant"
SCOPES = (ONLY_IT, EVERY_ON_GPU, NO_TENANT)
SCOPE_WORDS = {"only that tenant": ONLY_IT, "only it": ONLY_IT, "only the tenant": ONLY_IT,
               "every tenant on that gpu": EVERY_ON_GPU, "every tenant on the gpu": EVERY_ON_GPU,
               "every tenant on its gpu": EVERY_ON_GPU, "all tenants on that gpu": EVERY_ON_GPU,
               "no tenant": NO_TENANT, "none": NO_TENANT}


@dataclass(frozen=True)
class Probe:
    key: str
    title: str
    short: str
    """For the measurement's name: "tenants affected by <short>"."""
    xid: int | None = None


PROBES = {
    "memory": Probe("memory", "a tenant exceeds its memory share", "memory overuse"),
    "contained": Probe("contained", "contained fault (Xid 94) on its slice", "the contained fault", 94),
    "reset": Probe("reset", "reset-class fault (Xid 79) on its GPU", "the reset-class fault", 79),
}

PROMISES: dict[str, dict[str, str]] = {
    "mig": {"memory": ONLY_IT, "contained": ONLY_IT, "reset": EVERY_ON_GPU},
    "time-slicing": {"memory": EVERY_ON_GPU, "contained": EVERY_ON_GPU, "reset": EVERY_ON_GPU},
    "hami": {"memory": ONLY_IT, "contained": EVERY_ON_GPU, "reset": EVERY_ON_GPU},
}
"""docs/PARTITIONING.md, "What each mode promises": probe -> who fails, per mode family."""


def family(mode: str) -> str:
    """The promise column of a mode: mig-single and mig-mixed are MIG; whole GPUs (none) share nothing, so
    every tenant on a GPU is the only one there (the time-slicing column says the same)."""
    if mode.startswith("mig"):
        return "mig"
    if mode == "hami":
        return "hami"
    return "time-slicing"


def promise(mode: str, probe: str) -> str:
    """Who the contract says fails when ``probe`` hits a tenant of a node in ``mode``."""
    if probe not in PROBES:
        raise ValueError(f"unknown probe {probe!r}; known: {', '.join(PROBES)}")
    return PROMISES[family(mode)][probe]


def parse_scope(words: str) -> str:
    """'only that tenant', 'every tenant on that GPU', 'no tenant' (case-insensitive) -> the scope."""
    key = " ".join(words.strip().strip('"').lower().split())
    if key not in SCOPE_WORDS:
        raise PlaceholderError(words, "unknown outcome",
                               "write one of " + ", ".join(f'"{s}"' for s in SCOPES), placeholder="words")
    return SCOPE_WORDS[key]


# ------------------------------------------------------------------------- the partition config (embedded)

MIG_PROFILES: dict[str, dict[str, int]] = {
    "A100-40GB": {"1g.5gb": 7, "1g.10gb": 4, "2g.10gb": 3, "3g.20gb": 2, "4g.20gb": 1, "7g.40gb": 1},
    "A100-80GB": {"1g.10gb": 7, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1},
    "H100-80GB": {"1g.10gb": 7, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1},
    "H200": {"1g.18gb": 7, "1g.35gb": 4, "2g.35gb": 3, "3g.71gb": 2, "4g.71gb": 1, "7g.141gb": 1},
}
"""docs/PARTITIONING.md, "MIG profiles": profile -> most instances per GPU, per model."""
MODEL_ALIASES = {"A100": "A100-40GB", "A100-SXM4-40GB": "A100-40GB", "A100-SXM4-80GB": "A100-80GB",
                 "H100": "H100-80GB", "H100-SXM5-80GB": "H100-80GB", "H200-141GB": "H200"}
NOT_ENFORCED = ("(isolation not enforced)", "without enforcing isolation")
PARTITION_EXAMPLES = ("'MIG 7 x 1g.18gb', 'MIG 3g.71gb + 2g.35gb + 1g.18gb + 1g.18gb', 'time-slicing x 4' or "
                      "'HAMi x 4', optionally followed by '(isolation not enforced)'")


def gpu_model(name: str) -> str:
    """The contract's name of a GPU model a feature file names (``A100`` -> ``A100-40GB``, any case).

    Raises :class:`PlaceholderError` naming the models the reference platform simulates."""
    key = name.strip().lower()
    for alias, canonical in [*((m, m) for m in MIG_PROFILES), *MODEL_ALIASES.items()]:
        if key == alias.lower():
            return canonical
    aliases = ", ".join(f"{a} = {c}" for a, c in MODEL_ALIASES.items())
    raise PlaceholderError(name, "unknown GPU model: the reference platform simulates no such GPU",
                           f"write one of {', '.join(MIG_PROFILES)} (or an alias: {aliases})", placeholder="model")


def mig_layouts(model: str) -> str:
    """The one-profile MIG layouts a model's GPU can hold, as a feature file writes them."""
    return ", ".join(f"MIG {n} x {p}" for p, n in MIG_PROFILES[model].items())


def _mig_fix(description: str, canonical: str) -> str:
    """How to fix a MIG layout that ``canonical`` cannot hold: its layouts, and the models that hold this one."""
    holders = []
    for other in MIG_PROFILES:
        try:
            _partition_config(description, other)
        except PlaceholderError:
            continue
        holders.append(other)
    fix = f"write a layout one {canonical} GPU can hold: {mig_layouts(canonical)}, or a mix of these " \
          "profiles within 7 compute and 8 memory slices"
    if holders:
        fix += f"; or keep this layout on a model that holds it: {', '.join(holders)}"
    return fix


def _memory_slices(profile: str, profiles: dict[str, int]) -> int:
    compute = int(profile.split("g.", 1)[0])
    if compute == 1:
        smallest = min(int(p.split(".")[1].removesuffix("gb")) for p in profiles if p.startswith("1g."))
        return 1 if int(profile.split(".")[1].removesuffix("gb").removesuffix("+me")) == smallest else 2
    return {2: 2, 3: 4, 4: 4, 7: 8}.get(compute, 8)


def partition_config(description: str, model: str) -> dict[str, Any]:
    """The agent's partition config for a mode as a feature file says it (docs/PARTITIONING.md):

    - ``MIG 7 x 1g.18gb``: every GPU holds 7 instances of one profile (mig-single);
    - ``MIG 3g.71gb + 2g.35gb + 1g.18gb + 1g.18gb``: every GPU holds these instances (mig-mixed);
    - ``time-slicing x 4``: 4 tenants share each GPU; ``HAMi x 4``: 4 vGPUs per GPU;
    - any of them followed by ``(isolation not enforced)``: the node claims the mode but behaves like
      time-slicing (``enforce_isolation: false``).

    Raises :class:`PlaceholderError` naming what is wrong (an unknown model, a profile the model lacks, too
    many instances, ...) and how to fix it: the layouts the model can hold, the models that hold the layout."""
    try:
        return _partition_config(description, model)
    except PlaceholderError as exc:
        if exc.fix:
            raise
        raise PlaceholderError(exc.value, exc.problem, _mig_fix(description, gpu_model(model)),
                               placeholder=exc.placeholder) from None


def _partition_config(description: str, model: str) -> dict[str, Any]:
    """:func:`partition_config` without the search for a fix (a MIG layout that does not fit has none yet)."""
    text = " ".join(description.strip().split())
    enforce = True
    for suffix in NOT_ENFORCED:
        if text.lower().endswith(suffix):
            enforce, text = False, text[: -len(suffix)].strip().rstrip(",")
    canonical = gpu_model(model)

    def bad(problem: str, fix: str | None = None) -> PlaceholderError:
        return PlaceholderError(description, problem, fix or "", placeholder="layout")

    m = re.fullmatch(r"(?i)(time-slicing|hami) x (\d+)", text)
    if m:
        n = int(m.group(2))
        if not 2 <= n <= 64:
            raise bad(f"{n} tenant{'' if n == 1 else 's'} per GPU", f"write 2 to 64, e.g. '{m.group(1)} x 4'")
        kind = m.group(1).lower()
        config: dict[str, Any] = ({"mode": "time-slicing", "replicas": n} if kind == "time-slicing"
                                  else {"mode": "hami", "vgpus_per_gpu": n})
    elif text[:4].upper() == "MIG ":
        profiles = MIG_PROFILES[canonical]
        means = f" ({model.strip()} means {canonical})" if model.strip().lower() != canonical.lower() else ""
        body = text[4:].strip()
        single = re.fullmatch(r"(\d+) x (\S+)", body)
        layout = [single.group(2)] * int(single.group(1)) if single else [p.strip() for p in body.split("+")]
        for p in layout:
            if p not in profiles:
                raise bad(f"MIG profile {p!r} does not exist on {canonical}{means}")
            if layout.count(p) > profiles[p]:
                raise bad(f"{layout.count(p)} x {p} on one {canonical} GPU{means}: it holds at most {profiles[p]}")
        if not 1 <= len(layout) <= 7:
            raise bad(f"{len(layout)} MIG instances on one GPU", "write 1 to 7 instances, e.g. 'MIG 7 x 1g.18gb'")
        compute = sum(int(p.split("g.", 1)[0]) for p in layout)
        memory = sum(_memory_slices(p, profiles) for p in layout)
        if compute > 7 or memory > 8:
            raise bad(f"the layout {' + '.join(layout)} needs {compute} of 7 compute slices and {memory} of "
                      f"8 memory slices of a {canonical} GPU{means}: it does not fit")
        config = {"mode": "mig-single" if single else "mig-mixed", "layout": [layout]}
    else:
        raise bad("unknown partition layout", f"write {PARTITION_EXAMPLES}")
    if not enforce:
        config["enforce_isolation"] = False
    return config


# ------------------------------------------------------------------------------------------- the layout


@dataclass(frozen=True)
class SliceKind:
    """One kind of slice the node advertises: the resource a tenant asks one of, how many, its memory share."""

    resource: str
    count: int
    memory_mib: int
    profile: str = ""


@dataclass(frozen=True)
class Layout:
    """A node's partition layout as it advertises it (labels and allocatable)."""

    node: str
    mode: str
    gpus: int
    product: str
    slices: tuple[SliceKind, ...]
    enforced: bool = True
    """False when the node itself labels ``firedrill.dev/isolation-enforced=false``."""
    extra_requests: tuple[tuple[str, int], ...] = ()
    """HAMi: the memory share asked for explicitly (``nvidia.com/gpumem``)."""
    gpu_memory_mib: int = 0
    """One GPU's memory (``nvidia.com/gpu.memory``); 0 when the node does not say."""

    @property
    def total_slices(self) -> int:
        return sum(s.count for s in self.slices)

    @property
    def per_gpu(self) -> float:
        return self.total_slices / self.gpus if self.gpus else 0.0

    def describe(self) -> str:
        kinds = ", ".join(f"{s.count} x {s.profile or s.resource} ({s.memory_mib} MiB)" for s in self.slices)
        return f"{self.node}: {self.mode} on {self.gpus} x {self.product}: {kinds}"

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "mode": self.mode, "gpus": self.gpus, "product": self.product,
                "enforced": self.enforced, "total_slices": self.total_slices, "gpu_memory_mib": self.gpu_memory_mib,
                "slices": [{"resource": s.resource, "count": s.count, "memory_mib": s.memory_mib,
                            "profile": s.profile} for s in self.slices]}


class LayoutError(ValueError):
    """The node does not advertise a partition layout the drill can read."""


def profile_memory_mib(profile: str) -> int:
    """``1g.18gb`` -> 18432 (the profile's nominal memory, when the node does not label it)."""
    m = PROFILE_RE.match(profile)
    if not m:
        raise LayoutError(f"{profile!r} is not a MIG profile name (like 1g.18gb)")
    return int(m.group(2)) * 1024


def _int(value: Any) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def discover_layout(node: Obj) -> Layout:
    """Read the partition layout of ``node`` from its labels and ``status.allocatable``
    (docs/PARTITIONING.md, "What the node advertises"); raise :class:`LayoutError` saying what is missing."""
    meta, status = node.get("metadata") or {}, node.get("status") or {}
    name = meta.get("name", "?")
    labels = meta.get("labels") or {}
    alloc = {k: _int(v) for k, v in (status.get("allocatable") or {}).items()}
    mode = labels.get(MODE_LABEL)
    if mode is None:
        if labels.get(MIG_STRATEGY_LABEL) in ("single", "mixed"):
            mode = f"mig-{labels[MIG_STRATEGY_LABEL]}"
        elif labels.get(SHARING_LABEL) in ("time-slicing", "hami"):
            mode = labels[SHARING_LABEL]
        elif labels.get(REPLICAS_LABEL, "1") not in ("", "1"):
            mode = "time-slicing"
        else:
            mode = "none"
    if mode not in MODES:
        raise LayoutError(f"node {name}: partition mode {mode!r} is not one of {', '.join(MODES)}")
    product = labels.get(PRODUCT_LABEL, "unknown")
    gpus = _int(labels.get(COUNT_LABEL)) or 0
    gpu_memory = _int(labels.get(MEMORY_LABEL)) or 0
    enforced = labels.get(ENFORCED_LABEL, "true").lower() != "false"
    slices: list[SliceKind] = []
    extra: tuple[tuple[str, int], ...] = ()
    if mode == "mig-mixed":
        for res, count in sorted(alloc.items()):
            if res.startswith(MIG_PREFIX) and count:
                profile = res[len(MIG_PREFIX):]
                mem = _int(labels.get(f"{MIG_PREFIX}{profile}.memory")) or profile_memory_mib(profile)
                slices.append(SliceKind(res, count, mem, profile))
        if not slices:
            raise LayoutError(f"node {name} says mig-mixed but advertises no {MIG_PREFIX}<profile> resource")
    elif mode == "mig-single":
        count = alloc.get(GPU) or 0
        profile = (labels.get(MIG_CONFIG_LABEL) or "").removeprefix("all-")
        if not PROFILE_RE.match(profile):
            m = re.search(r"-MIG-(\d+g\.\d+gb(?:\+me)?)$", product)
            profile = m.group(1) if m else ""
        if not count or not profile:
            raise LayoutError(f"node {name} says mig-single but advertises {GPU}={count} and no profile in "
                              f"{MIG_CONFIG_LABEL} or {PRODUCT_LABEL}")
        slices.append(SliceKind(GPU, count, profile_memory_mib(profile), profile))
    else:
        resource = GPU_SHARED if alloc.get(GPU_SHARED) else GPU
        count = alloc.get(resource) or 0
        if not count:
            raise LayoutError(f"node {name} ({mode}) advertises no {GPU} or {GPU_SHARED}")
        per_gpu = count // gpus if gpus else 1
        if mode == "time-slicing":
            per_gpu = _int(labels.get(REPLICAS_LABEL)) or per_gpu
        share = gpu_memory // max(per_gpu, 1) if gpu_memory else 0
        if mode == "hami" and alloc.get(GPUMEM):
            share = int(alloc[GPUMEM] or 0) // count
            extra = ((GPUMEM, share),)
        slices.append(SliceKind(resource, count, share))
    if not gpus:
        gpus = 1
    return Layout(name, mode, gpus, product, tuple(slices), enforced, extra, gpu_memory)


def layout_mismatch(layout: Layout, gpus: int, model: str, config: dict[str, Any]) -> str:
    """Why ``layout`` (a node's, as it advertises it) is not the one a feature describes: ``gpus`` GPUs of
    ``model`` (canonical, :func:`gpu_model`) partitioned by ``config`` (:func:`partition_config`); '' when it is.
    Whether the node enforces isolation is not compared: that is what the drill finds out."""
    mode = config["mode"]
    if layout.mode != mode:
        return f"mode {layout.mode}, not {mode}"
    if normalized(model) not in normalized(layout.product):
        return f"GPU {layout.product}, not {model}"
    if layout.gpus != gpus:
        return f"{layout.gpus} GPUs, not {gpus}"
    if mode.startswith("mig"):
        wanted: dict[str, int] = {}
        for profile in config["layout"][0]:
            wanted[profile] = wanted.get(profile, 0) + gpus
        have = {s.profile: s.count for s in layout.slices}
        if have != wanted:
            return "MIG instances " + ", ".join(f"{n} x {p}" for p, n in sorted(have.items())) + ", not " + \
                ", ".join(f"{n} x {p}" for p, n in sorted(wanted.items()))
        return ""
    per_gpu = int(config.get("replicas") or config.get("vgpus_per_gpu") or 1)
    if layout.total_slices != per_gpu * gpus:
        return f"{layout.total_slices} tenant slices, not {per_gpu * gpus} ({per_gpu} per GPU)"
    return ""


def normalized(text: str) -> str:
    """A GPU name compared loosely: lower case, letters and digits only (``NVIDIA-H100-80GB-HBM3`` holds
    ``H100-80GB``)."""
    return re.sub(r"[^a-z0-9]", "", text.lower())


def partitioned(node: Obj) -> bool:
    """Does the node say it is partitioned (the Firedrill label, NVIDIA's MIG or sharing labels)?"""
    labels = (node.get("metadata") or {}).get("labels") or {}
    return (labels.get(MODE_LABEL, "none") != "none" or labels.get(MIG_STRATEGY_LABEL) in ("single", "mixed")
            or labels.get(SHARING_LABEL) in ("time-slicing", "hami"))


# --------------------------------------------------------------------------------------- judging a probe


def gpu_of(pod: Obj) -> int | None:
    """The GPU index of the slice the agent assigned (``firedrill.dev/devices: "<gpu>/<instance>"``)."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(DEVICES_ANNOTATION, "")
    head = str(raw).split(",")[0].split("/")[0].strip()
    return int(head) if head.isdigit() else None


def instance_of(pod: Obj) -> int | None:
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(DEVICES_ANNOTATION, "")
    parts = str(raw).split(",")[0].split("/")
    return int(parts[1]) if len(parts) > 1 and parts[1].strip().isdigit() else None


def expected_failures(scope: str, victim: str, gpu_of_tenant: dict[str, int | None]) -> set[str]:
    """The tenants that must fail: the victim alone, every tenant on the victim's GPU, or none."""
    if scope == NO_TENANT:
        return set()
    if scope == ONLY_IT:
        return {victim}
    gpu = gpu_of_tenant.get(victim)
    if gpu is None:
        return {victim}
    return {t for t, g in gpu_of_tenant.items() if g == gpu} | {victim}


@dataclass
class ProbeJudgement:
    probe: str
    scope: str
    expected_fail: set[str]
    failed: dict[str, str]
    """tenant -> reason of the failure."""
    escaped: list[str]
    """Failed although the promise says they survive (isolation did not hold)."""
    spared: list[str]
    """Survived although the promise says they fail (the fault or the cap did not reach them)."""

    @property
    def ok(self) -> bool:
        return not self.escaped and not self.spared

    def findings(self, mode: str, victim: str) -> list[str]:
        """One finding per kind of broken promise, naming every tenant concerned (and why it failed)."""
        title = PROBES[self.probe].title if self.probe in PROBES else self.probe
        out = []
        if self.escaped:
            names = ", ".join(f"{t} ({self.failed.get(t) or 'no reason given'})" for t in self.escaped)
            out.append(f"ISOLATION ESCAPED: {title} on tenant {victim}: {_plural(self.escaped)} {names} should "
                       f"have survived on a node in {mode}, which promises {self.scope} fails, but failed")
        if self.spared:
            out.append(f"PROMISED FAILURE MISSING: {title} on tenant {victim}: {_plural(self.spared)} "
                       f"{', '.join(self.spared)} should have failed in {mode} ({self.scope}), but survived")
        return out


def _plural(tenants: list[str]) -> str:
    return "tenant" if len(tenants) == 1 else "tenants"


def judge_probe(probe: str, scope: str, victim: str, tenants: list[str], gpu_of_tenant: dict[str, int | None],
                failed: dict[str, str]) -> ProbeJudgement:
    """Compare who failed with who should have (``scope``), tenant by tenant."""
    expect = expected_failures(scope, victim, gpu_of_tenant)
    escaped = sorted((t for t in failed if t not in expect and t in tenants), key=_natural)
    spared = sorted((t for t in expect if t not in failed), key=_natural)
    return ProbeJudgement(probe, scope, expect, dict(failed), escaped, spared)


def _natural(text: str) -> tuple[Any, ...]:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text))


def describe_affected(failed: set[str], victim: str, gpu_of_tenant: dict[str, int | None]) -> str:
    """Who failed, in the words of the feature file (or the list of tenants when no words fit)."""
    if not failed:
        return NO_TENANT
    if failed == {victim}:
        return ONLY_IT
    if failed == expected_failures(EVERY_ON_GPU, victim, gpu_of_tenant):
        return EVERY_ON_GPU
    return "tenants " + ", ".join(sorted(failed, key=_natural))


# ------------------------------------------------------------------------- a faulted GPU's slices


def slice_allocatable(node: Obj, layout: Layout) -> dict[str, int]:
    """The node's allocatable of each slice resource of ``layout`` (0 where absent or unreadable)."""
    alloc = (node.get("status") or {}).get("allocatable") or {}
    return {k.resource: _int(alloc.get(k.resource)) or 0 for k in layout.slices}


def slices_per_gpu(layout: Layout) -> tuple[dict[str, int], str]:
    """How many slices of each kind one GPU of the node holds, from its allocatable alone (each kind's count over
    the GPU count), and ''; or {} and why the allocatable does not say."""
    uneven = [f"{k.count} x {k.resource} over {layout.gpus} GPUs" for k in layout.slices
              if k.count % layout.gpus]
    if uneven:
        return {}, (f"node {layout.node} advertises {', '.join(uneven)}, which does not say how many are on one "
                    "GPU (the allocatable counts every GPU's slices together)")
    return {k.resource: k.count // layout.gpus for k in layout.slices}, ""


def slice_label(kind: SliceKind, mode: str = "") -> str:
    """What a slice of this kind is, in the customer's words: ``MIG 1g.18gb instance``, ``time-slicing replica``,
    ``HAMi vGPU``."""
    if kind.profile:
        return f"MIG {kind.profile} instance"
    return {"time-slicing": "time-slicing replica", "hami": "HAMi vGPU"}.get(mode, "slice")


def slices_left(per_gpu: dict[str, int], before: dict[str, int], now: dict[str, int]) -> dict[str, int]:
    """How many of one GPU's slices of each kind (``per_gpu``) are still allocatable: the node's allocatable
    ``now`` above what it keeps without that GPU (``before`` the fault, less the GPU's slices), at most the GPU's."""
    return {r: max(0, min(n, now.get(r, 0) - (before.get(r, 0) - n))) for r, n in per_gpu.items()}


@dataclass(frozen=True)
class SlicesOut:
    """A faulted GPU's slices in the node's allocatable after the fault (:func:`judge_slices_out`)."""

    out_after: float | None
    """Seconds from the fault until none of the GPU's slices was allocatable (None: not within the window)."""
    left: dict[str, int]
    """Of each kind, the GPU's slices still allocatable at the end of the window (or when it went out)."""
    back_after: float | None = None
    """Seconds from the fault until one of them was allocatable again while the fault stood (None: never)."""
    back: dict[str, int] = field(default_factory=dict)
    """What came back then."""


def judge_slices_out(seen: list[tuple[float, dict[str, int]]], fault: float, limit: float,
                     per_gpu: dict[str, int], until: float | None = None) -> SlicesOut:
    """From the node's allocatable ``seen`` (instant, slice resource -> allocatable, at each change, oldest first):
    when, within ``limit`` seconds of the ``fault`` instant, every slice of the GPU (``per_gpu`` of each kind) had
    left it, and whether one came back before ``until`` (the fault's repair; None: it stands)."""
    before = next((v for t, v in reversed(seen) if t <= fault), seen[0][1] if seen else {})
    after = [(t, v) for t, v in seen if t > fault]
    left = slices_left(per_gpu, before, before)
    out_at: float | None = None
    for t, v in after:
        if t - fault > limit:
            break
        left = slices_left(per_gpu, before, v)
        if not any(left.values()):
            out_at = t
            break
    if out_at is None:
        return SlicesOut(None, left)
    for t, v in after:
        if t <= out_at or (until is not None and t >= until):
            continue
        back = slices_left(per_gpu, before, v)
        if any(back.values()):
            return SlicesOut(out_at - fault, left, t - fault, back)
    return SlicesOut(out_at - fault, left)


# ------------------------------------------------------------------------------------------ the drill


@dataclass
class Tenant:
    name: str
    resource: str
    memory_mib: int
    generation: int = 0
    pod: str = ""


TERMINAL = ("Succeeded", "Failed")


class TenantForm(enum.Enum):
    """What a tenant pod runs."""

    PROBE = "probe"
    """The probe program (:mod:`drills.workloads.probe`): a real GPU, reached through its driver."""
    CANARY = "canary"
    """The training canary, its memory use declared to the node's simulated GPUs (the reference agent)."""


@register
@dataclass
class IsolationDrill(Drill):
    kind: ClassVar[str] = "partition-isolation"

    @classmethod
    def permissions(cls, profile: TargetProfile) -> list[Permission]:
        ns, why = profile.namespace, "partition isolation: the tenant probes"
        out = grant(ns, "", "pods", ("get", "list", "create", "delete"), why)
        out += grant(ns, "", "pods", ("get",), f"{why}' own reports", subresource="log")
        out += grant(ns, "", "events", ("list",), f"{why}: why a probe stays Pending")
        return out + grant(CLUSTER, "", "nodes", ("list", "watch"),
                           "partition isolation: the partitioned node, its allocatable watched after a fault")

    layout: Layout | None = None
    node: str = ""
    embedded_node: bool = False
    tenants: dict[str, Tenant] = field(default_factory=dict)
    wanted: int = 0
    reached: int = 0
    pending: dict[str, str] = field(default_factory=dict)
    probes: list[dict[str, Any]] = field(default_factory=list)
    last_probe: dict[str, Any] | None = None
    _inject_seq: int = 0
    settle_seconds: float = 1.0
    probe_timeout: float = 20.0
    run_timeout: float = 30.0
    probe_period: float = 0.5
    """Real clusters: seconds between a tenant probe's working-set allocations (:mod:`drills.workloads.probe`)."""
    probe_linger: float = 5.0
    """Real clusters: seconds a failed tenant probe keeps its memory before it exits."""
    reports: dict[str, list[ProbeReport]] = field(default_factory=dict)
    """Real clusters: each tenant pod's probe lines, as the harness read them from its log."""
    follower: LogFollower | None = None
    tenants_as: TenantForm | None = None
    """What the tenants run; None: decided by the node (:meth:`_read_layout`)."""
    node_seen: list[tuple[float, dict[str, int]]] = field(default_factory=list)
    """(harness monotonic instant, the node's allocatable of each slice resource) at each change, watched from the
    first injection on (:meth:`_watch_node`)."""
    reset_fault: dict[str, Any] | None = None
    """The last reset-class fault: its probe's ``column``, ``gpu``, ``xid``, the instant ``at`` it was injected and
    the instant it was ``repaired`` (None: it stands)."""
    _watching: bool = False
    _unrepaired: tuple[FaultRecord, dict[str, Any]] | None = None
    """Real clusters: the last probe's Xid, standing until the next probe starts (or the rollback's restore)."""
    _standing: bool = False
    """Embedded platform: an Xid of this drill stands on the node (repaired before the next probe)."""
    _seen_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def real(self) -> bool:
        """A real cluster: the node is picked among the cluster's, and Xids come from the profile's template."""
        return self.target.embedded is None

    @property
    def probing(self) -> bool:
        """The tenants run the probe program and their logs are the truth (a real cluster's real GPUs)."""
        return self.tenants_as is TenantForm.PROBE

    # ---------------------------------------------------------------- steady state
    def use_embedded_node(self, gpus: int, model: str, config: dict[str, Any]) -> None:
        """Start an extra embedded reference node partitioned by ``config`` and read its layout back."""
        if self.target.embedded is None:
            raise DrillInconclusive("this step starts a partitioned reference node, which only the embedded "
                                    "platform can do; on a real cluster write 'Given a partitioned node'")
            # the run checks the sentence first (Sentence.reference_only); this guards a direct call
        name = f"part-{self.run_id}"
        try:
            self.target.embedded.start_partitioned_node(name, gpus, model, config)
        except Exception as exc:  # noqa: BLE001 - any refusal means the platform cannot be drilled this way
            raise DrillInconclusive(f"the partitioned reference node could not be started: {exc}") from None
        self.embedded_node = True
        self._read_layout(self.target.driver.get(NODE, name))

    def use_partitioned_node(self, gpus: int, model: str, layout: str) -> None:
        """The embedded platform starts the node the feature describes (``gpus`` GPUs of ``model`` partitioned
        as ``layout``, the feature's words); a real cluster must have one: the first node (by name) with the
        allow label that advertises that layout, else INCONCLUSIVE naming it."""
        config = partition_config(layout, model)
        if self.target.embedded is not None:
            self.use_embedded_node(gpus, gpu_model(model), config)
            return
        model = gpu_model(model)
        wanted = f"{gpus} {model} GPU{'s' if gpus > 1 else ''} partitioned as {layout}"
        seen = []
        for node in sorted(self._allowed_nodes(), key=lambda n: n["metadata"]["name"]):
            if not partitioned(node):
                continue
            try:
                layout = discover_layout(node)
            except LayoutError as exc:
                seen.append(str(exc))
                continue
            why = layout_mismatch(layout, gpus, model, config)
            if not why:
                self._read_layout(node)
                return
            seen.append(f"{layout.node}: {why}")
        allow = self.target.profile.safety.allow_label
        raise DrillInconclusive(
            f"no node with the allow label {allow} advertises {wanted} (docs/PARTITIONING.md, 'What the node "
            "advertises'): partition a node so, or write the layout your nodes have; "
            + ("partitioned nodes seen: " + "; ".join(seen) if seen else "no partitioned node carries the label"))

    def _allowed_nodes(self) -> list[Obj]:
        safety = self.target.profile.safety
        return [n for n in self.target.driver.list(NODE) if ((n.get("metadata") or {}).get("labels") or {}).get(
            safety.allow_label_key) == safety.allow_label_value]

    def use_cluster_node(self) -> None:
        """Pick a node that is partitioned (its labels say so) and carries the profile's allow label."""
        allowed = self._allowed_nodes()
        chosen = [n for n in allowed if partitioned(n)]
        if not chosen:
            raise DrillInconclusive(f"no node carries both the allow label {safety.allow_label} and a partition "
                                    f"label ({MODE_LABEL}, {MIG_STRATEGY_LABEL} or {SHARING_LABEL}); "
                                    f"{len(allowed)} node(s) carry the allow label")
        self._read_layout(sorted(chosen, key=lambda n: n["metadata"]["name"])[0])

    def _read_layout(self, node: Obj) -> None:
        try:
            self.layout = discover_layout(node)
        except LayoutError as exc:
            raise DrillInconclusive(str(exc)) from None
        self.node = self.layout.node
        simulated = ((node.get("metadata") or {}).get("labels") or {}).get(SIMULATED_LABEL) == "true"
        if self.tenants_as is None:
            self.tenants_as = TenantForm.CANARY if simulated or not self.real else TenantForm.PROBE
        self.result.details["partition_layout"] = {**self.layout.to_dict(), "simulated_gpus": simulated,
                                                   "tenants": self.tenants_as.value}

    # ------------------------------------------------------------------------ act
    def _pod(self, t: Tenant, memory_mib: int | None = None) -> Obj:
        assert self.layout is not None
        profile = self.target.profile
        limits: dict[str, str] = {t.resource: "1"}
        for res, amount in self.layout.extra_requests:
            limits[res] = str(amount)
        if self.probing:  # the tenant program is the probe; memory_mib: the memory probe's victim
            t.generation += 1
            t.pod = f"iso-{self.run_id}-{t.name}-{t.generation}"
            greedy = 0 if memory_mib is None else memory_mib
            args = tenant_args(hold_mib=min(256, max(t.memory_mib // 4, 16)) if t.memory_mib else 256,
                               scratch_mib=64, period=self.probe_period, greedy_mib=greedy,
                               share_mib=t.memory_mib, linger=self.probe_linger)
            return probe_pod(t.pod, profile.namespace, profile.canary_image, t.resource, args=args,
                             limits={r: v for r, v in limits.items() if r != t.resource}, node=self.node,
                             labels={RUN_LABEL: self.run_id, TENANT_LABEL: t.name})
        # Simulated GPUs (the embedded platform, or its agent as a kubelet): each tenant is the training canary alone (a real process on the node, stepping
        # on its slice); its GPU memory use is what it declares to the simulated device (firedrill.dev/memory-mib).
        annotations = {} if memory_mib is None else {MEMORY_ANNOTATION: str(memory_mib)}
        t.generation += 1
        t.pod = f"iso-{self.run_id}-{t.name}-{t.generation}"
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": t.pod, "namespace": profile.namespace,
                             "labels": {RUN_LABEL: self.run_id, TENANT_LABEL: t.name},
                             "annotations": annotations},
                "spec": {"restartPolicy": "Never", "nodeSelector": {"kubernetes.io/hostname": self.node},
                         "containers": [{"name": "probe", "image": profile.canary_image,
                                         "command": list(profile.canary.command),
                                         "args": ["train", "--compute-seconds", "0.2", "--checkpoint-every", "0"],
                                         "env": [{"name": "WORLD_SIZE", "value": "1"}, {"name": "RANK", "value": "0"}],
                                         "resources": {"limits": limits, "requests": dict(limits)}}]}}

    def fill(self, up_to: int) -> int:
        """Create one probe tenant per slice, up to ``up_to`` tenants; wait; record the count reached and,
        for every pod left Pending, the scheduler's FailedScheduling reason."""
        if self.layout is None:
            raise DrillInconclusive("no partitioned node was set up before filling it")
        self.wanted = up_to
        kinds = [k for s in self.layout.slices for k in [s] * s.count]
        # fill beyond the advertised slices too, when asked: the scheduler must refuse the surplus
        while len(kinds) < up_to:
            kinds.append(self.layout.slices[-1])
        for i, kind in enumerate(kinds[:up_to], start=1):
            t = Tenant(f"tenant-{i}", kind.resource, kind.memory_mib)
            self.tenants[t.name] = t
            self.target.driver.create(self._pod(t))
        self.target.timeline.action("fill-slices", target=self.node, tenants=up_to)
        self._wait(lambda pods: sum(1 for p in pods.values() if _phase(p) == "Running") >= min(
            up_to, self.layout.total_slices if self.layout else up_to), self.run_timeout)
        self.pause(min(self.settle_seconds, 2.0))
        pods = self._pods()
        self.reached = sum(1 for t in self.tenants.values() if _phase(pods.get(t.pod, {})) == "Running")
        self.pending = {}
        for t in self.tenants.values():
            p = pods.get(t.pod, {})
            if _phase(p) == "Pending" and not (p.get("spec") or {}).get("nodeName"):
                self.pending[t.name] = self._failed_scheduling(t.pod) or "left Pending (no FailedScheduling Event)"
        self.result.measure(Measurement("tenants running", float(self.reached), "tenants",
                                        note=f"{up_to} asked for, {self.layout.total_slices} slices advertised"))
        self.result.details["fill"] = {"wanted": up_to, "reached": self.reached,
                                       "advertised": self.layout.total_slices, "pending": dict(self.pending)}
        if self.probing:
            running = [t.pod for t in self.tenants.values() if _phase(pods.get(t.pod, {})) == "Running"]
            self._wait_reports(running, self.run_timeout)
            self.result.details["probe_reports"] = self._report_summary()
        return self.reached

    def _report_summary(self) -> dict[str, Any]:
        """Real clusters, for the evidence: what each tenant's probe said it holds and sees."""
        out: dict[str, Any] = {}
        for t in self.tenants.values():
            report = self._first_report(t.pod) if t.pod else None
            out[t.name] = None if report is None else {
                "pod": t.pod, "event": report.event.value, "allocator": report.allocator,
                "allocated_mib": report.allocated_mib, "share_mib": report.share_mib, "gpu": report.gpu,
                "gpu_instance": report.gpu_instance, "error": report.error}
        return out

    def _failed_scheduling(self, pod: str) -> str:
        try:
            events = self.target.driver.list(EVENT, self.target.profile.namespace,
                                             field_selector=f"involvedObject.name={pod}")
        except KubeError:
            return ""
        msgs = [e.get("message", "") for e in events if e.get("reason") == "FailedScheduling"
                and (e.get("involvedObject") or {}).get("name") == pod]
        return msgs[-1] if msgs else ""

    def _pods(self) -> dict[str, Obj]:
        pods = {p["metadata"]["name"]: p for p in self.target.driver.list(
            POD, self.target.profile.namespace, label_selector=run_selector(self.run_id))}
        if self.probing:  # follow every tenant's probe log from the moment it is bound
            if self.follower is None:
                self.follower = LogFollower(self.target.driver, self._on_log_line, self.target.timeline.clock)
            for pod in pods.values():
                self.follower.follow(pod)
        return pods

    def _on_log_line(self, line: LogLine) -> None:
        report = parse_probe_line(line.text)
        if report is not None:
            self.reports.setdefault(line.pod, []).append(report)

    def _first_report(self, pod: str) -> ProbeReport | None:
        """The tenant's ``ready`` (or an early ``failed``) line: what it holds, on which GPU."""
        return next((r for r in list(self.reports.get(pod, ())) if r.event in (ProbeEvent.READY, ProbeEvent.FAILED)),
                    None)

    def _failed_report(self, pod: str) -> ProbeReport | None:
        return next((r for r in list(self.reports.get(pod, ())) if r.event is ProbeEvent.FAILED), None)

    def _wait_reports(self, pods: list[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(self._first_report(p) is None for p in pods):
            self._pods()
            self.pause(0.25)

    def _not_holding(self, tenants: list[Tenant]) -> str:
        """Real clusters: why some tenant could not be reached by a probe ('' when every one holds GPU memory)."""
        return not_holding([(t.name, t.pod, self._first_report(t.pod)) for t in tenants],
                           self.target.profile.canary_image)

    def _wait(self, predicate: Any, timeout: float) -> dict[str, Obj]:
        deadline = time.monotonic() + timeout
        while True:
            pods = self._pods()
            if predicate(pods) or time.monotonic() >= deadline:
                return pods
            self.result.raise_if_halted()
            self.pause(0.25)

    def _running_tenants(self) -> list[Tenant]:
        return [t for t in self.tenants.values() if t.name not in self.pending]

    def _refill(self) -> None:
        """Recreate every tenant whose pod is not Running, so the next probe starts from a full node."""
        pods = self._pods()
        # on a real cluster a tenant whose probe reported a failure is on its way out (it lingers): replace it
        self._recreate([t for t in self._running_tenants() if _phase(pods.get(t.pod, {})) != "Running"
                        or (self.probing and self._failed_report(t.pod) is not None)])
        want = {t.pod for t in self._running_tenants()}
        self._wait(lambda ps: all(_phase(ps.get(n, {})) == "Running" for n in want), self.run_timeout)
        if self.probing:
            self._wait_reports(sorted(want), self.run_timeout)

    def _recreate(self, tenants: list[Tenant], memory_mib: dict[str, int] | None = None) -> None:
        """Delete each tenant's pod and create it again (with ``memory_mib[name]`` MiB of use where given),
        until each has started or failed on its own account.

        A node may refuse a new pod for a moment while its predecessor's processes still hold the slice
        (the kubelet's ``UnexpectedAdmissionError``): that pod never ran, so it says nothing about isolation;
        it is created again until ``run_timeout``, each refusal on the timeline."""
        ns = self.target.profile.namespace
        deadline = time.monotonic() + self.run_timeout
        todo = list(tenants)
        while todo:
            for t in todo:
                self.target.driver.delete(POD, t.pod, ns, grace_seconds=0)
                self._wait(lambda ps, name=t.pod: name not in ps, 10.0)
                self.target.driver.create(self._pod(t, memory_mib=(memory_mib or {}).get(t.name)))
            names = [t.pod for t in todo]
            pods = self._wait(lambda ps: all(_phase(ps.get(n, {})) in ("Running", "Succeeded", "Failed")
                                             for n in names), max(deadline - time.monotonic(), 0.0))
            todo = [t for t in todo if admission_refused(pods.get(t.pod, {}))]
            if not todo or time.monotonic() >= deadline:
                return
            for t in todo:
                self.target.timeline.action("admission-refused", target=t.pod, reason=pod_reason(pods[t.pod]))

    def run_probe(self, key: str) -> None:
        """Perform one probe on a tenant (the first on GPU 0, or on the last tenant's GPU for faults),
        observe who fails, and record the matrix column.  Judged by :meth:`judge_last`."""
        if self.layout is None or not self.tenants:
            raise DrillInconclusive("no tenants to probe: fill the slices first")
        if self.probes:
            self._repair()
            self._refill()
        pods = self._pods()
        live = [t for t in self._running_tenants() if _phase(pods.get(t.pod, {})) == "Running"]
        if not live:
            raise DrillInconclusive(f"no probe tenant is Running on {self.node}; pods: "
                                    + ", ".join(f"{n}={_phase(p)}" for n, p in sorted(pods.items())))
        victim = live[0]
        gpus = {t.name: gpu_of(pods.get(t.pod, {})) for t in live}
        column: dict[str, Any] = {"probe": key, "title": PROBES[key].title, "victim": victim.name,
                                  "gpu": gpus.get(victim.name), "status": "done", "note": "",
                                  "promised": promise(self.layout.mode, key), "outcomes": {}}
        self.last_probe = column
        self.probes.append(column)
        self.result.details["isolation_matrix"] = self.matrix()
        if self.probing:
            self._run_probe_real(key, victim, live, column)
            return
        before = {t.name: t.pod for t in live}
        if key == "memory":
            overuse = max(victim.memory_mib + max(victim.memory_mib // 2, 1024), 1024)
            self._recreate([victim], {victim.name: overuse})
            before[victim.name] = victim.pod
            column["note"] = f"tenant {victim.name} uses {overuse} MiB of a {victim.memory_mib} MiB share"
            self.target.timeline.action("probe-memory", target=victim.pod, memory_mib=overuse)
        injected: FaultRecord | None = None
        if key != "memory":
            xid = PROBES[key].xid
            gpu = gpus.get(victim.name)
            inst = instance_of(pods.get(victim.pod, {})) if key == "contained" else None
            inst = inst if self.layout.mode.startswith("mig") else None
            if gpu is None:
                gpu = 0
                column["note"] = f"the agent wrote no {DEVICES_ANNOTATION} on {victim.pod}; injected on GPU 0"
            if self.real:  # the agent as a kubelet: the site's injector, as for a real GPU
                injected = self._inject_real(key, gpu, inst, column)
                if injected is None:
                    return
            else:
                self._inject(xid, gpu, inst, column)
        failed = self._observe(before, column)
        if injected is not None:
            self._unrepaired = (injected, column)  # repaired when the next probe starts, or by the rollback
        if key == "memory":  # the recreated victim may sit on another GPU than its predecessor
            gpus[victim.name] = gpu_of(self._pods().get(victim.pod, {})) if gpu_of(
                self._pods().get(victim.pod, {})) is not None else gpus.get(victim.name)
            column["gpu"] = gpus.get(victim.name)
        self._record(key, victim, live, gpus, failed, column)

    def _record(self, key: str, victim: Tenant, live: list[Tenant], gpus: dict[str, int | None],
                failed: dict[str, str], column: dict[str, Any]) -> None:
        column["gpus"] = {t: g for t, g in gpus.items()}
        for t in live:
            column["outcomes"][t.name] = ({"state": "failed", "reason": failed[t.name]} if t.name in failed
                                          else {"state": "survived", "reason": ""})
        column["affected"] = describe_affected(set(failed), victim.name, gpus)
        self.result.measure(Measurement(f"tenants affected by {PROBES[key].short}", float(len(failed)), "tenants",
                                        note=column["affected"]))
        self.result.details["isolation_matrix"] = self.matrix()

    # ------------------------------------------------------------- real clusters
    def _probe_inconclusive(self, column: dict[str, Any], message: str) -> bool:
        column["status"] = "inconclusive"
        column["note"] = (column["note"] + "; " if column["note"] else "") + message
        self.result.inconclusive(f"{column['title']}: {message}")
        self.result.details["isolation_matrix"] = self.matrix()
        return False

    def _run_probe_real(self, key: str, victim: Tenant, live: list[Tenant], column: dict[str, Any]) -> None:
        """A probe on a real cluster: the tenants are probe programs, the truth is what their logs say."""
        assert self.layout is not None
        reports = {t.name: self._first_report(t.pod) for t in live}
        gpus: dict[str, int | None] = {name: (r.gpu if r is not None else None) for name, r in reports.items()}
        column["gpu"] = gpus.get(victim.name)
        why = self._not_holding(live)
        if why:
            self._probe_inconclusive(column, f"not performed: {why}")
            return
        before = {t.name: t.pod for t in live}
        if key == "memory":
            ns = self.target.profile.namespace
            limit = max(self.layout.gpu_memory_mib, 2 * victim.memory_mib, victim.memory_mib + 1024)
            self.target.driver.delete(POD, victim.pod, ns, grace_seconds=0)
            self._wait(lambda ps, name=victim.pod: name not in ps, 30.0)
            self.target.driver.create(self._pod(victim, memory_mib=limit))
            before[victim.name] = victim.pod
            column["note"] = (f"tenant {victim.name} allocates GPU memory until the driver refuses (up to {limit} "
                              f"MiB; its share is {victim.memory_mib} MiB)")
            self.target.timeline.action("probe-memory", target=victim.pod, memory_mib=limit)
            self._wait_reports([victim.pod], self.run_timeout)
            report = self._first_report(victim.pod)
            if report is None or report.allocator is None:
                said = report.error if report is not None else "no probe report in its log"
                self._probe_inconclusive(column, f"the victim could not allocate GPU memory ({said}); the node's "
                                                 "NVIDIA container runtime must mount libcuda.so.1 (capability compute)")
                return
            gpus[victim.name] = report.gpu if report.gpu is not None else gpus.get(victim.name)
            column["gpu"] = gpus[victim.name]
        injected: FaultRecord | None = None
        if key != "memory":
            aim = self._aim(key, reports.get(victim.name), column)
            injected = None if aim is None else self._inject_real(key, *aim, column)
            if injected is None:
                return
        failed = self._observe(before, column)
        if injected is not None:
            self._unrepaired = (injected, column)  # repaired when the next probe starts, or by the rollback
        if key == "memory":
            said = self._failed_report(victim.pod)
            if said is not None:
                column["victim_allocated_mib"] = said.allocated_mib
        self._record(key, victim, live, gpus, failed, column)

    def _restore_xid(self, record: FaultRecord, column: dict[str, Any]) -> None:
        """Undo an injected Xid (``fault.xid.restore_template``) before the next probe, so it starts from a healthy
        GPU (the fault stands until then, so the sentences after its probe judge the platform with it standing);
        without a restore command the note says the GPU may need a reset by hand.

        Every tenant pod is deleted first (the next probe recreates them), so no process of the drill holds the
        GPU while it is restored: a GPU reset refuses a GPU in use."""
        if record.undo is None:
            column["note"] = (column["note"] + "; " if column["note"] else "") + (
                "no fault.xid.restore_template: the GPU may need a reset by hand before it serves tenants again")
            return
        if record in self.target.faults_done:
            self.target.faults_done.remove(record)
        ns = self.target.profile.namespace
        for t in self._running_tenants():
            self.target.driver.delete(POD, t.pod, ns, grace_seconds=0)
        gone = {t.pod for t in self._running_tenants()}
        self._wait(lambda ps: not gone & set(ps), 60.0)
        if self.reset_fault is not None and self.reset_fault["column"] is column:
            self.reset_fault["repaired"] = self.target.timeline.clock.mono()
        try:
            record.undo()
            column["restored"] = True
        except Exception as exc:  # noqa: BLE001 - a failed restore is reported, the drill goes on
            column["restored"] = False
            column["note"] = (column["note"] + "; " if column["note"] else "") + f"the restore command failed: {exc}"

    def _aim(self, key: str, report: ProbeReport | None, column: dict[str, Any]) -> tuple[int, int | None] | None:
        """The victim's GPU and MIG instance as its probe read them through NVML (None: the probe INCONCLUSIVE)."""
        assert self.layout is not None
        if report is None or report.gpu is None:
            return self._not_injected(column, "the victim's probe could not read its GPU's minor number "
                                                    "through NVML, so the Xid cannot be aimed")
        instance = None
        if key == "contained" and self.layout.mode.startswith("mig"):
            instance = report.gpu_instance
            if instance is None:
                return self._not_injected(column, "the victim's probe could not read its MIG GPU instance "
                                                        "id through NVML, so the contained fault cannot be aimed")
        return report.gpu, instance

    def _inject_real(self, key: str, gpu: int, instance: int | None, column: dict[str, Any]) -> FaultRecord | None:
        """Inject the probe's Xid on GPU ``gpu`` (MIG instance ``instance``) through ``fault.xid.command_template``,
        behind the node-fault safety checks; the record (whose undo runs the restore command), or None when it was
        not (the probe INCONCLUSIVE)."""
        xid = PROBES[key].xid
        assert xid is not None
        self._inject_seq += 1
        self._watch_node()
        self.target.touched.add(self.node)  # its blast radius: the abort guard leaves it alone, the rollback settles it
        self.target.timeline.action(f"inject-xid{xid}", target=self.node, gpu=gpu,
                                    instance="-" if instance is None else instance)
        try:
            done = inject_by_command(self.target.driver, self.target.profile, self.target.faults_done, self.node, xid,
                                     gpu=gpu, instance=instance, intend=self.target.intend)
        except FaultError as exc:
            return self._not_injected(column, str(exc))
        self._injected(column, gpu, xid)
        column["injection"] = {"id": f"{self.run_id}-{self._inject_seq}", "gpu": gpu, "instance": instance,
                               "xid": xid, "command": done.command, "blast_radius": done.blast_radius}
        return done.record

    def _not_injected(self, column: dict[str, Any], message: str) -> None:
        self._probe_inconclusive(column, message)
        return None

    def _inject(self, xid: int | None, gpu: int, instance: int | None, column: dict[str, Any]) -> None:
        """Embedded platform: ask the node's agent for an Xid through the Node annotation (docs/PARTITIONING.md)."""
        self._inject_seq += 1
        entry = {"id": f"{self.run_id}-{self._inject_seq}", "gpu": gpu, "instance": instance, "xid": xid}
        column["injection"] = entry
        self._watch_node()
        self.target.inject_xid(self.node, entry)  # the Node annotation the embedded platform's agent applies
        self._standing = True
        self._injected(column, gpu, xid)
        self.target.timeline.action(f"inject-xid{xid}", target=self.node, gpu=gpu,
                                    instance="-" if instance is None else instance)

    def _injected(self, column: dict[str, Any], gpu: int, xid: int | None) -> None:
        """An Xid was just written: a reset-class one is the fault whose GPU's slices must leave allocatable."""
        if column["probe"] == "reset":
            self.reset_fault = {"column": column, "gpu": gpu, "xid": xid, "at": self.target.timeline.clock.mono(),
                                "repaired": None}

    # ------------------------------------------------------- the node's allocatable
    def _watch_node(self) -> None:
        """Watch the node's allocatable from now on (once, before the first injection: its list gives the value
        before the fault)."""
        if self._watching or self.layout is None:
            return
        self._watching = True
        self.target.driver.watch(NODE, field_selector=f"metadata.name={self.node}", on_event=self._on_node,
                                 record=False)

    def _on_node(self, kind: str, node: Obj) -> None:
        layout = self.layout
        if kind == "DELETED" or layout is None or (node.get("metadata") or {}).get("name") != self.node:
            return
        alloc = slice_allocatable(node, layout)
        with self._seen_lock:
            if not self.node_seen or self.node_seen[-1][1] != alloc:
                self.node_seen.append((self.target.timeline.clock.mono(), alloc))

    def _allocatable_now(self) -> dict[str, int] | None:
        with self._seen_lock:
            return dict(self.node_seen[-1][1]) if self.node_seen else None

    def _repair(self) -> None:
        """Before the next probe, the last probe's Xid repaired.  A real cluster: the profile's restore command
        (:meth:`_restore_xid`).  The embedded platform: the injection removed, then the node's slices waited for
        until all are allocatable again (a GPU the fault took out returns through its burn-in, and its flap
        history is forgotten: the next fault is a first failure), so the probe starts from a full node; slices
        that never return make the next probe INCONCLUSIVE, naming them."""
        if self.real:
            if self._unrepaired is not None:
                record, column = self._unrepaired
                self._unrepaired = None
                self._restore_xid(record, column)
            return
        if not self._standing or self.layout is None:
            return
        self._standing = False
        clock = self.target.timeline.clock
        if self.reset_fault is not None and self.reset_fault["repaired"] is None:
            self.reset_fault["repaired"] = clock.mono()
        self.target.clear_xids(self.node)
        self.target.timeline.action("repair-xid", target=self.node)
        self.target.settle_gpus([self.node])
        want = {k.resource: k.count for k in self.layout.slices}
        deadline = clock.mono() + self.run_timeout
        while True:
            now = self._allocatable_now() or {}
            if all(now.get(r, 0) >= n for r, n in want.items()):
                return
            if clock.mono() >= deadline:
                raise DrillInconclusive(
                    f"node {self.node}'s slices were not all allocatable again {self.run_timeout:g} s after the last "
                    "probe's Xid was repaired, so the next probe cannot start from a full node: allocatable "
                    + ", ".join(f"{r} {now.get(r, 0)} of {n}" for r, n in want.items()))
            self.pause(0.1)

    def judge_slices(self, limit: float) -> SlicesOut:
        """Every slice of the GPU the last reset-class fault hit left the node's allocatable within ``limit``
        seconds of the fault, and none came back while the fault stood; FAIL naming the node, the GPU and the
        slices still allocatable.  INCONCLUSIVE when no such fault was injected, when the allocatable does not
        say which slices are that GPU's, or (a real cluster) when nothing confirms the fault took effect."""
        fault, layout = self.reset_fault, self.layout
        if fault is None or layout is None:
            raise DrillInconclusive("no reset-class fault was injected, so no GPU had to leave service")
        gpu, xid, column = fault["gpu"], fault["xid"], fault["column"]
        per_gpu, why = slices_per_gpu(layout)
        if why:
            raise DrillInconclusive(f"which slices are GPU {gpu}'s cannot be read from the allocatable: {why}")
        clock = self.target.timeline.clock

        def judged() -> SlicesOut:
            with self._seen_lock:
                seen = list(self.node_seen)
            return judge_slices_out(seen, fault["at"], limit, per_gpu, fault["repaired"])
        verdict = judged()
        while verdict.out_after is None and clock.mono() < fault["at"] + limit and fault["repaired"] is None:
            self.pause(0.1)
            verdict = judged()
        kinds = {k.resource: k for k in layout.slices}
        total = sum(per_gpu.values())

        def slices(counts: dict[str, int]) -> str:
            return ", ".join(f"{n} {slice_label(kinds[r], layout.mode)}{'' if n == 1 else 's'} ({r})"
                             for r, n in counts.items() if n)
        with self._seen_lock:
            start = self.node_seen[0][0] if self.node_seen else fault["at"]
            series = [{"t": round(t - fault["at"], 3), "allocatable": v} for t, v in self.node_seen if t >= start]
        self.result.details["slices_out"] = {
            "node": self.node, "gpu": gpu, "xid": xid, "slices_per_gpu": per_gpu, "limit_s": limit,
            "out_after_s": verdict.out_after, "left": verdict.left, "back_after_s": verdict.back_after,
            "repaired_after_s": None if fault["repaired"] is None else round(fault["repaired"] - fault["at"], 3),
            "allocatable_seen": series}
        where = f"GPU {gpu} of node {self.node}"
        if verdict.out_after is None:
            still = sum(verdict.left.values())
            failed = [t for t, o in column["outcomes"].items() if o["state"] == "failed"]
            if self.real and not failed:
                raise DrillInconclusive(f"{where} kept {still} of its {total} slices allocatable after the reset-class "
                                        f"fault (Xid {xid}), but no tenant failed either, so the injection is not "
                                        "confirmed to have taken effect")
            repaired = fault["repaired"]
            if repaired is not None and repaired - fault["at"] < limit:
                raise DrillInconclusive(f"the reset-class fault on {where} was repaired {repaired - fault['at']:.1f} s "
                                        f"after it, before the {limit:g} s window ended, with {still} of its {total} "
                                        "slices still allocatable")
            running = sorted((t for t, o in column["outcomes"].items() if o["state"] == "survived"
                              and (column.get("gpus") or {}).get(t) == gpu), key=_natural)
            self.result.measure(Measurement("slices out of service", None, "s",
                                            note=f"{still} of {total} still allocatable"))
            self.result.fail(f"{where} took a reset-class fault (Xid {xid}), yet {still} of its {total} slices were "
                             f"still allocatable {limit:g} s later: {slices(verdict.left)}"
                             + (f"; tenants still running on it: {', '.join(running)}" if running else ""))
            return verdict
        self.result.measure(Measurement("slices out of service", verdict.out_after, "s",
                                        note=f"all {total} slices of {where} left allocatable "
                                             f"{verdict.out_after:.2f} s after Xid {xid}"))
        if verdict.back_after is not None:
            self.result.fail(f"{where}: {slices(verdict.back)} allocatable again {verdict.back_after:.1f} s after its "
                             f"reset-class fault (Xid {xid}), while the fault still stood")
        return verdict

    def _observe(self, before: dict[str, str], column: dict[str, Any]) -> dict[str, str]:
        """Wait until some tenant has failed and nothing changed for ``settle_seconds`` (or the timeout);
        return tenant -> reason of every tenant whose pod failed (or vanished)."""
        deadline = time.monotonic() + self.probe_timeout
        last: dict[str, str] = {}
        changed = time.monotonic()
        # a real tenant meets a fault at its next working set, one every probe_period
        settle = max(self.settle_seconds, 4 * self.probe_period) if self.probing else self.settle_seconds
        while time.monotonic() < deadline:
            now = self._failures(before)
            if now != last:
                last, changed = now, time.monotonic()
            if last and time.monotonic() - changed >= settle:
                break
            self.pause(0.25)
        if not last and column["probe"] != "memory":
            column["note"] = (column["note"] + "; " if column["note"] else "") + \
                f"no tenant failed within {self.probe_timeout:g} s of the injection"
        return last

    def _failures(self, before: dict[str, str]) -> dict[str, str]:
        pods = self._pods()
        out = {}
        for tenant, name in before.items():
            said = self._failed_report(name) if self.probing else None
            if said is not None:  # the tenant's own account of its failure
                out[tenant] = failure_reason(said)
                continue
            p = pods.get(name)
            if p is None:
                out[tenant] = "pod deleted"
            elif _phase(p) == "Failed":
                reason = pod_reason(p)
                message = (p.get("status") or {}).get("message") or ""
                out[tenant] = f"{reason}: {message}" if message else (reason or "Failed")
        return out

    # -------------------------------------------------------------------- judge
    def judge_last(self, scope: str) -> ProbeJudgement | None:
        """Judge the last probe against ``scope`` (the feature's words, which must be the mode's promise)."""
        column = self.last_probe
        if column is None or self.layout is None:
            raise ValueError("'Then the tenants affected are ...' needs a probe step before it")
        promised = promise(self.layout.mode, column["probe"])
        if scope != promised:
            raise ValueError(f"the feature expects {scope!r} for {column['title']}, but the contract "
                             f"(docs/PARTITIONING.md) promises {promised!r} for mode {self.layout.mode}; "
                             "correct the feature file")
        column["expected"] = scope
        if column["status"] != "done":
            self.result.details["isolation_matrix"] = self.matrix()
            return None
        tenants = list(column["outcomes"])
        failed = {t: o["reason"] for t, o in column["outcomes"].items() if o["state"] == "failed"}
        if not failed and (column["probe"] != "memory" or self.probing):
            # no trace of the fault (and on a real cluster the memory probe's victim always meets the
            # driver's refusal in the end, so no failure at all means the probe never took effect)
            column["status"] = "inconclusive"
            self.result.inconclusive(f"{column['title']}: no tenant failed, so the probe was not confirmed "
                                     "to have taken effect")
            self.result.details["isolation_matrix"] = self.matrix()
            return None
        j = judge_probe(column["probe"], scope, column["victim"], tenants, column.get("gpus") or {}, failed)
        for t, o in column["outcomes"].items():
            o["expected"] = "failed" if t in j.expected_fail else "survived"
            o["escaped"] = t in j.escaped
            o["spared"] = t in j.spared
        mode = self.layout.mode + ("" if self.layout.enforced else " (labelled isolation-enforced=false)")
        for f in j.findings(mode, column["victim"]):
            self.result.fail(f)
        column["verdict"] = "PASS" if j.ok else "FAIL"
        self.result.details["isolation_matrix"] = self.matrix()
        return j

    def matrix(self) -> dict[str, Any]:
        """The evidence: tenants x probes, JSON-safe."""
        return {"node": self.node, "mode": self.layout.mode if self.layout else "",
                "enforced": self.layout.enforced if self.layout else None,
                "layout": self.layout.to_dict() if self.layout else {},
                "tenants": sorted((t.name for t in self._running_tenants()), key=_natural),
                "wanted": self.wanted, "reached": self.reached, "pending": dict(self.pending),
                "probes": [json.loads(json.dumps(p)) for p in self.probes]}

    # ----------------------------------------------------------------- rollback
    def rollback(self) -> None:
        """Delete every probe pod, clear the injections, remove an embedded partitioned node; never raises."""
        driver, ns = self.target.driver, self.target.profile.namespace
        if self.follower is not None:
            self.follower.stop()
        try:
            for pod in driver.list(POD, ns, label_selector=run_selector(self.run_id)):
                driver.delete(POD, pod["metadata"]["name"], ns, grace_seconds=0)
            if self.node and self.target.embedded is not None and not self.embedded_node:
                self.target.clear_xids(self.node)
            if self._unrepaired is not None:
                # the target's restore (a GPU reset) undoes the standing Xid after this: let the GPU be free first
                deadline = time.monotonic() + 60.0
                while driver.list(POD, ns, label_selector=run_selector(self.run_id)) and time.monotonic() < deadline:
                    time.sleep(0.25)
        except KubeError as exc:
            log.warning("rollback of isolation drill %s incomplete: %s", self.run_id, exc)
        if self.embedded_node and self.target.embedded is not None:
            try:
                self.target.embedded.remove_node(self.node, driver)
            except Exception as exc:  # noqa: BLE001 - rollback must finish
                log.warning("could not remove partitioned node %s: %s", self.node, exc)
        if self.layout is not None:
            self.result.details["isolation_matrix"] = self.matrix()


def not_holding(tenants: list[tuple[str, str, ProbeReport | None]], image: str) -> str:
    """Why some tenant (name, pod, its first probe report) cannot be reached by a probe: it never reported, it
    failed as it started, or it holds no GPU memory.  '' when every tenant holds GPU memory."""
    problems = []
    for name, pod, report in tenants:
        if report is None:
            problems.append(f"{name} ({pod}) wrote no probe report to its log (does {image} have python3?)")
        elif report.event is ProbeEvent.FAILED:
            problems.append(f"{name} failed as it started ({report.reason}: {report.error}; does the GPU still "
                            "carry an earlier fault?)")
        elif not report.holds_gpu_memory:
            problems.append(f"{name} holds no GPU memory: {report.error or 'no allocator'}")
    if not problems:
        return ""
    return ("; ".join(problems) + ". A tenant can only show isolation while it holds GPU memory: the image "
            "needs python3, and the node's NVIDIA container runtime must mount libcuda.so.1 and "
            "libnvidia-ml.so.1 into it (driver capabilities compute,utility, which the tenant pods ask for)")


def failure_reason(report: ProbeReport) -> str:
    """A tenant's failure in its own words (its probe's ``failed`` line)."""
    held = (f" (it held {report.allocated_mib} MiB; its share is {report.share_mib} MiB)"
            if report.reason == "OutOfMemory" and report.share_mib else "")
    return f"{report.reason or 'failed'}: {report.error or 'no detail'}{held}"


ADMISSION_REFUSED = "UnexpectedAdmissionError"
"""The kubelet's reason for a pod it refused to start (its devices could not be allocated yet)."""


def pod_reason(pod: Obj) -> str:
    """The pod's failure reason: ``status.reason``, else the first terminated container's reason."""
    st = pod.get("status") or {}
    if st.get("reason"):
        return str(st["reason"])
    for cs in st.get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated") or {}
        if term.get("reason"):
            return str(term["reason"])
    return ""


def admission_refused(pod: Obj) -> bool:
    """True for a pod the node refused at admission: it never ran, so its failure is no probe outcome."""
    return _phase(pod) == "Failed" and pod_reason(pod) == ADMISSION_REFUSED


def _phase(pod: Obj) -> str:
    return (pod.get("status") or {}).get("phase", "Pending") if pod else ""


__all__ = ["EVERY_ON_GPU", "IsolationDrill", "Layout", "LayoutError", "NO_TENANT", "ONLY_IT", "PROBES",
           "ADMISSION_REFUSED", "ProbeJudgement", "SliceKind", "SlicesOut", "admission_refused", "describe_affected",
           "discover_layout", "expected_failures", "failure_reason", "gpu_model", "judge_probe", "judge_slices_out",
           "mig_layouts", "not_holding", "parse_scope", "partition_config", "pod_reason", "promise", "slice_allocatable",
           "slice_label", "slices_left", "slices_per_gpu"]
