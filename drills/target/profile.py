"""The target profile: what cluster a run drills, how it pulls a node, and what it must never touch.

``firedrill run --profile FILE`` reads a YAML file describing a real cluster;
without ``--profile`` the run uses :func:`reference_profile`, the embedded
reference platform.  The profile's digest goes into the run's evidence, so the
file is strict: an unknown or misspelt field is an error, never ignored.

Fields (``docs/PROFILE.md`` has the same list and a complete example)::

    apiVersion: firedrill.dev/v1alpha1   optional; if present, exactly this
    kind: TargetProfile                   optional; if present, exactly this
    name            required  a name for the target, shown in reports (e.g. staging-h100)
    flavor          required  gang scheduler: volcano | kueue | kai | native
    namespace       required  namespace the drills create their pods in (a DNS-1123 label)
    queue           required  Volcano queue, Kueue LocalQueue or KAI leaf queue for the gangs
    canary_image    required  container image of the drill pods (any image that can sleep)
    gpu_resource    optional  extended resource the pods request; default nvidia.com/gpu
    fault:          required
      method        required  kill | hang | partition (reference platform only: SIGKILL, SIGSTOP,
                              heartbeats cut) | kubelet-stop (privileged pod + nsenter) |
                              delete-node (KWOK-style nodes) | command (your own CLI)
      command_template        required with method: command, forbidden otherwise; a shell command
                              with the placeholder {node}, e.g. "ipmitool -H {node}-bmc power off"
      restore_template        optional, methods command and kubelet-stop: a command with {node} that undoes the
                              fault on rollback (e.g. "ipmitool -H {node}-bmc power on"); without it the
                              run says the node must be restored by hand
      timeout_seconds         optional; seconds for the fault to be confirmed; default 60
      xid:                    optional; how the isolation and GPU fault drills inject an Xid on a real cluster
        command_template      required in xid: a shell command with {node} and {xid}, and optionally {gpu},
                              {instance} (the MIG GPU instance id, "-" for a whole GPU) and {uuid} (the GPU's
                              UUID; the GPU fault drill knows only that one)
        restore_template      optional: a command with the same placeholders, run on rollback (a GPU reset)
      hang:                   optional; how the hang drill stops one rank inside a step on a real cluster
        command_template      required in hang: a shell command with {pod} or {uuid}, and optionally {node} and
                              {namespace}: e.g. "kubectl exec -n {namespace} {pod} -- kill -USR2 1" (the
                              canary takes SIGUSR2 as its GPU stuck in a kernel: docs/WORKLOAD.md)
        restore_template      optional: a command with the same placeholders, run on rollback
      storage_stall:          optional; how the hang drill stalls the checkpoint storage on a real cluster
        command_template      required in storage_stall: a shell command with {node} and optionally {seconds}
                              that stalls that node's checkpoint storage and lifts the stall by itself after
                              {seconds} (e.g. a firewall rule with an expiry)
        restore_template      optional: run when the stall's time is up and on rollback
    safety:                   optional; every field has a safe default
      allow_label             key=value a node must carry to be touched; default firedrill.dev/chaos=allowed
      max_nodes               most nodes one drill may pull; default 1
      max_gpu_share           most of the cluster's GPUs one drill may remove, 0 < x <= 1; default 0.25
      refuse_control_plane    never touch control-plane nodes; default true
      require_healthy         refuse to start on an already degraded cluster; default true
      abort_when              conditions that stop the whole run at once (ABORTED, exit 5, every fault undone):
                              [node-outside-blast-radius-not-ready]; default none (docs/SAFETY.md)
    leakReport:               optional; where the leak drill reads the leak report (docs/LEAK_REPORT.md)
      url                     an absolute http(s) URL serving the contract; default: the API server's path
    canary:                   optional; how the training canary runs (docs/WORKLOAD.md)
      command                 its entry point in canary_image, a list of strings; default [firedrill-canary]
      shared_volume           a core/v1 volume source every rank reaches (checkpoints and rendezvous), e.g.
                              {persistentVolumeClaim: {claimName: firedrill-shared}} (ReadWriteMany) or
                              {nfs: {server: ..., path: ...}}; without it the node-pull and leak drills are
                              INCONCLUSIVE on a real cluster (the reference platform serves its own nfs)
    inference:                optional; how the serving drills run the inference canary (docs/SERVING.md)
      command                 its entry point, a list of strings; default [firedrill-inference]
      image                   its image, built from drills/inference/Containerfile; required for the serving
                              drills on a real cluster (the embedded platform needs none)
      url                     an absolute http(s) URL at which the harness reaches Service firedrill-inference
                              (port 8000) in the namespace, e.g. through your Ingress or gateway; default: the
                              address the cluster's load balancer gives the drill's Service
    prometheus:               optional; for clusters with no leak report endpoint (some holes: INCONCLUSIVE)
      url                     the Prometheus base URL (DCGM exporter and kube-state-metrics scraped)
      scrape_interval         seconds between its scrapes; the drill waits 2 of them after a window; default 1
    governance:               optional; the identities and the audit log of the governance drill (docs/GOVERNANCE.md);
                              each field it lacks makes only the step that needs it INCONCLUSIVE, naming the field
      tenant_kubeconfig       a kubeconfig holding a tenant's own credentials (a namespace user, not an admin)
      tenant_context          its context; default the file's current context
      tenant_namespace        the tenant's namespace (a DNS-1123 label)
      other_namespace         another tenant's namespace, which the tenant must not reach
      restricted_priority_class  a PriorityClass the tenant may not use in its namespace
      node_kubeconfig         optional: a node's own (kubelet) credentials, for "a node's identity writes another
                              node's Lease"
      node_context            its context; default the file's current context
      node_name               the node those credentials belong to; required with node_kubeconfig
      audit_log               the API server's audit log (--audit-log-path) as a file this machine reads
      record_wait_seconds     how long a record may take to reach the audit log after its request; default 10
    fabric:                   optional; what the fabric drill holds each GPU node to (docs/FABRIC.md)
      gpus_per_node           the GPUs every GPU node was bought with (the inventory); default: each node's GPU
                              Feature Discovery label nvidia.com/gpu.count
      bandwidth_test:         optional; a bandwidth test each worker of the gang runs on its node, in place of the
                              canary's own collective (e.g. NCCL's all_reduce_perf from nccl-tests)
        image                 required: an image that has the test
        command               required: its command and arguments, a list of strings, e.g.
                              [all_reduce_perf, -b, 1G, -e, 4G, -f, "2", -g, "8"]; its output must be nccl-tests'
                              table (a busbw column, "# Avg bus bandwidth")
        timeout_seconds       optional; how long every worker's test may take; default 600

:func:`load_profile` reports every problem at once, each with the file, the
field path and what is allowed.
"""

from __future__ import annotations

import difflib
import re
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from types import MappingProxyType
from pathlib import Path
from typing import Any, ClassVar, TypeVar
from urllib.parse import urlparse

import yaml

from drills.errors import FiredrillError
from drills.kube.flavors import GangFlavor, thaw, valid_dns_label, valid_label_key, valid_label_value
from drills.slurm.rest import API_PATTERN as SLURM_REST_API_PATTERN, API_VERSION as SLURM_REST_API
from drills.slurm.rest import TOKEN_ENV as SLURM_REST_TOKEN_ENV

__all__ = [
    "API_VERSION",
    "KIND",
    "FaultMethod",
    "Platform",
    "SlurmGovernance",
    "SlurmSettings",
    "GangForm",
    "RaySettings",
    "CanarySettings",
    "FaultSettings",
    "LeakReportSettings",
    "XID_PLACEHOLDERS",
    "HangSettings",
    "SiteCommand",
    "StallSettings",
    "XidSettings",
    "ProfileError",
    "SafetySettings",
    "TargetProfile",
    "GovernanceSettings",
    "BandwidthTest",
    "FabricSettings",
    "load_profile",
    "reference_profile",
]

API_VERSION = "firedrill.dev/v1alpha1"
KIND = "TargetProfile"
_CANARY = ("command", "shared_volume")
_INFERENCE = ("command", "image", "url")
_FABRIC = ("gpus_per_node", "bandwidth_test")
_BANDWIDTH_TEST = ("image", "command", "timeout_seconds")
_GOVERNANCE = ("tenant_kubeconfig", "tenant_context", "tenant_namespace", "other_namespace",
               "restricted_priority_class", "node_kubeconfig", "node_context", "node_name", "audit_log",
               "record_wait_seconds")
CANARY_COMMAND = ("firedrill-canary",)
INFERENCE_COMMAND = ("firedrill-inference",)
REFERENCE_SHARED_VOLUME: Mapping[str, Any] = MappingProxyType(
    {"nfs": {"server": "refplatform-nfs", "path": "/firedrill"}})
"""The reference platform's nfs export: one directory every node agent maps for its pods."""
DOCS = "docs/PROFILE.md"
REFERENCE_IMAGE = "firedrill.dev/simulated:latest"


class ProfileError(FiredrillError):
    """A target profile that cannot be used; ``problems`` lists each one (field path: what is wrong)."""

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or [message]


class FaultMethod(Enum):
    """How a drill pulls a node."""

    KILL = "kill"
    """Reference platform: SIGKILL the node's agent process (a crashed host)."""
    HANG = "hang"
    """Reference platform: SIGSTOP the agent (a hung host: the process exists but does nothing)."""
    PARTITION = "partition"
    """Reference platform: the agent stops heartbeating but its pods keep running (a network partition)."""
    KUBELET_STOP = "kubelet-stop"
    """Real cluster: a privileged pod on the node stops the kubelet through nsenter."""
    DELETE_NODE = "delete-node"
    """Real cluster: delete the Node object (KWOK-style simulated nodes)."""
    COMMAND = "command"
    """Real cluster: run ``fault.command_template`` with ``{node}`` replaced (a cloud or IPMI CLI)."""

    @property
    def reference_only(self) -> bool:
        """True for the methods that act on the reference platform's agent processes."""
        return self in (FaultMethod.KILL, FaultMethod.HANG, FaultMethod.PARTITION)


REFERENCE_METHODS = tuple(m for m in FaultMethod if m.reference_only)
CLUSTER_METHODS = tuple(m for m in FaultMethod if not m.reference_only)


