"""The governance drill: cross each control chain on purpose with a tenant's own credentials.

A policy document is not a control in effect.  Each step makes one or two deliberate attempts, as the
tenant (or a node) would, through the official kubernetes client with that identity's own credentials:

- admission and quota: a pod, and a job, asking for more GPUs than the tenant namespace's ResourceQuota
  leaves; nothing of either may run (the pod is refused, the job's controller cannot create its pods); pods
  sent at once, each within what the quota leaves and together over it: what they hold at once stays within it;
- access: a read and a write in another tenant's namespace; a ``pods/binding`` (the scheduler's work); a node
  identity's write to another node's Lease;
- priority: a pod of a PriorityClass the tenant may not use; a pod of the tenant's that needs the GPUs a pod of
  a higher class holds (it must wait, never preempt it);
- change control: the tenant cordons a node, evicts another workload's pod, deletes a node (dry runs).

Every request carries a User-Agent unique to the attempt, and the audit log's byte offset is noted before
it, so the record it left is found without doubt.  The chain's judgement (:meth:`GovernanceDrill.judge`)
looks each refusal's record up, puts each record's digest into the evidence (the scenario's details, a
measurement's note and a timeline entry) and FAILs naming the chain for everything that got through or left
no record.  Whatever the drill itself made (pods, a job, a PriorityClass, a label on a Lease, a cordon that
got through) is undone by its rollback, as the cluster admin.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import urllib3
from kubernetes.client.rest import ApiException
from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_fixed

from drills.kinds.governance.audit import (
    REFUSED, REFUSED_BY_ADMISSION, SUCCEEDED, AuditLog, AuditLogError, RecordQuery, find,
)
from drills.kinds.governance.chains import (
    Answer, Attempt, Chain, Gate, classify, judge_chain, refused_by_limited_scope,
)
from drills.kinds.governance.textlog import TextLog
from drills.kinds.governance.identities import ConnectError, Identity, Missing, Resolved, connect, resolve
from drills.kube.driver import NODE, POD, RESOURCES, KubeDriver, KubeError, Resource
from drills.kube.flavors import RUN_LABEL, GangFlavor, GangSpec, indexed_job, volcano_job
from drills.records.verdict import Measurement, Threshold
from drills.scenario.drill import Drill, register
from drills.target.access import CLUSTER, Permission, grant
from drills.target.profile import TargetProfile
from drills.target.safety import eligible_nodes
from drills.workloads.canaryjob import gpu_holder

log = logging.getLogger(__name__)
Obj = dict[str, Any]

RESOURCE_QUOTA = Resource("v1", "ResourceQuota", "resourcequotas", True)
NAMESPACE = RESOURCES[("v1", "Namespace")]
LEASE = RESOURCES[("coordination.k8s.io/v1", "Lease")]
PRIORITY_CLASS = RESOURCES[("scheduling.k8s.io/v1", "PriorityClass")]
VCJOB = RESOURCES[("batch.volcano.sh/v1alpha1", "Job")]
BATCH_JOB = RESOURCES[("batch/v1", "Job")]
NODE_LEASE_NAMESPACE = "kube-node-lease"
HOSTNAME_LABEL = "kubernetes.io/hostname"
HOLD_LABEL = "firedrill.dev/governance-hold"
"""A node selector no node carries: the tenant's pod for the binding attempt is never scheduled by anyone else."""
HIGH_PRIORITY = 100_000
"""The value of the PriorityClass the drill gives the pod the tenant's pod must not preempt."""
START_TIMEOUT = 30.0
QUOTA_BACK_S = 15.0
"""Seconds the rollback waits for the quota to count the burst's deleted pods gone."""
DRY_RUN = {"dryRun": "All"}
"""Disruptive attempts are dry runs: authorization comes first, so the gate answers as for the real thing, and a
hole changes nothing on a cluster that honours dry runs."""
MERGE_PATCH = "application/merge-patch+json"
AGENT = "firedrill-governance"


def gpu_quota(quotas: list[Obj], gpu_resource: str) -> tuple[str, str, int, int] | None:
    """(quota name, key, hard, used) of the tightest unscoped ResourceQuota on ``gpu_resource`` (a scoped quota
    limits only pods in its scopes, so it does not hold an ordinary pod); None when there is none."""
    keys = (f"requests.{gpu_resource}", gpu_resource, f"limits.{gpu_resource}")
    best: tuple[str, str, int, int] | None = None
    for quota in quotas:
        spec = quota.get("spec") or {}
        if spec.get("scopes") or spec.get("scopeSelector"):
            continue
        hard = spec.get("hard") or {}
        used = (quota.get("status") or {}).get("used") or {}
        for key in keys:
            if key in hard:
                h, u = _count(hard[key]), _count(used.get(key, "0"))
                if best is None or h - u < best[2] - best[3]:
                    best = (quota["metadata"]["name"], key, h, u)
    return best


def _count(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def pod_gpus(pod: Obj, gpu_resource: str) -> int:
    total = 0
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        total += _count((res.get("limits") or {}).get(gpu_resource) or (res.get("requests") or {}).get(gpu_resource)
                        or 0)
    return total


def free_gpus(node: Obj, pods: list[Obj], gpu_resource: str) -> int:
    """The node's allocatable GPUs less those of the non-terminal pods bound to it."""
    name = node["metadata"]["name"]
    alloc = _count(((node.get("status") or {}).get("allocatable") or {}).get(gpu_resource, 0))
    used = sum(pod_gpus(p, gpu_resource) for p in pods if (p.get("spec") or {}).get("nodeName") == name
               and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))
    return alloc - used


def send(driver: KubeDriver, method: str, path: str, body: Any = None, query: dict[str, str] | None = None,
         content_type: str = "application/json", timeout: float = 15.0) -> tuple[Answer, Obj]:
    """One request as the driver's identity, never retried (one attempt, one record): the answer's code, and the
    object answered (a Status on refusal)."""
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = content_type
    m, url, hdrs, data, post = driver.api.param_serialize(method, path, query_params=list((query or {}).items()),
                                                          header_params=headers, body=body,
                                                          auth_settings=["BearerToken"])
    try:
        resp = driver.api.rest_client.request(m, url, headers=hdrs, body=data, post_params=post,
                                              _request_timeout=timeout)
    except (urllib3.exceptions.HTTPError, OSError, ApiException) as exc:
        return Answer(0, message=f"cannot reach the cluster at {driver.host}: {type(exc).__name__}"), {}
    raw = resp.read()
    try:
        obj = json.loads(raw) if raw else {}
    except ValueError:
        obj = {}
    obj = obj if isinstance(obj, dict) else {}
    if resp.status >= 400:
        return Answer(resp.status, str(obj.get("reason") or ""), str(obj.get("message") or "")), obj
    return Answer(resp.status, str(getattr(resp, "reason", "") or "")), obj


