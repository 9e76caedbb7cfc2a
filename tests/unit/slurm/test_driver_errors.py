"""The Slurm driver's refusals that need no cluster: a client that is not installed, an answer that is not a job
id, a slurmrestd address that is not one or where nothing listens.  (Its reads, a controller that is not there,
and slurmrestd's refusals of a token and of an API version are tested against the real Slurm: tests/realslurm.)"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from drills.slurm.driver import SlurmDriver
from drills.slurm.rest import SlurmRest
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


def test_a_slurmrestd_address_that_is_not_a_url_or_an_api_that_is_not_a_version_is_refused() -> None:
    with pytest.raises(SlurmError, match=r"slurm.rest.url 'slurm-head:6820' is not an http\(s\) URL"):
        SlurmRest("slurm-head:6820", "alice", "t")
    with pytest.raises(SlurmError, match=r"slurm.rest.api 'latest' is not an openapi plugin version"):
        SlurmRest("http://127.0.0.1:6820", "alice", "t", api="latest")


def test_a_slurmrestd_that_is_not_there_is_named_with_the_request() -> None:
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    driver = SlurmDriver(rest=SlurmRest(f"http://127.0.0.1:{port}", "alice", "t", timeout=2))
    try:
        with pytest.raises(SlurmError, match=rf"GET http://127.0.0.1:{port}/slurm/v0.0.38/nodes: .* is slurmrestd "
                                             "listening there"):
            driver.nodes()
    finally:
        driver.close()