class FaultUnavailable(FiredrillError):
    """A scenario names a fault this target cannot inject: a reference-platform method on a real cluster that
    ``fault.stand_ins`` does not map, or a real-cluster method on the reference platform.  The scenario is
    INCONCLUSIVE with this reason, never a harness error."""


PULL = "pull"
"""``{fault}`` where the scenario asks for no fault by name ("the configured fault method")."""


def fault_word(asked: FaultMethod | None) -> str:
    """What ``{fault}`` in a fault command says: the fault the scenario names (``kill``, ``hang``, ``partition``;
    or ``command``, ``kubelet-stop``...), ``pull`` where it names none, so one site command can tell a host crash
    from a node cut off from its controller."""
    return PULL if asked is None else asked.value


def _template_problems(method: FaultMethod, template: str | None) -> list[str]:
    if method is not FaultMethod.COMMAND:
        if template is not None:
            return [f"fault.command_template: set, but neither fault.method ({method.value}) nor a stand-in is "
                    "command; it is used only with method: command (remove it or use command)"]
        return []
    if template is None or not template.strip():
        return ["fault.command_template: required when fault.method is command; give a shell command with "
                "the placeholder {node}, e.g. \"ipmitool -H {node}-bmc power off\""]
    try:
        fields = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as err:
        return [f"fault.command_template: {template!r} is not a valid template ({err}); write braces that are "
                "not placeholders as {{ and }}"]
    if "node" not in fields:
        return [f"fault.command_template: {template!r} has no {{node}} placeholder, so every drill would hit "
                "the same machine; put {node} where the node name goes"]
    others = sorted(fields - {"node", "expire_seconds", "fault"})
    if others:
        return [f"fault.command_template: unknown placeholder(s) {', '.join('{' + f + '}' for f in others)}; "
                "only {node}, {fault} and {expire_seconds} are replaced (write a literal brace as {{ or }})"]
    return []


HANG_PLACEHOLDERS = ("node", "pod", "namespace", "uuid")
"""What ``fault.hang`` templates may use; ``{pod}`` or ``{uuid}`` aims the hang at one rank."""
STALL_PLACEHOLDERS = ("node", "seconds")
"""What ``fault.storage_stall`` templates may use; ``{node}`` is required."""
XID_PLACEHOLDERS = ("node", "gpu", "instance", "xid", "uuid")
"""What ``fault.xid`` templates may use; ``{node}`` and ``{xid}`` are required in ``command_template``."""
NO_INSTANCE = "-"
"""What ``{instance}`` becomes when the Xid hits a whole GPU (not one MIG instance)."""


def _placeholder_problems(path: str, template: str | None, known: tuple[str, ...], example: str
                          ) -> tuple[set[str], list[str]]:
    """The placeholders ``template`` uses and its problems: empty, not a template, or placeholders not ``known``."""
    if template is None or not template.strip():
        return set(), [f"{path}: is empty; give a shell command, e.g. {example!r}"]
    try:
        fields = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as err:
        return set(), [f"{path}: {template!r} is not a valid template ({err}); write braces that are not placeholders "
                       "as {{ and }}"]
    unknown = sorted(fields - set(known))
    if unknown:
        return fields, [f"{path}: unknown placeholder(s) {', '.join('{' + f + '}' for f in unknown)}; the known ones "
                        f"are {', '.join('{' + f + '}' for f in known)} (write a literal brace as {{ or }})"]
    return fields, []


def _xid_template_problems(path: str, template: str | None, *, required: tuple[str, ...]) -> list[str]:
    fields, problems = _placeholder_problems(path, template, XID_PLACEHOLDERS,
                                             "inject-xid --node {node} --gpu {gpu} --instance {instance} --xid {xid}")
    missing = [r for r in required if r not in fields]
    if fields and missing:
        problems.append(f"{path}: {template!r} has no {', '.join('{' + m + '}' for m in missing)} placeholder; "
                        "without it every injection would hit the same node or inject the same Xid")
    return problems


@dataclass(frozen=True)
class SiteCommand:
    """A fault a real cluster injects with the site's own command, named in the profile (``fault.hang``,
    ``fault.storage_stall``): a ``command_template`` and an optional ``restore_template`` whose placeholders are the
    subclass's :attr:`PLACEHOLDERS`, at least one of :attr:`AIM` in the command.  Every injection first passes the
    same blast-radius check as a node fault and is written down before it runs (:mod:`drills.target.faults`)."""

    SECTION: ClassVar[str] = ""
    PLACEHOLDERS: ClassVar[tuple[str, ...]] = ()
    AIM: ClassVar[tuple[str, ...]] = ()
    """At least one of these in the command: what aims it."""
    EXAMPLE: ClassVar[str] = ""

    command_template: str
    restore_template: str | None = None
    """Run on rollback with the same placeholders; None: the fault ends by itself."""

    def __post_init__(self) -> None:
        problems = []
        for name, template in (("command_template", self.command_template),
                               ("restore_template", self.restore_template)):
            if template is None and name == "restore_template":
                continue
            path = f"fault.{self.SECTION}.{name}"
            fields, found = _placeholder_problems(path, template, self.PLACEHOLDERS, self.EXAMPLE)
            if not found and name == "command_template" and not fields & set(self.AIM):
                found.append(f"{path}: {template!r} has no {' nor '.join('{' + a + '}' for a in self.AIM)}; without "
                             "it the fault could not be aimed where the scenario says")
            problems += found
        if problems:
            raise ProfileError(f"invalid fault.{self.SECTION} settings: " + "; ".join(problems), problems)

    def command_for(self, **values: str) -> str:
        """The injection command, its placeholders filled (every one of :attr:`PLACEHOLDERS` must be given)."""
        return self.command_template.format(**values)

    def restore_for(self, **values: str) -> str | None:
        return None if self.restore_template is None else self.restore_template.format(**values)

    def to_dict(self) -> dict[str, Any]:
        out = {"command_template": self.command_template}
        if self.restore_template is not None:
            out["restore_template"] = self.restore_template
        return out


@dataclass(frozen=True)
class HangSettings(SiteCommand):
    """``fault.hang``: how the hang drill stops one rank inside a step on a real cluster (docs/HANG.md): a command
    aimed at the rank's pod (``{pod}``, ``{namespace}``) or its GPU (``{uuid}``, as its canary logged it) on
    ``{node}``; its restore, when none is given, is the job's restart or deletion (a hung rank ends with its
    process)."""

    SECTION: ClassVar[str] = "hang"
    PLACEHOLDERS: ClassVar[tuple[str, ...]] = HANG_PLACEHOLDERS
    AIM: ClassVar[tuple[str, ...]] = ("pod", "uuid")
    EXAMPLE: ClassVar[str] = "kubectl exec -n {namespace} {pod} -- kill -USR2 1"


@dataclass(frozen=True)
class StallSettings(SiteCommand):
    """``fault.storage_stall``: how the hang drill stops the checkpoint storage answering on a real cluster
    (docs/HANG.md): a command for ``{node}`` (its mount of the checkpoint storage) that stalls it for ``{seconds}``
    and undoes itself then (e.g. a firewall rule with an expiry), and optionally a restore run when the stall's
    time is up and on rollback."""

    SECTION: ClassVar[str] = "storage_stall"
    PLACEHOLDERS: ClassVar[tuple[str, ...]] = STALL_PLACEHOLDERS
    AIM: ClassVar[tuple[str, ...]] = ("node",)
    EXAMPLE: ClassVar[str] = "ssh {node} sudo stall-nfs --for {seconds}"


@dataclass(frozen=True, slots=True)
class XidSettings:
    """``fault.xid``: how the partition isolation drill injects an Xid on a real cluster (docs/PROFILE.md).

    Every injection first passes the same blast-radius check as a node fault (:mod:`drills.target.safety`)."""

    command_template: str
    """A shell command with ``{node}`` and ``{xid}``, optionally ``{gpu}``, ``{instance}`` and ``{uuid}`` (the
    GPU's UUID, as the GPU fault drill's canary logged it: a real pod does not reveal its GPU's minor number)."""
    restore_template: str | None = None
    """Run on rollback with the same placeholders (e.g. a GPU reset); None: the run says to restore by hand."""

    def __post_init__(self) -> None:
        problems = _xid_template_problems("fault.xid.command_template", self.command_template,
                                          required=("node", "xid"))
        if self.restore_template is not None:
            problems += _xid_template_problems("fault.xid.restore_template", self.restore_template,
                                               required=("node",))
        if problems:
            raise ProfileError("invalid Xid injection settings: " + "; ".join(problems), problems)

    def uses(self, placeholder: str) -> bool:
        """Does either template use ``{placeholder}``?"""
        return any(placeholder in {name for _, name, _, _ in string.Formatter().parse(t) if name is not None}
                   for t in (self.command_template, self.restore_template) if t)

    @staticmethod
    def _values(node: str, gpu: int | None, instance: int | None, xid: int, uuid: str) -> dict[str, str]:
        return {"node": node, "gpu": "" if gpu is None else str(gpu),
                "instance": NO_INSTANCE if instance is None else str(instance), "xid": str(xid), "uuid": uuid}

    def command_for(self, node: str, gpu: int | None, instance: int | None, xid: int, uuid: str = "") -> str:
        """The injection command for Xid ``xid`` on GPU ``gpu`` (its minor number; MIG GPU instance ``instance``)
        of ``node``, the GPU whose UUID is ``uuid``."""
        return self.command_template.format(**self._values(node, gpu, instance, xid, uuid))

    def restore_for(self, node: str, gpu: int | None, instance: int | None, xid: int, uuid: str = "") -> str | None:
        """The command that undoes that injection, if the profile gives one."""
        if self.restore_template is None:
            return None
        return self.restore_template.format(**self._values(node, gpu, instance, xid, uuid))

    def to_dict(self) -> dict[str, Any]:
        out = {"command_template": self.command_template}
        if self.restore_template is not None:
            out["restore_template"] = self.restore_template
        return out


