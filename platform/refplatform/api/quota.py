"""ResourceQuota admission for pods, as upstream's ResourceQuota admission plugin decides it.

- A pod created in a namespace is charged to every ResourceQuota of that namespace whose scopes match it
  (no scope: every pod).  For each resource named in the quota's ``spec.hard`` that the pod uses, the usage
  of the namespace's non-terminal pods (phase neither Succeeded nor Failed) plus the pod's own may not
  exceed the hard limit, else 403::

      pods "x" is forbidden: exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=5,
      used: requests.nvidia.com/gpu=0, limited: requests.nvidia.com/gpu=4

- Resources counted: ``pods`` and ``count/pods``; ``requests.<r>`` and ``limits.<r>`` summed over the
  containers (an init container's, if larger, as upstream's effective request), where an extended
  resource's request defaults to its limit; bare ``cpu``, ``memory`` and ``ephemeral-storage`` are
  requests.  Other names in ``spec.hard`` are shown but not charged.
- Scopes (``spec.scopes`` and ``spec.scopeSelector.matchExpressions``): ``PriorityClass`` (In, NotIn,
  Exists, DoesNotExist on ``spec.priorityClassName``), ``Terminating`` / ``NotTerminating``
  (``activeDeadlineSeconds``), ``BestEffort`` / ``NotBestEffort`` (no requests or limits at all).
- Limited priority classes (the API server's ``--limited-priority-class``, upstream's admission
  configuration ``limitedResources`` with ``matchScopes: [{scopeName: PriorityClass, operator: In,
  values: [...]}]``): a pod of such a class is admitted only in a namespace with a ResourceQuota whose
  scope selector selects the class (``In`` listing it, or ``Exists``), else 403 ``insufficient quota to
  match these scopes: [{PriorityClass In [NAME]}]``.
- ``status.hard`` and ``status.used`` of each quota of the namespace are written after every admitted
  pod, every pod deleted or finished (the service tells), and every write of a quota.

Deviation from upstream: a pod being deleted counts until it is gone (upstream stops counting it once its
grace period is over); a quota on ``requests.cpu`` does not refuse a pod that states no cpu request.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from refplatform.api import errors as E
from refplatform.resources import PODS, RESOURCEQUOTAS
from refplatform.quantity import parse_quantity
from refplatform.store import ObjectNotFound, Store

Obj = dict[str, Any]

TERMINAL_PHASES = ("Succeeded", "Failed")
GPU_QUOTA_NAMES = frozenset({"requests.nvidia.com/gpu", "limits.nvidia.com/gpu", "nvidia.com/gpu"})
"""What the ``no-gpu-quota`` defect stops enforcing."""
STANDARD_REQUESTS = ("cpu", "memory", "ephemeral-storage")
"""Resources whose bare quota name means the request (``cpu`` = ``requests.cpu``)."""
SCOPE_NAMES = ("PriorityClass", "Terminating", "NotTerminating", "BestEffort", "NotBestEffort")
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


@dataclass(frozen=True)
class ScopeRequirement:
    """One ``scopeSelector.matchExpressions`` item (or a ``spec.scopes`` name, operator Exists)."""

    scope: str
    operator: str = "Exists"
    values: tuple[str, ...] = ()

    def matches(self, pod: Obj) -> bool:
        spec = pod.get("spec") or {}
        if self.scope == "PriorityClass":
            pc = str(spec.get("priorityClassName") or "")
            return {"In": pc in self.values, "NotIn": pc not in self.values, "Exists": pc != "",
                    "DoesNotExist": pc == ""}.get(self.operator, False)
        if self.scope in ("Terminating", "NotTerminating"):
            terminating = spec.get("activeDeadlineSeconds") is not None
            return terminating == (self.scope == "Terminating")
        if self.scope in ("BestEffort", "NotBestEffort"):
            best_effort = not any((c.get("resources") or {}).get("requests") or (c.get("resources") or {}).get("limits")
                                  for c in _containers(pod))
            return best_effort == (self.scope == "BestEffort")
        return False

    def __str__(self) -> str:
        """As upstream's ``%v`` prints it: ``{PriorityClass In [a b]}``."""
        return f"{{{self.scope} {self.operator} [{' '.join(self.values)}]}}"


