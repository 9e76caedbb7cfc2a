"""A hung rank on a real cluster: the profile's ``fault.hang`` command (docs/HANG.md), behind the same blast-radius
check as a node fault, written down before it runs.  The reference platform hangs a rank through its node agent
instead (``{"gpu", "hang": true}`` in :mod:`drills.target.throttle`)."""

from __future__ import annotations

from drills.kube.driver import KubeDriver
from drills.target.faults import FaultError, FaultRecord, Intend, no_journal, run_site_command
from drills.target.profile import TargetProfile

__all__ = ["NO_HANG_COMMAND", "NO_STALL_COMMAND", "inject_hang", "stall_storage"]

NO_HANG_COMMAND = ("this profile has no way to hang one rank: set fault.hang.command_template in the target profile "
                   "(a command with {pod} or {uuid}, e.g. \"kubectl exec -n {namespace} {pod} -- kill -USR2 1\": the "
                   "canary takes SIGUSR2 as its GPU stuck in a kernel; docs/PROFILE.md, docs/HANG.md)")


NO_STALL_COMMAND = ("this profile has no way to stall the checkpoint storage: set fault.storage_stall.command_template "
                    "in the target profile (a command with {node} and {seconds} that stalls that node's checkpoint "
                    "storage and lifts the stall by itself, e.g. a firewall rule on the NFS server with an expiry; "
                    "docs/PROFILE.md, docs/HANG.md)")


def inject_hang(driver: KubeDriver, profile: TargetProfile, faults_done: list[FaultRecord], node: str, pod: str,
                uuid: str, *, intend: Intend = no_journal) -> dict[str, object]:
    """Hang the rank of ``pod`` (its GPU ``uuid``) on ``node`` with ``fault.hang``: what the evidence records of it.
    The record joins ``faults_done`` before its outcome is judged, so its restore runs on every exit path. Raises
    :class:`FaultError`, saying why, when nothing was (or may have been) injected."""
    settings = profile.fault.hang
    if settings is None:
        raise FaultError(NO_HANG_COMMAND)
    values = {"node": node, "pod": pod, "namespace": profile.namespace, "uuid": uuid}
    command, restore = settings.command_for(**values), settings.restore_for(**values)
    _, radius = run_site_command(driver, profile, faults_done, node, what="hang", act=f"hang the rank of pod {pod}",
                                 command=command, restore=restore, intend=intend,
                                 by_hand=f"delete pod {profile.namespace}/{pod} if it still runs: a hung rank ends "
                                         "with its process")
    return {"method": "command", "command": command, "blast_radius": radius,
            "restore": restore or "none: the job's restart or deletion ends the hung process"}


def stall_storage(driver: KubeDriver, profile: TargetProfile, faults_done: list[FaultRecord], node: str,
                  seconds: float, *, intend: Intend = no_journal) -> dict[str, object]:
    """Stall ``node``'s checkpoint storage for ``seconds`` with ``fault.storage_stall`` (the command lifts it by
    itself then; its restore runs on rollback): what the evidence records of it. Raises :class:`FaultError`."""
    settings = profile.fault.storage_stall
    if settings is None:
        raise FaultError(NO_STALL_COMMAND)
    values = {"node": node, "seconds": f"{seconds:g}"}
    command, restore = settings.command_for(**values), settings.restore_for(**values)
    _, radius = run_site_command(driver, profile, faults_done, node, what="storage stall",
                                 act=f"stall the checkpoint storage for {seconds:g} s", command=command,
                                 restore=restore, intend=intend, expires_in=seconds,
                                 by_hand=f"lift the checkpoint storage stall of node {node} if it still stands")
    return {"method": "command", "command": command, "blast_radius": radius,
            "restore": restore or f"none: the command lifts the stall after {seconds:g} s"}
