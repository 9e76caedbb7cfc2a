"""The real Slurm the drills meet (issue 47, item 4): it starts in about a second and declares simulated GPUs as
GRES that Slurm binds and names to each step.  How it behaves when a node dies under a job (the node DOWN after
``SlurmdTimeout``, the job requeued, or ``NODE_FAIL`` with requeue off) is what the node-pull drill times and judges
on it (``test_nodepull.py``)."""

from __future__ import annotations

import os
import pwd
import re
import shlex
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.realslurm.cluster import (Accounting, SlurmCluster, SlurmClusterSpec, hostname_is_loopback,
                                     missing_accounting_binaries, running)

pytestmark = pytest.mark.realslurm

TIMEOUT_S = 1
"""A tuned ``SlurmdTimeout`` (upstream 300 s): a node silent this long is set DOWN; slurmctld pings every node about
every third of it."""
MESSAGE_TIMEOUT_S = 1
"""A tuned ``MessageTimeout`` (upstream 10 s): how long slurmctld waits for a ping's answer before the node is not
responding.  With upstream's 10 s no node is seen down sooner than 10 s, whatever ``SlurmdTimeout`` says."""
CRED_EXPIRE_S = 5
"""A tuned ``AuthInfo=cred_expire`` (upstream 120 s; 5 is the least slurmctld accepts): how long it holds a requeued
batch job before it may start again."""
SCHEDULING = "bf_interval=1,sched_interval=1"
"""Tuned scheduling loops (upstream: backfill every 30 s, the main loop every 60 s), so an eligible job starts in
seconds."""
TUNED = {"slurmd_timeout": TIMEOUT_S, "message_timeout": MESSAGE_TIMEOUT_S, "cred_expire": CRED_EXPIRE_S,
         "scheduler_parameters": SCHEDULING}
