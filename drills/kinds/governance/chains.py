"""The four control chains, an attempt to cross one, and how an attempt is judged.

Pure: no I/O, no clock.  The drill (:mod:`drills.kinds.governance.drill`) makes the attempts and fills in what it
saw; :func:`judge_attempt` says what each one means, and :func:`judge_chain` what a chain's attempts add up
to.  An attempt PASSes only when its gate stopped it AND the record of that is found in the audit log.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from drills.kinds.governance.audit import AuditRecord, RecordQuery
from drills.kinds.governance.textlog import CommandAnswer, LineQuery, LogLine
from drills.records.verdict import Verdict

__all__ = ["LIMITED_SCOPE_REFUSAL", "Answer", "Attempt", "Chain", "ChainTally", "Gate", "Judged", "classify",
           "judge_attempt", "judge_chain", "refused_by_limited_scope"]


class Chain(Enum):
    """A control chain of the governance feature; the value is how the feature file names it."""

    ADMISSION_AND_QUOTA = "admission-and-quota"
    """A job over the namespace's GPU quota is held or refused: nothing of it runs."""
    ACCESS = "access"
    """A tenant stays in its namespace and does not do the scheduler's or a node's work."""
    PRIORITY = "priority"
    """A tenant uses only the priority classes it is given, and never preempts a higher class."""
    CHANGE_CONTROL = "change-control"
    """A disruptive action (cordon, drain, eviction, node deletion) is refused to a tenant."""

    @classmethod
    def parse(cls, words: str) -> "Chain":
        text = " ".join(words.split()).lower().replace(" ", "-")
        for chain in cls:
            if text == chain.value:
                return chain
        raise ValueError(words)


class Gate(Enum):
    """What the gate did with one attempt, as far as the answers and observations show."""

    REFUSED = "refused"
    """The gate stopped it (a refusal, or the thing was held and nothing of it happened)."""
    LET_THROUGH = "let through"
    """The action was done, or passed the gate (a write answered 2xx, a pod over the quota exists)."""
    UNCLEAR = "unclear"
    """The answer says nothing about the gate (401, 404, 5xx, no answer): no claim either way."""
    NOT_MADE = "not made"
    """The attempt could not be made (a credential or setting is missing): no claim either way."""


@dataclass(frozen=True)
class Answer:
    """The API's answer to the attempt's request (code 0: no answer at all)."""

    code: int
    reason: str = ""
    message: str = ""

    def describe(self) -> str:
        if self.code == 0:
            return f"no answer ({self.message})" if self.message else "no answer"
        text = f"HTTP {self.code}" + (f" {self.reason}" if self.reason else "")
        return text + (f": {_short(self.message)}" if self.message else "")


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


PASSED_GATE = frozenset({200, 201, 202, 204, 400, 409, 422})
"""Answers that mean a request passed authorization: it was done, or judged on its content (upstream authorizes
before it validates or looks for conflicts)."""


LIMITED_SCOPE_REFUSAL = "insufficient quota to match these scopes"
"""How upstream's ResourceQuota admission refuses a pod whose PriorityClass its ``limitedResources`` configuration
lists, in a namespace with no ResourceQuota covering that scope.  kube-apiserver answers it HTTP 500 with this
message (seen on 1.37.2: the plugin returns a plain error, not a Forbidden); the embedded platform answers 403."""


def refused_by_limited_scope(answer: Answer) -> bool:
    """Upstream's answer when the limited-priority-class gate stopped a pod: a 500 with its message.  Any other
    500 says nothing of the gate."""
    return answer.code == 500 and LIMITED_SCOPE_REFUSAL in answer.message


def classify(answer: Answer, refusals: frozenset[int]) -> Gate:
    """What one answer says of the gate, when ``refusals`` are the codes that mean "stopped"."""
    if answer.code in refusals:
        return Gate.REFUSED
    if answer.code in PASSED_GATE or 200 <= answer.code < 300:
        return Gate.LET_THROUGH
    return Gate.UNCLEAR