@dataclass(frozen=True, slots=True)
class FaultSettings:
    """How the fault is injected and how long it may take to be confirmed."""

    method: FaultMethod
    command_template: str | None = None
    """Method ``command`` only: a shell command with ``{node}``."""
    restore_template: str | None = None
    """Methods ``command`` and ``kubelet-stop``: the command with ``{node}`` that undoes the fault on rollback."""
    timeout_seconds: float = 60.0
    """Seconds for the fault to be confirmed; past it the drill is INCONCLUSIVE."""
    xid: XidSettings | None = None
    """``fault.xid``: how the isolation drill injects an Xid on a real cluster; None: it cannot (INCONCLUSIVE)."""
    stand_ins: tuple[tuple[FaultMethod, FaultMethod], ...] = ()
    """``fault.stand_ins``: (reference method, real-cluster method) pairs.  On a real cluster a scenario that says
    ``with partition`` pulls the node with the method standing in for ``partition`` (e.g. kubelet-stop: the node
    stops reporting while its pods run on); a reference method without a stand-in makes the scenario INCONCLUSIVE."""
    expire_seconds: float | None = None
    """``fault.expire_seconds``: the fault command undoes itself this long after it acts (it schedules its own
    undo: ``systemd-run --on-active={expire_seconds}``, a BMC power schedule, an instance's auto-restart), so the
    cluster heals even when nobody runs ``firedrill recover``; the journal records when.  ``{expire_seconds}`` in
    ``command_template`` is replaced by it.  None: the fault stands until it is undone."""
    hang: HangSettings | None = None
    """``fault.hang``: how the hang drill stops one rank on a real cluster; None: it cannot (INCONCLUSIVE)."""
    storage_stall: StallSettings | None = None
    """``fault.storage_stall``: how the hang drill stalls the checkpoint storage on a real cluster; None: it cannot."""
    stand_in_choices: tuple[FaultMethod, ...] = CLUSTER_METHODS
    """What may stand in for a reference-platform method on this kind of cluster (a Slurm node: only a command)."""

    def __post_init__(self) -> None:
        problems = [f"fault.stand_ins.{ref.value}: {ref.value} is not a reference-platform method; stand-ins map "
                    f"{', '.join(m.value for m in REFERENCE_METHODS)}" for ref, _ in self.stand_ins
                    if not ref.reference_only]
        problems += [f"fault.stand_ins.{ref.value}: {real.value} acts on the reference platform too; a stand-in is "
                     f"one of {', '.join(m.value for m in CLUSTER_METHODS)}" for ref, real in self.stand_ins
                     if real.reference_only]
        uses_command = FaultMethod.COMMAND in (self.method, *(real for _, real in self.stand_ins))
        problems += _template_problems(FaultMethod.COMMAND if uses_command else self.method, self.command_template)
        if self.restore_template is not None:
            if not {self.method, *(real for _, real in self.stand_ins)} & {FaultMethod.COMMAND,
                                                                          FaultMethod.KUBELET_STOP}:
                problems.append(f"fault.restore_template: set, but fault.method is {self.method.value}; it is used "
                                "only with command or kubelet-stop (the reference platform restores by itself)")
            else:
                problems += [p.replace("command_template", "restore_template").replace(
                    "required when fault.method is command; ", "")
                    for p in _template_problems(FaultMethod.COMMAND, self.restore_template)]
        if self.timeout_seconds <= 0:
            problems.append(f"fault.timeout_seconds: {self.timeout_seconds} must be above 0")
        if self.expire_seconds is not None and self.expire_seconds <= 0:
            problems.append(f"fault.expire_seconds: {self.expire_seconds} must be above 0")
        for key, template in (("command_template", self.command_template), ("restore_template", self.restore_template)):
            if self.expire_seconds is None and template is not None and "{expire_seconds}" in template:
                problems.append(f"fault.{key} uses {{expire_seconds}}, but fault.expire_seconds is not set; set it "
                                "to the seconds after which the command's own undo runs")
        if problems:
            raise ProfileError("invalid fault settings: " + "; ".join(problems), problems)

    def method_for(self, named: FaultMethod | None, *, reference: bool) -> FaultMethod:
        """The method that injects the fault a scenario names (None: "the configured fault method") on the
        reference platform (``reference``) or a real cluster.  Raises :class:`FaultUnavailable` with the reason
        and the fix when this target has no such fault."""
        method = self.method if named is None else named
        said = "the configured fault method" if named is None else method.value
        if reference and not method.reference_only:
            raise FaultUnavailable(f"the scenario pulls a node with {said} ({method.value}), which acts on real "
                                   "clusters; the reference platform's nodes are processes, pulled with kill, hang "
                                   "or partition")
        if reference or not method.reference_only:
            return method
        stand_in = dict(self.stand_ins).get(method)
        if stand_in is None:
            raise FaultUnavailable(
                f"the scenario pulls a node with {said}, which signals the reference platform's node processes; "
                f"this profile names no stand-in for it on a real cluster: set fault.stand_ins.{method.value} to "
                + (f"one of {', '.join(m.value for m in self.stand_in_choices)}" if len(self.stand_in_choices) > 1
                   else self.stand_in_choices[0].value) + " (docs/PROFILE.md, \"Fault methods\")")
        return stand_in

    def command_for(self, node: str, asked: FaultMethod | None = None) -> str:
        """The command for ``node`` (method ``command`` only), with its ``{expire_seconds}`` when it has one and
        ``{fault}``: the fault the scenario asked for (:func:`fault_word`)."""
        if self.command_template is None:
            raise ProfileError(f"fault.method is {self.method.value}, which has no command template")
        return self._render(self.command_template, node, asked)

    def restore_for(self, node: str, asked: FaultMethod | None = None) -> str | None:
        """The command that undoes the fault on ``node``, if the profile gives one."""
        return None if self.restore_template is None else self._render(self.restore_template, node, asked)

    def _render(self, template: str, node: str, asked: FaultMethod | None) -> str:
        expire = "" if self.expire_seconds is None else f"{self.expire_seconds:g}"
        return template.format(node=node, expire_seconds=expire, fault=fault_word(asked))


def _abort_when(section: Any, problems: list[str]) -> tuple[AbortCondition, ...]:
    """``safety.abort_when``: a list of condition names (docs/SAFETY.md, 'The abort guard')."""
    raw = section.data.get("abort_when", [])
    allowed = " | ".join(c.value for c in AbortCondition)
    if not isinstance(raw, list):
        problems.append(f"{section.where('abort_when')}: expected a list of condition names ({allowed}), got "
                        f"{_type_name(raw)}")
        return ()
    out = []
    for item in raw:
        try:
            out.append(AbortCondition(item))
        except ValueError:
            problems.append(f"{section.where('abort_when')}: {item!r} is no abort condition; allowed: {allowed}")
    return tuple(out)


def _allow_label_problems(allow_label: str) -> list[str]:
    key, eq, value = allow_label.partition("=")
    if not eq or not valid_label_key(key) or not valid_label_value(value) or not value:
        return [f"safety.allow_label: {allow_label!r} must be key=value with a valid label key and a non-empty "
                "value, e.g. firedrill.dev/chaos=allowed"]
    return []


class AbortCondition(Enum):
    """What a profile's ``safety.abort_when`` may name: a breach stops the whole run (drills.scenario.guard)."""

    OUTSIDE_NODE_NOT_READY = "node-outside-blast-radius-not-ready"
    """A node the drill did not fault goes NotReady (its Ready condition leaves True)."""


@dataclass(frozen=True, slots=True)
class SafetySettings:
    """What a drill on a real cluster may touch; see :mod:`drills.target.safety` for the checks."""

    allow_label: str = "firedrill.dev/chaos=allowed"
    """``key=value``: only nodes carrying this label are ever faulted."""
    max_nodes: int = 1
    """Most nodes one drill may pull."""
    max_gpu_share: float = 0.25
    """Most of the cluster's GPUs (capacity) one drill may remove, 0 < share <= 1."""
    refuse_control_plane: bool = True
    """Never touch nodes labelled ``node-role.kubernetes.io/control-plane`` or ``.../master``."""
    require_healthy: bool = True
    """Refuse to start when pre-flight finds the cluster already degraded."""
    abort_when: tuple[AbortCondition, ...] = ()
    """Conditions that stop the whole run at once, the scenario ABORTED and every fault undone (none: no guard)."""

    def __post_init__(self) -> None:
        problems = _allow_label_problems(self.allow_label)
        if self.max_nodes < 1:
            problems.append(f"safety.max_nodes: {self.max_nodes} must be 1 or more")
        if not 0 < self.max_gpu_share <= 1:
            problems.append(f"safety.max_gpu_share: {self.max_gpu_share} must be above 0 and at most 1")
        if problems:
            raise ProfileError("invalid safety settings: " + "; ".join(problems), problems)

    @property
    def allow_label_key(self) -> str:
        return self.allow_label.partition("=")[0]

    @property
    def allow_label_value(self) -> str:
        return self.allow_label.partition("=")[2]


def _url_problems(path: str, url: str) -> list[str]:
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return [f"{path}: {url!r} is not an absolute http(s) URL; write e.g. "
                "https://dashboard.example/apis/firedrill.dev/v1alpha1/leakreport"]
    return []


@dataclass(frozen=True, slots=True)
class LeakReportSettings:
    """Where the leak identification drill reads the leak report (at most one of the two URLs)."""

    url: str | None = None
    """``leakReport.url``: an absolute URL serving the contract; None: the target's API server path."""
    prometheus_url: str | None = None
    """``prometheus.url``: compute the report from Prometheus metrics (for clusters without the endpoint)."""
    scrape_interval: float | None = None
    """``prometheus.scrape_interval``: seconds between the Prometheus scrapes (None: 1 s, the embedded rate)."""

    def __post_init__(self) -> None:
        problems = _url_problems("leakReport.url", self.url) if self.url is not None else []
        if self.prometheus_url is not None:
            problems += _url_problems("prometheus.url", self.prometheus_url)
        if self.url is not None and self.prometheus_url is not None:
            problems.append("leakReport.url and prometheus.url are both set; keep one (leakReport.url when the "
                            "platform serves the contract)")
        if problems:
            raise ProfileError("invalid leak report source: " + "; ".join(problems), problems)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.url is not None:
            out["leakReport"] = {"url": self.url}
        if self.prometheus_url is not None:
            out["prometheus"] = {"url": self.prometheus_url}
            if self.scrape_interval is not None:
                out["prometheus"]["scrape_interval"] = self.scrape_interval
        return out