"""The settings a site tunes for fast healing, as the node-pull drill meets them (docs/SLURM.md)."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    with running(SlurmClusterSpec(tmp_path_factory.mktemp("slurm"), nodes=3, gpus_per_node=4, **TUNED)) as made:
        yield made


def submit(cluster: SlurmCluster, script: str, *options: str) -> int:
    path = cluster.root / f"job-{time.monotonic_ns()}.sh"
    path.write_text("#!/bin/bash\n" + script)
    out = cluster.run("sbatch", "--parsable", f"--output={cluster.root}/out-%j.txt", *options, str(path))
    return int(out.stdout.strip().split(";")[0])


def job(cluster: SlurmCluster, job_id: int) -> dict[str, Any]:
    (found,) = [j for j in cluster.json("squeue")["jobs"] if j["job_id"] == job_id]
    return found


def wait(predicate: Callable[[], bool], timeout: float, what: Callable[[], object]) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what()}"
        time.sleep(0.2)


def output(cluster: SlurmCluster, job_id: int) -> str:
    path = cluster.root / f"out-{job_id}.txt"
    return path.read_text() if path.exists() else ""


def test_every_node_is_up_with_its_gpus_declared(cluster: SlurmCluster) -> None:
    nodes = {n["name"]: n for n in cluster.json("sinfo")["nodes"]}
    assert sorted(nodes) == cluster.spec.node_names()
    assert {n["gres"] for n in nodes.values()} == {"gpu:4"}
    assert all(n["state"] == "idle" for n in nodes.values()), nodes


def test_each_step_is_told_its_rank_and_the_gpus_it_holds(cluster: SlurmCluster) -> None:
    job_id = submit(cluster, 'srun bash -c \'echo "rank=$SLURM_PROCID/$SLURM_NTASKS node=$SLURMD_NODENAME '
                             'cvd=$CUDA_VISIBLE_DEVICES step=$SLURM_STEP_GPUS"\'\n',
                    "--nodes=2", "--ntasks-per-node=1", "--gres=gpu:2")
    wait(lambda: job(cluster, job_id)["job_state"] == "COMPLETED", 20, lambda: job(cluster, job_id))
    lines = sorted(output(cluster, job_id).split())
    ranks = sorted(line for line in lines if line.startswith("rank="))
    assert ranks == ["rank=0/2", "rank=1/2"], lines
    assert lines.count("cvd=0,1") == 2 and lines.count("step=0,1") == 2, lines


@pytest.mark.skipif(not Path("/sys/fs/cgroup/devices/devices.allow").exists(),
                    reason="this machine has no cgroup v1 devices controller at /sys/fs/cgroup/devices, which Slurm "
                           "22.05's task/cgroup confines devices with")
def test_with_constrained_devices_a_step_opens_only_the_gpus_it_was_given(tmp_path: Path) -> None:
    """``ConstrainDevices=yes`` (task/cgroup, the devices controller of cgroup v1) works on this machine's Slurm:
    a step given GPUs 0 and 1 of a node reaches their device files (ENXIO: the cgroup let the open through, and no
    driver answers a simulated GPU) and is refused the others (EPERM: the cgroup).  The accelerator access drill's
    Slurm side will judge this (docs/SLURM.md, "Not yet")."""
    spec = SlurmClusterSpec(tmp_path / "slurm", nodes=1, gpus_per_node=4, constrain_devices=True, **TUNED)
    with running(spec) as made:
        devices = made.gpu_files(made.spec.node_names()[0])[0].parent
        probe = ("import errno, os\n"
                 f"d = {str(devices)!r}\n"
                 "def tried(n):\n"
                 "    try:\n"
                 "        os.close(os.open(os.path.join(d, n), os.O_RDWR))\n"
                 "        return 'opened'\n"
                 "    except OSError as e:\n"
                 "        return errno.errorcode[e.errno]\n"
                 "print('opens', os.environ.get('CUDA_VISIBLE_DEVICES'), "
                 "' '.join(n + '=' + tried(n) for n in sorted(os.listdir(d))))\n")
        job_id = submit(made, f"srun python3 -c {shlex.quote(probe)}\n", "--nodes=1", "--gres=gpu:2")
        wait(lambda: job(made, job_id)["job_state"] == "COMPLETED", 30, lambda: (job(made, job_id),
                                                                                 output(made, job_id)))
        said = output(made, job_id).split()
        assert said[:2] == ["opens", "0,1"], said
        assert said[2:] == ["nvidia0=ENXIO", "nvidia1=ENXIO", "nvidia2=EPERM", "nvidia3=EPERM"], said


# ---------------------------------------------------------------- accounting: a tenant's governance
# The governance drills' cluster (``SlurmClusterSpec(accounting=Accounting())``): MariaDB and slurmdbd of its own, the
# tenant ``firedrill-tenant`` in account ``tenant-a`` only, with only the QOS ``tenant-gpu`` (``GrpTRES=gres/gpu=4``,
# ``DenyOnLimit``); ``high`` is withheld from it, and the partition ``restricted`` allows only ``tenant-b``.  Every
# attempt below runs as the tenant (``cluster.as_tenant``), and each refusal is judged twice: by what the command says
# (exactly, with its exit status) and by the lines slurmctld's log gained (exactly, less their timestamps): the record
# of the refusal a governance drill looks for.

needs_accounting = pytest.mark.skipif(bool(missing_accounting_binaries()),
                                      reason=f"accounting needs {', '.join(missing_accounting_binaries())}: "
                                             "apt-get install mariadb-server slurmdbd")
OVER_LIMIT = ("sbatch: error: Batch job submission failed: Job violates accounting/QOS policy (job submit limit, "
              "user's size and/or time limits)")


@pytest.fixture(scope="module")
def governed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    if missing_accounting_binaries():
        pytest.skip("accounting needs mariadb-server and slurmdbd")
    spec = SlurmClusterSpec(tmp_path_factory.mktemp("governed"), nodes=2, gpus_per_node=4, accounting=Accounting(),
                            **TUNED)
    with running(spec) as made:
        yield made


def tenant_uid(cluster: SlurmCluster) -> int:
    assert cluster.spec.accounting is not None
    return pwd.getpwnam(cluster.spec.accounting.tenant_user).pw_uid


def tenant_script(cluster: SlurmCluster, body: str = "sleep 300\n") -> str:
    """A batch script in the tenant's folder, for it to submit."""
    path = cluster.tenant_dir / f"job-{time.monotonic_ns()}.sh"
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(0o644)
    return str(path)


