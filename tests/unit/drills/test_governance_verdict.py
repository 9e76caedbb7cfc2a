"""How the governance drill judges: what an answer says of a gate, an attempt's verdict and message, a chain's
tally (tables); the quota and capacity arithmetic; and the order its sentences must come in."""

from __future__ import annotations

from pathlib import Path

import pytest

from drills.kinds.governance.audit import REFUSED, REFUSED_BY_ADMISSION, RecordQuery, parse_line
from drills.kinds.governance.chains import (
    Answer, Attempt, Chain, Gate, classify, judge_attempt, judge_chain, refused_by_limited_scope,
)
from drills.kinds.governance.drill import burst_size, create_once_class_known, free_gpus, gpu_quota, over_quota_pods
from drills.kube.driver import KubeError
from drills.kinds.governance.identities import Missing, resolve
from drills.records.verdict import Verdict
from drills.scenario.vocabulary import Checked, check, check_scenario, sentence_of
from drills.target.profile import GovernanceSettings
from tests.unit.drills.test_governance_audit import event, line

import drills.bdd.steps  # noqa: F401 - registers the sentences

CLASSIFY: list[tuple[int, frozenset[int], Gate]] = [
    (403, REFUSED, Gate.REFUSED),
    (422, REFUSED_BY_ADMISSION, Gate.REFUSED),
    (422, REFUSED, Gate.LET_THROUGH),  # judged on its content: it passed authorization
    (200, REFUSED, Gate.LET_THROUGH),
    (201, REFUSED_BY_ADMISSION, Gate.LET_THROUGH),
    (409, REFUSED, Gate.LET_THROUGH),
    (401, REFUSED, Gate.UNCLEAR),
    (404, REFUSED, Gate.UNCLEAR),
    (500, REFUSED, Gate.UNCLEAR),
    (0, REFUSED, Gate.UNCLEAR),
]


@pytest.mark.parametrize("code,refusals,gate", CLASSIFY)
def test_what_an_answer_says_of_the_gate(code: int, refusals: frozenset[int], gate: Gate) -> None:
    assert classify(Answer(code), refusals) is gate


@pytest.mark.parametrize("answer,refused", [
    # kube-apiserver 1.37.2's answer to a pod of a class its ResourceQuota admission limits (tests/realk8s).
    (Answer(500, "", "insufficient quota to match these scopes: [{PriorityClass In [firedrill-critical]}]"), True),
    (Answer(500, "InternalError", "etcdserver: request timed out"), False),
    (Answer(201, "", "insufficient quota to match these scopes"), False),
])
def test_upstream_s_limited_priority_class_refusal_is_a_500_with_its_own_message(answer: Answer, refused: bool) -> None:
    assert refused_by_limited_scope(answer) is refused


QUERY = RecordQuery(frozenset({"list"}), "pods", REFUSED, namespace="team-b", user="tenant-a", user_agent="fd/1")
RECORD = parse_line(line(event()))
FORBIDDEN = Answer(403, "Forbidden", 'pods is forbidden: User "tenant-a" cannot list resource "pods"')


def attempt(gate: Gate, *, answer: Answer | None = FORBIDDEN, record: bool = False, readable: bool = True,
            why: str = "", chain: Chain = Chain.ACCESS) -> Attempt:
    return Attempt(chain, "the tenant tenant-a", "list pods in another tenant's namespace team-b", QUERY, gate,
                   answer, why, 0, RECORD if record else None, readable, "" if readable else "no log here")


JUDGE: list[tuple[str, Attempt, Verdict, list[str]]] = [
    ("stopped and recorded", attempt(Gate.REFUSED, record=True), Verdict.PASS,
     ["access: the tenant tenant-a tried to list pods", "stopped (HTTP 403 Forbidden", "recorded as tenant-a list pods",
      "sha256"]),
    ("stopped, no record", attempt(Gate.REFUSED), Verdict.FAIL,
     ["access: ", "stopped (HTTP 403", "but the audit log holds no record of it",
      "(sought: user tenant-a, verb list, pods in namespace team-b, code 403, User-Agent fd/1)"]),
    ("stopped, the log unreadable", attempt(Gate.REFUSED, readable=False), Verdict.INCONCLUSIVE,
     ["access: ", "its record cannot be looked for: no log here"]),
    ("let through", attempt(Gate.LET_THROUGH, answer=Answer(200, "OK"), why="it read 3 pod(s) of team-b"),
     Verdict.FAIL, ["access: the gate let it through: the tenant tenant-a tried to list pods", "(HTTP 200 OK)",
                    "it read 3 pod(s) of team-b"]),
    ("let through, even with a record", attempt(Gate.LET_THROUGH, answer=Answer(201), record=True), Verdict.FAIL,
     ["access: the gate let it through"]),
    ("not made", attempt(Gate.NOT_MADE, answer=None, why="no node credentials are configured; set "
                                                          "governance.node_kubeconfig"), Verdict.INCONCLUSIVE,
     ["access: not tried", "set governance.node_kubeconfig"]),
    ("unclear answer", attempt(Gate.UNCLEAR, answer=Answer(401, "Unauthorized"),
                               why="check governance.tenant_kubeconfig"), Verdict.INCONCLUSIVE,
     ["says nothing of the gate (HTTP 401 Unauthorized)", "check governance.tenant_kubeconfig"]),
]


