"""Partition configs and what a node advertises per mode (docs/PARTITIONING.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from refplatform.gpu.mig import PartitionError
from refplatform.gpu.partition import PartitionConfig, advertise, load_partition_config, parse_partition_config

H200 = ("H200", "NVIDIA-H200", 2, 143771)


def test_load_full_example(tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    f.write_text('mode: mig-mixed\nlayout:\n  - ["1g.18gb", "1g.18gb"]\n  - ["3g.71gb"]\nreplicas: 4\n'
                 "rename_by_default: false\nvgpus_per_gpu: 4\nenforce_isolation: true\n")
    c = load_partition_config(f)
    assert c == PartitionConfig("mig-mixed", (("1g.18gb", "1g.18gb"), ("3g.71gb",)), 4, False, 4, True)


@pytest.mark.parametrize("text,match", [
    ("mode: mig\n", "mode must be one of none, mig-single"),
    ("mode: mig-mixed\n", "mode mig-mixed needs a layout"),
    ("mode: none\nreplica: 3\n", "unknown key"),
    ("mode: time-slicing\nreplicas: 0\n", "replicas must be an integer >= 1"),
    ("mode: hami\nenforce_isolation: maybe\n", "enforce_isolation must be true or false"),
    ("mode: mig-mixed\nlayout: 1g.18gb\n", "layout must be a list"),
    ("- a\n", "must be a mapping"),
    ("mode: [\n", "not valid YAML"),
])
def test_invalid_configs(tmp_path: Path, text: str, match: str) -> None:
    f = tmp_path / "p.yaml"
    f.write_text(text)
    with pytest.raises(PartitionError, match=match):
        load_partition_config(f)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(PartitionError, match="cannot read partition config"):
        load_partition_config(tmp_path / "nope.yaml")


def test_none() -> None:
    assert advertise(parse_partition_config({"mode": "none"}), *H200) == (
        {"nvidia.com/gpu": "2"}, {"firedrill.dev/partition-mode": "none"})


def test_mig_single() -> None:
    res, labels = advertise(parse_partition_config({"mode": "mig-single", "layout": [["1g.18gb"] * 7]}), *H200)
    assert res == {"nvidia.com/gpu": "14"}
    assert labels == {"firedrill.dev/partition-mode": "mig-single", "nvidia.com/mig.strategy": "single",
                      "nvidia.com/gpu.product": "NVIDIA-H200-MIG-1g.18gb", "nvidia.com/mig.config": "all-1g.18gb"}


def test_mig_mixed() -> None:
    c = parse_partition_config({"mode": "mig-mixed", "layout": [["1g.18gb"] * 7, ["3g.71gb", "2g.35gb", "1g.18gb"]]})
    res, labels = advertise(c, *H200)
    assert res == {"nvidia.com/mig-1g.18gb": "8", "nvidia.com/mig-3g.71gb": "1", "nvidia.com/mig-2g.35gb": "1"}
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    assert labels["nvidia.com/mig-1g.18gb.count"] == "8"
    assert labels["nvidia.com/mig-3g.71gb.memory"] == str(71 * 1024)
    assert "nvidia.com/gpu" not in res


def test_time_slicing_and_rename() -> None:
    res, labels = advertise(parse_partition_config({"mode": "time-slicing", "replicas": 4}), *H200)
    assert res == {"nvidia.com/gpu": "8"}
    assert labels == {"firedrill.dev/partition-mode": "time-slicing", "nvidia.com/gpu.replicas": "4",
                      "nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.product": "NVIDIA-H200-SHARED"}
    res, _ = advertise(parse_partition_config({"mode": "time-slicing", "replicas": 4, "rename_by_default": True}), *H200)
    assert res == {"nvidia.com/gpu.shared": "8"}


def test_hami_and_isolation_label() -> None:
    c = parse_partition_config({"mode": "hami", "vgpus_per_gpu": 4, "enforce_isolation": False})
    res, labels = advertise(c, *H200)
    assert res == {"nvidia.com/gpu": "8", "nvidia.com/gpumem": str(2 * 143771), "nvidia.com/gpucores": "200"}
    assert labels == {"firedrill.dev/partition-mode": "hami", "firedrill.dev/isolation-enforced": "false",
                      "nvidia.com/gpu.sharing-strategy": "hami"}


def test_mig_layout_invalid_for_model() -> None:
    with pytest.raises(PartitionError, match=r"GPU 0 \(H100-80GB\): profile '1g.18gb'"):
        advertise(parse_partition_config({"mode": "mig-mixed", "layout": [["1g.18gb"]]}), "H100-80GB", "x", 1, 81559)