def attempt(cluster: SlurmCluster, *argv: str, logged: str = "") -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """``argv`` as the tenant, and the lines slurmctld's log gained meanwhile, less their timestamps (waiting for
    one that holds ``logged``)."""
    mark = cluster.log_mark()
    proc = cluster.as_tenant(*argv)
    lines: list[str] = []

    def seen() -> bool:
        nonlocal lines
        lines = [line.split("] ", 1)[-1] for line in cluster.log_since(mark)]
        return any(logged in line for line in lines)
    wait(seen, 5, lambda: lines)
    print(f"as tenant: {' '.join(argv)} -> exit {proc.returncode}, stderr {proc.stderr.strip()!r}; slurmctld: {lines}")
    return proc, lines


def tenant_jobs(cluster: SlurmCluster) -> list[dict[str, Any]]:
    """The tenant's jobs in the queue: id, state, reason, GPUs."""
    assert cluster.spec.accounting is not None
    out = cluster.run("squeue", "-h", "-u", cluster.spec.accounting.tenant_user, "-o", "%i|%T|%r|%b|%D").stdout
    jobs = []
    for line in out.splitlines():
        job_id, state, reason, tres, nodes = line.split("|")
        gpus = int(tres.rsplit(":", 1)[1]) * int(nodes) if tres.startswith("gres:gpu:") else 0
        jobs.append({"id": int(job_id), "state": state, "reason": reason, "gpus": gpus})
    return jobs


def cancel_tenant_jobs(cluster: SlurmCluster) -> None:
    assert cluster.spec.accounting is not None
    cluster.run("scancel", "-u", cluster.spec.accounting.tenant_user)
    wait(lambda: not [j for j in tenant_jobs(cluster) if j["state"] in ("PENDING", "RUNNING", "COMPLETING")], 20,
         lambda: tenant_jobs(cluster))


@needs_accounting
def test_the_accounting_cluster_starts_in_seconds_with_the_tenant_s_governance(governed: SlurmCluster) -> None:
    timings = {name: round(seconds, 2) for name, seconds in governed.timings.items()}
    print(f"accounting cluster started: {timings}")
    assert governed.timings["accounting"] < 20 and governed.timings["total"] < 30, timings
    assocs = governed.run("sacctmgr", "-nP", "show", "assoc", "format=account,user,qos,defaultqos").stdout.split()
    assert "tenant-a|firedrill-tenant|tenant-gpu|tenant-gpu" in assocs, assocs
    assert not [a for a in assocs if a.startswith("tenant-b|firedrill-tenant")], assocs
    qos = governed.run("sacctmgr", "-nP", "show", "qos", "format=name,grptres,flags").stdout.split()
    assert "tenant-gpu|gres/gpu=4|DenyOnLimit" in qos and "high||" in qos, qos
    assert governed.as_tenant("id", "-u", check=True).stdout.strip() == str(tenant_uid(governed))
    partitions = governed.as_tenant("sinfo", "-h", "-o", "%P", check=True).stdout.split()
    assert partitions == ["gpu*", "restricted"], partitions
    # the tenant's job runs, as the tenant, its steps on both nodes (they read slurm.conf too)
    proc = governed.as_tenant("sbatch", "--parsable", "--nodes=2", "--gres=gpu:1",
                              tenant_script(governed, "id -u\nsrun bash -c 'echo $SLURMD_NODENAME'\n"), check=True)
    job_id = int(proc.stdout.strip())
    wait(lambda: job(governed, job_id)["job_state"] == "COMPLETED", 20, lambda: job(governed, job_id))
    said = (governed.tenant_dir / f"slurm-{job_id}.out").read_text().split()
    assert said[0] == str(tenant_uid(governed)) and sorted(said[1:]) == governed.spec.node_names(), said
    if hostname_is_loopback():
        listening = listening_addresses([p.pid for p in governed.procs.values()])
        assert set(listening) >= {"slurmctld", "slurmdbd", "mariadbd", "slurmd"}, listening
        assert {a for addrs in listening.values() for a in addrs} == {"127.0.0.1"}, listening


def listening_addresses(pids: list[int]) -> dict[str, set[str]]:
    """Each process's name -> the addresses its TCP sockets listen on (from /proc)."""
    inodes: dict[str, str] = {}
    for pid in pids:
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes[target[8:-1]] = name
        except OSError:
            continue
    found: dict[str, set[str]] = {}
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                raw = fields[1].split(":")[0]
                address = socket.inet_ntoa(bytes.fromhex(raw)[::-1]) if table == "tcp" else f"[{raw}]"
                found.setdefault(inodes[fields[9]], set()).add(address)
    return found