@dataclass(frozen=True, slots=True)
class CanarySettings:
    """How the training canary runs on the target (``docs/WORKLOAD.md``)."""

    command: tuple[str, ...] = CANARY_COMMAND
    """The canary's entry point inside ``canary_image``."""
    shared_volume: Mapping[str, Any] | None = None
    """A core/v1 volume source every rank can reach (checkpoints, rendezvous); None: not configured."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"command": list(self.command)}
        if self.shared_volume is not None:
            out["shared_volume"] = thaw(self.shared_volume)
        return {"canary": out}


@dataclass(frozen=True, slots=True)
class InferenceSettings:
    """How the serving drills run the inference canary on the target (``docs/SERVING.md``)."""

    command: tuple[str, ...] = INFERENCE_COMMAND
    image: str | None = None
    """The image, built from ``drills/inference/Containerfile`` (None: none configured; the embedded platform runs
    the command without one, a real cluster's serving scenarios are INCONCLUSIVE)."""
    url: str | None = None
    """Where the harness reaches the Service ``firedrill-inference`` (None: its load-balancer address)."""

    def __post_init__(self) -> None:
        problems = _url_problems("inference.url", self.url) if self.url is not None else []
        if problems:
            raise ProfileError("invalid inference settings: " + "; ".join(problems), problems)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"command": list(self.command)}
        if self.image is not None:
            out["image"] = self.image
        if self.url is not None:
            out["url"] = self.url
        return {"inference": out}


@dataclass(frozen=True, slots=True)
class GovernanceSettings:
    """``governance``: whose credentials the governance drill crosses the control chains with, and where it finds
    the records of the refusals (``docs/GOVERNANCE.md``).

    Every field may be absent: the step that needs a missing one is INCONCLUSIVE and names it.  On the embedded
    reference platform the kubeconfigs and the audit log come from its data directory when not given."""

    tenant_kubeconfig: str | None = None
    """A kubeconfig with a tenant's own credentials (None: the embedded platform's, or $KUBECONFIG when
    ``tenant_context`` is given)."""
    tenant_context: str | None = None
    """The context of ``tenant_kubeconfig`` to use (None: its current context)."""
    tenant_namespace: str | None = None
    """The tenant's own namespace, where it may create ordinary objects."""
    other_namespace: str | None = None
    """Another tenant's namespace, which the tenant must neither read nor write."""
    restricted_priority_class: str | None = None
    """A PriorityClass the tenant may not use in its namespace."""
    node_kubeconfig: str | None = None
    """A node's own (kubelet) credentials (None: the embedded platform's; absent on a real cluster: the node step
    is INCONCLUSIVE)."""
    node_context: str | None = None
    node_name: str | None = None
    """The node ``node_kubeconfig`` belongs to (its identity is ``system:node:<node_name>``)."""
    audit_log: str | None = None
    """The API server's audit log (``--audit-log-path``, audit.k8s.io/v1 JSON lines), readable from here."""
    record_wait_seconds: float = 10.0
    """How long a record may take to reach the audit log after the request it records (batching backends)."""

    def __post_init__(self) -> None:
        problems = []
        for key in ("tenant_namespace", "other_namespace"):
            value = getattr(self, key)
            if value is not None and not valid_dns_label(value):
                problems.append(f"governance.{key}: {value!r} is not a namespace name (DNS-1123 label: a-z, 0-9, "
                                "'-', at most 63)")
        if self.tenant_namespace is not None and self.tenant_namespace == self.other_namespace:
            problems.append(f"governance.other_namespace: {self.other_namespace!r} is the tenant's own namespace; "
                            "name another tenant's namespace")
        if (self.node_kubeconfig is None) != (self.node_name is None):
            problems.append("governance.node_name: required with governance.node_kubeconfig (and only with it): the "
                            "name of the node whose credentials the file holds")
        if self.node_context is not None and self.node_kubeconfig is None:
            problems.append("governance.node_context: set, but governance.node_kubeconfig is not; a node's "
                            "credentials are never taken from your own kubeconfig")
        if not self.record_wait_seconds > 0:
            problems.append(f"governance.record_wait_seconds: {self.record_wait_seconds} must be above 0")
        if problems:
            raise ProfileError("invalid governance settings: " + "; ".join(problems), problems)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {key: getattr(self, key) for key in _GOVERNANCE if getattr(self, key) is not None}
        return {"governance": out}


@dataclass(frozen=True, slots=True)
class BandwidthTest:
    """``fabric.bandwidth_test``: a bandwidth test every worker of the fabric drill's gang runs on its node
    (nccl-tests' ``all_reduce_perf``), whose output the drill parses (:mod:`drills.kinds.fabric.nccltests`)."""

    image: str
    command: tuple[str, ...]
    """The command and its arguments, e.g. ``("all_reduce_perf", "-b", "1G", "-e", "4G", "-f", "2", "-g", "8")``."""
    timeout_seconds: float = 600.0
    """How long the workers' tests may take, from their creation; past it the scenario is INCONCLUSIVE."""

    def to_dict(self) -> dict[str, Any]:
        return {"image": self.image, "command": list(self.command), "timeout_seconds": self.timeout_seconds}


@dataclass(frozen=True, slots=True)
class FabricSettings:
    """``fabric``: what the fabric drill holds each GPU node to (docs/FABRIC.md)."""

    gpus_per_node: int | None = None
    """The GPUs every GPU node was bought with (None: each node's ``nvidia.com/gpu.count`` label says)."""
    bandwidth_test: BandwidthTest | None = None
    """A test that measures each node's collective bandwidth (None: the canary's own collective is measured)."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.gpus_per_node is not None:
            out["gpus_per_node"] = self.gpus_per_node
        if self.bandwidth_test is not None:
            out["bandwidth_test"] = self.bandwidth_test.to_dict()
        return {"fabric": out} if out else {}


class Platform(Enum):
    """How the drilled cluster schedules its GPUs: the profile's ``platform`` field."""

    KUBERNETES = "kubernetes"
    """A Kubernetes cluster (or the embedded reference platform), drilled through its API server."""
    SLURM = "slurm"
    """A Slurm cluster, drilled through its commands (``sbatch``, ``squeue --json``, ``sinfo --json``; docs/SLURM.md)."""
    RAY = "ray"
    """A Ray cluster, drilled through its dashboard's state and Job Submission APIs (docs/RAY.md)."""


SLURM_FEATURE = "firedrill"
"""The node feature (slurm.conf ``Features=``) a Slurm node must carry to be faulted, unless the profile says."""


@dataclass(frozen=True, slots=True)
class SlurmGovernance:
    """``slurm.governance``: who the tenant is on a Slurm cluster and where the refusals are on record
    (docs/SLURM.md, "What governance does there"). Every field may be absent: the step that needs it is
    INCONCLUSIVE and names it."""

    tenant_command: tuple[str, ...] = ()
    """How this machine runs a Slurm command as the tenant, its own Unix user (an argv prefix: ``[sudo, -n, -u,
    alice, --]``, ``[runuser, -u, alice, --]``, ``[ssh, alice@login]``): Slurm knows a user by its uid."""
    tenant_qos: str | None = None
    """The QOS the tenant's jobs run under, whose ``GrpTRES`` GPU limit is its quota."""
    tenant_account: str | None = None
    """The account the tenant's jobs are charged to (None: its default account)."""
    other_partition: str | None = None
    """A partition the tenant's account may not use (``AllowAccounts``/``DenyAccounts``)."""
    restricted_qos: str | None = None
    """A QOS the tenant was not given."""
    controller_log: str | None = None
    """slurmctld's log (``SlurmctldLogFile``) as this machine reads it: where each refusal is on record."""
    record_wait_seconds: float = 10.0
    """How long a refusal may take to reach the log after the command it records."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"tenant_command": list(self.tenant_command)} if self.tenant_command else {}
        for key in ("tenant_qos", "tenant_account", "other_partition", "restricted_qos", "controller_log"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.record_wait_seconds != 10.0:
            out["record_wait_seconds"] = self.record_wait_seconds
        return out


@dataclass(frozen=True, slots=True)
class SlurmRestSettings:
    """``slurm.rest``: slurmrestd, where the site serves it; the drills read jobs and nodes there instead of running
    ``squeue``/``sinfo`` for each poll (docs/SLURM.md, "Reading through slurmrestd")."""

    url: str
    """Where slurmrestd listens, e.g. ``http://slurm-head:6820``."""
    user: str
    """The user the token is for (``X-SLURM-USER-NAME``): not root, not SlurmUser (slurmrestd refuses both)."""
    token_env: str = SLURM_REST_TOKEN_ENV
    """The environment variable holding the token (``scontrol token username=<user> lifespan=<seconds>``); the
    profile never holds the token itself. Not ``SLURM_JWT`` unless the token is the harness user's own: Slurm's
    commands read that one too, and would speak as the token's user."""
    api: str = SLURM_REST_API
    """The openapi plugin version slurmrestd serves (Slurm 22.05: ``v0.0.38``)."""

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "user": self.user, "token_env": self.token_env, "api": self.api}