def _pod(name: str, namespace: str, image: str, run_id: str, *, gpus: int = 0, gpu_resource: str = "nvidia.com/gpu",
         node_selector: dict[str, str] | None = None, priority_class: str | None = None,
         container: Obj | None = None) -> Obj:
    if container is None:
        container = {"name": "main", "image": image, "command": ["sleep", "3600"]}
        if gpus:
            container["resources"] = {"limits": {gpu_resource: str(gpus)}}
    spec: Obj = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0, "containers": [container]}
    if node_selector:
        spec["nodeSelector"] = node_selector
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {RUN_LABEL: run_id}}, "spec": spec}


@dataclass
class Pending:
    """An attempt whose gate is judged by watching (a job the quota must hold, a preemption that must not come)."""

    attempt: Attempt
    names: dict[str, str] = field(default_factory=dict)
    held: dict[str, str] = field(default_factory=dict)
    """The pods that must keep running (a preemption watched), by name: their uids."""


@dataclass
class Burst:
    """Pods the tenant sent at once, each within the quota and together over it: the ones admitted are watched
    (what they may hold together is what the quota left)."""

    namespace: str
    gpus_each: int
    leaves: int
    """GPUs the quota left before the burst (hard less used)."""
    action: str
    admitted: list[str] = field(default_factory=list)
    since: int = 0


