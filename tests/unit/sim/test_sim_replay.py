"""Trace replay on a small slice of the openb trace: invariants and determinism."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from refplatform.core import MILLI_PER_GPU, PLACEMENT_POLICIES, ClusterState, TieBreak
from refplatform.sim import DEFAULT_NODE_FILE, DEFAULT_POD_FILE, TraceError, TracePod, inflate, replay
from refplatform.sim.__main__ import main

TRACE = Path(__file__).resolve().parents[3] / ".." / "shared" / "traces" / "alibaba-gpu-v2023"
needs_trace = pytest.mark.skipif(not (TRACE / DEFAULT_POD_FILE).is_file(),
                                 reason=f"Alibaba trace not found at {TRACE} (../shared is absent on this machine)")


@pytest.fixture(scope="module")
def trace_slice(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every 12th node (~100, all GPU models) and the first 1,000 pods, plus a gpu_spec variant."""
    out = tmp_path_factory.mktemp("openb-slice")
    with (TRACE / DEFAULT_NODE_FILE).open() as fh:
        rows = list(csv.reader(fh))
    with (out / DEFAULT_NODE_FILE).open("w", newline="") as fh:
        csv.writer(fh).writerows([rows[0]] + rows[1::12])
    for name in (DEFAULT_POD_FILE, "openb_pod_list_gpuspec33.csv"):
        with (TRACE / name).open() as fh:
            rows = list(csv.reader(fh))
        with (out / name).open("w", newline="") as fh:
            csv.writer(fh).writerows(rows[:1001])
    return out


def _checker(problems: list[str]):
    def check(state: ClusterState) -> None:
        real = np.arange(state.width)[None, :] < state.gpu_count[:, None]
        if (state.gpu_free < 0).any() or (state.gpu_free > MILLI_PER_GPU).any():
            problems.append("per-GPU free milli out of 0..1000")
        if (state.gpu_free[~real] != 0).any():
            problems.append("milli on a GPU that does not exist")
        if (state.cpu_free < 0).any() or (state.mem_free < 0).any():
            problems.append("CPU or memory over-allocated")
        if (state.full_free != (state.gpu_free == MILLI_PER_GPU).sum(axis=1)).any():
            problems.append("idle-GPU count out of sync")
    return check


@needs_trace
@pytest.mark.parametrize("policy", PLACEMENT_POLICIES)
def test_replay_never_overallocates_and_reports_ratios_in_range(trace_slice: Path, policy: str) -> None:
    problems: list[str] = []
    result = replay(trace_slice, policy, 42, on_step=_checker(problems))
    assert not problems, sorted(set(problems))
    assert result.nodes == 102 and result.pods > 0
    assert 0 < result.failed_pods < result.pods
    assert min(result.arrived_pct) >= 0 and max(result.arrived_pct) <= 131
    assert all(0.0 <= a <= 100.0 for a in result.alloc_pct)
    assert (np.diff(result.alloc_pct) >= -1e-9).all(), "pods never leave: allocation only grows"
    assert all(0.0 <= f <= 100.0 for f in result.frag_ratio_pct + result.frag_amount_pct)
    assert 0.0 <= result.unallocated_130 <= 100.0
    assert result.alloc_at(130) <= max(result.arrived_pct) + 1


@needs_trace
def test_replay_is_deterministic_per_seed(trace_slice: Path) -> None:
    a, b, c = (replay(trace_slice, "fgd", seed) for seed in (7, 7, 8))
    strip = lambda r: {**r.__dict__, "seconds": 0}  # noqa: E731
    assert strip(a) == strip(b)
    assert strip(a) != strip(c)


@needs_trace
def test_replay_honours_gpu_model_constraints(trace_slice: Path) -> None:
    result = replay(trace_slice, "best-fit", 1, pod_file="openb_pod_list_gpuspec33.csv")
    assert result.pods > 0 and 0 <= result.unallocated_130 <= 100


@needs_trace
def test_cli_prints_a_table(trace_slice: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--trace-dir", str(trace_slice), "--policy", "best-fit", "fgd", "--seeds", "1-2"]) == 0
    out = capsys.readouterr().out
    assert "unalloc@130%" in out and "best-fit" in out and "fgd" in out and "tie-break: order" in out


@needs_trace
def test_cli_studies_the_tie_break_and_the_hybrid_weight(trace_slice: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--trace-dir", str(trace_slice), "--policy", "fgd+bestfit", "--seeds", "1",
                 "--tie-break", "random", "--fgd-packing-weight", "0.02"]) == 0
    out = capsys.readouterr().out
    assert "tie-break: random  fgd+bestfit weight: 0.02" in out and "fgd+bestfit" in out
    order = replay(trace_slice, "fgd", 3)
    spread = replay(trace_slice, "fgd", 3, tie_break=TieBreak.RANDOM)
    assert order.alloc_pct != spread.alloc_pct, "the tie-break decides many FGD placements"


def test_cli_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    assert "FGD" in capsys.readouterr().out


def test_cli_reports_a_missing_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--trace-dir", str(tmp_path), "--policy", "random"]) == 2
    assert "trace file not found" in capsys.readouterr().err
    with pytest.raises(TraceError):
        replay(tmp_path, "random", 1)


def test_replay_benchmark_fails_when_the_trace_is_missing(tmp_path: Path) -> None:
    bench = Path(__file__).resolve().parents[2] / "bench" / "bench_replay.py"
    run = subprocess.run([sys.executable, str(bench), "--trace-dir", str(tmp_path), "--policy", "fgd"],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                             [str(bench.parents[2]), str(bench.parents[2] / "platform")])})
    assert run.returncode == 2, run.stdout + run.stderr
    assert "trace not found" in run.stderr and "nothing was measured" in run.stderr


def test_inflation_copies_until_the_next_copy_would_pass_the_target() -> None:
    pods = [TracePod("a", 1000, 100, 1, 1000), TracePod("b", 1000, 100, 1, 500), TracePod("c", 1000, 100, 0, 0)]
    out = inflate(pods, capacity_milli=10_000, ratio=1.3, rng=np.random.default_rng(3))
    total = sum(p.gpu_total for _, p in out)
    assert 13_000 - 1000 < total <= 13_000
    names = [n for n, _ in out]
    assert len(set(names)) == len(names) and {"a", "b", "c"} <= set(names)


def test_inflation_tunes_down_when_the_trace_is_too_big() -> None:
    pods = [TracePod(f"p{i}", 1000, 100, 1, 1000) for i in range(20)]
    out = inflate(pods, capacity_milli=10_000, ratio=1.3, rng=np.random.default_rng(3))
    assert sum(p.gpu_total for _, p in out) == 13_000
