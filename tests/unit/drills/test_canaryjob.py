"""The canary job's arguments: what :class:`CanaryTraining` asks of the canary reaches its command line."""

from __future__ import annotations

import pytest

from drills.canary.config import parse_config
from drills.target.profile import reference_profile
from drills.workloads.canaryjob import CanaryTraining, canary_job_spec


def args(training: CanaryTraining) -> list[str]:
    return list(canary_job_spec("job", "run", reference_profile(), training).args)


def test_a_slow_checkpoint_write_is_asked_for_only_when_set() -> None:
    assert "--checkpoint-seconds" not in args(CanaryTraining(2, 1, checkpoint_every=5))
    slow = args(CanaryTraining(2, 1, checkpoint_every=5, checkpoint_seconds=2.5))
    assert slow[slow.index("--checkpoint-seconds") + 1] == "2.5"
    assert parse_config(slow, {}).checkpoint_seconds == 2.5  # the canary takes what the job passes


def test_a_negative_checkpoint_time_is_refused() -> None:
    with pytest.raises(ValueError, match="checkpoint write"):
        CanaryTraining(2, 1, checkpoint_every=5, checkpoint_seconds=-1)