def scopes_of(quota: Obj) -> list[ScopeRequirement]:
    spec = quota.get("spec") or {}
    out = [ScopeRequirement(str(s)) for s in spec.get("scopes") or []]
    for expr in ((spec.get("scopeSelector") or {}).get("matchExpressions") or []):
        out.append(ScopeRequirement(str(expr.get("scopeName")), str(expr.get("operator")),
                                    tuple(str(v) for v in expr.get("values") or [])))
    return out


def quota_matches(quota: Obj, pod: Obj) -> bool:
    return all(s.matches(pod) for s in scopes_of(quota))


def _containers(pod: Obj) -> list[Obj]:
    return [c for c in (pod.get("spec") or {}).get("containers") or [] if isinstance(c, dict)]


def _quantity(raw: Any) -> Decimal:
    try:
        return Decimal(parse_quantity(raw))
    except (ValueError, InvalidOperation, TypeError):
        return Decimal(0)


def _sums(containers: Iterable[Obj]) -> tuple[dict[str, Decimal], dict[str, Decimal]]:
    requests: dict[str, Decimal] = {}
    limits: dict[str, Decimal] = {}
    for c in containers:
        res = c.get("resources") or {}
        lim = {k: _quantity(v) for k, v in (res.get("limits") or {}).items()}
        req = {k: _quantity(v) for k, v in (res.get("requests") or {}).items()}
        for k, v in lim.items():
            if k not in req and "/" in k and not k.startswith("kubernetes.io/"):
                req[k] = v  # an extended resource's request is its limit
        for k, v in req.items():
            requests[k] = requests.get(k, Decimal(0)) + v
        for k, v in lim.items():
            limits[k] = limits.get(k, Decimal(0)) + v
    return requests, limits


def pod_usage(pod: Obj) -> dict[str, Decimal]:
    """What one pod charges to a quota, by quota resource name."""
    requests, limits = _sums(_containers(pod))
    for init in (pod.get("spec") or {}).get("initContainers") or []:
        if isinstance(init, dict):
            ireq, ilim = _sums([init])
            for k, v in ireq.items():
                requests[k] = max(requests.get(k, Decimal(0)), v)
            for k, v in ilim.items():
                limits[k] = max(limits.get(k, Decimal(0)), v)
    usage = {"pods": Decimal(1), "count/pods": Decimal(1)}
    for k, v in requests.items():
        usage[f"requests.{k}"] = v
        if k in STANDARD_REQUESTS:
            usage[k] = v
    for k, v in limits.items():
        usage[f"limits.{k}"] = v
    return usage


