"""The governance drill's sentences (docs/STEPS.md, docs/GOVERNANCE.md)."""

from __future__ import annotations


from collections.abc import Iterator, Sequence

from drills.errors import PlaceholderError
from drills.kinds.governance import Chain, GovernanceDrill
from drills.kinds.governance.slurm import SlurmGovernanceDrill  # noqa: F401 - its Slurm side, registered on import
from drills.scenario.context import ScenarioContext
from drills.scenario.vocabulary import Checked, scenario_rule, step

def _governance(drill: ScenarioContext) -> GovernanceDrill:
    return drill.drill(GovernanceDrill)


def _chain(chain: str) -> Chain:
    """The control chain a judgement names: admission-and-quota, access, priority or change-control."""
    try:
        return Chain.parse(chain)
    except ValueError:
        raise PlaceholderError(chain, "no such control chain", "write one of " + ", ".join(c.value for c in Chain),
                               placeholder="chain") from None


@step("Given", "a tenant's own credentials and the API server's audit log",
      "a tenant's own credentials and the API server's audit log")
def governance_identities(drill: ScenarioContext) -> None:
    """The drill acts with a tenant's own credentials (an ordinary namespace user) and judges each refusal by its
    record in the API server's audit log: the profile's `governance` section (docs/PROFILE.md), or, on the
    embedded platform, its data directory. Each one missing makes the steps that need it INCONCLUSIVE, naming the
    profile field to set; nothing is skipped silently."""
    _governance(drill).prepare()


@step("When", "the tenant submits a pod asking for more GPUs than its namespace's quota leaves",
      "the tenant submits a pod asking for more GPUs than its namespace's quota leaves")
def quota_pod(drill: ScenarioContext) -> None:
    """Admission and quota: a pod of one GPU more than the tenant namespace's ResourceQuota (`requests.<gpu>`) leaves
    must be refused (403, or 422). A namespace with no such quota has no gate: FAIL."""
    _governance(drill).quota_pod()


@step("When", "the tenant submits a job asking for more GPUs than its namespace's quota leaves",
      "the tenant submits a job asking for more GPUs than its namespace's quota leaves")
def quota_job(drill: ScenarioContext) -> None:
    """Admission and quota: a job (a Volcano Job for the volcano flavor, a batch/v1 Job otherwise) of one worker
    asking one GPU more than the quota leaves. The job itself is accepted; its controller's creates of its pods
    must be refused, and that refusal is the record sought."""
    _governance(drill).quota_job()


@step("When", "the tenant submits several pods at once, each within its namespace's quota and together over it",
      "the tenant submits several pods at once, each within its namespace's quota and together over it")
def quota_at_once(drill: ScenarioContext) -> None:
    """Admission and quota under concurrency: the tenant sends pods of half the GPUs its namespace's quota leaves
    each (at least 1), one more pod than fit, all at the same instant. The ones over the quota must be refused
    (403, each recorded in the audit log); an admission that charges only running pods admits them all. What the
    admitted pods hold is judged by the watch that follows: bound to nodes beyond the quota is a FAIL naming them;
    admitted but held unbound (queued) is INCONCLUSIVE, as there is no refusal to find a record of."""
    _governance(drill).quota_at_once()


@step("Then", "nothing over the quota runs within {limit:Duration}", "nothing over the quota runs within 5 seconds")
def nothing_over_quota(drill: ScenarioContext, limit: float) -> None:
    """For that long no pod of the over-quota job may exist: one that does is the quota letting it through, whether
    or not it runs yet; and pods sent at once may not hold more GPUs at once, bound to nodes, than the quota left.
    The pods over the quota that ran are measured and shown."""
    _governance(drill).watch_over_quota(limit)


@step("When", "the tenant reads and writes pods in another tenant's namespace",
      "the tenant reads and writes pods in another tenant's namespace")
def other_namespace(drill: ScenarioContext) -> None:
    """Access: the tenant lists the pods of another tenant's namespace (`governance.other_namespace`), then creates
    one there; both must be refused (403)."""
    _governance(drill).other_namespace()


@step("When", "the tenant binds its own pod to a node, as only the scheduler may",
      "the tenant binds its own pod to a node, as only the scheduler may")
def tenant_binds(drill: ScenarioContext) -> None:
    """Access: the tenant creates a pod that no scheduler takes and POSTs its `pods/binding` to a node itself,
    bypassing the scheduler, the quota and the gang; it must be refused (403)."""
    _governance(drill).binding()


@step("When", "a node's identity writes another node's Lease", "a node's identity writes another node's Lease")
def node_writes_lease(drill: ScenarioContext) -> None:
    """Access: with one node's own credentials (`governance.node_kubeconfig`; the embedded platform's first node
    otherwise) the drill labels another node's Lease in `kube-node-lease`. As upstream's Node authorizer, the API
    must refuse it (403): a node that may renew another's Lease can keep a dead node alive."""
    _governance(drill).node_lease()


@step("When", "the tenant creates a pod with a priority class it may not use",
      "the tenant creates a pod with a priority class it may not use")
def restricted_class(drill: ScenarioContext) -> None:
    """Priority: a pod of `governance.restricted_priority_class` in the tenant's namespace must be refused (403,
    upstream's `insufficient quota to match these scopes`). A class that does not exist proves nothing:
    INCONCLUSIVE."""
    _governance(drill).restricted_class()


@step("When", "the tenant's pod needs the GPUs a pod of a higher priority class holds",
      "the tenant's pod needs the GPUs a pod of a higher priority class holds")
