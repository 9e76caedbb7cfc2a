"""The Slurm commands the harness runs, against the cluster one ``slurm.conf`` names; its reads through slurmrestd
instead where the profile names one (:mod:`drills.slurm.rest`).

Every command runs with a deadline and without a shell; a command that is missing, times out, exits non-zero or
prints what is not JSON raises :class:`~drills.slurm.state.SlurmError` naming the command, its exit and what it
said, and how to fix the usual causes (the client not installed, ``SLURM_CONF`` naming another cluster, slurmctld
unreachable).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drills.slurm.rest import SlurmRest
from drills.slurm.state import SlurmError, SlurmJob, SlurmNode, parse_jobs, parse_nodes

__all__ = ["SlurmDriver"]

COMMAND_TIMEOUT_S = 30.0


@dataclass
class SlurmDriver:
    """Slurm's commands for one cluster: ``conf`` is its ``slurm.conf`` (None: the client's default);
    ``workdir`` is where batch jobs start and their output lands unless a script says otherwise."""

    conf: Path | None = None
    workdir: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    """More environment for every command (and so for every job it submits: sbatch exports it)."""
    timeout: float = COMMAND_TIMEOUT_S
    rest: SlurmRest | None = None
    """slurmrestd, where the site serves it: jobs and nodes are read there (no process per poll)."""

    def _env(self) -> dict[str, str]:
        out = {**os.environ, **self.env}
        if self.conf is not None:
            out["SLURM_CONF"] = str(self.conf)
        return out

    def run(self, *argv: str, stdin: str | None = None) -> str:
        """``argv`` with the cluster's environment; its standard output."""
        env = self._env()
        if shutil.which(argv[0], path=env.get("PATH")) is None:
            raise SlurmError(f"{argv[0]} is not installed here: install the Slurm client (Debian: slurm-client) "
                             "matching the cluster's release")
        try:
            proc = subprocess.run(list(argv), input=stdin, capture_output=True, text=True, env=env,
                                  timeout=self.timeout, cwd=self.workdir)
        except subprocess.TimeoutExpired:
            raise SlurmError(f"{' '.join(argv)} did not answer within {self.timeout:g} s: is slurmctld reachable "
                             f"from here ({self._where()})?") from None
        if proc.returncode != 0:
            said = (proc.stderr.strip() or proc.stdout.strip() or "nothing").splitlines()[-1]
            raise SlurmError(f"{' '.join(argv)} exited {proc.returncode}: {said} ({self._where()})")
        return proc.stdout

    def _where(self) -> str:
        return f"SLURM_CONF={self.conf}" if self.conf is not None else "the client's default slurm.conf"

    def json(self, command: str, *argv: str) -> dict[str, Any]:
        out = self.run(command, "--json", *argv)
        try:
            doc = json.loads(out)
        except json.JSONDecodeError as exc:
            raise SlurmError(f"{command} --json printed what is not JSON ({exc}): is this Slurm 21.08 or "
                             "later?") from None
        if not isinstance(doc, dict):
            raise SlurmError(f"{command} --json printed a {type(doc).__name__}, not an object")
        errors = [e for e in doc.get("errors") or [] if e]
        if errors:
            said = "; ".join(f"{e.get('description') or e.get('error') or e} ({e.get('source') or '?'})"
                             if isinstance(e, dict) else str(e) for e in errors)
            raise SlurmError(f"{command} --json answered with errors: {said} ({self._where()}): is slurmctld up "
                             "and reachable from here, and does the harness's user belong to the cluster?")
        return doc

    # ------------------------------------------------------------- reads
    def jobs(self, job_ids: Sequence[int] = ()) -> list[SlurmJob]:
        """The jobs slurmctld still knows (finished ones for ``MinJobAge`` seconds), or those of ``job_ids``."""
        found = parse_jobs(self.rest.get("jobs") if self.rest is not None else self.json("squeue"))
        wanted = set(job_ids)
        return [j for j in found if not wanted or j.job_id in wanted]

    def job(self, job_id: int) -> SlurmJob | None:
        return next(iter(self.jobs([job_id])), None)

    def nodes(self) -> list[SlurmNode]:
        return parse_nodes(self.rest.get("nodes") if self.rest is not None else self.json("sinfo"))

    def close(self) -> None:
        if self.rest is not None:
            self.rest.close()

    # ------------------------------------------------------------- acts
    def submit(self, script: str, options: Sequence[str] = ()) -> int:
        """``sbatch --parsable OPTIONS`` with ``script`` on its standard input; the job's id."""
        out = self.run("sbatch", "--parsable", *options, stdin=script).strip()
        head = out.splitlines()[-1].split(";")[0] if out else ""
        if not head.isdigit():
            raise SlurmError(f"sbatch answered {out!r}, not a job id")
        return int(head)

    def cancel(self, job_id: int) -> None:
        self.run("scancel", str(job_id))