@dataclass(frozen=True, slots=True)
class SlurmSettings:
    """``slurm`` (with ``safety.allow_feature``): how the drills reach a Slurm cluster and run their jobs there."""

    partition: str
    """The partition every drill job is submitted to (``sbatch --partition``)."""
    conf: str | None = None
    """The cluster's ``slurm.conf`` as this machine reads it (None: the client's default, or ``$SLURM_CONF``)."""
    account: str | None = None
    """The account the drill jobs are charged to (None: the harness user's default account)."""
    qos: str | None = None
    """The QOS the drill jobs ask for (None: the association's default)."""
    gres: str = "gpu"
    """The GRES name of the GPUs (``--gres=<gres>:<count>``)."""
    canary_command: tuple[str, ...] = CANARY_COMMAND
    """How a task of a drill job starts the training canary on a node (the harness's Python there, or an image
    runner): ``srun`` runs it once per rank."""
    shared_dir: str | None = None
    """A directory every node sees at the same path (checkpoints, rendezvous, the ranks' output files); None: the
    training drills are INCONCLUSIVE, naming this field."""
    allow_feature: str = SLURM_FEATURE
    """Only nodes carrying this feature (slurm.conf ``Features=``) are ever faulted."""
    sbatch_args: tuple[str, ...] = ()
    """More ``sbatch`` arguments for every drill job, as the site's users submit theirs (``--requeue``,
    ``--reservation=...``, ``--constraint=...``)."""
    governance: SlurmGovernance = field(default_factory=SlurmGovernance)
    """The tenant and the record of its refusals, for the governance drill."""
    device_dir: str = "/dev"
    """Where a node's GPU device files (``nvidia0``, ...) are, as a job there reads them (``{node}``: the node's
    name, for a test bench whose simulated nodes keep theirs apart); gres.conf's ``File=`` names the same files."""
    rest: SlurmRestSettings | None = None
    """slurmrestd to read jobs and nodes through; None: ``squeue --json`` and ``sinfo --json``."""

    def devices_of(self, node: str) -> str:
        return self.device_dir.replace("{node}", node)

    def sbatch_options(self) -> tuple[str, ...]:
        """What every drill job is submitted with: its partition, its account and QOS where the profile says, and
        the profile's own ``sbatch_args``."""
        out = [f"--partition={self.partition}"]
        out += [f"--account={self.account}"] if self.account else []
        out += [f"--qos={self.qos}"] if self.qos else []
        return (*out, *self.sbatch_args)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"partition": self.partition, "gres": self.gres,
                               "canary_command": list(self.canary_command)}
        if self.sbatch_args:
            out["sbatch_args"] = list(self.sbatch_args)
        for key in ("conf", "account", "qos", "shared_dir"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.device_dir != "/dev":
            out["device_dir"] = self.device_dir
        if self.governance.to_dict():
            out["governance"] = self.governance.to_dict()
        if self.rest is not None:
            out["rest"] = self.rest.to_dict()
        return {"slurm": out}


RAY_RESOURCE = "firedrill"
"""The custom resource (``ray start --resources``) a Ray node must declare to be faulted, unless the profile says."""
RAY_CANARY_COMMAND = ("python3", "-m", "drills.canary.raytrain")
"""How the head starts the canary's Ray job (a Python with ``ray[train]`` and Firedrill installed)."""


class GangForm(Enum):
    """How the site's training jobs ask Ray for their workers (``ray.gang_form``)."""

    PLACEMENT_GROUP = "placement-group"
    """One placement group of every worker's bundle: Ray reserves all of them or none (its gang)."""
    SEPARATE_ACTORS = "separate-actors"
    """Each worker an actor of its own, no placement group: no gang (what a site whose jobs start their workers
    one by one gets; the gang drill shows what it costs)."""


@dataclass(frozen=True, slots=True)
class RaySettings:
    """``ray`` (with ``safety.allow_resource``): how the drills reach a Ray cluster and run their jobs there."""

    dashboard: str
    """The head's dashboard, e.g. ``http://10.0.0.1:8265``: the state API and the Job Submission API."""
    canary_command: tuple[str, ...] = RAY_CANARY_COMMAND
    """How the head starts the canary's job (``<command> train ...``, ``<command> gang ...``)."""
    storage_path: str | None = None
    """A directory every node sees at the same path: Ray Train's ``storage_path`` for the canary's checkpoints;
    None: the training drills are INCONCLUSIVE, naming this field."""
    max_failures: int = 2
    """Ray Train's ``FailureConfig.max_failures`` for the canary, as the site's own jobs run."""
    gang_form: GangForm = GangForm.PLACEMENT_GROUP
    cpus_per_worker: float = 1.0
    """CPUs each canary worker asks for beside its GPUs."""
    env_vars: Mapping[str, str] = field(default_factory=dict)
    """The runtime environment's ``env_vars`` for every drill job."""
    allow_resource: str = RAY_RESOURCE
    """Only nodes declaring this custom resource are ever faulted; the head is never faulted."""

    def runtime_env(self) -> dict[str, Any]:
        return {"env_vars": dict(self.env_vars)} if self.env_vars else {}

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"dashboard": self.dashboard, "canary_command": list(self.canary_command),
                               "max_failures": self.max_failures, "gang_form": self.gang_form.value,
                               "cpus_per_worker": self.cpus_per_worker}
        if self.storage_path is not None:
            out["storage_path"] = self.storage_path
        if self.env_vars:
            out["env_vars"] = dict(self.env_vars)
        return {"ray": out}


@dataclass(frozen=True, slots=True)
class TargetProfile:
    """One drill target: the cluster's gang flavor, where drills run, how nodes are pulled, what is safe."""

    name: str
    flavor: GangFlavor
    namespace: str
    queue: str
    canary_image: str
    fault: FaultSettings
    safety: SafetySettings = field(default_factory=SafetySettings)
    gpu_resource: str = "nvidia.com/gpu"
    leak_report: LeakReportSettings = field(default_factory=LeakReportSettings)
    canary: CanarySettings = field(default_factory=CanarySettings)
    inference: InferenceSettings = field(default_factory=InferenceSettings)
    governance: GovernanceSettings = field(default_factory=GovernanceSettings)
    fabric: FabricSettings = field(default_factory=FabricSettings)
    platform: Platform = Platform.KUBERNETES
    slurm: SlurmSettings | None = None
    """``platform: slurm``: the Slurm cluster's settings (None on Kubernetes).  A Slurm profile has no flavor,
    namespace, queue or image: those fields keep neutral values no drill reads there, since every kind's Slurm
    check (:meth:`drills.scenario.drill.Drill.unsupported_on_slurm`) comes before anything else."""

    ray: RaySettings | None = None
    """``platform: ray``: the Ray cluster's settings (None elsewhere); as on Slurm, the Kubernetes fields keep
    neutral values no drill reads, since every kind's Ray check (:meth:`drills.scenario.drill.Drill
    .unsupported_on_ray`) comes first."""

    @property
    def on_slurm(self) -> bool:
        return self.platform is Platform.SLURM

    @property
    def on_ray(self) -> bool:
        return self.platform is Platform.RAY

    @property
    def on_kubernetes(self) -> bool:
        """A Kubernetes cluster or the embedded platform (not Slurm, not Ray)."""
        return self.platform is Platform.KUBERNETES

    def to_dict(self) -> dict[str, Any]:
        """The profile as YAML would write it (every field, defaults included): what the evidence records."""
        if self.slurm is not None:
            return {"apiVersion": API_VERSION, "kind": KIND, "name": self.name, "platform": self.platform.value,
                    **self.slurm.to_dict(), "fault": self._fault_dict(),
                    "safety": {"allow_feature": self.slurm.allow_feature, "max_nodes": self.safety.max_nodes,
                               "max_gpu_share": self.safety.max_gpu_share,
                               "require_healthy": self.safety.require_healthy}}
        if self.ray is not None:
            return {"apiVersion": API_VERSION, "kind": KIND, "name": self.name, "platform": self.platform.value,
                    **self.ray.to_dict(), "fault": self._fault_dict(),
                    "safety": {"allow_resource": self.ray.allow_resource, "max_nodes": self.safety.max_nodes,
                               "max_gpu_share": self.safety.max_gpu_share,
                               "require_healthy": self.safety.require_healthy}}
        return self._kubernetes_dict()

    def _fault_dict(self) -> dict[str, Any]:
        fault: dict[str, Any] = {"method": self.fault.method.value, "timeout_seconds": self.fault.timeout_seconds}
        if self.fault.command_template is not None:
            fault["command_template"] = self.fault.command_template
        if self.fault.restore_template is not None:
            fault["restore_template"] = self.fault.restore_template
        if self.fault.xid is not None:
            fault["xid"] = self.fault.xid.to_dict()
        if self.fault.hang is not None:
            fault["hang"] = self.fault.hang.to_dict()
        if self.fault.storage_stall is not None:
            fault["storage_stall"] = self.fault.storage_stall.to_dict()
        if self.fault.stand_ins:
            fault["stand_ins"] = {ref.value: real.value for ref, real in self.fault.stand_ins}
        if self.fault.expire_seconds is not None:
            fault["expire_seconds"] = self.fault.expire_seconds
        return fault

    def _kubernetes_dict(self) -> dict[str, Any]:
        fault = self._fault_dict()
        return {
            "apiVersion": API_VERSION, "kind": KIND, "name": self.name, "flavor": self.flavor.value,
            "namespace": self.namespace, "queue": self.queue, "canary_image": self.canary_image,
            "gpu_resource": self.gpu_resource, "fault": fault,
            "safety": {"allow_label": self.safety.allow_label, "max_nodes": self.safety.max_nodes,
                       "max_gpu_share": self.safety.max_gpu_share,
                       "refuse_control_plane": self.safety.refuse_control_plane,
                       "require_healthy": self.safety.require_healthy,
                       **({"abort_when": [c.value for c in self.safety.abort_when]} if self.safety.abort_when
                          else {})},
            **self.leak_report.to_dict(),
            **self.canary.to_dict(),
            **self.inference.to_dict(),
            **self.governance.to_dict(),
            **self.fabric.to_dict(),
        }


def reference_profile() -> TargetProfile:
    """The built-in profile of the embedded reference platform (``firedrill run`` without ``--profile``).

    Its nodes are local processes, so the allow label is one every simulated GPU node carries, and up to
    half the GPUs may go (one node of a small cluster); only one node is pulled at a time.
    """
    return TargetProfile(
        name="reference", flavor=GangFlavor.VOLCANO, namespace="default", queue="default",
        canary_image=REFERENCE_IMAGE, fault=FaultSettings(FaultMethod.KILL, timeout_seconds=10.0),
        safety=SafetySettings(allow_label="nvidia.com/gpu.present=true", max_nodes=1, max_gpu_share=0.5),
        canary=CanarySettings(shared_volume=REFERENCE_SHARED_VOLUME),
        # The embedded API server writes each audit record before its response starts (refplatform.api.audit),
        # so a record is there when the answer is: a second covers reading the file back.
        governance=GovernanceSettings(tenant_namespace="firedrill-tenant", other_namespace="firedrill-neighbour",
                                      restricted_priority_class="firedrill-critical", record_wait_seconds=1.0))


# --- loading -----------------------------------------------------------------------------------------------

_Missing: Any = object()
E = TypeVar("E", bound=Enum)

_TOP = ("apiVersion", "kind", "name", "flavor", "namespace", "queue", "canary_image", "gpu_resource", "fault",
        "safety", "leakReport", "prometheus", "canary", "inference", "governance", "fabric")