def tenant_needs_higher_gpus(drill: ScenarioContext) -> None:
    """Priority: the drill gives pods of its own higher PriorityClass every free GPU of one node (two pods sharing
    them where there are two GPUs, each a GPU workload that names the GPUs it was given), then the tenant creates a
    pod of one GPU pinned to that node, at its own lower priority. The tenant's pod must wait."""
    _governance(drill).preemption()


@step("Then", "the pod of the higher class keeps running for {limit:Duration}",
      "the pod of the higher class keeps running for 5 seconds")
def higher_keeps_running(drill: ScenarioContext, limit: float) -> None:
    """For that long the higher class's pods keep running (the same pods, not deleted or evicted) and the tenant's
    pod stays unbound; the record sought is the scheduler's write of the tenant pod's status (it was held)."""
    _governance(drill).watch_preemption(limit)


@step("When", "the tenant cordons a node", "the tenant cordons a node")
def tenant_cordons(drill: ScenarioContext) -> None:
    """Change control: the tenant marks a node unschedulable (a dry run; the first eligible node by name, as the
    profile's `safety` allows); it must be refused (403)."""
    _governance(drill).cordon()


@step("When", "the tenant evicts another workload's pod", "the tenant evicts another workload's pod")
def tenant_evicts(drill: ScenarioContext) -> None:
    """Change control: the drill starts a pod in the profile's namespace and the tenant POSTs its `pods/eviction`
    (a dry run), the step a drain repeats for every pod; it must be refused (403)."""
    _governance(drill).evict()


@step("When", "the tenant deletes a node", "the tenant deletes a node")
def tenant_deletes_node(drill: ScenarioContext) -> None:
    """Change control: the tenant deletes a node (a dry run); it must be refused (403)."""
    _governance(drill).delete_node()


@step("Then", "the {chain} gate stopped every attempt and the audit log holds a record of each refusal",
      "the access gate stopped every attempt and the audit log holds a record of each refusal", check=_chain)
def chain_held(drill: ScenarioContext, chain: str) -> None:
    """The chain's judgement (`admission-and-quota`, `access`, `priority` or `change-control`): PASS only when every
    attempt of the chain was stopped AND each stop's record is found in the audit log (matched by user, verb,
    objectRef, code and the request's own User-Agent; waiting up to `governance.record_wait_seconds`). Each
    record's SHA-256 goes into the evidence. An attempt that got through, or a refusal without its record, FAILs
    naming the chain and what got through or which record is missing."""
    _governance(drill).judge(_chain(chain))


GOVERNANCE_ATTEMPTS = {
    quota_pod.__name__: Chain.ADMISSION_AND_QUOTA, quota_job.__name__: Chain.ADMISSION_AND_QUOTA,
    quota_at_once.__name__: Chain.ADMISSION_AND_QUOTA,
    other_namespace.__name__: Chain.ACCESS, tenant_binds.__name__: Chain.ACCESS,
    node_writes_lease.__name__: Chain.ACCESS,
    restricted_class.__name__: Chain.PRIORITY, tenant_needs_higher_gpus.__name__: Chain.PRIORITY,
    tenant_cordons.__name__: Chain.CHANGE_CONTROL, tenant_evicts.__name__: Chain.CHANGE_CONTROL,
    tenant_deletes_node.__name__: Chain.CHANGE_CONTROL,
}
"""Each governance attempt's sentence and the chain it crosses."""


@scenario_rule
def _governance_in_order(steps: Sequence[Checked]) -> Iterator[tuple[int, PlaceholderError]]:
    """A chain's judgement follows an attempt of that chain; a watch follows what it watches; what must be
    watched (the over-quota job, the higher class's pod) is watched before its chain is judged."""
    tried: set[Chain] = set()
    job = preempt = False
    for i, st in enumerate(steps):
        value = st.text or st.step
        if st.step in GOVERNANCE_ATTEMPTS:
            tried.add(GOVERNANCE_ATTEMPTS[st.step])
        if st.step in (quota_job.__name__, quota_at_once.__name__):
            job = True
        elif st.step == tenant_needs_higher_gpus.__name__:
            preempt = True
        elif st.step == nothing_over_quota.__name__:
            if not job:
                yield i, PlaceholderError(value, "no job over the quota (nor pods at once) was submitted, so nothing "
                                          "is watched", "put 'When the tenant submits a job asking for more GPUs "
                                          "than its namespace's quota leaves' before it")
            job = False
        elif st.step == higher_keeps_running.__name__:
            if not preempt:
                yield i, PlaceholderError(value, "no pod of a higher class holds GPUs the tenant needs",
                                          "put 'When the tenant's pod needs the GPUs a pod of a higher priority class "
                                          "holds' before it")
            preempt = False
        elif st.step == chain_held.__name__:
            chain = _chain(st.values["chain"])
            if chain not in tried:
                yield i, PlaceholderError(st.values["chain"], f"no attempt of the {chain.value} chain comes before "
                                          "this judgement", "put the chain's 'When the tenant ...' sentences before it "
                                          "(docs/GOVERNANCE.md)", placeholder="chain")
            if chain is Chain.ADMISSION_AND_QUOTA and job:
                yield i, PlaceholderError(value, "the over-quota job (or the pods sent at once) is never watched", "put 'Then nothing over the "
                                          "quota runs within <duration>' before it")
            if chain is Chain.PRIORITY and preempt:
                yield i, PlaceholderError(value, "the higher class's pod is never watched", "put 'Then the pod of the "
                                          "higher class keeps running for <duration>' before it")
