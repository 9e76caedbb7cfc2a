"""The Slurm driver's refusals that need no cluster: a client that is not installed, an answer that is not a job
id.  (Its reads and a controller that is not there are tested against the real Slurm: tests/realslurm.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from drills.slurm.driver import SlurmDriver
from drills.slurm.state import SlurmError


def test_a_client_that_is_not_installed_says_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(SlurmError, match="squeue is not installed here: install the Slurm client"):
        SlurmDriver(env={"PATH": str(tmp_path)}).jobs()


def test_sbatch_that_answers_no_job_id_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "sbatch"  # a stand-in for sbatch's answer only; every other path runs the real Slurm
    fake.write_text("#!/bin/sh\necho 'Submitted to nowhere'\n")
    fake.chmod(0o755)
    with pytest.raises(SlurmError, match="sbatch answered 'Submitted to nowhere', not a job id"):
        SlurmDriver(env={"PATH": str(tmp_path)}).submit("#!/bin/sh\n")
