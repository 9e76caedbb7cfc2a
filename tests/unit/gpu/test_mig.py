"""MIG profile tables and layout validation (docs/PARTITIONING.md)."""

from __future__ import annotations

import pytest

from refplatform.gpu.mig import (
    PROFILES,
    PartitionError,
    compute_slices,
    memory_slices,
    profile_memory_mib,
    table_model,
    validate_layout,
)


def test_tables_match_the_contract() -> None:
    assert PROFILES["A100-40GB"] == {"1g.5gb": 7, "1g.10gb": 4, "2g.10gb": 3, "3g.20gb": 2, "4g.20gb": 1, "7g.40gb": 1}
    assert PROFILES["A100-80GB"] == PROFILES["H100-80GB"] == {
        "1g.10gb": 7, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1}
    assert PROFILES["H200"] == {"1g.18gb": 7, "1g.35gb": 4, "2g.35gb": 3, "3g.71gb": 2, "4g.71gb": 1, "7g.141gb": 1}


@pytest.mark.parametrize("name,model", [("H200", "H200"), ("NVIDIA-H200", "H200"), ("H100-80GB", "H100-80GB"),
                                        ("A100-SXM4-80GB", "A100-80GB"), ("A100-SXM4-40GB", "A100-40GB")])
def test_agent_model_names_map_to_table_names(name: str, model: str) -> None:
    assert table_model(name) == model


def test_unknown_model() -> None:
    with pytest.raises(PartitionError, match="no MIG profile table"):
        table_model("T4")


def test_slices() -> None:
    assert [compute_slices(p) for p in PROFILES["H200"]] == [1, 1, 2, 3, 4, 7]
    assert [memory_slices("H200", p) for p in PROFILES["H200"]] == [1, 2, 2, 4, 4, 8]
    assert [memory_slices("A100-40GB", p) for p in PROFILES["A100-40GB"]] == [1, 2, 2, 4, 4, 8]
    assert profile_memory_mib("1g.18gb") == 18 * 1024


def test_full_layouts_are_valid_and_missing_entries_repeat() -> None:
    layout = [["1g.18gb"] * 7, ["3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb"]]
    out = validate_layout("H200", layout, 3)
    assert out[2] == out[1] == ["3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb"]
    for model, profiles in PROFILES.items():
        for profile, n in profiles.items():
            assert validate_layout(model, [[profile] * n], 1) == [[profile] * n]


@pytest.mark.parametrize("layout,match", [
    ([["1g.10gb"]], r"GPU 0 \(H200\): profile '1g.10gb' is not a MIG profile of H200"),
    ([["1g.18gb"], ["1g.18gb"] * 8], r"GPU 1 \(H200\): 8 instances \(1g.18gb...\) exceed 7"),
    ([["4g.71gb", "4g.71gb"]], r"GPU 0 \(H200\): profile 4g.71gb x2 exceeds its maximum of 1"),
    ([["4g.71gb", "3g.71gb", "1g.18gb"]], r"GPU 0 \(H200\): profiles 4g.71gb, 3g.71gb, 1g.18gb take 8 compute slices"),
    ([["3g.71gb", "2g.35gb", "1g.35gb", "1g.18gb"]], r"GPU 0 \(H200\): profiles .* take 9 memory slices \(max 8\)"),
])
def test_invalid_layouts_name_gpu_model_and_profile(layout: list[list[str]], match: str) -> None:
    with pytest.raises(PartitionError, match=match):
        validate_layout("H200", layout, 2)


def test_mig_single_needs_one_profile() -> None:
    with pytest.raises(PartitionError, match=r"GPU 1 \(H200\): mig-single needs one profile.*1g.18gb and profile 2g.35gb"):
        validate_layout("H200", [["1g.18gb"] * 7, ["2g.35gb"] * 3], 2, single=True)
    assert validate_layout("H200", [["1g.18gb"] * 7], 2, single=True) == [["1g.18gb"] * 7] * 2