@pytest.mark.parametrize("a,verdict,phrases", [pytest.param(a, v, p, id=i) for i, a, v, p in JUDGE])
def test_an_attempt_passes_only_when_stopped_and_recorded(a: Attempt, verdict: Verdict, phrases: list[str]) -> None:
    judged = judge_attempt(a)
    assert judged.verdict is verdict, judged.message
    for phrase in phrases:
        assert phrase in judged.message, (phrase, judged.message)
    assert judged.unrecorded is (a.gate is Gate.REFUSED and verdict is Verdict.FAIL)


CHAINS: list[tuple[str, list[Attempt], Verdict, tuple[int, int, int]]] = [
    ("every attempt stopped and recorded", [attempt(Gate.REFUSED, record=True)] * 3, Verdict.PASS, (0, 0, 3)),
    ("one let through", [attempt(Gate.REFUSED, record=True), attempt(Gate.LET_THROUGH)], Verdict.FAIL, (1, 0, 1)),
    ("one unrecorded", [attempt(Gate.REFUSED, record=True), attempt(Gate.REFUSED)], Verdict.FAIL, (0, 1, 1)),
    ("one not made", [attempt(Gate.REFUSED, record=True), attempt(Gate.NOT_MADE)], Verdict.INCONCLUSIVE, (0, 0, 1)),
    ("a FAIL outweighs a not made", [attempt(Gate.NOT_MADE), attempt(Gate.LET_THROUGH)], Verdict.FAIL, (1, 0, 0)),
    ("nothing tried proves nothing", [], Verdict.INCONCLUSIVE, (0, 0, 0)),
    ("other chains' attempts are left out", [attempt(Gate.LET_THROUGH, chain=Chain.PRIORITY),
                                            attempt(Gate.REFUSED, record=True)], Verdict.PASS, (0, 0, 1)),
]


@pytest.mark.parametrize("attempts,verdict,counts", [pytest.param(a, v, c, id=i) for i, a, v, c in CHAINS])
def test_a_chain_adds_up_its_attempts(attempts: list[Attempt], verdict: Verdict, counts: tuple[int, int, int]) -> None:
    tally = judge_chain(Chain.ACCESS, attempts)
    assert tally.verdict is verdict
    assert (tally.let_through, tally.unrecorded, tally.recorded) == counts
    assert all(m.startswith("access: ") for m in tally.failures + tally.unknowns + tally.passes)
    assert len(tally.digests) == tally.recorded


@pytest.mark.parametrize("words,chain", [("access", Chain.ACCESS), ("Admission and quota", Chain.ADMISSION_AND_QUOTA),
                                         ("change-control", Chain.CHANGE_CONTROL), ("priority", Chain.PRIORITY)])
def test_a_chain_is_named_as_the_feature_names_it(words: str, chain: Chain) -> None:
    assert Chain.parse(words) is chain


def quota(name: str, hard: dict[str, str], used: dict[str, str] | None = None, **spec: object) -> dict[str, object]:
    return {"metadata": {"name": name}, "spec": {"hard": hard, **spec}, "status": {"used": used or {}}}


