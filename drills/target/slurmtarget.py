"""A Slurm cluster as a drill target: the profile's ``slurm`` settings, the Slurm driver, the fault commands.

The Kubernetes target (:class:`drills.target.connect.Target`) holds a Kubernetes driver; this one holds the Slurm
driver (:mod:`drills.slurm`) and offers the drills the same surface where a Slurm cluster has the same thing: the
run's timeline and fault journal, pulling a node with the profile's command (written down before it acts, undone
on every exit path), each node's service before a scenario and now, and what a dead run left broken.

Safety, as on Kubernetes (docs/SAFETY.md): only nodes carrying the profile's ``safety.allow_feature`` are pulled;
at most ``safety.max_nodes`` nodes and ``safety.max_gpu_share`` of the GPUs out at once; with
``safety.require_healthy`` a run refuses a cluster whose allowed nodes are already down or drained; a run refuses a
cluster for which a dead run's fault journal still holds a fault not undone (``firedrill recover --profile``).
"""

from __future__ import annotations

import getpass
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from drills.slurm.driver import SlurmDriver
from drills.slurm.rest import TOKEN_ENV, SlurmRest
from drills.slurm.state import NodeFlag, SlurmError, SlurmNode
from drills.target.commandtarget import CommandTarget, check_share
from drills.target.faults import FaultError
from drills.target.journal import Undo, UndoKind
from drills.target.marks import Mark
from drills.target.profile import TargetProfile
from drills.target.service import NodeService

__all__ = ["DRILL_JOB", "SlurmTarget", "node_service", "serving_on", "slurm_driver", "slurm_key", "slurm_marks",
           "slurm_target"]

log = logging.getLogger(__name__)

OUT_OF_SERVICE = (NodeFlag.DOWN, NodeFlag.NOT_RESPONDING, NodeFlag.DRAIN, NodeFlag.DRAINING, NodeFlag.FUTURE,
                  NodeFlag.INVALID, NodeFlag.MAINTENANCE, NodeFlag.POWERED_DOWN, NodeFlag.REBOOT_REQUESTED)
"""The node states that keep a Slurm node from running jobs, as "back in service" names them."""


def slurm_key(profile: TargetProfile) -> str:
    """What the fault journals call this cluster (the Kubernetes target uses its API server's address)."""
    assert profile.slurm is not None
    return f"slurm:{profile.slurm.conf or 'default slurm.conf'}"


def node_service(node: SlurmNode) -> NodeService:
    """A Slurm node's service in the words "back in service" judges: ready = answering and not DOWN; cordoned =
    drained; its other states that keep jobs off it stand as its taints; its GPUs = its GRES count."""
    return NodeService(node.name, ready=not node.down,
                       cordoned=bool(node.flags & {NodeFlag.DRAIN, NodeFlag.DRAINING}),
                       taints=frozenset(f"slurm state {f.value}" for f in node.flags if f in OUT_OF_SERVICE
                                        and f not in (NodeFlag.DOWN, NodeFlag.NOT_RESPONDING, NodeFlag.DRAIN,
                                                      NodeFlag.DRAINING)),
                       gpus=node.gpus)


@dataclass
class SlurmTarget(CommandTarget):
    """A Slurm cluster, drilled through its commands (``platform: slurm``)."""

    PLATFORM: ClassVar[str] = "Slurm"
    driver: SlurmDriver | None = None

    # ------------------------------------------------------------- what it is
    @property
    def journal_key(self) -> str:
        assert self.profile is not None
        return slurm_key(self.profile)

    @property
    def description(self) -> str:
        assert self.profile is not None and self.profile.slurm is not None
        return (f"Slurm cluster {self.profile.name} ({self.profile.slurm.conf or 'the client default slurm.conf'}), "
                f"partition {self.profile.slurm.partition}")

    def secrets(self) -> list[str]:
        return []  # munge holds the credentials; the harness reads none

    def nodes(self) -> list[SlurmNode]:
        assert self.driver is not None
        return self.driver.nodes()

    def service_now(self) -> dict[str, NodeService]:
        """Every node's service as it stands (raises SlurmError when the cluster does not answer)."""
        return {n.name: node_service(n) for n in self.nodes()}

    def preflight(self) -> None:
        """Refuse a cluster whose allowed nodes are already out of service (``safety.require_healthy``); warn
        otherwise."""
        assert self.profile is not None and self.profile.slurm is not None
        feature = self.profile.slurm.allow_feature
        nodes = self.nodes()
        allowed = [n for n in nodes if feature in n.features]
        if not allowed:
            self.warnings.append(f"no node carries the feature {feature!r} (safety.allow_feature), so no node can "
                                 "be pulled: add it to the GPU nodes' Features= in slurm.conf")
        out = {n.name: [f.value for f in sorted(n.flags & set(OUT_OF_SERVICE), key=lambda f: f.value)]
               for n in allowed if not n.serving}
        if out and self.profile.safety.require_healthy:
            raise SlurmError("the cluster is already degraded, so no verdict on it would be honest: "
                             + "; ".join(f"{k}: {', '.join(v) or 'not serving'}" for k, v in sorted(out.items()))
                             + " (bring the nodes back, or set safety.require_healthy: false to drill it anyway)")
        self.warnings += [f"node {k} is out of service before the run: {', '.join(v)}" for k, v in sorted(out.items())]

    def _check_blast_radius(self, node: str) -> None:
        assert self.profile is not None and self.profile.slurm is not None
        nodes = {n.name: n for n in self.nodes()}
        found = nodes.get(node)
        feature = self.profile.slurm.allow_feature
        if found is None:
            raise FaultError(f"node {node} is not in the cluster's sinfo")
        if feature not in found.features:
            raise FaultError(f"node {node} does not carry the feature {feature!r} (safety.allow_feature), so it is "
                             "never pulled; add the feature in slurm.conf to allow it")
        check_share(node, self._pulled_now(), {n: x.gpus for n, x in nodes.items()}, self.profile.safety)


