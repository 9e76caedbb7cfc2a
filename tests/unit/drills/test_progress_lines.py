"""The job's progress and its declared checkpoint writes, from the canaries' own lines (drills.workloads.progress):
the truth the hang drill judges by (issue 48)."""

from __future__ import annotations

import json

from drills.workloads.canarylog import CanaryLine, parse_line
from drills.workloads.progress import checkpoint_writes, job_progress, whole_steps


def line(uid: str, rank: int, seq: int, mono: float, event: str, generation: str = "0", **fields: object) -> CanaryLine:
    raw = json.dumps({"seq": seq, "ts": "2026-12-05T10:00:00Z", "event": event, "rank": rank,
                      "generation": generation, **fields})
    out = parse_line(raw, pod=f"pod-{uid}", uid=uid, node="n", mono=mono, wall=mono)
    assert out is not None
    return out


def test_a_step_counts_once_every_rank_of_its_generation_logged_it() -> None:
    lines = [line("a", 0, 1, 1.0, "step", step=1), line("b", 1, 1, 1.2, "step", step=1),
             line("a", 0, 2, 2.0, "step", step=2),  # rank 1 hangs inside step 2: the job's progress stays at 1
             line("c", 0, 1, 9.0, "step", generation="1", step=1)]
    assert [(p.generation, p.step, p.mono) for p in whole_steps(lines, 2)] == [("0", 1, 1.2)]
    assert job_progress(lines, 2) == whole_steps(lines, 2)[0]
    assert job_progress(lines, 2, uids={"c"}) is None  # one rank alone is not the job
    assert job_progress(lines, 1, uids={"c"}).step == 1  # type: ignore[union-attr]
    assert job_progress([], 2) is None


def test_a_checkpoint_write_runs_from_its_begin_line_to_its_complete_line() -> None:
    lines = [line("a", 0, 1, 1.0, "checkpoint-begin", step=5, file="ckpt-0000000005.json"),
             line("a", 0, 2, 4.0, "checkpoint", step=5, file="ckpt-0000000005.json", digest="sha256:x"),
             line("a", 0, 3, 6.0, "checkpoint-begin", step=10, file="ckpt-0000000010.json")]
    done, open_write = checkpoint_writes(lines)
    assert (done.step, done.file, done.began, done.done, done.seconds(99.0)) == (5, "ckpt-0000000005.json", 1.0, 4.0,
                                                                                 3.0)
    assert (open_write.step, open_write.done, open_write.seconds(8.5)) == (10, None, 2.5)