def burst_size(leaves: int) -> tuple[int, int]:
    """(pods, GPUs each) for a burst in which every pod fits the ``leaves`` GPUs a quota leaves and all of them
    together do not: half of what is left each (at least 1), and one pod more than fit."""
    each = max(1, leaves // 2)
    return leaves // each + 1, each


def over_quota_pods(gpus_bound: int, leaves: int, each: int) -> int:
    """How many of a burst's pods, of ``each`` GPUs, hold GPUs beyond the ``leaves`` its quota left."""
    over = max(0, gpus_bound - leaves)
    return -(-over // each) if each else 0


CLASS_UNKNOWN = "no PriorityClass with name"
"""kube-apiserver's Priority admission looks a class up in an informer cache that may lag its create by
milliseconds: a pod of a class created just before is refused 403 with this message until the cache has it."""


def create_once_class_known(driver: KubeDriver, body: dict[str, Any], within: float = 10.0) -> None:
    """Create a pod of a PriorityClass the drill has just made, again while the API server's admission does not
    know the class yet (that refusal only, for ``within`` seconds); any other answer is the answer."""
    for attempt in Retrying(stop=stop_after_delay(within), wait=wait_fixed(0.2), reraise=True,
                            retry=retry_if_exception(lambda e: isinstance(e, KubeError) and e.code == 403
                                                     and CLASS_UNKNOWN in str(e))):
        with attempt:
            driver.create(body)


@register
@dataclass
class GovernanceDrill(Drill):
    kind: ClassVar[str] = "governance"
    ray_absent: ClassVar[str] = ("Ray has no tenants, quotas or admission of its own: every job of a cluster "
                                 "shares its resources (a site puts its quotas in front of Ray)")

    @classmethod
    def unsupported(cls, profile: TargetProfile, *, reference: bool) -> str | None:
        gov = profile.governance
        if reference or ((gov.tenant_kubeconfig or gov.tenant_context) and gov.tenant_namespace):
            return None
        return ("the governance drills cross each control chain as a tenant: set governance.tenant_kubeconfig (or "
                "tenant_context) and governance.tenant_namespace in the target profile (docs/GOVERNANCE.md)")

    @classmethod
    def unsupported_on_slurm(cls, profile: TargetProfile) -> str | None:
        gov = profile.slurm.governance if profile.slurm is not None else None
        if gov is not None and gov.tenant_command:
            return None  # its Slurm side: drills.kinds.governance.slurm
        return ("the governance drills cross each control chain as a tenant, its own Unix user: set "
                "slurm.governance.tenant_command (with controller_log, tenant_qos, other_partition and restricted_qos) "
                "in the target profile (docs/SLURM.md)")

    @classmethod
    def permissions(cls, profile: TargetProfile) -> list[Permission]:
        """The harness's own identity: it sets up and undoes each chain's attempt; the tenant's and the node's
        credentials (``governance``) are the ones whose refusals are judged (docs/GOVERNANCE.md)."""
        ns, gov, why = profile.namespace, profile.governance, "governance"
        out = grant(ns, "", "pods", ("get", "create", "delete"), f"{why}: the victim and the higher class's pod")
        out += grant(CLUSTER, "", "pods", ("list",), f"{why}: free GPUs for the preemption chain")
        out += grant(CLUSTER, "", "nodes", ("get", "list", "patch"), f"{why}: choosing nodes, undoing a cordon "
                                                                      "that got through")
        out += grant(CLUSTER, "scheduling.k8s.io", "priorityclasses", ("get", "create", "delete"),
                     f"{why}: the priority chains")
        out += grant("kube-node-lease", "coordination.k8s.io", "leases", ("list", "patch"),
                     f"{why}: the node-lease chain (and undoing a patch that got through)")
        if gov.tenant_namespace:
            tns = gov.tenant_namespace
            out += grant(tns, "", "namespaces", ("get",), f"{why}: the tenant's namespace exists")
            out += grant(tns, "", "resourcequotas", ("list",), f"{why}: the tenant's GPU quota")
            out += grant(tns, "", "pods", ("get", "list", "delete"), f"{why}: the tenant's attempts")
            group = "batch.volcano.sh" if profile.flavor is GangFlavor.VOLCANO else "batch"
            out += grant(tns, group, "jobs", ("delete",), f"{why}: the tenant's over-quota job")
        if gov.other_namespace:
            ons = gov.other_namespace
            out += grant(ons, "", "namespaces", ("get",), f"{why}: the neighbour's namespace exists")
            out += grant(ons, "", "pods", ("delete",), f"{why}: undoing a cross-namespace create that got through")
        return out

    attempts: list[Attempt] = field(default_factory=list)
    resolved: Resolved | None = None
    tenant: KubeDriver | None = None
    tenant_problem: str = ""
    tenant_user: str | None = None
    node: KubeDriver | None = None
    audit: AuditLog | TextLog | None = None
    """Where refusals are recorded: the API server's audit log (slurmctld's log on Slurm)."""
    audit_problem: str = ""
    pending_job: Pending | None = None
    pending_burst: Burst | None = None
    pending_preemption: Pending | None = None
    _said: set[str] = field(default_factory=set)
    _undo: list[tuple[str, Callable[[], Any]]] = field(default_factory=list)
    _seq: int = 0
    _left: int | None = None
    _made_node: bool = False

    # ------------------------------------------------------------------ setup
    def prepare(self) -> None:
        """Resolve the identities and the audit log, and check the tenant's credentials with a read of its own
        namespace.  Whatever is missing is said once, as INCONCLUSIVE naming the profile field; nothing raises."""
        if self.resolved is not None:
            return
        self.result.drill = "governance"
        embedded = self.target.embedded
        self.resolved = r = resolve(self.target.profile.governance,
                                    Path(embedded.data_dir) if embedded is not None and embedded.data_dir else None)
        if isinstance(r.audit_log, Missing):
            self.audit_problem = r.audit_log.message()
        else:
            self.audit = AuditLog(r.audit_log)
            try:
                self.audit.end()
            except AuditLogError as exc:
                self.audit, self.audit_problem = None, f"{exc}; set governance.audit_log to the API server's " \
                                                       "--audit-log-path as this machine reads it"
        if self.audit_problem:
            self._say(f"governance: {self.audit_problem}")
        self.result.details["governance"] = {"audit_log": self._log_name(), "attempts": []}
        for value in (r.tenant_namespace, r.other_namespace):
            if isinstance(value, str) and self.target.driver.find(NAMESPACE, value) is None:
                key = "tenant_namespace" if value == r.tenant_namespace else "other_namespace"
                self._say(f"governance: namespace {value} (governance.{key}) does not exist on the cluster; name "
                          "an existing one")
        if isinstance(r.tenant, Missing):
            self.tenant_problem = r.tenant.message()
            return
        self.tenant, self.tenant_problem = self._connect(r.tenant)
        if self.tenant is None:
            return
        self.tenant_user = self._whoami(self.tenant) or r.tenant.user
        ns = r.tenant_namespace if isinstance(r.tenant_namespace, str) else None
        if ns is not None:
            self.tenant.api.user_agent = f"{AGENT}/{self.run_id}-check"
            answer, _ = send(self.tenant, "GET", POD.path(ns), query={"limit": "1"})
            if answer.code == 401:
                self.tenant_problem = (f"the API did not accept the tenant's credentials ({answer.describe()}); check "
                                       f"{r.tenant.field}")
                self.tenant = None
            elif answer.code >= 400 or answer.code == 0:
                self.tenant_problem = (f"the tenant cannot list pods in its own namespace {ns} ({answer.describe()});"
                                       " is governance.tenant_namespace its namespace?")
                self.tenant = None

    def _connect(self, identity: Identity) -> tuple[KubeDriver | None, str]:
        try:
            return connect(identity, self.target.timeline), ""
        except ConnectError as exc:
            return None, str(exc)

    def _whoami(self, driver: KubeDriver) -> str | None:
        """The username the API server knows ``driver``'s identity by (SelfSubjectReview, Kubernetes 1.28+);
        None when the server does not say."""
        driver.api.user_agent = f"{AGENT}/{self.run_id}-whoami"
        answer, obj = send(driver, "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                           {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
        user = ((obj.get("status") or {}).get("userInfo") or {}).get("username") if answer.code < 300 else None
        return user if isinstance(user, str) and user else None

    def _say(self, message: str) -> None:
        if message not in self._said:
            self._said.add(message)
            self.result.inconclusive(message)

    def _log_name(self) -> str:
        """The audit log as the evidence names it (no path of this machine)."""
        if self.audit is None:
            return "none"
        if self.target.profile.governance.audit_log is None and self.target.embedded is not None:
            return "the embedded platform's audit.log"
        return f"{self.audit.path.name} (governance.audit_log)"

    def _need(self, *values: Any) -> str:
        """Why an attempt cannot be made ("" when everything it needs is there)."""
        for value in values:
            if isinstance(value, Missing):
                return value.message()
        return ""

    # --------------------------------------------------------------- attempts
    def _agent(self, driver: KubeDriver) -> str:
        self._seq += 1
        agent = f"{AGENT}/{self.run_id}-{self._seq}"
        driver.api.user_agent = agent
        return agent

    def _since(self) -> int:
        if self.audit is None:
            return 0
        try:
            return self.audit.end()
        except AuditLogError as exc:
            self.audit_problem = str(exc)
            return 0

    def _not_made(self, chain: Chain, actor: str, action: str, why: str) -> Attempt:
        attempt = Attempt(chain, actor, action, gate=Gate.NOT_MADE, why=why)
        self._add(attempt)
        return attempt

    def _add(self, attempt: Attempt) -> None:
        attempt.log_readable, attempt.log_problem = self.audit is not None, self.audit_problem
        self.attempts.append(attempt)
        self.target.timeline.action("governance attempt", chain=attempt.chain.value, actor=attempt.actor,
                                    action=attempt.action, gate=attempt.gate.value,
                                    answer=attempt.answer.describe() if attempt.answer else "")

    def _try(self, chain: Chain, actor: str, action: str, driver: KubeDriver, method: str, path: str,
             query_of: Callable[[str], RecordQuery], *, body: Any = None, params: dict[str, str] | None = None,
             content_type: str = "application/json", refusals: frozenset[int] = REFUSED,
             refused_if: Callable[[Answer], bool] | None = None,
             field_name: str = "governance.tenant_kubeconfig") -> tuple[Attempt, Obj]:
        """Make one request as ``driver``'s identity and note what the gate did (stopped: an answer in ``refusals``,
        or one ``refused_if`` recognises); the record it must have left is ``query_of(user_agent)``."""
        agent = self._agent(driver)
        since = self._since()
        answer, obj = send(driver, method, path, body, params, content_type)
        gate = Gate.REFUSED if refused_if is not None and refused_if(answer) else classify(answer, refusals)
        why = ""
        if answer.code == 401:
            why = f"the API did not accept {actor}'s credentials; check {field_name}"
        attempt = Attempt(chain, actor, action, query_of(agent), gate, answer, why, since)
        self._add(attempt)
        return attempt, obj

    def _tenant_ready(self, chain: Chain, action: str, *needs: Any) -> tuple[KubeDriver, str] | None:
        """The tenant's driver and namespace, or None after noting the attempt as not made (and why)."""
        self.prepare()
        r = self.resolved
        assert r is not None
        why = self.tenant_problem or self._need(r.tenant_namespace, *needs)
        if why or self.tenant is None or not isinstance(r.tenant_namespace, str):
            self._not_made(chain, self._tenant_actor(), action, why or "the tenant's credentials are not usable")
            return None
        return self.tenant, r.tenant_namespace

    def _tenant_actor(self) -> str:
        return f"the tenant {self.tenant_user}" if self.tenant_user else "the tenant"

    def _query(self, verbs: set[str], resource: str, codes: frozenset[int], agent: str, *, namespace: str = "",
               name: str = "", subresource: str = "", api_group: str = "", user: str | None = None) -> RecordQuery:
        return RecordQuery(frozenset(verbs), resource, codes, namespace=namespace, name=name,
                           subresource=subresource, api_group=api_group,
                           user=user if user is not None else self.tenant_user, user_agent=agent)

    def _undo_later(self, what: str, fn: Callable[[], Any]) -> None:
        self._undo.append((what, fn))

    def _delete_later(self, res: Resource, name: str, namespace: str | None) -> None:
        self._undo_later(f"delete {res.kind} {name}", lambda: self.target.driver.delete(res, name, namespace,
                                                                                         grace_seconds=0))

    # ------------------------------------------------------- admission and quota
    def _quota(self, namespace: str) -> tuple[str, str, int, int] | None:
        return gpu_quota(self.target.driver.list(RESOURCE_QUOTA, namespace), self.target.profile.gpu_resource)

    def _leaves(self, chain: Chain, action: str, namespace: str) -> int | None:
        """GPUs the namespace's quota leaves (hard less used, read once a scenario: what a first attempt let
        through must not shrink the next one's ask); None after noting a FAIL when no quota limits GPUs."""
        if self._left is not None:
            return self._left
        gpu = self.target.profile.gpu_resource
        quota = self._quota(namespace)
        if quota is None:
            attempt = Attempt(chain, self._tenant_actor(), action, gate=Gate.LET_THROUGH,
                              why=f"namespace {namespace} has no ResourceQuota limiting requests.{gpu}, so nothing "
                                  "holds a job of any size: the chain has no gate")
            self._add(attempt)
            return None
        name, key, hard, used = quota
        self.result.details["governance"]["quota"] = {"name": name, "key": key, "hard": hard, "used": used}
        self._left = max(0, hard - used)
        return self._left

    def _tenant_quota(self, action: str) -> tuple[KubeDriver, str, int] | None:
        """The tenant's driver, its namespace and the GPUs its quota leaves; None after noting the attempt as not
        made, or as a FAIL when no quota limits GPUs."""
        chain = Chain.ADMISSION_AND_QUOTA
        ready = self._tenant_ready(chain, action)
        if ready is None:
            return None
        tenant, ns = ready
        leaves = self._leaves(chain, action, ns)
        return None if leaves is None else (tenant, ns, leaves)

    def _quota_words(self) -> str:
        quota = self.result.details["governance"].get("quota") or {}
        return f"ResourceQuota {quota.get('name')} allows {quota.get('hard')} ({quota.get('used')} used)"

    def quota_pod(self) -> None:
        """The tenant creates a pod asking for one GPU more than its namespace's quota leaves: refused."""
        chain, action = Chain.ADMISSION_AND_QUOTA, "create a pod over its namespace's GPU quota"
        quota = self._tenant_quota(action)
        if quota is None:
            return
        tenant, ns, left = quota
        gpus = left + 1  # one GPU more than the quota leaves
        gpu = self.target.profile.gpu_resource
        name = f"gov-quota-{self.run_id}"
        action = f"create pod {name} asking {gpus} {gpu} in {ns}, over its quota"
        body = _pod(name, ns, self.target.profile.canary_image, self.run_id, gpus=gpus, gpu_resource=gpu)
        attempt, _ = self._try(chain, self._tenant_actor(), action, tenant, "POST", POD.path(ns),
                               lambda agent: self._query({"create"}, "pods", REFUSED_BY_ADMISSION, agent,
                                                         namespace=ns, name=name),
                               body=body, refusals=REFUSED_BY_ADMISSION)
        if attempt.gate is Gate.LET_THROUGH:
            attempt.why = f"the API admitted it, though {self._quota_words()}"
            self._delete_later(POD, name, ns)

    def quota_job(self) -> None:
        """The tenant submits a job (the profile's flavor: a Volcano Job, else a batch/v1 Job) of one worker asking
        one GPU more than the quota leaves; the job is accepted, but its controller must not get a pod of it."""
        chain, action = Chain.ADMISSION_AND_QUOTA, "submit a job over its namespace's GPU quota"
        quota = self._tenant_quota(action)
        if quota is None:
            return
        tenant, ns, left = quota
        gpus = left + 1  # one GPU more than the quota leaves
        profile = self.target.profile
        name = f"gov-job-{self.run_id}"
        spec = GangSpec(name=name, run_id=self.run_id, workers=1, gpus_per_worker=gpus, image=profile.canary_image,
                        namespace=ns, queue=profile.queue, command=("sleep", "3600"), max_retry=0,
                        gpu_resource=profile.gpu_resource)
        if profile.flavor is GangFlavor.VOLCANO:
            manifest, res = volcano_job(spec), VCJOB
        else:
            manifest, res = indexed_job(spec, GangFlavor.NATIVE), BATCH_JOB
        action = f"submit {res.kind} {name} of one worker asking {gpus} {profile.gpu_resource}, over its quota"
        agent = self._agent(tenant)
        since = self._since()
        answer, _ = send(tenant, "POST", res.path(ns), manifest)
        if answer.code in REFUSED:  # the job itself was refused: that is a gate stopping it too
            attempt = Attempt(chain, self._tenant_actor(), action,
                              self._query({"create"}, res.plural, REFUSED, agent, namespace=ns, name=name,
                                          api_group=res.api_version.rpartition("/")[0]),
                              Gate.REFUSED, answer, "", since)
            self._add(attempt)
            return
        if not 200 <= answer.code < 300:
            self._add(Attempt(chain, self._tenant_actor(), action, gate=Gate.UNCLEAR, answer=answer,
                              why="the job could not be submitted" + (
                                  "; check governance.tenant_kubeconfig" if answer.code == 401 else "")))
            return
        self._delete_later(res, name, ns)
        query = RecordQuery(frozenset({"create"}), "pods", REFUSED_BY_ADMISSION, namespace=ns, name_prefix=name,
                            not_user_agent=agent)
        attempt = Attempt(chain, self._tenant_actor(), action, query,
                          Gate.UNCLEAR, answer, "", since)
        self.pending_job = Pending(attempt, {"job": name, "namespace": ns})

    def quota_at_once(self) -> None:
        """The tenant sends several pods at once, each within what its namespace's quota leaves and together over
        it (:func:`burst_size`): an admission that charges only what already runs admits them all.  Each refusal
        is an attempt judged by its record; the admitted pods are judged by the watch that follows, on what they
        hold together."""
        chain, action = Chain.ADMISSION_AND_QUOTA, "send pods at once, each within its namespace's GPU quota and " \
                                                   "together over it"
        quota = self._tenant_quota(action)
        if quota is None:
            return
        tenant, ns, leaves = quota
        if leaves == 0:
            self._not_made(chain, self._tenant_actor(), action,
                           f"{self._quota_words()}: no GPU is left for a pod that fits; free some of the quota")
            return
        gpu = self.target.profile.gpu_resource
        count, each = burst_size(leaves)
        names = [f"gov-burst-{self.run_id}-{i}" for i in range(count)]
        burst = Burst(ns, each, leaves, f"send {count} pods of {each} {gpu} at once ({count * each} in all) to "
                                        f"{ns}, whose quota leaves {leaves}")
        bodies = [_pod(n, ns, self.target.profile.canary_image, self.run_id, gpus=each, gpu_resource=gpu)
                  for n in names]
        used_before = (self.result.details["governance"].get("quota") or {}).get("used", 0)
        self._undo_later(f"wait for namespace {ns}'s quota to count the burst's pods gone",
                         lambda: self._quota_back(ns, used_before))  # undone last: after the pods' deletes
        agent = self._agent(tenant)
        burst.since = self._since()
        start = threading.Barrier(count)

        def create(body: Obj) -> Answer:
            start.wait(timeout=10)
            return send(tenant, "POST", POD.path(ns), body)[0]

        with ThreadPoolExecutor(max_workers=count, thread_name_prefix="governance-burst") as pool:
            answers = list(pool.map(create, bodies))
        for name, answer in zip(names, answers):
            gate = classify(answer, REFUSED_BY_ADMISSION)
            if gate is Gate.LET_THROUGH:
                burst.admitted.append(name)
                self._delete_later(POD, name, ns)
                continue
            self._add(Attempt(chain, self._tenant_actor(), f"create pod {name} asking {each} {gpu}, one of "
                                                           f"{count} sent at once to {ns}, whose quota leaves {leaves}",
                              self._query({"create"}, "pods", REFUSED_BY_ADMISSION, agent, namespace=ns, name=name),
                              gate, answer, "", burst.since))
        self.target.timeline.action("governance burst", namespace=ns, pods=count, gpus_each=each, leaves=leaves,
                                    admitted=list(burst.admitted))
        self.pending_burst = burst

    def _quota_back(self, namespace: str, used: int, within: float = QUOTA_BACK_S) -> None:
        """Wait until the namespace's quota counts no more than ``used`` again: upstream's quota controller
        frees what deleted pods held a moment after they go, and the next scenario's tenant pod must fit."""
        clock = self.target.timeline.clock
        deadline = clock.mono() + within
        while True:
            quota = self._quota(namespace)
            if quota is None or quota[3] <= used:
                return
            if clock.mono() >= deadline:
                log.warning("governance rollback: namespace %s's quota still counts %d GPUs used (%d before the "
                            "burst) after %.0f s", namespace, quota[3], used, within)
                return
            threading.Event().wait(0.2)  # a rollback runs to its end: no pause that a halt would cut short

    def watch_over_quota(self, seconds: float) -> None:
        """For ``seconds``, no pod of the over-quota job may exist (the quota must refuse its controller's creates):
        a pod that exists is the quota letting it through, whether or not it runs yet.  The pods of a burst
        admitted together may not hold more GPUs at once, bound to nodes, than the quota left: an excess that
        is admitted but held unbound (queued) is not a run over the quota, and one that is bound is."""
        self.prepare()
        job, burst = self.pending_job, self.pending_burst
        ns = job.names["namespace"] if job is not None else burst.namespace if burst is not None else None
        clock = self.target.timeline.clock
        deadline = clock.mono() + seconds
        seen: dict[str, str] = {}
        running = 0
        burst_bound = 0
        while ns is not None:
            try:
                pods = self.target.driver.list(POD, ns, label_selector=f"{RUN_LABEL}={self.run_id}")
            except KubeError as exc:
                log.warning("could not list the tenant's pods: %s", exc)
                pods = []
            for p in pods:
                phase = (p.get("status") or {}).get("phase") or "Pending"
                node = (p.get("spec") or {}).get("nodeName")
                seen[p["metadata"]["name"]] = phase + (f" on {node}" if node else "")
            mine = [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
            of_burst = [p for p in mine if burst is not None and p["metadata"]["name"] in burst.admitted]
            bound = sum(pod_gpus(p, self.target.profile.gpu_resource) for p in of_burst
                        if (p.get("spec") or {}).get("nodeName"))
            burst_bound = max(burst_bound, bound)
            others = sum((p.get("status") or {}).get("phase") == "Running" for p in mine if p not in of_burst)
            over = over_quota_pods(bound, burst.leaves, burst.gpus_each) if burst is not None else 0
            running = max(running, others + over)
            if clock.mono() >= deadline:
                break
            self.pause(min(0.25, max(0.0, deadline - clock.mono())))
        self.result.measure(Measurement("admission-and-quota: pods over the quota running", float(running), "pods",
                                        note="; ".join(f"{n}: {s}" for n, s in sorted(seen.items()))))
        if job is not None:
            of_job = {n: s for n, s in seen.items() if n.startswith(job.names["job"])}
            attempt = job.attempt
            if of_job:
                attempt.gate = Gate.LET_THROUGH
                attempt.why = "its controller created " + ", ".join(f"pod {n} ({s})" for n, s in sorted(of_job.items()))
            else:
                attempt.gate = Gate.REFUSED
            self._add(attempt)
            self.pending_job = None
        if burst is not None:
            self._judge_burst(burst, burst_bound, seen)
            self.pending_burst = None

    def _judge_burst(self, burst: Burst, bound: int, seen: dict[str, str]) -> None:
        """An attempt for the burst's admitted pods when they were more than the quota left: let through when they
        were bound beyond it at once, unclear when the excess was only queued (no refusal to find a record of)."""
        admitted = len(burst.admitted) * burst.gpus_each
        self.result.details["governance"]["burst"] = {"gpus_each": burst.gpus_each, "leaves": burst.leaves,
                                                      "admitted": list(burst.admitted), "gpus_bound_at_once": bound}
        if admitted <= burst.leaves:
            return
        pods = ", ".join(f"pod {n} ({seen.get(n, 'gone')})" for n in burst.admitted)
        attempt = Attempt(Chain.ADMISSION_AND_QUOTA, self._tenant_actor(), burst.action, since=burst.since,
                          answer=Answer(201, "Created"))
        if bound > burst.leaves:
            attempt.gate = Gate.LET_THROUGH
            attempt.why = (f"the API admitted {len(burst.admitted)} of them ({admitted} GPUs) and {bound} GPUs of "
                           f"them were bound at once, though {self._quota_words()}: {pods}")
        else:
            attempt.gate = Gate.UNCLEAR
            attempt.why = (f"the API admitted {len(burst.admitted)} of them ({admitted} GPUs), over what "
                           f"{self._quota_words()} left, but held the excess unbound (queued, not refused): "
                           f"{pods}")
        self._add(attempt)

    # ------------------------------------------------------------------- access
    def other_namespace(self) -> None:
        """The tenant lists pods, and creates one, in another tenant's namespace: both refused."""
        chain = Chain.ACCESS
        r = self._resolved()
        other = r.other_namespace
        ready = self._tenant_ready(chain, "read and write pods in another tenant's namespace", other)
        if ready is None or not isinstance(other, str):
            return
        tenant, _ = ready
        attempt, obj = self._try(chain, self._tenant_actor(), f"list pods in another tenant's namespace {other}",
                                 tenant, "GET", POD.path(other),
                                 lambda agent: self._query({"list"}, "pods", REFUSED, agent, namespace=other))
        if attempt.gate is Gate.LET_THROUGH:
            attempt.why = f"it read {len(obj.get('items') or [])} pod(s) of {other}"
        name = f"gov-other-{self.run_id}"
        body = _pod(name, other, self.target.profile.canary_image, self.run_id)
        attempt, _ = self._try(chain, self._tenant_actor(), f"create pod {name} in another tenant's namespace {other}",
                               tenant, "POST", POD.path(other),
                               lambda agent: self._query({"create"}, "pods", REFUSED, agent, namespace=other,
                                                         name=name), body=body)
        if attempt.gate is Gate.LET_THROUGH:
            self._delete_later(POD, name, other)

    def binding(self) -> None:
        """The tenant creates a pod no scheduler takes (a node selector no node carries) and POSTs its
        ``pods/binding`` to a node itself, as only the scheduler may: refused."""
        chain = Chain.ACCESS
        ready = self._tenant_ready(chain, "bind its pod to a node itself")
        if ready is None:
            return
        tenant, ns = ready
        node = self._some_node()
        if node is None:
            self._not_made(chain, self._tenant_actor(), "bind its pod to a node itself", "no Ready node to bind to")
            return
        name = f"gov-bind-{self.run_id}"
        body = _pod(name, ns, self.target.profile.canary_image, self.run_id, node_selector={HOLD_LABEL: "never"})
        tenant.api.user_agent = f"{AGENT}/{self.run_id}-setup"
        answer, _ = send(tenant, "POST", POD.path(ns), body)
        if not 200 <= answer.code < 300:
            self._not_made(chain, self._tenant_actor(), f"bind pod {name} to node {node}",
                           f"the tenant could not create its own pod to bind ({answer.describe()})")
            return
        self._delete_later(POD, name, ns)
        binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "namespace": ns},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        attempt, _ = self._try(chain, self._tenant_actor(), f"bind its pod {name} to node {node} (pods/binding)",
                               tenant, "POST", POD.path(ns, name, "binding"),
                               lambda agent: self._query({"create"}, "pods", REFUSED, agent, namespace=ns, name=name,
                                                         subresource="binding"), body=binding)
        if attempt.gate is Gate.LET_THROUGH:
            bound = (self.target.driver.find(POD, name, ns) or {}).get("spec", {}).get("nodeName")
            attempt.why = f"pod {name} is bound to {bound}" if bound else "the API accepted the binding"

    def node_lease(self) -> None:
        """A node's own identity patches another node's Lease (a label only): refused, as the Node authorizer does."""
        chain = Chain.ACCESS
        self.prepare()
        r = self._resolved()
        if isinstance(r.node, Missing) or r.node_name is None:
            self._not_made(chain, "a node's identity", "write another node's Lease",
                           r.node.message() if isinstance(r.node, Missing) else "no node name")
            return
        own = r.node_name
        actor = f"node {own}'s identity"
        if self.node is None:
            self.node, problem = self._connect(r.node)
            if self.node is None:
                self._not_made(chain, actor, "write another node's Lease", problem)
                return
        leases = sorted(lease["metadata"]["name"] for lease in self.target.driver.list(LEASE, NODE_LEASE_NAMESPACE))
        other = next((n for n in leases if n != own), None)
        if other is None:
            self._not_made(chain, actor, "write another node's Lease", f"no other node's Lease in "
                                                                       f"{NODE_LEASE_NAMESPACE}")
            return
        self.node.api.user_agent = f"{AGENT}/{self.run_id}-node-check"
        answer, _ = send(self.node, "GET", LEASE.path(NODE_LEASE_NAMESPACE, own))
        if answer.code == 401:
            self._not_made(chain, actor, f"write node {other}'s Lease",
                           f"the API did not accept the node's credentials ({answer.describe()}); check {r.node.field}")
            return
        patch = {"metadata": {"labels": {RUN_LABEL: self.run_id}}}
        attempt, _ = self._try(chain, actor, f"label node {other}'s Lease in {NODE_LEASE_NAMESPACE}", self.node,
                               "PATCH", LEASE.path(NODE_LEASE_NAMESPACE, other),
                               lambda agent: self._query({"patch"}, "leases", REFUSED, agent,
                                                         namespace=NODE_LEASE_NAMESPACE, name=other,
                                                         api_group="coordination.k8s.io",
                                                         user=r.node.user or f"system:node:{own}"),
                               body=patch, content_type=MERGE_PATCH, field_name=r.node.field)
        if attempt.gate is Gate.LET_THROUGH:
            attempt.why = f"node {own} may write node {other}'s Lease, so it could keep a dead node alive"
            self._undo_later(f"unlabel Lease {other}", lambda: self.target.driver.patch(
                LEASE, other, {"metadata": {"labels": {RUN_LABEL: None}}}, NODE_LEASE_NAMESPACE))

    # ------------------------------------------------------------------ priority
    def restricted_class(self) -> None:
        """The tenant creates a pod of a PriorityClass it may not use: refused."""
        chain = Chain.PRIORITY
        r = self._resolved()
        cls = r.restricted_priority_class
        ready = self._tenant_ready(chain, "use a priority class it may not use", cls)
        if ready is None or not isinstance(cls, str):
            return
        tenant, ns = ready
        if self.target.driver.find(PRIORITY_CLASS, cls) is None:
            self._not_made(chain, self._tenant_actor(), f"use PriorityClass {cls}",
                           f"PriorityClass {cls} (governance.restricted_priority_class) does not exist on the cluster, "
                           "so a refusal would prove nothing; name a class the tenant may not use")
            return
        name = f"gov-class-{self.run_id}"
        body = _pod(name, ns, self.target.profile.canary_image, self.run_id, priority_class=cls)
        # Upstream's ResourceQuota admission refuses a limited class with HTTP 500 (chains.LIMITED_SCOPE_REFUSAL),
        # and its audit record carries that code.
        attempt, obj = self._try(chain, self._tenant_actor(), f"create pod {name} of PriorityClass {cls} in {ns}",
                                 tenant, "POST", POD.path(ns),
                                 lambda agent: self._query({"create"}, "pods", REFUSED_BY_ADMISSION | {500}, agent,
                                                           namespace=ns, name=name),
                                 body=body, refusals=REFUSED_BY_ADMISSION, refused_if=refused_by_limited_scope)
        if attempt.gate is Gate.LET_THROUGH:
            attempt.why = f"the pod was admitted at priority {(obj.get('spec') or {}).get('priority')}"
            self._delete_later(POD, name, ns)

    def preemption(self) -> None:
        """Pods of a higher class (the drill's own PriorityClass) take every free GPU of one node, two pods sharing
        them where there are two GPUs to share; then the tenant's pod (one GPU, pinned to that node, its own lower
        priority) is created: it must wait."""
        chain, action = Chain.PRIORITY, "take the GPUs a pod of a higher priority class holds"
        ready = self._tenant_ready(chain, action)
        if ready is None:
            return
        tenant, ns = ready
        driver, profile = self.target.driver, self.target.profile
        gpu = profile.gpu_resource
        pods = driver.list(POD)
        nodes = [n for n in self._nodes() if HOSTNAME_LABEL in (n["metadata"].get("labels") or {})]
        candidates = sorted(((free_gpus(n, pods, gpu), n["metadata"]["name"], n["metadata"]["labels"][HOSTNAME_LABEL])
                             for n in nodes), key=lambda t: t[1])
        choice = next((c for c in candidates if c[0] >= 1), None)
        if choice is None:
            self._not_made(chain, self._tenant_actor(), action, f"no eligible node has a free {gpu}")
            return
        free, node, host = choice
        high_class = f"firedrill-gov-high-{self.run_id}"
        driver.create({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                       "metadata": {"name": high_class, "labels": {RUN_LABEL: self.run_id}}, "value": HIGH_PRIORITY,
                       "description": "Firedrill governance drill: the class the tenant's pod must not preempt"})
        self._delete_later(PRIORITY_CLASS, high_class, None)
        # Two pods share the node's free GPUs where there are two to share, each a GPU workload that says which
        # GPUs it was given: the scenario then also shows that two pods of one node never hold the same GPU.
        shares = [free - free // 2, free // 2] if free >= 2 else [free]
        highs = [f"gov-high-{self.run_id}-{i}" for i in range(len(shares))]
        for high, gpus in zip(highs, shares):
            create_once_class_known(driver, _pod(high, profile.namespace, profile.canary_image, self.run_id,
                                                 node_selector={HOSTNAME_LABEL: host}, priority_class=high_class,
                                                 container=gpu_holder(profile, gpus)))
            self._delete_later(POD, high, profile.namespace)
        running: dict[str, Obj] = {}
        for high in highs:
            started = self._wait_running(high, profile.namespace, START_TIMEOUT)
            if started is None:
                self._not_made(chain, self._tenant_actor(), action, f"the higher class's pod {high} did not start "
                                                                    f"on {node} within {START_TIMEOUT:g} s")
                return
            running[high] = started
        high = ", ".join(highs)
        low = f"gov-low-{self.run_id}"
        tenant_agent = self._agent(tenant)
        since = self._since()
        answer, obj = send(tenant, "POST", POD.path(ns), _pod(low, ns, profile.canary_image, self.run_id, gpus=1,
                                                               gpu_resource=gpu, node_selector={HOSTNAME_LABEL: host}))
        if not 200 <= answer.code < 300:
            self._not_made(chain, self._tenant_actor(), action, f"the tenant could not create its pod {low} "
                                                                f"({answer.describe()})")
            return
        self._delete_later(POD, low, ns)
        mine = (obj.get("spec") or {}).get("priority")
        theirs = (running[highs[0]].get("spec") or {}).get("priority")
        if not isinstance(mine, int) or not isinstance(theirs, int) or mine >= theirs:
            self._not_made(chain, self._tenant_actor(), action, f"its pod {low} got priority {mine}, not below the "
                                                                f"higher class's {theirs}: nothing to judge")
            return
        query = RecordQuery(frozenset({"patch", "update"}), "pods", SUCCEEDED, namespace=ns, name=low,
                            subresource="status", not_user_agent=tenant_agent)
        attempt = Attempt(chain, self._tenant_actor(), f"take node {node}'s GPUs with its pod {low} (priority {mine}) "
                                                       f"from pod(s) {high} (priority {theirs})", query,
                          Gate.UNCLEAR, answer, "", since)
        self.pending_preemption = Pending(attempt, {"low": low, "namespace": ns, "node": node},
                                          {name: pod["metadata"]["uid"] for name, pod in running.items()})

    def _wait_running(self, name: str, namespace: str, timeout: float) -> Obj | None:
        clock = self.target.timeline.clock
        deadline = clock.mono() + timeout
        while True:
            pod = self.target.driver.find(POD, name, namespace)
            if pod is not None and (pod.get("status") or {}).get("phase") == "Running":
                return pod
            if clock.mono() >= deadline:
                return None
            self.pause(0.2)

    def watch_preemption(self, seconds: float) -> None:
        """For ``seconds``, the higher class's pod must keep running (same uid, not deleted) and the tenant's pod
        stay unbound; the record is the scheduler's write of the tenant pod's status (it was held)."""
        self.prepare()
        pending = self.pending_preemption
        if pending is None:
            return
        names, attempt = pending.names, pending.attempt
        driver, ns = self.target.driver, self.target.profile.namespace
        clock = self.target.timeline.clock
        deadline = clock.mono() + seconds
        lost = bound = taken = ""
        while not lost:
            for taken, uid in pending.held.items():
                high = driver.find(POD, taken, ns)
                if high is None or high["metadata"].get("uid") != uid:
                    lost = "deleted"
                elif high["metadata"].get("deletionTimestamp"):
                    lost = "being deleted"
                elif (high.get("status") or {}).get("phase") != "Running":
                    lost = f"{(high.get('status') or {}).get('phase')}"
                if lost:
                    break
            low = driver.find(POD, names["low"], names["namespace"]) or {}
            bound = (low.get("spec") or {}).get("nodeName") or ""
            if lost or clock.mono() >= deadline:
                break
            self.pause(min(0.25, max(0.0, deadline - clock.mono())))
        if lost:
            who = ""
            if self.audit is not None:
                took = find(self.audit.records(attempt.since), RecordQuery(
                    frozenset({"delete", "create"}), "pods", SUCCEEDED, namespace=ns, name=taken)) or find(
                    self.audit.records(attempt.since), RecordQuery(frozenset({"create"}), "pods", SUCCEEDED,
                                                                    namespace=ns, name=taken,
                                                                    subresource="eviction"))
                if took is not None:
                    who = f" by {took.user} ({took.verb}{'/' + took.subresource if took.subresource else ''}, " \
                          f"audit event {took.audit_id})"
            attempt.gate = Gate.LET_THROUGH
            attempt.why = f"the higher class's pod {taken} was preempted: {lost}{who}"
        elif bound:
            attempt.gate = Gate.UNCLEAR
            attempt.why = f"the tenant's pod was bound to {bound} beside the higher class's pods: the node had room"
        else:
            attempt.gate = Gate.REFUSED
        self.result.measure(Measurement("priority: higher-class pods preempted", float(bool(lost)), "pods",
                                        note=attempt.why or f"{', '.join(pending.held)} kept running on {names['node']} for "
                                                            f"{seconds:g} s"))
        self._add(attempt)
        self.pending_preemption = None

    # ------------------------------------------------------------ change control
    def cordon(self) -> None:
        """The tenant cordons a node (``spec.unschedulable``, a dry run): refused."""
        chain = Chain.CHANGE_CONTROL
        ready = self._tenant_and_node(chain, "cordon a node")
        if ready is None:
            return
        tenant, node = ready
        attempt, _ = self._try(chain, self._tenant_actor(), f"cordon node {node}", tenant, "PATCH",
                               NODE.path(None, node),
                               lambda agent: self._query({"patch"}, "nodes", REFUSED, agent, name=node),
                               body={"spec": {"unschedulable": True}}, params=DRY_RUN, content_type=MERGE_PATCH)
        if attempt.gate is Gate.LET_THROUGH:
            now = self.target.driver.find(NODE, node) or {}
            if (now.get("spec") or {}).get("unschedulable"):
                attempt.why = f"node {node} is cordoned"
                self._undo_later(f"uncordon {node}", lambda: self.target.driver.patch(
                    NODE, node, {"spec": {"unschedulable": None}}))
            else:
                attempt.why = "the API accepted the cordon (a dry run: nothing changed)"

    def evict(self) -> None:
        """The tenant evicts another workload's pod (one the drill starts in the profile's namespace; a dry run):
        refused."""
        chain = Chain.CHANGE_CONTROL
        ready = self._tenant_ready(chain, "evict another workload's pod")
        if ready is None:
            return
        tenant, _ = ready
        profile = self.target.profile
        victim = f"gov-victim-{self.run_id}"
        self.target.driver.create(_pod(victim, profile.namespace, profile.canary_image, self.run_id))
        self._delete_later(POD, victim, profile.namespace)
        body = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": victim, "namespace": profile.namespace}, "deleteOptions": {"dryRun": ["All"]}}
        attempt, _ = self._try(chain, self._tenant_actor(), f"evict pod {victim} of namespace {profile.namespace}",
                               tenant, "POST", POD.path(profile.namespace, victim, "eviction"),
                               lambda agent: self._query({"create"}, "pods", REFUSED, agent,
                                                         namespace=profile.namespace, name=victim,
                                                         subresource="eviction"), body=body, params=DRY_RUN)
        if attempt.gate is Gate.LET_THROUGH:
            left = self.target.driver.find(POD, victim, profile.namespace)
            attempt.why = ("the pod was evicted" if left is None or left["metadata"].get("deletionTimestamp")
                           else "the API accepted the eviction (a dry run: the pod stays)")

    def delete_node(self) -> None:
        """The tenant deletes a node (a dry run): refused."""
        chain = Chain.CHANGE_CONTROL
        ready = self._tenant_and_node(chain, "delete a node")
        if ready is None:
            return
        tenant, node = ready
        attempt, _ = self._try(chain, self._tenant_actor(), f"delete node {node}", tenant, "DELETE",
                               NODE.path(None, node),
                               lambda agent: self._query({"delete"}, "nodes", REFUSED, agent, name=node),
                               body={"apiVersion": "v1", "kind": "DeleteOptions", "dryRun": ["All"]}, params=DRY_RUN)
        if attempt.gate is Gate.LET_THROUGH:
            attempt.why = (f"node {node} was deleted" if self.target.driver.find(NODE, node) is None
                           else "the API accepted the deletion (a dry run: the node stays)")

    # ------------------------------------------------------------------ helpers
    def _tenant_and_node(self, chain: Chain, what: str) -> tuple[KubeDriver, str] | None:
        """The tenant's client and a node the drill may aim at, for an attempt on a node; None (the attempt
        recorded as not made, saying why) when either is missing."""
        ready = self._tenant_ready(chain, what)
        node = self._some_node()
        if ready is None:
            return None
        if node is None:
            self._not_made(chain, self._tenant_actor(), what, "no eligible node (safety.allow_label)")
            return None
        return ready[0], node

    def _resolved(self) -> Resolved:
        self.prepare()
        assert self.resolved is not None
        return self.resolved

    def _nodes(self) -> list[Obj]:
        """Eligible nodes (allow label, Ready, not control plane) that take pods, by name."""
        gpu = self.target.profile.gpu_resource
        nodes = eligible_nodes(self.target.driver.list(NODE), self.target.profile.safety)
        return sorted((n for n in nodes if not (n.get("spec") or {}).get("unschedulable")
                       and not any(t.get("effect") == "NoSchedule" and t.get("key") != gpu
                                   for t in (n.get("spec") or {}).get("taints") or [])),
                      key=lambda n: n["metadata"]["name"])

    def _some_node(self) -> str | None:
        nodes = self._nodes()
        return nodes[0]["metadata"]["name"] if nodes else None

    # --------------------------------------------------------------------- judge
    def judge(self, chain: Chain) -> None:
        """Look up each refusal's record (waiting up to ``governance.record_wait_seconds`` in all), then judge the
        chain: the measurements, their thresholds (nothing let through, no refusal unrecorded), each record's
        digest in the evidence, and a finding naming the chain for each attempt that got through or left no
        record."""
        self.prepare()
        if self.pending_burst is not None and chain is Chain.ADMISSION_AND_QUOTA:
            self._add(Attempt(chain, self._tenant_actor(), self.pending_burst.action, gate=Gate.UNCLEAR,
                              why="what its admitted pods held was never watched"))
            self.pending_burst = None
        for pending in (self.pending_job, self.pending_preemption):
            if pending is not None and pending.attempt.chain is chain:
                pending.attempt.gate, pending.attempt.why = Gate.UNCLEAR, "it was never watched"
                self._add(pending.attempt)
        mine = [a for a in self.attempts if a.chain is chain]
        self._look_up(mine)
        tally = judge_chain(chain, mine)
        name = chain.value
        self.result.measure(Measurement(f"{name}: attempts let through", float(tally.let_through), "attempts",
                                        note=f"of {len(mine)} attempt(s)"))
        self.result.measure(Measurement(f"{name}: refusals without an audit record", float(tally.unrecorded),
                                        "refusals"))
        self.result.measure(Measurement(f"{name}: refusals found in the audit log", float(tally.recorded), "records",
                                        note="sha256 " + ", ".join(tally.digests) if tally.digests else ""))
        self.result.check(Threshold(f"{name}: attempts let through", 0.0, "attempts"))
        self.result.check(Threshold(f"{name}: refusals without an audit record", 0.0, "refusals"))
        for attempt in mine:
            if attempt.record is not None:
                self._record_found(name, attempt.record)
        for message in tally.failures:
            self.result.fail(message)
        for message in tally.unknowns:
            self._say(message)
        if not mine:
            self._say(f"{name}: no attempt of this chain was made, so nothing was judged")
        details = self.result.details.setdefault("governance", {"audit_log": self._log_name(), "attempts": []})
        details["attempts"] = [a.summary() for a in self.attempts]
        details.setdefault("chains", {})[name] = {"verdict": tally.verdict.value, "let_through": tally.let_through,
                                                  "unrecorded": tally.unrecorded, "recorded": tally.recorded,
                                                  "records_sha256": list(tally.digests)}

    def _look_up(self, attempts: list[Attempt]) -> None:
        """Find the record of each refusal among ``attempts`` in the audit log, waiting up to
        ``governance.record_wait_seconds`` in all."""
        clock = self.target.timeline.clock
        deadline = clock.mono() + self.target.profile.governance.record_wait_seconds
        for attempt in attempts:
            attempt.log_readable, attempt.log_problem = self.audit is not None, self.audit_problem
            if attempt.gate is Gate.REFUSED and isinstance(attempt.query, RecordQuery) and self.audit is not None:
                try:
                    attempt.record = self.audit.wait_for(attempt.query, attempt.since,
                                                          max(0.0, deadline - clock.mono()), clock.mono,
                                                          threading.Event().wait)
                except AuditLogError as exc:
                    attempt.log_readable, attempt.log_problem = False, str(exc)

    def _record_found(self, chain: str, rec: Any) -> None:
        self.target.timeline.action("audit record found", chain=chain, auditID=rec.audit_id, sha256=rec.digest,
                                    user=rec.user, verb=rec.verb, code=rec.code, target=rec.name)

    # ------------------------------------------------------------------ rollback
    def rollback(self) -> None:
        """Undo, as the cluster admin, everything the drill made or a hole let through; close the identities."""
        while self._undo:
            what, fn = self._undo.pop()
            try:
                fn()
            except KubeError as exc:
                if exc.code != 404:
                    log.warning("governance rollback: could not %s: %s", what, exc)
        for driver in (self.tenant, self.node):
            if driver is not None:
                driver.close()
        self.tenant = self.node = None