DRILL_JOB = re.compile(r"^(canary-fd[0-9a-f]{6}|gang-[a-z]-fd[0-9a-f]{6}|acc-fd[0-9a-f]{6}-[0-9]+"
                       r"|gov-fd[0-9a-f]{6}-(?:[0-9]+|holder|victim))$")
"""The names of the drills' jobs, each with its run's id: the training canary (``canary-<run id>``), a gang
(``gang-a-<run id>``), an access probe (``acc-<run id>-1``), governance's (``gov-<run id>-1`` the tenant's,
``gov-<run id>-holder`` and ``-victim`` the harness's). Only a Firedrill run submits such a job."""


def slurm_driver(profile: TargetProfile, workdir: Path | None = None) -> SlurmDriver:
    """The commands for the cluster ``profile`` names, reading through its slurmrestd where it names one (raises
    SlurmError when that one's token is not in the environment)."""
    assert profile.slurm is not None
    rest = None
    if profile.slurm.rest is not None:
        settings, me = profile.slurm.rest, getpass.getuser()
        if settings.token_env == "SLURM_JWT" and settings.user != me:
            raise SlurmError(f"slurm.rest.token_env is SLURM_JWT, which Slurm's own commands read too: sbatch would "
                             f"then speak as {settings.user}, not as {me} who runs it, and be refused "
                             f"('Invalid user id'); name another variable (token_env: {TOKEN_ENV}), or mint the token "
                             f"for {me}")
        token = os.environ.get(settings.token_env, "").strip()
        if not token:
            raise SlurmError(f"slurm.rest reads through slurmrestd as {settings.user}, but ${settings.token_env} holds "
                             f"no token: mint one (scontrol token username={settings.user} lifespan=SECONDS) and "
                             f"export {settings.token_env}=<the token>, or remove slurm.rest to read with squeue "
                             "and sinfo")
        token = token.removeprefix("SLURM_JWT=")  # scontrol token's line as it prints it
        rest = SlurmRest(settings.url, settings.user, token, api=settings.api, token_env=settings.token_env)
    return SlurmDriver(conf=Path(profile.slurm.conf) if profile.slurm.conf else None, workdir=workdir, rest=rest)


def slurm_marks(profile: TargetProfile, driver: SlurmDriver) -> list[Mark]:
    """What a dead run left on the Slurm cluster itself, journal or not: its drill jobs still queued or running
    (they hold GPUs the next verdict would count as the platform's), each with the ``scancel`` that ends it."""
    assert profile.slurm is not None
    env = ("env", f"SLURM_CONF={profile.slurm.conf}") if profile.slurm.conf else ()
    return [Mark(f"Slurm job {j.job_id} {j.name} ({j.state.value}" + (f" on {', '.join(j.nodes)}" if j.nodes else "")
                 + ")", Undo(UndoKind.COMMAND, argv=(*env, "scancel", str(j.job_id)),
                             note=f"cancel Slurm job {j.job_id}"))
            for j in driver.jobs() if DRILL_JOB.match(j.name) and not j.state.ended]


def serving_on(driver: SlurmDriver) -> Callable[[str], bool]:
    """Whether a node of the cluster serves again (recovery closes a step only a person could take then)."""
    def serving(name: str) -> bool:
        try:
            return any(n.name == name and n.serving for n in driver.nodes())
        except SlurmError:
            return False
    return serving


def slurm_target(profile: TargetProfile, workdir: Path | None = None) -> SlurmTarget:
    """Reach the Slurm cluster ``profile`` names and check it before any drill (raises SlurmError saying what
    failed and how to fix it)."""
    assert profile.slurm is not None
    conf = Path(profile.slurm.conf) if profile.slurm.conf else None
    if conf is not None and not conf.exists():
        raise SlurmError(f"slurm.conf {conf} (slurm.conf in the profile) does not exist on this machine; point "
                         "slurm.conf at the cluster's configuration as this machine reads it")
    target = SlurmTarget(driver=slurm_driver(profile, workdir), profile=profile)  # workdir: where sbatch runs
    target.preflight()
    return target
