"""Which Slurm jobs ``firedrill recover`` may cancel: only those a drill submitted, each named with its run's id."""

from __future__ import annotations

import pytest

from drills.scenario.context import new_run_id
from drills.target.slurmtarget import DRILL_JOB

RUN = new_run_id()


@pytest.mark.parametrize("name", [f"canary-{RUN}", f"gang-a-{RUN}", f"gang-c-{RUN}", f"acc-{RUN}-1", f"acc-{RUN}-12",
                                  f"gov-{RUN}-3", f"gov-{RUN}-holder", f"gov-{RUN}-victim"])
def test_every_kind_of_drill_job_is_known_by_its_name(name: str) -> None:
    assert DRILL_JOB.match(name)


@pytest.mark.parametrize("name", ["canary", "canary-fdxyz123", f"canary-{RUN}-1", f"acc-{RUN}", f"gang-{RUN}",
                                  f"my-acc-{RUN}-1", "train-llama", f"acc-{RUN}-1 ",
                                  f"gov-{RUN}-other", f"gov-{RUN}"])
def test_a_users_job_is_never_taken_for_one(name: str) -> None:
    assert not DRILL_JOB.match(name)