QUOTAS: list[tuple[str, list[dict[str, object]], tuple[str, str, int, int] | None]] = [
    ("no quota", [], None),
    ("a quota on other things", [quota("cpu", {"requests.cpu": "10"})], None),
    ("requests of the GPU", [quota("gpu", {"requests.nvidia.com/gpu": "4"}, {"requests.nvidia.com/gpu": "1"})],
     ("gpu", "requests.nvidia.com/gpu", 4, 1)),
    ("limits of the GPU", [quota("gpu", {"limits.nvidia.com/gpu": "8"})], ("gpu", "limits.nvidia.com/gpu", 8, 0)),
    ("the tightest of two", [quota("a", {"requests.nvidia.com/gpu": "8"}), quota("b", {"requests.nvidia.com/gpu": "2"})],
     ("b", "requests.nvidia.com/gpu", 2, 0)),
    ("a scoped quota holds no ordinary pod", [quota("crit", {"requests.nvidia.com/gpu": "1"},
                                                    scopeSelector={"matchExpressions": []})], None),
]


@pytest.mark.parametrize("quotas,expected", [pytest.param(q, e, id=i) for i, q, e in QUOTAS])
def test_the_quota_a_job_must_exceed(quotas: list[dict[str, object]], expected: object) -> None:
    assert gpu_quota(quotas, "nvidia.com/gpu") == expected  # type: ignore[arg-type]