_FAULT = ("method", "command_template", "restore_template", "timeout_seconds", "xid", "stand_ins",
          "expire_seconds", "hang", "storage_stall")
_XID = ("command_template", "restore_template")
_SAFETY = ("allow_label", "max_nodes", "max_gpu_share", "refuse_control_plane", "require_healthy", "abort_when")


def _type_name(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "a mapping"}.get(type(value), type(value).__name__)


class _Section:
    """One mapping of the file, with its field path; records problems instead of raising."""

    def __init__(self, data: Mapping[str, Any], path: str, known: tuple[str, ...], problems: list[str]) -> None:
        self.data, self.path, self.problems = data, path, problems
        for key in data:
            if key not in known:
                hint = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
                did_you_mean = f"did you mean {hint[0]!r}? " if hint else ""
                self.problems.append(f"{self.where(str(key))}: unknown field; {did_you_mean}"
                                     f"known fields here: {', '.join(known)}")

    def where(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def _get(self, key: str, default: Any, kinds: tuple[type, ...], expected: str) -> Any:
        value = self.data.get(key, _Missing)
        if value is _Missing:
            if default is _Missing:
                self.problems.append(f"{self.where(key)}: required field is missing; expected {expected}")
            return default
        if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
            shown = "" if value is None else f" ({value!r})"
            self.problems.append(f"{self.where(key)}: expected {expected}, got {_type_name(value)}{shown}")
            return _Missing
        return value

    def string(self, key: str, default: Any = _Missing, *, check: Callable[[str], bool] | None = None,
               expected: str = "a string") -> Any:
        value = self._get(key, default, (str,), expected)
        if isinstance(value, str) and key in self.data:
            if not value.strip():
                self.problems.append(f"{self.where(key)}: is empty; expected {expected}")
                return _Missing
            if check is not None and not check(value):
                self.problems.append(f"{self.where(key)}: {value!r} is not {expected}")
                return _Missing
        return value

    def integer(self, key: str, default: int, *, minimum: int) -> Any:
        value = self._get(key, default, (int,), f"an integer >= {minimum}")
        if isinstance(value, int) and value < minimum:
            self.problems.append(f"{self.where(key)}: {value} is below the minimum {minimum}")
            return _Missing
        return value

    def number(self, key: str, default: float, *, above: float, at_most: float | None = None) -> Any:
        bound = f"above {above:g}" + (f" and at most {at_most:g}" if at_most is not None else "")
        value = self._get(key, default, (int, float), f"a number {bound}")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if value <= above or (at_most is not None and value > at_most):
                self.problems.append(f"{self.where(key)}: {value} must be {bound}")
                return _Missing
            return float(value)
        return value

    def optional_string(self, key: str, expected: str) -> Any:
        """A string that may be absent (None) but, when given, must be a string."""
        return self._get(key, None, (str,), expected)

    def boolean(self, key: str, default: bool) -> Any:
        return self._get(key, default, (bool,), "true or false")

    def choice(self, key: str, enum: type[E], default: Any = _Missing) -> Any:
        allowed = " | ".join(str(member.value) for member in enum)
        value = self._get(key, default, (str,), f"one of {allowed}")
        if isinstance(value, str):
            try:
                return enum(value)
            except ValueError:
                hint = difflib.get_close_matches(value, [str(m.value) for m in enum], n=1, cutoff=0.6)
                did_you_mean = f" (did you mean {hint[0]!r}?)" if hint else ""
                self.problems.append(f"{self.where(key)}: {value!r} is not allowed{did_you_mean}; "
                                     f"allowed: {allowed}")
                return _Missing
        return value

    def section(self, key: str, known: tuple[str, ...], *, required: bool) -> _Section | None:
        value = self.data.get(key, _Missing)
        if value is _Missing or value is None:
            if required:
                self.problems.append(f"{self.where(key)}: required section is missing; it takes "
                                     f"{', '.join(known)}")
                return None
            value = {}
        if not isinstance(value, Mapping):
            self.problems.append(f"{self.where(key)}: expected a mapping of {', '.join(known)}, "
                                 f"got {_type_name(value)}")
            return None
        return _Section(value, self.where(key), known, self.problems)


def _exactly(expected: str) -> Callable[[str], bool]:
    return lambda value: value == expected


def _parse(doc: Mapping[str, Any], problems: list[str]) -> TargetProfile | None:
    top = _Section(doc, "", _TOP, problems)
    top.string("apiVersion", API_VERSION, check=_exactly(API_VERSION), expected=repr(API_VERSION))
    top.string("kind", KIND, check=_exactly(KIND), expected=repr(KIND))
    name = top.string("name")
    flavor = top.choice("flavor", GangFlavor)
    namespace = top.string("namespace", check=valid_dns_label,
                           expected="a namespace name (DNS-1123 label: a-z, 0-9, '-', at most 63)")
    queue = top.string("queue")
    canary_image = top.string("canary_image", expected="a container image reference")
    gpu_resource = top.string("gpu_resource", "nvidia.com/gpu", check=valid_label_key,
                              expected="a resource name such as nvidia.com/gpu")

    fault_fields = _fault_fields(top, doc, problems)

    safety_section = top.section("safety", _SAFETY, required=False)
    safety_values: dict[str, Any] = {}
    if safety_section is not None:
        allow = safety_section.string("allow_label", "firedrill.dev/chaos=allowed", expected="key=value")
        if isinstance(allow, str):
            problems.extend(_allow_label_problems(allow))
        safety_values = {
            "allow_label": allow,
            "max_nodes": safety_section.integer("max_nodes", 1, minimum=1),
            "max_gpu_share": safety_section.number("max_gpu_share", 0.25, above=0, at_most=1),
            "refuse_control_plane": safety_section.boolean("refuse_control_plane", True),
            "require_healthy": safety_section.boolean("require_healthy", True),
            "abort_when": _abort_when(safety_section, problems),
        }
    urls: dict[str, Any] = {}
    scrape_interval: float | None = None
    for key in ("leakReport", "prometheus"):
        sub = top.section(key, ("url", "scrape_interval") if key == "prometheus" else ("url",), required=False)
        if sub is not None and key in doc:
            value = sub.string("url", expected="an absolute http(s) URL")
            if isinstance(value, str):
                problems.extend(_url_problems(f"{key}.url", value))
                urls[key] = value
            if key == "prometheus" and "scrape_interval" in (doc.get(key) or {}):
                interval = sub.number("scrape_interval", 1.0, above=0, at_most=600)
                if isinstance(interval, (int, float)):
                    scrape_interval = float(interval)
    canary = _canary(top.section("canary", _CANARY, required=False), problems)
    inference = _inference(top.section("inference", _INFERENCE, required=False), problems)
    governance = _governance(top.section("governance", _GOVERNANCE, required=False), problems)
    fabric = _fabric(top.section("fabric", _FABRIC, required=False), problems)
    if problems:
        return None
    try:
        leak = LeakReportSettings(urls.get("leakReport"), urls.get("prometheus"), scrape_interval)
    except ProfileError as err:
        problems.extend(err.problems)
        return None
    fault = _fault_settings(fault_fields, problems)
    if fault is None:
        return None
    return TargetProfile(name=name, flavor=flavor, namespace=namespace, queue=queue, canary_image=canary_image,
                         gpu_resource=gpu_resource, fault=fault, safety=SafetySettings(**safety_values),
                         leak_report=leak, canary=canary, inference=inference or InferenceSettings(),
                         governance=governance or GovernanceSettings(), fabric=fabric or FabricSettings())


def _fault_fields(top: _Section, doc: Mapping[str, Any], problems: list[str]) -> tuple[Any, ...]:
    """``fault``'s fields, each checked (problems recorded): method, command and restore templates, timeout, xid,
    stand-ins, expiry; a field that is broken is ``_Missing``."""
    fault_section = top.section("fault", _FAULT, required=True)
    if fault_section is None:
        return (_Missing, _Missing, _Missing, _Missing, None, (), None, None, None)
    method = fault_section.choice("method", FaultMethod)
    template = fault_section.optional_string("command_template", "a shell command with {node}")
    restore = fault_section.optional_string("restore_template", "a shell command with {node}")
    timeout = fault_section.number("timeout_seconds", 60.0, above=0)
    expire = fault_section.number("expire_seconds", None, above=0) if "expire_seconds" in (
        doc.get("fault") or {}) else None
    stand_ins = _stand_ins(fault_section, problems)
    if isinstance(method, FaultMethod) and template is not _Missing:
        uses_command = FaultMethod.COMMAND in (method, *(real for _, real in stand_ins))
        problems.extend(_template_problems(FaultMethod.COMMAND if uses_command else method, template))
    xid = _xid(fault_section, problems)
    hang = _site_command(fault_section, HangSettings, problems)
    stall = _site_command(fault_section, StallSettings, problems)
    return (method, template, restore, timeout, xid, stand_ins, expire, hang, stall)


def _fault_settings(fields: tuple[Any, ...], problems: list[str]) -> FaultSettings | None:
    try:
        return FaultSettings(*fields)
    except ProfileError as err:
        problems.extend(err.problems)
        return None


_SLURM_TOP = ("apiVersion", "kind", "name", "platform", "slurm", "fault", "safety")
_SLURM = ("conf", "partition", "account", "qos", "gres", "canary_command", "shared_dir", "sbatch_args",
          "device_dir", "governance", "rest")
_SLURM_REST = ("url", "user", "token_env", "api")
_SLURM_GOVERNANCE = ("tenant_command", "tenant_qos", "tenant_account", "other_partition", "restricted_qos",
                     "controller_log", "record_wait_seconds")
_SLURM_OWN_ARGS = frozenset({"--partition", "--account", "--qos", "--job-name", "--nodes", "--ntasks-per-node",
                              "--gres", "--output"})
"""sbatch options the drills or the profile's own fields set: refused in ``slurm.sbatch_args``."""
_SLURM_SAFETY = ("allow_feature", "max_nodes", "max_gpu_share", "require_healthy")
_KUBERNETES_ONLY = tuple(k for k in _TOP if k not in _SLURM_TOP)
_COMMAND_METHODS = (FaultMethod.COMMAND,)
"""What pulls a Slurm or Ray node: the site's own command per node (a BMC, a cloud CLI, ``ssh`` with ``systemctl``)."""


def _command_fault_fields(top: _Section, doc: Mapping[str, Any], problems: list[str], platform: str,
                          page: str) -> tuple[Any, ...]:
    """The ``fault`` section of a cluster whose nodes only the site's command pulls (Slurm, Ray): every method and
    stand-in must be ``command``; Xid, hang and storage-stall injections are refused, naming ``page``."""
    fault_fields = _fault_fields(top, doc, problems)
    method, _, _, _, xid, stand_ins, _, hang, stall = fault_fields
    for what, used in (("fault.method", method), *((f"fault.stand_ins.{ref.value}", real)
                                                    for ref, real in stand_ins)):
        if isinstance(used, FaultMethod) and used not in _COMMAND_METHODS:
            problems.append(f"{what}: {used.value} acts on Kubernetes; a {platform} node is pulled with command (a "
                            "command_template with {node}, e.g. a BMC power-off, with its restore_template)")
    if xid is not None:
        problems.append(f"fault.xid: the {platform} target injects no Xid yet ({page}); remove it")
    for part, given in (("hang", hang), ("storage_stall", stall)):
        if given is not None:
            problems.append(f"fault.{part}: the {platform} target has no hang drill yet ({page}); remove it")
    return fault_fields


def _parse_slurm(doc: Mapping[str, Any], problems: list[str]) -> TargetProfile | None:
    """A profile with ``platform: slurm``: the cluster's ``slurm`` settings, its fault commands and its safety."""
    for key in _KUBERNETES_ONLY:
        if key in doc:
            problems.append(f"{key}: a Kubernetes field; a Slurm profile (platform: slurm) names its partition, "
                            f"account and QOS under slurm: (fields: {', '.join(_SLURM)}); remove {key}")
    top = _Section({k: v for k, v in doc.items() if k not in _KUBERNETES_ONLY}, "", _SLURM_TOP, problems)
    top.string("apiVersion", API_VERSION, check=_exactly(API_VERSION), expected=repr(API_VERSION))
    top.string("kind", KIND, check=_exactly(KIND), expected=repr(KIND))
    name = top.string("name")
    section = top.section("slurm", _SLURM, required=True)
    slurm: dict[str, Any] = {}
    if section is not None:
        slurm["partition"] = section.string("partition", expected="the partition the drill jobs run in")
        for key in ("conf", "account", "qos", "shared_dir"):
            slurm[key] = section.optional_string(key, f"slurm.{key} as a string")
        slurm["gres"] = section.string("gres", "gpu", expected="the GRES name of the GPUs, e.g. gpu")
        slurm["device_dir"] = section.string("device_dir", "/dev", expected="the nodes' GPU device directory, "
                                             "e.g. /dev")
        command = section.data.get("canary_command", list(CANARY_COMMAND))
        if not isinstance(command, list) or not command or not all(isinstance(c, str) and c.strip()
                                                                    for c in command):
            problems.append(f"{section.where('canary_command')}: expected a non-empty list of strings, e.g. "
                            "[python3, -m, drills.canary]")
        else:
            slurm["canary_command"] = tuple(command)
        args = section.data.get("sbatch_args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) and a.startswith("--") for a in args):
            problems.append(f"{section.where('sbatch_args')}: expected a list of sbatch long options, e.g. "
                            "[--requeue, --reservation=acceptance]")
        elif any(a.split("=")[0] in _SLURM_OWN_ARGS for a in args):
            own = ", ".join(a for a in args if a.split("=")[0] in _SLURM_OWN_ARGS)
            problems.append(f"{section.where('sbatch_args')}: {own} set by the drills or by slurm.partition, "
                            "account or qos; remove them")
        else:
            slurm["sbatch_args"] = tuple(args)
        for key in ("conf", "shared_dir", "device_dir"):
            if isinstance(slurm.get(key), str) and not slurm[key].startswith("/"):
                problems.append(f"slurm.{key}: {slurm[key]!r} is not an absolute path; every node and this machine "
                                "must read it at the same place")
        governance = _slurm_governance(section, problems)
        if governance is not None:
            slurm["governance"] = governance
        rest = _slurm_rest(section, problems)
        if rest is not None:
            slurm["rest"] = rest
    fault_fields = _command_fault_fields(top, doc, problems, "Slurm", "docs/SLURM.md")
    safety_section = top.section("safety", _SLURM_SAFETY, required=False)
    safety: dict[str, Any] = {}
    if safety_section is not None:
        slurm["allow_feature"] = safety_section.string("allow_feature", SLURM_FEATURE,
                                                       expected="a node feature (slurm.conf Features=)")
        safety = {"max_nodes": safety_section.integer("max_nodes", 1, minimum=1),
                  "max_gpu_share": safety_section.number("max_gpu_share", 0.25, above=0, at_most=1),
                  "require_healthy": safety_section.boolean("require_healthy", True)}
    if problems or any(v is _Missing for v in (name, *slurm.values(), *safety.values())):
        return None
    fault = _fault_settings(fault_fields, problems)
    if fault is None:
        return None
    fault = replace(fault, stand_in_choices=_COMMAND_METHODS)
    return TargetProfile(name=name, flavor=GangFlavor.NATIVE, namespace="firedrill", queue="", canary_image="",
                         fault=fault, safety=SafetySettings(**safety), platform=Platform.SLURM,
                         slurm=SlurmSettings(**slurm))


_RAY_TOP = ("apiVersion", "kind", "name", "platform", "ray", "fault", "safety")
_RAY = ("dashboard", "canary_command", "storage_path", "max_failures", "gang_form", "cpus_per_worker", "env_vars")
_RAY_SAFETY = ("allow_resource", "max_nodes", "max_gpu_share", "require_healthy")


def _parse_ray(doc: Mapping[str, Any], problems: list[str]) -> TargetProfile | None:
    """A profile with ``platform: ray``: the cluster's ``ray`` settings, its fault commands and its safety."""
    kubernetes_only = tuple(k for k in _TOP if k not in _RAY_TOP)
    for key in kubernetes_only:
        if key in doc:
            problems.append(f"{key}: a Kubernetes field; a Ray profile (platform: ray) names its dashboard and the "
                            f"canary's settings under ray: (fields: {', '.join(_RAY)}); remove {key}")
    top = _Section({k: v for k, v in doc.items() if k not in kubernetes_only}, "", _RAY_TOP, problems)
    top.string("apiVersion", API_VERSION, check=_exactly(API_VERSION), expected=repr(API_VERSION))
    top.string("kind", KIND, check=_exactly(KIND), expected=repr(KIND))
    name = top.string("name")
    section = top.section("ray", _RAY, required=True)
    ray: dict[str, Any] = {}
    if section is not None:
        ray["dashboard"] = section.string(
            "dashboard", check=lambda v: urlparse(v).scheme in ("http", "https") and bool(urlparse(v).netloc),
            expected="the head's dashboard URL, e.g. http://10.0.0.1:8265")
        ray["storage_path"] = section.optional_string("storage_path", "ray.storage_path as a string")
        if isinstance(ray["storage_path"], str) and not ray["storage_path"].startswith("/"):
            problems.append(f"ray.storage_path: {ray['storage_path']!r} is not an absolute path; every node and "
                            "this machine must read it at the same place")
        ray["max_failures"] = section.integer("max_failures", 2, minimum=0)
        ray["gang_form"] = section.choice("gang_form", GangForm, GangForm.PLACEMENT_GROUP)
        cpus = section._get("cpus_per_worker", 1.0, (int, float), "a number of CPUs >= 0")
        if isinstance(cpus, (int, float)) and cpus < 0:
            problems.append(f"ray.cpus_per_worker: {cpus} is below 0")
        ray["cpus_per_worker"] = float(cpus) if isinstance(cpus, (int, float)) and cpus >= 0 else _Missing
        command = section.data.get("canary_command", list(RAY_CANARY_COMMAND))
        if not isinstance(command, list) or not command or not all(isinstance(c, str) and c.strip()
                                                                    for c in command):
            problems.append(f"{section.where('canary_command')}: expected a non-empty list of strings, e.g. "
                            "[python3, -m, drills.canary.raytrain]")
            ray["canary_command"] = _Missing
        else:
            ray["canary_command"] = tuple(command)
        env = section.data.get("env_vars", {})
        if not isinstance(env, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            problems.append(f"{section.where('env_vars')}: expected a mapping of names to quoted strings, e.g. "
                            "{NCCL_DEBUG: \"INFO\"}")
            ray["env_vars"] = _Missing
        else:
            ray["env_vars"] = MappingProxyType(dict(env))
    fault_fields = _command_fault_fields(top, doc, problems, "Ray", "docs/RAY.md")
    safety_section = top.section("safety", _RAY_SAFETY, required=False)
    safety: dict[str, Any] = {}
    if safety_section is not None:
        ray["allow_resource"] = safety_section.string("allow_resource", RAY_RESOURCE,
                                                      expected="a custom resource name (ray start --resources)")
        safety = {"max_nodes": safety_section.integer("max_nodes", 1, minimum=1),
                  "max_gpu_share": safety_section.number("max_gpu_share", 0.25, above=0, at_most=1),
                  "require_healthy": safety_section.boolean("require_healthy", True)}
    if problems or any(v is _Missing for v in (name, *ray.values(), *safety.values())):
        return None
    fault = _fault_settings(fault_fields, problems)
    if fault is None:
        return None
    fault = replace(fault, stand_in_choices=_COMMAND_METHODS)
    return TargetProfile(name=name, flavor=GangFlavor.NATIVE, namespace="firedrill", queue="", canary_image="",
                         fault=fault, safety=SafetySettings(**safety), platform=Platform.RAY, ray=RaySettings(**ray))


def _slurm_rest(slurm: _Section, problems: list[str]) -> SlurmRestSettings | None:
    """``slurm.rest``: slurmrestd's URL, the token's user and where the token is, the API version."""
    section = slurm.section("rest", _SLURM_REST, required=False)
    if section is None or "rest" not in slurm.data:
        return None
    url = section.string("url", check=lambda u: u.startswith(("http://", "https://")) and len(u.split("//", 1)[1]) > 0,
                         expected="slurmrestd's http(s) URL, e.g. http://slurm-head:6820")
    user = section.string("user", check=lambda u: bool(u.strip()) and u != "root",
                          expected="an ordinary user for the token (slurmrestd refuses tokens of root)")
    token_env = section.string("token_env", SLURM_REST_TOKEN_ENV,
                               check=lambda e: re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", e) is not None,
                               expected="the name of the environment variable holding the token")
    api = section.string("api", SLURM_REST_API, check=lambda a: SLURM_REST_API_PATTERN.match(a) is not None,
                         expected=f"an openapi plugin version such as {SLURM_REST_API}")
    if any(v is _Missing for v in (url, user, token_env, api)):
        return None  # each problem is on record
    return SlurmRestSettings(url=url.rstrip("/"), user=user, token_env=token_env, api=api)


def _slurm_governance(slurm: _Section, problems: list[str]) -> SlurmGovernance | None:
    """``slurm.governance``: the tenant's command prefix, its QOS and account, what it may not use, the log."""
    section = slurm.section("governance", _SLURM_GOVERNANCE, required=False)
    if section is None:
        return None
    fields: dict[str, Any] = {}
    command = section.data.get("tenant_command", [])
    if not isinstance(command, list) or not all(isinstance(c, str) and c.strip() for c in command):
        problems.append(f"{section.where('tenant_command')}: expected a list of strings, the command that runs what "
                        "follows as the tenant, e.g. [sudo, -n, -u, alice, --]")
    else:
        fields["tenant_command"] = tuple(command)
    for key in ("tenant_qos", "tenant_account", "other_partition", "restricted_qos", "controller_log"):
        fields[key] = section.optional_string(key, f"slurm.governance.{key} as a string")
    fields["record_wait_seconds"] = section.number("record_wait_seconds", 10.0, above=0)
    if isinstance(fields["controller_log"], str) and not fields["controller_log"].startswith("/"):
        problems.append(f"slurm.governance.controller_log: {fields['controller_log']!r} is not an absolute path")
    if "tenant_command" not in fields or any(v is _Missing for v in fields.values()):
        return None  # each problem is on record
    return SlurmGovernance(**fields)


def _stand_ins(fault: _Section, problems: list[str]) -> tuple[tuple[FaultMethod, FaultMethod], ...]:
    """``fault.stand_ins``: a mapping of reference method -> real-cluster method, each name checked."""
    if fault.data.get("stand_ins") is None:
        return ()
    section = fault.section("stand_ins", tuple(m.value for m in REFERENCE_METHODS), required=False)
    if section is None:
        return ()
    pairs = []
    for ref in REFERENCE_METHODS:
        if ref.value in section.data:
            real = section.choice(ref.value, FaultMethod)
            if isinstance(real, FaultMethod):
                if real.reference_only:
                    problems.append(f"{section.where(ref.value)}: {real.value} acts on the reference platform too; "
                                    f"a stand-in is one of {', '.join(m.value for m in CLUSTER_METHODS)}")
                else:
                    pairs.append((ref, real))
    return tuple(pairs)


def _xid(fault: _Section, problems: list[str]) -> XidSettings | None:
    """``fault.xid``, checked (unknown fields, placeholders); None when absent or broken (problems recorded)."""
    if fault.data.get("xid") is None:
        return None
    section = fault.section("xid", _XID, required=False)
    if section is None:
        return None
    command = section.string("command_template", expected="a shell command with {node} and {xid}")
    restore = section.optional_string("restore_template", "a shell command with {node}")
    if not isinstance(command, str) or restore is _Missing:
        return None
    try:
        return XidSettings(command, restore)
    except ProfileError as err:
        problems.extend(err.problems)
        return None


S = TypeVar("S", bound=SiteCommand)


def _site_command(fault: _Section, kind: type[S], problems: list[str]) -> S | None:
    """``fault.<kind.SECTION>``, checked (unknown fields, placeholders); None when absent or broken (problems
    recorded)."""
    if fault.data.get(kind.SECTION) is None:
        return None
    section = fault.section(kind.SECTION, _XID, required=False)
    if section is None:
        return None
    expected = f"a shell command with {' or '.join('{' + a + '}' for a in kind.AIM)}"
    command = section.string("command_template", expected=expected)
    restore = section.optional_string("restore_template", expected)
    if not isinstance(command, str) or restore is _Missing:
        return None
    try:
        return kind(command, restore)
    except ProfileError as err:
        problems.extend(err.problems)
        return None


def _canary(section: _Section | None, problems: list[str]) -> CanarySettings:
    if section is None:
        return CanarySettings()
    command = section.data.get("command", list(CANARY_COMMAND))
    if not isinstance(command, list) or not command or not all(isinstance(c, str) and c.strip() for c in command):
        problems.append(f"{section.where('command')}: expected a non-empty list of strings, e.g. [firedrill-canary]")
        command = list(CANARY_COMMAND)
    volume = section.data.get("shared_volume")
    if volume is not None and (not isinstance(volume, Mapping) or len(volume) != 1):
        problems.append(f"{section.where('shared_volume')}: expected one core/v1 volume source, e.g. "
                        "{persistentVolumeClaim: {claimName: firedrill-shared}}")
        volume = None
    return CanarySettings(tuple(command), MappingProxyType(dict(volume)) if volume is not None else None)


def _inference(section: _Section | None, problems: list[str]) -> InferenceSettings | None:
    if section is None:
        return InferenceSettings()
    command = section.data.get("command", list(INFERENCE_COMMAND))
    if not isinstance(command, list) or not command or not all(isinstance(c, str) and c.strip() for c in command):
        problems.append(f"{section.where('command')}: expected a non-empty list of strings, e.g. "
                        "[firedrill-inference]")
        return None
    image = section.data.get("image")
    if image is not None and (not isinstance(image, str) or not image.strip()):
        problems.append(f"{section.where('image')}: expected a container image reference")
        return None
    url = section.data.get("url")
    if url is not None:
        if not isinstance(url, str):
            problems.append(f"{section.where('url')}: expected an absolute http(s) URL")
            return None
        found = _url_problems(section.where("url"), url)
        if found:
            problems.extend(found)
            return None
    return InferenceSettings(tuple(command), image, url)


def _governance(section: _Section | None, problems: list[str]) -> GovernanceSettings | None:
    """``governance``, checked; None when broken (problems recorded)."""
    if section is None:
        return GovernanceSettings()
    names = "a namespace name (DNS-1123 label: a-z, 0-9, '-', at most 63)"
    values: dict[str, Any] = {
        "tenant_kubeconfig": section.string("tenant_kubeconfig", None, expected="the path of a kubeconfig file"),
        "tenant_context": section.string("tenant_context", None, expected="a context name in that kubeconfig"),
        "tenant_namespace": section.string("tenant_namespace", None, check=valid_dns_label, expected=names),
        "other_namespace": section.string("other_namespace", None, check=valid_dns_label, expected=names),
        "restricted_priority_class": section.string("restricted_priority_class", None,
                                                    expected="the name of a PriorityClass"),
        "node_kubeconfig": section.string("node_kubeconfig", None, expected="the path of a kubeconfig file"),
        "node_context": section.string("node_context", None, expected="a context name in that kubeconfig"),
        "node_name": section.string("node_name", None, expected="a node name"),
        "audit_log": section.string("audit_log", None, expected="the path of the API server's audit log"),
        "record_wait_seconds": section.number("record_wait_seconds", 10.0, above=0, at_most=600),
    }
    if any(v is _Missing for v in values.values()):
        return None
    try:
        return GovernanceSettings(**values)
    except ProfileError as err:
        problems.extend(err.problems)
        return None


def _fabric(section: _Section | None, problems: list[str]) -> FabricSettings | None:
    """``fabric``, checked; None when broken (problems recorded)."""
    if section is None:
        return FabricSettings()
    gpus = section.data.get("gpus_per_node")
    if gpus is not None:
        gpus = section.integer("gpus_per_node", 1, minimum=1)
    test: BandwidthTest | None = None
    if section.data.get("bandwidth_test") is not None:
        sub = section.section("bandwidth_test", _BANDWIDTH_TEST, required=False)
        if sub is None:
            return None
        image = sub.string("image", expected="a container image reference")
        command = sub.data.get("command")
        if not isinstance(command, list) or not command or not all(isinstance(c, str) and c.strip() for c in command):
            problems.append(f"{sub.where('command')}: expected a non-empty list of strings, e.g. [all_reduce_perf, "
                            '-b, 1G, -e, 4G, -f, "2", -g, "8"]')
            return None
        timeout = sub.number("timeout_seconds", 600.0, above=0)
        if image is _Missing or timeout is _Missing:
            return None
        test = BandwidthTest(image, tuple(command), float(timeout))
    if gpus is _Missing:
        return None
    return FabricSettings(gpus, test)


def load_profile(path: str | Path) -> TargetProfile:
    """Read and check a target profile; raise :class:`ProfileError` naming the file, each field and the fix."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ProfileError(f"target profile {path} does not exist; pass the path of a YAML profile "
                           f"(see {DOCS} and examples/profile-*.yaml)") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ProfileError(f"cannot read target profile {path}: {err}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err)
        raise ProfileError(f"target profile {path} is not valid YAML{where}: {problem}") from None
    if not isinstance(doc, Mapping):
        raise ProfileError(f"target profile {path} must be a YAML mapping of fields (name, flavor, namespace, "
                           f"...), got {_type_name(doc)}; see {DOCS}")
    raw = doc.get("platform", Platform.KUBERNETES.value)
    try:
        platform = Platform(str(raw).strip().lower())
    except ValueError:
        raise ProfileError(f"target profile {path}: platform {raw!r} is not one Firedrill drills; write one of "
                           f"{' | '.join(p.value for p in Platform)} (or leave it out: kubernetes)") from None
    problems: list[str] = []
    if platform is Platform.SLURM:
        profile = _parse_slurm(doc, problems)
    elif platform is Platform.RAY:
        profile = _parse_ray(doc, problems)
    else:
        profile = _parse(dict((k, v) for k, v in doc.items() if k != "platform"), problems)
    if profile is None:
        listing = "\n".join(f"  - {problem}" for problem in problems)
        raise ProfileError(f"target profile {path} has {len(problems)} problem(s):\n{listing}\n"
                           f"Every field is described in {DOCS}.", problems)
    return profile