@dataclass
class Attempt:
    """One deliberate crossing of a chain: who tried what, what the gate did, and the record sought."""

    chain: Chain
    actor: str
    """Who tried, in words ("the tenant tenant-a", "node gpu-node-0's identity", "the tenant's job")."""
    action: str
    """What was tried, in words ("list pods in namespace firedrill-neighbour")."""
    query: RecordQuery | LineQuery | None = None
    """The audit record the gate's decision must have left (None: not known, e.g. the attempt was not made); on
    Slurm, the line of slurmctld's log."""
    gate: Gate = Gate.NOT_MADE
    answer: Answer | CommandAnswer | None = None
    why: str = ""
    """For NOT_MADE and UNCLEAR: why there is no claim (names the profile field to set); for LET_THROUGH: what
    got through, when more than the answer says."""
    since: int = 0
    """Byte offset of the audit log just before the attempt's request."""
    record: AuditRecord | LogLine | None = None
    log_readable: bool = True
    """False when the audit log could not be read (its path missing from the profile, or unreadable)."""
    log_problem: str = ""

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"chain": self.chain.value, "actor": self.actor, "action": self.action,
                               "gate": self.gate.value}
        if self.answer is not None:
            out["answer"] = self.answer.describe()
        if self.why:
            out["why"] = self.why
        if self.query is not None:
            out["record_sought"] = self.query.describe()
        if self.record is not None:
            out["record"] = self.record.summary()
        return out


@dataclass(frozen=True)
class Judged:
    verdict: Verdict
    message: str
    unrecorded: bool = False
    """A refusal whose record is missing from a readable audit log."""


def judge_attempt(attempt: Attempt) -> Judged:
    """PASS: stopped and recorded.  FAIL: let through, or stopped with no record in a readable log.
    INCONCLUSIVE: not made, an answer that says nothing of the gate, or a log that cannot be read."""
    chain, who = attempt.chain.value, f"{attempt.actor} tried to {attempt.action}"
    answered = f" ({attempt.answer.describe()})" if attempt.answer is not None else ""
    if attempt.gate is Gate.NOT_MADE:
        return Judged(Verdict.INCONCLUSIVE, f"{chain}: not tried: {attempt.actor} could not {attempt.action}: "
                                            f"{attempt.why}")
    if attempt.gate is Gate.UNCLEAR:
        return Judged(Verdict.INCONCLUSIVE, f"{chain}: {who}, and the answer says nothing of the gate{answered}"
                                            + (f": {attempt.why}" if attempt.why else ""))
    if attempt.gate is Gate.LET_THROUGH:
        what = f": {attempt.why}" if attempt.why else ""
        return Judged(Verdict.FAIL, f"{chain}: the gate let it through: {who}{answered}{what}")
    if attempt.record is not None:
        return Judged(Verdict.PASS, f"{chain}: {who}: stopped{answered}, recorded as {attempt.record.describe()}")
    sought = f" (sought: {attempt.query.describe()})" if attempt.query is not None else ""
    if not attempt.log_readable:
        return Judged(Verdict.INCONCLUSIVE, f"{chain}: {who}: stopped{answered}, but its record cannot be looked "
                                            f"for: {attempt.log_problem}")
    return Judged(Verdict.FAIL, f"{chain}: {who}: stopped{answered}, but the audit log holds no record of it"
                                f"{sought}", unrecorded=True)


@dataclass(frozen=True)
class ChainTally:
    """What a chain's attempts add up to: the evidence's numbers and the messages behind a FAIL or INCONCLUSIVE."""

    chain: Chain
    let_through: int
    unrecorded: int
    recorded: int
    failures: tuple[str, ...] = ()
    unknowns: tuple[str, ...] = ()
    passes: tuple[str, ...] = ()
    digests: tuple[str, ...] = field(default=())

    @property
    def verdict(self) -> Verdict:
        if self.failures:
            return Verdict.FAIL
        if self.unknowns or not self.passes:
            return Verdict.INCONCLUSIVE
        return Verdict.PASS


def judge_chain(chain: Chain, attempts: list[Attempt]) -> ChainTally:
    """The tally of ``chain``'s attempts (the others are left out).  A chain with no attempt judged is
    INCONCLUSIVE: it proves nothing."""
    mine = [a for a in attempts if a.chain is chain]
    judged = [(a, judge_attempt(a)) for a in mine]
    return ChainTally(
        chain,
        let_through=sum(a.gate is Gate.LET_THROUGH for a in mine),
        unrecorded=sum(j.unrecorded for _, j in judged),
        recorded=sum(j.verdict is Verdict.PASS for _, j in judged),
        failures=tuple(j.message for _, j in judged if j.verdict is Verdict.FAIL),
        unknowns=tuple(j.message for _, j in judged if j.verdict is Verdict.INCONCLUSIVE),
        passes=tuple(j.message for _, j in judged if j.verdict is Verdict.PASS),
        digests=tuple(a.record.digest for a, j in judged if j.verdict is Verdict.PASS and a.record is not None))
