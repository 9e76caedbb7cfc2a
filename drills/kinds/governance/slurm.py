"""The governance drill on a Slurm cluster: the tenant, its own Unix user, crosses each control chain with Slurm's
own commands, and each refusal is found on record in slurmctld's log (docs/SLURM.md, "What governance does there").
The log lines sought are Slurm 22.05's (measured on ``tests/realslurm``'s cluster).

Slurm knows a user by the uid munge vouches for, so the tenant's commands run through the profile's
``slurm.governance.tenant_command`` (``sudo -n -u alice --``, ``runuser -u alice --``, ``ssh alice@login``). The
chains, as Slurm has them:

- admission and quota: the tenant's QOS (``tenant_qos``) limits the GPUs its running jobs hold together
  (``GrpTRES=gres/gpu=N``); a job over what it leaves is refused at submission (``DenyOnLimit``) or held pending
  with a reason naming the limit (``QOSGrpGRES``); jobs sent at once, each within it, never run over it together;
- access: a job in a partition its account may not use (``other_partition``) is refused; the tenant may not raise
  its own job's priority, the scheduler's (and an operator's) work; Slurm has no node identity a tenant could
  borrow (a node's slurmd authenticates as its root through munge), so that attempt is not made, saying why;
- priority: a job at a QOS the tenant was not given (``restricted_qos``) is refused; a job of the tenant's that
  needs the GPUs a job of the harness holds waits, and never preempts it;
- change control: the tenant drains a node, cancels another user's job, deletes a node: each refused.

A refusal is recorded where slurmctld logs it (``controller_log``): ``Security violation, UPDATE_NODE RPC from
uid=999``, ``exceeded association/QOS limit for user 999: QOSGrpGRES``. A job held by a limit is recorded by
slurmctld's own account of it (``scontrol show job``: ``Reason=QOSGrpGRES``), a line whose digest goes into the
evidence like a log line's. Whatever got through is undone: a drained node resumed, the tenant's jobs cancelled
(as the tenant), the harness's own jobs cancelled.
"""

from __future__ import annotations

import itertools
import logging
import shlex
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drills.kinds.governance.audit import AuditLogError
from drills.kinds.governance.chains import Attempt, Chain, Gate
from drills.kinds.governance.drill import GovernanceDrill, burst_size
from drills.kinds.governance.textlog import CommandAnswer, LineQuery, LogLine, TextLog
from drills.records.verdict import Measurement
from drills.scenario.drill import slurm_side
from drills.slurm.state import JobState, SlurmError, SlurmJob, SlurmNode

__all__ = ["SlurmGovernanceDrill", "limit_reason", "qos_gpu_limit"]

log = logging.getLogger(__name__)

COMMAND_TIMEOUT_S = 30.0
START_TIMEOUT_S = 30.0
JOB_MINUTES = 5
"""Every job the drill submits ends on its own after this long (a dead run leaves nothing running for long)."""
LIMIT_REASONS = ("QOSGrp", "QOSMax", "AssocGrp", "AssocMax", "QOSMin")
"""Pending reasons that name an accounting limit (``QOSGrpGRES``, ``AssocGrpGRES``, ``QOSMaxGRESPerJob``, ...)."""
HELD = "JobId="
"""How the record of a held job begins (slurmctld's account of it, not a log line)."""
POLICY = "violates accounting/QOS policy"
"""What sbatch says of a job refused for a limit (``DenyOnLimit``)."""


def qos_gpu_limit(grp_tres: str) -> int | None:
    """The GPUs of a QOS's ``GrpTRES`` (``cpu=8,gres/gpu=4``), or None when it limits no GPUs."""
    for part in grp_tres.split(","):
        key, _, value = part.strip().partition("=")
        if key == "gres/gpu" and value.strip().isdigit():
            return int(value)
    return None


def _refused(answer: CommandAnswer) -> bool:
    """How Slurm's clients say slurmctld refused the user: ``Invalid user id`` (node updates),
    ``Access/permission denied`` (jobs)."""
    said = answer.said.lower()
    return "invalid user id" in said or "permission denied" in said


def limit_reason(reason: str) -> bool:
    """Whether a pending job's reason names an accounting limit (it is held by the quota, not waiting for room)."""
    return reason.startswith(LIMIT_REASONS)


