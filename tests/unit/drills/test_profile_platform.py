"""A target profile names the kind of cluster it drills: Kubernetes (the default, and the only one drilled today);
a profile written for Slurm is refused with one message saying what exists, not seven about missing fields."""

from __future__ import annotations

from pathlib import Path

import pytest

from drills.target.profile import ProfileError, load_profile

NATIVE = Path(__file__).resolve().parents[3] / "examples" / "profile-native.yaml"


def test_a_profile_for_slurm_is_refused_saying_what_exists(tmp_path: Path) -> None:
    slurm = tmp_path / "slurm.yaml"
    slurm.write_text("name: s\nplatform: slurm\nslurm:\n  partition: gpu\n")
    with pytest.raises(ProfileError, match=r"platform 'slurm': Firedrill drills Kubernetes clusters .* "
                                           r"docs/SLURM.md\); remove the field") as caught:
        load_profile(slurm)
    assert "required field is missing" not in str(caught.value)


def test_platform_kubernetes_is_the_default_and_may_be_written(tmp_path: Path) -> None:
    written = tmp_path / "k8s.yaml"
    written.write_text("platform: kubernetes\n" + NATIVE.read_text())
    assert load_profile(written) == load_profile(NATIVE)