@needs_accounting
def test_a_job_over_the_qos_gpu_limit_is_refused_at_submission_under_deny_on_limit(governed: SlurmCluster) -> None:
    proc, log = attempt(governed, "sbatch", "--parsable", "--nodes=2", "--gres=gpu:3", tenant_script(governed),
                        logged="_slurm_rpc_submit_batch_job")
    assert (proc.returncode, proc.stderr.strip()) == (1, f"sbatch: error: QOSGrpGRES\n{OVER_LIMIT}"), proc
    assert f"_job_create: exceeded association/QOS limit for user {tenant_uid(governed)}: QOSGrpGRES" in log, log
    assert "_slurm_rpc_submit_batch_job: Job violates accounting/QOS policy (job submit limit, user's size and/or " \
           "time limits)" in log, log
    assert not tenant_jobs(governed)


@needs_accounting
def test_without_deny_on_limit_a_job_over_the_qos_gpu_limit_is_accepted_and_pends(tmp_path: Path) -> None:
    spec = SlurmClusterSpec(tmp_path / "slurm", nodes=2, gpus_per_node=4, accounting=Accounting(deny_on_limit=False),
                            **TUNED)
    with running(spec) as made:
        proc, log = attempt(made, "sbatch", "--parsable", "--nodes=2", "--gres=gpu:3", tenant_script(made),
                            logged="_slurm_rpc_submit_batch_job")
        assert proc.returncode == 0 and proc.stderr == "", proc
        job_id = int(proc.stdout.strip())
        submitted = [line for line in log if line.startswith("_slurm_rpc_submit_batch_job:")]
        assert len(submitted) == 1 and re.fullmatch(
            rf"_slurm_rpc_submit_batch_job: JobId={job_id} InitPrio=1 usec=\d+", submitted[0]), log
        # slurmctld's log holds no record of the limit: the job's reason is its only one
        assert not [line for line in log if "QOSGrpGRES" in line or "exceeded" in line], log
        time.sleep(3)  # three scheduling passes: it never starts
        assert tenant_jobs(made) == [{"id": job_id, "state": "PENDING", "reason": "QOSGrpGRES", "gpus": 6}]


@needs_accounting
def test_jobs_within_the_limit_run_together_only_up_to_it_the_rest_pend_on_the_qos(governed: SlurmCluster) -> None:
    try:
        ids = []
        for _ in range(3):
            proc = governed.as_tenant("sbatch", "--parsable", "--gres=gpu:2", tenant_script(governed), check=True)
            ids.append(int(proc.stdout.strip()))
        # the third job pends with reason None until a scheduler pass weighs it against the QOS: wait for that pass
        wait(lambda: sorted((j["state"], j["reason"] if j["state"] == "PENDING" else "") for j in tenant_jobs(governed))
             == [("PENDING", "QOSGrpGRES"), ("RUNNING", ""), ("RUNNING", "")], 15, lambda: tenant_jobs(governed))
        for _ in range(10):  # and so it stays, pass after pass of the scheduler
            jobs = tenant_jobs(governed)
            assert sum(j["gpus"] for j in jobs if j["state"] == "RUNNING") <= 4, jobs
            assert [j["reason"] for j in jobs if j["state"] == "PENDING"] == ["QOSGrpGRES"], jobs
            time.sleep(0.3)
        print(f"three jobs of 2 GPUs under GrpTRES=gres/gpu=4: {tenant_jobs(governed)}")
        usage = governed.run("scontrol", "show", "assoc_mgr", "flags=qos", "qos=tenant-gpu").stdout
        assert "gres/gpu=4(4)" in usage, usage
    finally:
        cancel_tenant_jobs(governed)