def counts(pod: Obj) -> bool:
    """Whether a stored pod is charged to quota: until it is Succeeded or Failed."""
    return (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES


def format_quantity(value: Decimal) -> str:
    if value == value.to_integral_value():
        return str(int(value))
    milli = value * 1000
    if milli == milli.to_integral_value():
        return f"{int(milli)}m"
    return str(value.normalize())


def _pretty(values: dict[str, Decimal], names: Iterable[str]) -> str:
    return ",".join(f"{n}={format_quantity(values.get(n, Decimal(0)))}" for n in sorted(names))


class QuotaAdmission:
    """Charges pods to their namespace's ResourceQuotas and keeps each quota's ``status`` current."""

    def __init__(self, store: Store, limited_priority_classes: Iterable[str] = (), *,
                 enforce_gpus: bool = True, charge_pending: bool = True) -> None:
        self.store = store
        self.limited = tuple(sorted(set(limited_priority_classes)))
        self.enforce_gpus = enforce_gpus
        """False: the ``no-gpu-quota`` defect (docs/DEFECTS.md); GPU usage is counted and shown, never refused."""
        self.charge_pending = charge_pending
        """False: the ``quota-ignores-pending`` defect (docs/DEFECTS.md); admission charges only the pods already
        running, so requests that each fit, sent together, are all admitted over the quota.  ``status.used``
        still counts every non-terminal pod."""

    def quotas(self, namespace: str) -> list[Obj]:
        return sorted(self.store.list(RESOURCEQUOTAS.key, namespace)[0], key=lambda q: q["metadata"]["name"])

    def _used(self, namespace: str, quota: Obj, pods: list[Obj], *, admitting: bool = False) -> dict[str, Decimal]:
        used: dict[str, Decimal] = {}
        for pod in pods:
            if admitting and not self.charge_pending and (pod.get("status") or {}).get("phase") != "Running":
                continue
            if counts(pod) and quota_matches(quota, pod):
                for k, v in pod_usage(pod).items():
                    used[k] = used.get(k, Decimal(0)) + v
        return used

    def admit(self, pod: Obj) -> None:
        """Refuse (403) a pod that would exceed a quota of its namespace or uses a limited priority class
        no quota there covers."""
        meta = pod.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        quotas = self.quotas(namespace)
        pc = str((pod.get("spec") or {}).get("priorityClassName") or "")
        if pc and pc in self.limited:
            limited = ScopeRequirement("PriorityClass", "In", self.limited)
            covered = any(quota_matches(q, pod) and any(s.scope == "PriorityClass" for s in scopes_of(q))
                          for q in quotas)
            if not covered:
                message = f"insufficient quota to match these scopes: [{limited}]"
                raise E.admission_forbidden(PODS, name, message,
                                            f'{message}: priority class "{pc}" is limited and no ResourceQuota in '
                                            f'namespace "{namespace}" selects it')
        if not quotas:
            return
        pods = self.store.list(PODS.key, namespace)[0]
        requested = pod_usage(pod)
        for quota in quotas:
            if not quota_matches(quota, pod):
                continue
            hard = {k: _quantity(v) for k, v in ((quota.get("spec") or {}).get("hard") or {}).items()}
            used = self._used(namespace, quota, pods, admitting=True)
            exceeded = [k for k, limit in hard.items() if requested.get(k, Decimal(0)) > 0
                        and (self.enforce_gpus or k not in GPU_QUOTA_NAMES)
                        and used.get(k, Decimal(0)) + requested[k] > limit]
            if exceeded:
                qname = quota["metadata"]["name"]
                message = (f"exceeded quota: {qname}, requested: {_pretty(requested, exceeded)}, "
                           f"used: {_pretty(used, exceeded)}, limited: {_pretty(hard, exceeded)}")
                raise E.admission_forbidden(PODS, name, message, message)

    def refresh(self, namespace: str) -> None:
        """Write ``status.hard`` and ``status.used`` of every quota of ``namespace`` that changed."""
        quotas = self.quotas(namespace)
        if not quotas:
            return
        pods = self.store.list(PODS.key, namespace)[0]
        for quota in quotas:
            status = self.status_of(namespace, quota, pods)
            if quota.get("status") == status:
                continue

            def write(current: Obj, status: Obj = status) -> Obj:
                new = copy.deepcopy(current)
                new["status"] = status
                return new
            try:
                self.store.mutate(RESOURCEQUOTAS.key, namespace, quota["metadata"]["name"], write)
            except ObjectNotFound:
                pass

    def status_of(self, namespace: str, quota: Obj, pods: list[Obj] | None = None) -> Obj:
        hard = dict((quota.get("spec") or {}).get("hard") or {})
        used = self._used(namespace, quota, self.store.list(PODS.key, namespace)[0] if pods is None else pods)
        return {"hard": hard, "used": {k: format_quantity(used.get(k, Decimal(0))) for k in sorted(hard)}}