@dataclass
class Held:
    """Tenant jobs whose gate is judged by watching: they must never run (the quota holds them), or one must wait
    for the GPUs a harness job holds without preempting it. Each job with the attempt that submitted it."""

    jobs: dict[int, Attempt] = field(default_factory=dict)
    gpus_each: int = 0
    leaves: int = 0
    action: str = ""
    holder: int | None = None
    """The harness's job that must keep running (the preemption chain)."""


def allowed(nodes: list[SlurmNode], feature: str) -> list[SlurmNode]:
    """The nodes carrying the profile's ``safety.allow_feature``: the only ones the drill acts on."""
    return [n for n in nodes if feature in n.features]


@slurm_side(GovernanceDrill)
@dataclass
class SlurmGovernanceDrill(GovernanceDrill):
    """The governance drill on a Slurm cluster (``target`` is a :class:`drills.target.slurmtarget.SlurmTarget`)."""

    tenant_uid: str = ""
    tenant_jobs: list[int] = field(default_factory=list)
    own_jobs: list[int] = field(default_factory=list)
    drained: list[str] = field(default_factory=list)
    held_quota: Held | None = None
    held_burst: Held | None = None
    held_preemption: Held | None = None
    _used_lines: set[int] = field(default_factory=set)
    _names: Any = field(default_factory=itertools.count)
    _ready: bool = False

    # ------------------------------------------------------------------ setup
    @property
    def _gov(self) -> Any:
        assert self.target.profile.slurm is not None
        return self.target.profile.slurm.governance

    def prepare(self) -> None:
        """The tenant's identity (its uid, through ``tenant_command``) and slurmctld's log; whatever is missing is
        said once, as INCONCLUSIVE naming the profile field; nothing raises."""
        if self._ready:
            return
        self._ready = True
        self.result.drill = "governance"
        gov = self._gov
        if gov.controller_log is None:
            self.audit_problem = ("slurmctld's log is not named: set slurm.governance.controller_log to its "
                                  "SlurmctldLogFile as this machine reads it")
        else:
            self.audit = TextLog(Path(gov.controller_log), "slurmctld's log")  # the record, as the audit log is
            try:
                self.audit.end()
            except AuditLogError as exc:
                self.audit, self.audit_problem = None, (f"{exc}; set slurm.governance.controller_log to the "
                                                        "SlurmctldLogFile as this machine reads it")
        if self.audit_problem:
            self._say(f"governance: {self.audit_problem}")
        self.result.details["governance"] = {"audit_log": self._log_name(), "attempts": []}
        if not gov.tenant_command:
            self.tenant_problem = ("the tenant's commands need its own Unix user: set slurm.governance.tenant_command"
                                   " (e.g. [sudo, -n, -u, alice, --])")
            return
        uid, name = self._as_tenant("id", "-u"), self._as_tenant("id", "-un")
        if uid.code != 0 or not uid.stdout.strip().isdigit():
            self.tenant_problem = f"slurm.governance.tenant_command does not run a command as the tenant: {uid.describe()}"
            return
        self.tenant_uid, self.tenant_user = uid.stdout.strip(), name.stdout.strip() or None
        if self.tenant_uid == "0":
            self.tenant_problem = ("slurm.governance.tenant_command runs commands as root, an operator: name a "
                                   "tenant's own user")

    def _log_name(self) -> str:
        return "slurmctld's log (slurm.governance.controller_log)" if self.audit is not None else "none"

    def _conf_env(self) -> list[str]:
        conf = self.target.profile.slurm.conf
        return ["env", f"SLURM_CONF={conf}"] if conf else []

    def _as_tenant(self, *argv: str) -> CommandAnswer:
        """``argv`` run as the tenant (``tenant_command``), with the cluster's slurm.conf."""
        full = [*self._gov.tenant_command, *self._conf_env(), *argv]
        try:
            proc = subprocess.run(full, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S,
                                  stdin=subprocess.DEVNULL, cwd="/")
        except (OSError, subprocess.TimeoutExpired) as exc:
            return CommandAnswer(argv[0], -1, stderr=f"{shlex.join(full)}: {exc}")
        return CommandAnswer(argv[0], proc.returncode, proc.stdout, proc.stderr)

    def _tenant_actor(self) -> str:
        who = self.tenant_user or "the tenant"
        return f"the tenant {who} (uid {self.tenant_uid})" if self.tenant_uid else "the tenant"

    def _need_tenant(self, chain: Chain, action: str, *fields: tuple[str, Any]) -> bool:
        """Whether the tenant can make the attempt; if not, it is noted as not made, naming what is missing."""
        self.prepare()
        missing = [name for name, value in fields if value is None]
        why = self.tenant_problem or (f"set slurm.governance.{missing[0]} in the target profile (docs/SLURM.md)"
                                      if missing else "")
        if why:
            self._not_made(chain, self._tenant_actor(), action, why)
            return False
        return True

    # --------------------------------------------------------------- attempts
    def _name(self) -> str:
        """A new name for a job of the tenant's (``gov-<run id>-<n>``; thread-safe)."""
        return f"gov-{self.run_id}-{next(self._names) + 1}"

    def _submit_args(self, name: str, *extra: str) -> list[str]:
        return ["sbatch", "--parsable", f"--job-name={name}", f"--time={JOB_MINUTES}", "--output=/dev/null",
                "--chdir=/tmp", *extra, "--wrap", f"sleep {JOB_MINUTES * 60}"]

    def _tenant_submit(self, chain: Chain, action: str, refused: LineQuery, *options: str,
                       refused_if: Callable[[CommandAnswer], bool]) -> tuple[Attempt, int | None]:
        """The tenant submits a job; refused (an exit that ``refused_if`` recognises): its record is ``refused``;
        accepted: the job's id (cancelled at rollback) and the attempt, its gate left to the caller."""
        since = self._since()
        answer = self._as_tenant(*self._submit_args(self._name(), *options))
        job = answer.stdout.strip().split(";")[0] if answer.code == 0 else ""
        if answer.code == 0 and job.isdigit():
            self.tenant_jobs.append(int(job))
            return Attempt(chain, self._tenant_actor(), action, None, Gate.UNCLEAR, answer, "", since), int(job)
        gate = Gate.REFUSED if answer.code > 0 and refused_if(answer) else Gate.UNCLEAR
        why = "" if gate is Gate.REFUSED else "sbatch failed for a reason that is not this gate's"
        attempt = Attempt(chain, self._tenant_actor(), action, refused, gate, answer, why, since)
        self._add(attempt)
        return attempt, None

    def _tenant_command(self, chain: Chain, action: str, argv: list[str], record: LineQuery,
                        refused_if: Callable[[CommandAnswer], bool]) -> Attempt:
        since = self._since()
        answer = self._as_tenant(*argv)
        if answer.code == 0:
            gate = Gate.LET_THROUGH
        elif answer.code > 0 and refused_if(answer):
            gate = Gate.REFUSED
        else:
            gate = Gate.UNCLEAR
        attempt = Attempt(chain, self._tenant_actor(), action, record, gate, answer, "", since)
        self._add(attempt)
        return attempt

    def _violation(self, rpc: str, *more: str) -> LineQuery:
        """slurmctld's line for an RPC it refused the tenant: ``error: Security violation, UPDATE_NODE RPC from
        uid=999`` (22.05)."""
        return LineQuery((f"Security violation, {rpc} RPC", *more))

    def _over_limit(self) -> LineQuery:
        """slurmctld's line for a job refused over a limit (``DenyOnLimit``): ``_job_create: exceeded
        association/QOS limit for user 999: QOSGrpGRES``."""
        return LineQuery((f"exceeded association/QOS limit for user {self.tenant_uid}:",))

    # ---------------------------------------------------------------- quota
    def _quota_left(self, action: str) -> int | None:
        """GPUs the tenant's QOS leaves (its ``GrpTRES`` GPU limit less what its running jobs hold), read once a
        scenario; None after noting why no attempt can be made (or a FAIL when the QOS limits no GPUs)."""
        chain = Chain.ADMISSION_AND_QUOTA
        if not self._need_tenant(chain, action, ("tenant_qos", self._gov.tenant_qos)):
            return None
        if self._left is not None:
            return self._left
        qos = self._gov.tenant_qos
        try:
            raw = self.target.driver.run("sacctmgr", "-n", "-P", "show", "qos", qos, "format=Name,GrpTRES").strip()
            jobs = self.target.driver.jobs()
        except SlurmError as exc:
            self._add(Attempt(chain, self._tenant_actor(), action, gate=Gate.NOT_MADE,
                              why=f"QOS {qos}'s limits could not be read: {exc}"))
            return None
        name, _, grp_tres = (raw.splitlines()[0] if raw else "").partition("|")
        limit = qos_gpu_limit(grp_tres)
        if limit is None:
            shown = f"GrpTRES {grp_tres!r}" if name else f"sacctmgr knows no QOS named {qos}"
            self._add(Attempt(chain, self._tenant_actor(), action, gate=Gate.LET_THROUGH,
                              why=f"QOS {qos} has no GrpTRES limit on gres/gpu ({shown}), so nothing holds a job of "
                                  "any size: the chain has no gate"))
            return None
        used = sum(j.gpus_held for j in jobs if j.qos == qos and j.state is JobState.RUNNING)
        self.result.details["governance"]["quota"] = {"qos": qos, "gpu_limit": limit, "used": used}
        self._left = max(0, limit - used)
        return self._left

    def _quota_words(self) -> str:
        quota = self.result.details["governance"].get("quota") or {}
        return f"QOS {quota.get('qos')} allows {quota.get('gpu_limit')} GPUs ({quota.get('used')} held)"

    def _qos_options(self) -> list[str]:
        gov, slurm = self._gov, self.target.profile.slurm
        return ([f"--partition={slurm.partition}", f"--qos={gov.tenant_qos}"]
                + ([f"--account={gov.tenant_account}"] if gov.tenant_account else []))

    def _over_quota(self, action: str, shape: Callable[[int], list[str]]) -> None:
        chain = Chain.ADMISSION_AND_QUOTA
        left = self._quota_left(action)
        if left is None:
            return
        gpus = left + 1
        record = self._over_limit()
        attempt, job = self._tenant_submit(chain, f"{action} ({gpus} GPUs, over what its QOS leaves)", record,
                                           *self._qos_options(), *shape(gpus),
                                           refused_if=lambda a: POLICY in a.said)
        if job is not None:
            self.held_quota = self.held_quota or Held()
            self.held_quota.jobs[job] = attempt

    def quota_pod(self) -> None:
        """The tenant submits a job of one task asking one GPU more than its QOS leaves."""
        self._over_quota("submit a job of one task", lambda gpus: ["--ntasks=1", f"--gpus={gpus}"])

    def quota_job(self) -> None:
        """The tenant submits a job of two tasks asking, together, one GPU more than its QOS leaves."""
        self._over_quota("submit a job of two tasks", lambda gpus: ["--ntasks=2", f"--gpus={gpus}"])

    def quota_at_once(self) -> None:
        """The tenant submits several jobs at the same instant, each within what its QOS leaves and together over
        it; the ones refused are judged by their records, the ones accepted by the watch that follows."""
        chain, action = Chain.ADMISSION_AND_QUOTA, "submit several jobs at once, each within its QOS, over it together"
        left = self._quota_left(action)
        if left is None:
            return
        count, each = burst_size(left)
        record = self._over_limit()
        with ThreadPoolExecutor(max_workers=count) as pool:
            answers = list(pool.map(lambda _: self._tenant_submit(
                chain, f"submit one of {count} jobs of {each} GPU(s) at once", record, *self._qos_options(),
                "--ntasks=1", f"--gpus={each}", refused_if=lambda a: POLICY in a.said), range(count)))
        accepted = {job: attempt for attempt, job in answers if job is not None}
        if accepted:
            self.held_burst = Held(accepted, gpus_each=each, leaves=left,
                                   action=f"submit {count} jobs of {each} GPU(s) at once, {left} GPU(s) left")

    def watch_over_quota(self, seconds: float) -> None:
        """For ``seconds``: the jobs over the quota never run; the jobs sent at once never hold more GPUs together
        than the QOS left. What still pends then pends for a reason naming the limit, or the gate is not shown."""
        self.prepare()
        quota, burst = self.held_quota, self.held_burst
        watched = [j for h in (quota, burst) if h is not None for j in h.jobs]
        ran: dict[int, str] = {}
        burst_most = 0
        last: dict[int, SlurmJob] = {}
        clock = self.target.timeline.clock
        deadline = clock.mono() + seconds
        while watched:
            last = {**last, **self._jobs(watched)}
            running = {j: job for j, job in last.items() if job.state is JobState.RUNNING}
            for job in running.values():
                ran[job.job_id] = f"running on {', '.join(job.nodes) or '?'} with {job.gpus_held} GPU(s)"
            if burst is not None:
                burst_most = max(burst_most, sum(running[j].gpus_held for j in burst.jobs if j in running))
            if clock.mono() >= deadline:
                break
            self.pause(min(0.25, max(0.0, deadline - clock.mono())))
        over = [j for j in (quota.jobs if quota else {}) if j in ran]
        self.result.measure(Measurement("admission-and-quota: jobs over the quota running", float(len(over)), "jobs",
                                        note="; ".join(f"job {j}: {s}" for j, s in sorted(ran.items()))))
        for job_id, attempt in (quota.jobs.items() if quota else ()):
            self._judge_held(attempt, job_id, last.get(job_id), ran.get(job_id))
        self.held_quota = None
        if burst is None:
            return
        self.result.details["governance"]["burst"] = {"gpus_each": burst.gpus_each, "leaves": burst.leaves,
                                                      "accepted": sorted(burst.jobs),
                                                      "gpus_running_at_once": burst_most}
        if burst_most > burst.leaves:
            self._add(Attempt(Chain.ADMISSION_AND_QUOTA, self._tenant_actor(), burst.action, gate=Gate.LET_THROUGH,
                              why=f"its jobs {', '.join(map(str, sorted(burst.jobs)))} held {burst_most} GPUs at "
                                  f"once, though {self._quota_words()}"))
        elif len(burst.jobs) * burst.gpus_each > burst.leaves:
            for job_id, attempt in burst.jobs.items():
                if job_id not in ran:  # the ones that fit ran; the others must be held by the limit
                    self._judge_held(attempt, job_id, last.get(job_id), None)
        self.held_burst = None

    def _jobs(self, ids: list[int]) -> dict[int, SlurmJob]:
        try:
            return {j.job_id: j for j in self.target.driver.jobs(ids)}
        except SlurmError as exc:
            log.warning("governance on Slurm: squeue: %s", exc)
            return {}

    def _judge_held(self, attempt: Attempt, job_id: int, job: SlurmJob | None, ran: str | None) -> None:
        """One accepted tenant job the gate had to hold: let through if it ran; refused (held) if it still pends
        for a reason naming the limit, its record slurmctld's own account of the job; otherwise no claim."""
        attempt.action = f"{attempt.action}: job {job_id}"
        if ran is not None:
            attempt.gate, attempt.why = Gate.LET_THROUGH, f"job {job_id} ran ({ran}), though {self._quota_words()}"
        elif job is not None and job.state is JobState.PENDING and limit_reason(job.reason):
            self._held(attempt, job_id, job.reason)
        else:
            state = f"{job.state.value}, reason {job.reason}" if job is not None else "gone"
            attempt.gate, attempt.why = Gate.UNCLEAR, (f"job {job_id} did not run but is {state}: not held by the "
                                                       "limit, so the gate was not shown")
        self._add(attempt)

    def _held(self, attempt: Attempt, job_id: int, reason: str) -> None:
        """The gate held the tenant's job (it pends for ``reason``): refused, its record slurmctld's own account of
        the job (``scontrol show job -o``), the line naming that reason, read now while the job is there."""
        attempt.gate = Gate.REFUSED
        attempt.query = LineQuery((f"{HELD}{job_id} ", f"Reason={reason}"))
        try:
            text = self.target.driver.run("scontrol", "show", "job", "-o", str(job_id)).strip()
        except SlurmError as exc:
            log.warning("governance on Slurm: scontrol show job %s: %s", job_id, exc)
            return
        line = text.splitlines()[0] if text else ""
        if attempt.query.matches(line + " "):
            attempt.record = LogLine.of(line, 0, f"slurmctld's account of job {job_id}")

    # ----------------------------------------------------------------- access
    def other_namespace(self) -> None:
        """The tenant submits a job to a partition its account may not use: refused (``EnforcePartLimits``), or
        accepted and held there for that reason, never run."""
        chain = Chain.ACCESS
        partition = self._gov.other_partition
        action = f"submit a job to partition {partition}, which its account may not use"
        if not self._need_tenant(chain, action, ("other_partition", partition)):
            return
        options = [f"--partition={partition}"] + ([f"--account={self._gov.tenant_account}"]
                                                   if self._gov.tenant_account else [])
        record = LineQuery(("Job's account not permitted to use this partition", f"({partition} allows"))
        attempt, job = self._tenant_submit(chain, action, record, *options,
                                           refused_if=lambda a: "account/partition" in a.said)
        if job is not None:
            self._judge_settled(attempt, job, lambda reason: "not permitted" in reason or "NotAllowed" in reason)

    def _judge_settled(self, attempt: Attempt, job_id: int, held_for: Callable[[str], bool]) -> None:
        """A tenant job the gate should have refused was accepted: let through if it runs, refused (held) if it
        pends for the gate's reason (its record slurmctld's account of it), else no claim; after a few seconds."""
        clock = self.target.timeline.clock
        deadline = clock.mono() + START_TIMEOUT_S / 6
        job = None
        while clock.mono() < deadline:
            job = self._jobs([job_id]).get(job_id)
            if job is not None and (job.state is not JobState.PENDING or job.reason not in ("None", "")):
                break
            self.pause(0.25)
        if job is not None and job.state is JobState.PENDING and held_for(job.reason):
            self._held(attempt, job_id, job.reason.split()[0])
        elif job is not None and job.state in (JobState.RUNNING, JobState.COMPLETING, JobState.COMPLETED):
            attempt.gate, attempt.why = Gate.LET_THROUGH, f"slurmctld accepted it as job {job_id}, which ran"
        else:
            state = f"{job.state.value}, reason {job.reason}" if job is not None else "gone"
            attempt.gate, attempt.why = Gate.UNCLEAR, f"slurmctld accepted it as job {job_id}, now {state}"
        self._add(attempt)

    def binding(self) -> None:
        """The tenant raises its own waiting job's priority above what the scheduler gave it, the scheduler's (and
        an operator's) work: refused. (The job waits for a begin time an hour ahead: a job held with ``--hold`` has
        priority 0, which slurmctld will not change for anyone until it is released.)"""
        chain = Chain.ACCESS
        action = "raise its own waiting job's priority, as only the scheduler or an operator may"
        if not self._need_tenant(chain, action):
            return
        answer = self._as_tenant(*self._submit_args(self._name(), "--begin=now+1hour",
                                                    f"--partition={self.target.profile.slurm.partition}",
                                                    *([f"--qos={self._gov.tenant_qos}"] if self._gov.tenant_qos
                                                      else [])))
        job = answer.stdout.strip().split(";")[0]
        if answer.code != 0 or not job.isdigit():
            self._not_made(chain, self._tenant_actor(), action, f"the tenant's own job could not be submitted: "
                                                                f"{answer.describe()}")
            return
        self.tenant_jobs.append(int(job))
        try:
            shown = self.target.driver.run("scontrol", "show", "job", "-o", job)
        except SlurmError as exc:
            self._not_made(chain, self._tenant_actor(), action, f"its job {job} could not be read: {exc}")
            return
        now = next((int(w.split("=", 1)[1]) for w in shown.split() if w.startswith("Priority=")
                    and w.split("=", 1)[1].isdigit()), 0)
        wanted = min(now + 1000, 4294967294)  # above what it has: a lowering is a user's right (nice)
        self._tenant_command(chain, f"{action} (job {job}, from {now} to {wanted})",
                             ["scontrol", "update", f"jobid={job}", f"priority={wanted}"],
                             LineQuery((f"_slurm_rpc_update_job: JobId={job} uid={self.tenant_uid}:",
                                        "Access/permission denied")),
                             refused_if=lambda a: "denied" in a.said.lower())

    def node_lease(self) -> None:
        """Slurm has no node identity a tenant could borrow: not made, saying why."""
        self._not_made(Chain.ACCESS, "a node's identity", "write another node's heartbeat",
                       "Slurm has no such thing to drill: a node's slurmd authenticates to slurmctld as that node's "
                       "root through munge, and no per-node credential exists that a tenant could hold")

    # --------------------------------------------------------------- priority
    def restricted_class(self) -> None:
        """The tenant submits a job at a QOS it was not given: refused."""
        chain = Chain.PRIORITY
        qos = self._gov.restricted_qos
        action = f"submit a job at QOS {qos}, which it was not given"
        if not self._need_tenant(chain, action, ("restricted_qos", qos)):
            return
        record = LineQuery((f"user='{self.tenant_user}'", f"does not have access to qos {qos}"))
        attempt, job = self._tenant_submit(chain, action, record,
                                           f"--partition={self.target.profile.slurm.partition}", f"--qos={qos}",
                                           refused_if=lambda a: "Invalid qos" in a.said)
        if job is not None:
            attempt.gate, attempt.why = Gate.LET_THROUGH, f"slurmctld accepted it as job {job}"
            self._add(attempt)

    def preemption(self) -> None:
        """The harness holds every free GPU of one node with a job of its own; the tenant submits a job of one GPU
        pinned to that node. It must wait: the harness's job keeps running."""
        chain = Chain.PRIORITY
        action = "run a job of one GPU on a node whose GPUs a job of the harness holds"
        if not self._need_tenant(chain, action):
            return
        slurm = self.target.profile.slurm
        try:
            nodes = allowed(self.target.nodes(), slurm.allow_feature)
        except SlurmError as exc:
            self._not_made(chain, self._tenant_actor(), action, f"the cluster's nodes could not be read: {exc}")
            return
        free = {n.name: n.gpus - n.gpus_used for n in nodes if n.serving and n.gpus - n.gpus_used > 0}
        if not free:
            self._not_made(chain, self._tenant_actor(), action, "no node the profile allows has a free GPU")
            return
        node = sorted(free)[0]
        holder = self._own_job(chain, action, "holder", f"--nodelist={node}", "--nodes=1",
                               f"--gres={slurm.gres}:{free[node]}")
        if holder is None:
            return
        if not self._wait_job(holder, JobState.RUNNING):
            self._not_made(chain, self._tenant_actor(), action, f"the harness's job {holder} holding node {node}'s "
                                                                f"{free[node]} GPU(s) never ran")
            return
        action = f"run a job of one GPU on node {node}, whose {free[node]} GPU(s) the harness's job {holder} holds"
        options = [f"--nodelist={node}", f"--gres={slurm.gres}:1", f"--partition={slurm.partition}"]
        options += [f"--qos={self._gov.tenant_qos}"] if self._gov.tenant_qos else []
        attempt, job = self._tenant_submit(chain, action, LineQuery(()), *options, refused_if=lambda a: False)
        if job is None:
            attempt.why = "the tenant's job was not accepted, so whether it would preempt is not shown"
            return
        self.held_preemption = Held({job: attempt}, holder=holder)

    def _own_job(self, chain: Chain, action: str, role: str, *options: str) -> int | None:
        """A job of the harness's own (``gov-<run id>-<role>``, one task sleeping out its time limit), cancelled at
        rollback; None after noting the attempt as not made."""
        try:
            job = self.target.driver.submit(f"#!/bin/sh\nexec sleep {JOB_MINUTES * 60}\n", [
                f"--job-name=gov-{self.run_id}-{role}", "--ntasks=1", f"--time={JOB_MINUTES}", "--output=/dev/null",
                *options, *self.target.profile.slurm.sbatch_options()])
        except SlurmError as exc:
            self._not_made(chain, self._tenant_actor(), action, f"the harness's own job could not be submitted: {exc}")
            return None
        self.own_jobs.append(job)
        return job

    def _wait_job(self, job_id: int, state: JobState) -> bool:
        clock = self.target.timeline.clock
        deadline = clock.mono() + START_TIMEOUT_S
        while clock.mono() < deadline:
            job = self._jobs([job_id]).get(job_id)
            if job is not None and job.state is state:
                return True
            self.pause(0.25)
        return False

    def watch_preemption(self, seconds: float) -> None:
        """For ``seconds`` the harness's job keeps running (the same run: not requeued) and the tenant's job does
        not run; then the tenant's job, still pending, is held, its record slurmctld's account of it."""
        self.prepare()
        held = self.held_preemption
        if held is None or held.holder is None:
            return
        (job_id, attempt), holder = next(iter(held.jobs.items())), held.holder
        clock = self.target.timeline.clock
        deadline = clock.mono() + seconds
        first = self._jobs([holder]).get(holder)
        broke = ""
        last: SlurmJob | None = None
        while not broke:
            jobs = self._jobs([job_id, holder])
            last = jobs.get(job_id, last)
            now = jobs.get(holder)
            if now is None or now.state is not JobState.RUNNING or (first is not None
                                                                    and now.restarts != first.restarts):
                broke = f"the harness's job {holder} stopped running ({now.state.value if now else 'gone'})"
            elif last is not None and last.state is JobState.RUNNING:
                broke = f"the tenant's job {job_id} ran on {', '.join(last.nodes)}"
            if clock.mono() >= deadline:
                break
            self.pause(min(0.25, max(0.0, deadline - clock.mono())))
        if broke:
            attempt.gate, attempt.why = Gate.LET_THROUGH, broke
        elif last is not None and last.state is JobState.PENDING:
            self._held(attempt, job_id, last.reason)
        else:
            attempt.gate, attempt.why = Gate.UNCLEAR, f"the tenant's job {job_id} is {last.state.value if last else 'gone'}"
        self._add(attempt)
        self.held_preemption = None

    # --------------------------------------------------------- change control
    def _node(self, chain: Chain, action: str) -> str | None:
        if not self._need_tenant(chain, action):
            return None
        try:
            nodes = allowed(self.target.nodes(), self.target.profile.slurm.allow_feature)
        except SlurmError as exc:
            self._not_made(chain, self._tenant_actor(), action, f"the cluster's nodes could not be read: {exc}")
            return None
        if not nodes:
            self._not_made(chain, self._tenant_actor(), action, "no node carries the profile's "
                                                                "safety.allow_feature")
            return None
        return sorted(n.name for n in nodes)[0]

    def cordon(self) -> None:
        """The tenant drains a node: refused (one that got through is resumed at rollback)."""
        chain = Chain.CHANGE_CONTROL
        node = self._node(chain, "drain a node")
        if node is None:
            return
        attempt = self._tenant_command(chain, f"drain node {node}", ["scontrol", "update", f"nodename={node}",
                                                                     "state=drain", "reason=firedrill-governance"],
                                       self._violation("UPDATE_NODE", f"uid={self.tenant_uid}"),
                                       refused_if=_refused)
        if attempt.gate is Gate.LET_THROUGH:
            self.drained.append(node)

    def evict(self) -> None:
        """The harness runs a job of its own; the tenant cancels it: refused."""
        chain = Chain.CHANGE_CONTROL
        action = "cancel another user's job"
        if not self._need_tenant(chain, action):
            return
        victim = self._own_job(chain, action, "victim")
        if victim is None:
            return
        self._tenant_command(chain, f"cancel job {victim}, the harness's", ["scancel", str(victim)],
                             self._violation("REQUEST_KILL_JOB", f"JobId={victim} from uid {self.tenant_uid}"),
                             refused_if=_refused)

    def delete_node(self) -> None:
        """The tenant deletes a node: refused."""
        chain = Chain.CHANGE_CONTROL
        node = self._node(chain, "delete a node")
        if node is None:
            return
        self._tenant_command(chain, f"delete node {node}", ["scontrol", "delete", f"nodename={node}"],
                             self._violation("DELETE_NODE", f"uid={self.tenant_uid}"),
                             refused_if=_refused)

    # ------------------------------------------------------------------ judge
    def _look_up(self, attempts: list[Attempt]) -> None:
        """Each refusal's line in slurmctld's log (each line recording one refusal only), waiting up to
        ``record_wait_seconds`` in all; a held job's record was read when it was judged."""
        clock = self.target.timeline.clock
        deadline = clock.mono() + self._gov.record_wait_seconds
        for attempt in attempts:
            attempt.log_readable, attempt.log_problem = self.audit is not None, self.audit_problem
            if attempt.gate is not Gate.REFUSED or attempt.record is not None:
                continue
            if not isinstance(attempt.query, LineQuery) or not attempt.query.needles \
                    or not isinstance(self.audit, TextLog):
                continue
            if attempt.query.needles[0].startswith(HELD):
                continue  # a held job: slurmctld's account of it was read then (:meth:`_held`), or it was not there
            try:
                attempt.record = self.audit.wait_for(attempt.query, attempt.since, max(0.0, deadline - clock.mono()),
                                                        clock.mono, threading.Event().wait,
                                                        exclude=self._used_lines)
            except AuditLogError as exc:
                attempt.log_readable, attempt.log_problem = False, str(exc)
            if attempt.record is not None:
                self._used_lines.add(attempt.record.offset)

    def _record_found(self, chain: str, rec: Any) -> None:
        self.target.timeline.action("audit record found", chain=chain, sha256=rec.digest, record=rec.describe())

    # ------------------------------------------------------------------ rollback
    def rollback(self) -> None:
        """Resume a node a drain got through on, cancel the tenant's jobs (as the tenant) and the harness's own."""
        for node in self.drained:
            try:
                self.target.driver.run("scontrol", "update", f"nodename={node}", "state=resume")
            except SlurmError as exc:
                log.warning("governance rollback: could not resume node %s: %s", node, exc)
        if self.tenant_jobs and self._gov.tenant_command:
            answer = self._as_tenant("scancel", *map(str, self.tenant_jobs))
            if answer.code != 0:
                log.warning("governance rollback: the tenant's jobs: %s", answer.describe())
        for job in self.own_jobs:
            try:
                self.target.driver.cancel(job)
            except SlurmError as exc:
                log.warning("governance rollback: job %s: %s", job, exc)