def test_free_gpus_of_a_node_count_only_its_live_pods() -> None:
    node = {"metadata": {"name": "n0"}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}}

    def pod(node: str, gpus: int, phase: str = "Running") -> dict[str, object]:
        return {"spec": {"nodeName": node, "containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
                "status": {"phase": phase}}

    assert free_gpus(node, [pod("n0", 3), pod("n0", 2, "Succeeded"), pod("n1", 4), pod("n0", 1)],
                     "nvidia.com/gpu") == 4


def test_the_embedded_platform_supplies_what_the_profile_leaves_out(tmp_path: Path) -> None:
    settings = GovernanceSettings(tenant_namespace="firedrill-tenant", other_namespace="firedrill-neighbour",
                                  restricted_priority_class="firedrill-critical")
    bare = resolve(settings, tmp_path)
    assert isinstance(bare.tenant, Missing) and "tenant-a.kubeconfig" in bare.tenant.message()
    assert isinstance(bare.node, Missing) and bare.node.field == "governance.node_kubeconfig"
    assert bare.audit_log == tmp_path / "audit.log"
    for name in ("tenant-a.kubeconfig", "node-gpu-node-1.kubeconfig", "node-gpu-node-0.kubeconfig"):
        (tmp_path / name).write_text("{}")
    found = resolve(settings, tmp_path)
    assert not isinstance(found.tenant, Missing) and found.tenant.user == "tenant-a"
    assert not isinstance(found.node, Missing) and found.node_name == "gpu-node-0"
    assert found.node.user == "system:node:gpu-node-0"


def test_a_real_cluster_without_settings_names_each_field_to_set() -> None:
    r = resolve(GovernanceSettings(), None)
    fields = [v.field for v in (r.tenant, r.node, r.audit_log, r.tenant_namespace, r.other_namespace,
                                r.restricted_priority_class) if isinstance(v, Missing)]
    assert fields == ["governance.tenant_kubeconfig", "governance.node_kubeconfig", "governance.audit_log",
                      "governance.tenant_namespace", "governance.other_namespace",
                      "governance.restricted_priority_class"]
    assert all("set governance." in v.message() and "docs/PROFILE.md" in v.message()
               for v in (r.tenant, r.audit_log) if isinstance(v, Missing))
    given = resolve(GovernanceSettings(tenant_context="team-a", node_kubeconfig="~/node.kubeconfig",
                                       node_name="gpu-7", audit_log="audit.log"), None)
    assert not isinstance(given.tenant, Missing) and given.tenant.kubeconfig is None
    assert given.tenant.context == "team-a"
    assert not isinstance(given.node, Missing) and given.node.kubeconfig == Path("~/node.kubeconfig").expanduser()
    assert given.node.user == "system:node:gpu-7"


def checked(*texts: str) -> list[Checked]:
    out = []
    for text in texts:
        found = sentence_of(text)
        assert found is not None, text
        out.append(Checked(found.name, check(text), text))
    return out


JUDGE_ACCESS = "the access gate stopped every attempt and the audit log holds a record of each refusal"
JUDGE_QUOTA = "the admission-and-quota gate stopped every attempt and the audit log holds a record of each refusal"
JUDGE_PRIORITY = "the priority gate stopped every attempt and the audit log holds a record of each refusal"
JOB = "the tenant submits a job asking for more GPUs than its namespace's quota leaves"
BURST = "the tenant submits several pods at once, each within its namespace's quota and together over it"
PREEMPT = "the tenant's pod needs the GPUs a pod of a higher priority class holds"

ORDER: list[tuple[str, list[str], list[str]]] = [
    ("a chain after its attempts", ["the tenant cordons a node", "the tenant reads and writes pods in another "
                                    "tenant's namespace", JUDGE_ACCESS], []),
    ("a judgement before any attempt of its chain", ["the tenant cordons a node", JUDGE_ACCESS],
     ["no attempt of the access chain comes before this judgement"]),
    ("a job never watched", [JOB, JUDGE_QUOTA], ["the over-quota job (or the pods sent at once) is never watched"]),
    ("pods at once never watched", [BURST, JUDGE_QUOTA], ["the over-quota job (or the pods sent at once) is never "
                                                          "watched"]),
    ("pods at once watched", [BURST, "nothing over the quota runs within 5 seconds", JUDGE_QUOTA], []),
    ("a job watched", [JOB, "nothing over the quota runs within 5 seconds", JUDGE_QUOTA], []),
    ("a watch with nothing to watch", ["nothing over the quota runs within 5 seconds"],
     ["no job over the quota (nor pods at once) was submitted"]),
    ("a preemption never watched", [PREEMPT, JUDGE_PRIORITY], ["the higher class's pod is never watched"]),
    ("a preemption watched", [PREEMPT, "the pod of the higher class keeps running for 5 seconds", JUDGE_PRIORITY], []),
    ("a keep-running with no higher pod", ["the pod of the higher class keeps running for 5 seconds"],
     ["no pod of a higher class holds GPUs the tenant needs"]),
]


@pytest.mark.parametrize("texts,problems", [pytest.param(t, p, id=i) for i, t, p in ORDER])
def test_the_governance_sentences_must_come_in_an_order_that_can_run(texts: list[str], problems: list[str]) -> None:
    found = [str(err) for _, err in check_scenario(checked(*texts))]
    assert len(found) == len(problems), found
    for problem, message in zip(problems, found):
        assert problem in message, (problem, message)


class ClassLaggingDriver:
    """Answers a pod create as kube-apiserver does while its Priority admission's cache lags the class's create."""

    def __init__(self, refusals: int, message: str = "pods \"gov-high\" is forbidden: no PriorityClass with name "
                                                   "firedrill-gov-high-x was found") -> None:
        self.refusals, self.message, self.created = refusals, message, 0

    def create(self, body: dict) -> dict:
        if self.refusals:
            self.refusals -= 1
            raise KubeError(f"POST /api/v1/namespaces/n/pods: 403 Forbidden: {self.message}", 403, "Forbidden")
        self.created += 1
        return body


def test_a_pod_of_a_class_just_made_is_created_once_admission_knows_the_class() -> None:
    """Found on kube-apiserver v1.37.2 (tests/realk8s/test_walk.py): the class was created 1.5 ms before the pod,
    and the pod was refused 403 'no PriorityClass with name ...' by a cache that had not seen it yet."""
    lagging = ClassLaggingDriver(refusals=2)
    create_once_class_known(lagging, {"metadata": {"name": "gov-high"}})  # type: ignore[arg-type]
    assert lagging.created == 1 and lagging.refusals == 0


def test_any_other_refusal_is_the_answer_at_once() -> None:
    other = ClassLaggingDriver(refusals=1, message="pods is forbidden: User cannot create")
    with pytest.raises(KubeError, match="User cannot create"):
        create_once_class_known(other, {"metadata": {"name": "gov-high"}}, within=5.0)  # type: ignore[arg-type]
    assert other.created == 0


@pytest.mark.parametrize("leaves,count,each", [(1, 2, 1), (2, 3, 1), (3, 4, 1),
                                               (4, 3, 2), (5, 3, 2), (8, 3, 4), (9, 3, 4)])
def test_a_burst_fits_pod_by_pod_and_not_together(leaves: int, count: int, each: int) -> None:
    assert burst_size(leaves) == (count, each)
    assert each <= leaves < count * each  # each fits what is left; all of them do not
    assert (count - 1) * each <= leaves  # one pod more than fit, no more


@pytest.mark.parametrize("bound,leaves,each,over", [(0, 4, 2, 0), (4, 4, 2, 0), (6, 4, 2, 1), (5, 4, 2, 1),
                                                    (3, 1, 1, 2), (12, 8, 4, 1)])
def test_pods_over_the_quota_are_the_excess_in_whole_pods(bound: int, leaves: int, each: int, over: int) -> None:
    assert over_quota_pods(bound, leaves, each) == over
