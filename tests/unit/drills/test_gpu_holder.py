"""The GPU holder: a pod that is not a training job of its own still says which GPUs it was given (issue 25), so
the invariants judge the GPUs of the governance drill's higher-class pods and the control-plane drill's pods."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from drills.scenario.invariants import identity_from_lines
from drills.scenario.vocabulary import PlaceholderError, parse_gpus
from drills.target.profile import reference_profile
from drills.workloads.canaryjob import gpu_holder


def test_the_holder_asks_for_its_gpus_and_runs_the_canary_of_the_profile() -> None:
    profile = reference_profile()
    container = gpu_holder(profile, 3, seconds=5)
    assert container["resources"] == {"limits": {profile.gpu_resource: "3"}}
    assert container["image"] == profile.canary_image and container["command"] == list(profile.canary.command)
    assert container["args"][0] == "train" and container["args"][-2:] == ["--steps-total", "5"]
    assert "resources" not in gpu_holder(profile, 0)


def test_the_holder_names_the_gpus_it_was_given_and_ends_after_its_seconds() -> None:
    """The canary run with the holder's arguments, as a container would run them: its first line is an identity
    the invariant watch reads; it exits 0 after its one step."""
    args = gpu_holder(reference_profile(), 2, seconds=1)["args"]
    env = {**os.environ, "NVIDIA_VISIBLE_DEVICES": "GPU-aaaa,GPU-bbbb"}
    for name in ("WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    proc = subprocess.run([sys.executable, "-m", "drills.canary", *args], capture_output=True, text=True,
                          timeout=30, env=env)
    assert proc.returncode == 0, proc.stderr
    found = identity_from_lines(proc.stdout.splitlines())
    assert found is not None and found.gpus == ("GPU-aaaa", "GPU-bbbb") and found.world_size == 1


@pytest.mark.parametrize(("text", "count"), [("1 GPU", 1), ("4 GPUs", 4), (" 8 GPUs ", 8)])
def test_a_gpu_count_reads_with_its_word(text: str, count: int) -> None:
    assert parse_gpus(text) == count


@pytest.mark.parametrize(("text", "problem"), [("0 GPUs", "at least one GPU"), ("four GPUs", "not a GPU count"),
                                               ("4", "not a GPU count")])
def test_a_bad_gpu_count_says_what_to_write(text: str, problem: str) -> None:
    with pytest.raises(PlaceholderError) as err:
        parse_gpus(text)
    assert problem in str(err.value) and "'1 GPU' or '4 GPUs'" in str(err.value)