@needs_accounting
def test_the_tenant_is_refused_a_partition_and_a_qos_it_was_not_given(governed: SlurmCluster) -> None:
    proc, log = attempt(governed, "sbatch", "--parsable", "--partition=restricted", "--gres=gpu:1",
                        tenant_script(governed), logged="_slurm_rpc_submit_batch_job")
    assert (proc.returncode, proc.stderr.strip()) == (1, "sbatch: error: Batch job submission failed: Invalid account "
                                                         "or account/partition combination specified"), proc
    assert log == ["part_policy_valid_acct: Job's account not permitted to use this partition (restricted allows "
                   "tenant-b not tenant-a)",
                   "_slurm_rpc_submit_batch_job: Invalid account or account/partition combination specified"], log

    proc, log = attempt(governed, "sbatch", "--parsable", "--qos=high", "--gres=gpu:1", tenant_script(governed),
                        logged="_slurm_rpc_submit_batch_job")
    assert (proc.returncode, proc.stderr.strip()) == (
        1, "sbatch: error: Batch job submission failed: Invalid qos specification"), proc
    assoc = [line for line in log if "does not have access to qos high" in line]
    assert len(assoc) == 1 and assoc[0].startswith("error: This association ") and \
        assoc[0].endswith("(account='tenant-a', user='firedrill-tenant', partition='(null)') does not have access to "
                          "qos high"), log
    assert "_slurm_rpc_submit_batch_job: Invalid qos specification" in log, log

    proc, log = attempt(governed, "sbatch", "--parsable", "--account=tenant-b", "--gres=gpu:1", tenant_script(governed),
                        logged="_slurm_rpc_submit_batch_job")
    assert (proc.returncode, proc.stderr.strip()) == (1, "sbatch: error: Batch job submission failed: Invalid account "
                                                         "or account/partition combination specified"), proc
    assert f"_job_create: invalid account or partition for user {tenant_uid(governed)}, account 'tenant-b', and " \
           "partition 'gpu'" in log, log
    assert not tenant_jobs(governed)


@needs_accounting
def test_the_tenant_is_refused_the_operator_s_commands(governed: SlurmCluster) -> None:
    uid, node = tenant_uid(governed), governed.spec.node_names()[0]
    roots = submit(governed, "sleep 300\n")
    try:
        proc = governed.as_tenant("sbatch", "--parsable", "--begin=now+3600", tenant_script(governed), check=True)
        own = int(proc.stdout.strip())

        proc, log = attempt(governed, "scontrol", "update", f"nodename={node}", "state=drain", "reason=x",
                            logged="_slurm_rpc_update_node")
        assert (proc.returncode, proc.stderr.strip()) == (1, "slurm_update error: Invalid user id"), proc
        assert f"error: Security violation, UPDATE_NODE RPC from uid={uid}" in log, log
        assert f"_slurm_rpc_update_node for {node}: Invalid user id" in log, log

        proc, log = attempt(governed, "scancel", str(roots), logged="job_str_signal")
        assert (proc.returncode, proc.stderr.strip()) == (
            210, f"scancel: error: Kill job error on job id {roots}: Access/permission denied"), proc
        assert f"_slurm_rpc_kill_job: REQUEST_KILL_JOB JobId={roots} uid {uid}" in log, log
        assert f"error: Security violation, REQUEST_KILL_JOB RPC for JobId={roots} from uid {uid}" in log, log
        assert f"_slurm_rpc_kill_job: job_str_signal() uid={uid} JobId={roots} sig=9 returned: Access/permission " \
               "denied" in log, log

        proc, log = attempt(governed, "scontrol", "delete", f"nodename={node}", logged="_slurm_rpc_delete_node")
        assert (proc.returncode, proc.stderr.strip()) == (1, f"delete_node nodename={node}: Invalid user id"), proc
        assert f"error: Security violation, DELETE_NODE RPC from uid={uid}" in log, log
        assert f"_slurm_rpc_delete_node for {node}: Invalid user id" in log, log

        proc, log = attempt(governed, "scontrol", "update", f"jobid={own}", "priority=999999",
                            logged="_slurm_rpc_update_job")
        assert (proc.returncode, proc.stderr.strip()) == (1, f"Access/permission denied for job {own}"), proc
        assert f"error: sched: Attempt to modify priority for JobId={own}" in log, log
        assert f"_slurm_rpc_update_job: JobId={own} uid={uid}: Access/permission denied" in log, log

        # and nothing changed: the node serves, root's job runs, the tenant's job keeps its priority
        assert governed.node_states()[node] & {"IDLE", "MIXED", "ALLOCATED"}, governed.node_states()
        assert "DRAIN" not in governed.node_states()[node], governed.node_states()
        assert job(governed, roots)["job_state"] in ("RUNNING", "PENDING"), job(governed, roots)
        assert governed.run("squeue", "-h", "-j", str(own), "-o", "%Q").stdout.strip() == "1"
    finally:
        governed.run("scancel", str(roots))
        cancel_tenant_jobs(governed)
