"""``--checkpoint-on-sigterm``: real canary processes are sent SIGTERM mid-run (as a preemption's graceful
delete does); rank 0 checkpoints the last completed step through its normal path, logs it with
``trigger: sigterm``, and exits 143; a restart resumes from it.  Off by default: SIGTERM writes nothing.  A slow
periodic write (``--checkpoint-seconds``) SIGTERM arrives in is abandoned at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from drills.canary.checkpoint import read_checkpoint

REPO = Path(__file__).resolve().parents[3]
DEADLINE_S = 60.0


def env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    return {**base, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]), **extra}


def start(args: list[str], **extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "drills.canary", "train", "--compute-seconds", "0.01", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(**extra))


def read_until(stream: IO[str], event: str, min_step: int = 0) -> list[dict[str, Any]]:
    """Lines up to the first ``event`` line whose step is at least ``min_step`` (the canary writes a step
    every ~10 ms, so each read returns soon; the deadline guards a canary that stopped)."""
    lines: list[dict[str, Any]] = []
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        raw = stream.readline()
        if not raw:
            break
        lines.append(json.loads(raw))
        if lines[-1]["event"] == event and lines[-1].get("step", 0) >= min_step:
            return lines
    raise AssertionError(f"no {event} line with step >= {min_step}; got {lines[-3:]}")


def finish(proc: subprocess.Popen[str]) -> tuple[int, list[dict[str, Any]]]:
    out, _ = proc.communicate(timeout=DEADLINE_S)
    return proc.returncode, [json.loads(line) for line in out.splitlines() if line.strip()]


def test_sigterm_checkpoints_the_last_completed_step_then_exits_143_and_a_restart_resumes_there(
        tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    proc = start(["--checkpoint-dir", str(ckpt), "--checkpoint-every", "1000", "--checkpoint-on-sigterm"])
    assert proc.stdout is not None
    before = read_until(proc.stdout, "step", min_step=3)
    assert before[0]["config"]["checkpoint_on_sigterm"] is True
    proc.send_signal(signal.SIGTERM)
    code, after = finish(proc)
    lines = before + after
    assert code == 143
    steps = [line["step"] for line in lines if line["event"] == "step"]
    (checkpoint,) = [line for line in lines if line["event"] == "checkpoint"]
    exit_line = lines[-1]
    assert exit_line["event"] == "exit" and exit_line["reason"] == "sigterm" and exit_line["code"] == 143
    # the last completed step, logged like any checkpoint, with the trigger, before the exit line
    assert checkpoint["trigger"] == "sigterm" and checkpoint["step"] == steps[-1] == exit_line["step"]
    assert lines.index(checkpoint) > max(i for i, line in enumerate(lines) if line["event"] == "step")
    content = read_checkpoint(ckpt / checkpoint["file"])
    assert content["step"] == steps[-1] and content["digest"] == checkpoint["digest"]

    again = start(["--checkpoint-dir", str(ckpt), "--checkpoint-every", "1000", "--steps-total",
                   str(steps[-1] + 2)])
    code, lines = finish(again)
    assert code == 0
    resumed = next(line for line in lines if line["event"] == "resumed")
    assert resumed["from_step"] == steps[-1] and resumed["checkpoint"] == checkpoint["file"]


def test_without_the_flag_sigterm_writes_no_checkpoint(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    proc = start(["--checkpoint-dir", str(ckpt), "--checkpoint-every", "1000"])
    assert proc.stdout is not None
    before = read_until(proc.stdout, "step", min_step=2)
    assert before[0]["config"]["checkpoint_on_sigterm"] is False
    proc.send_signal(signal.SIGTERM)
    code, after = finish(proc)
    assert code == 143
    assert [line for line in before + after if line["event"] == "checkpoint"] == []
    assert not ckpt.exists() or list(ckpt.iterdir()) == []


def test_two_ranks_only_rank_0_writes_the_sigterm_checkpoint(tmp_path: Path) -> None:
    ckpt, rdv = tmp_path / "ckpt", tmp_path / "rdv"
    common = ["--checkpoint-dir", str(ckpt), "--checkpoint-every", "1000", "--checkpoint-on-sigterm",
              "--rendezvous-dir", str(rdv)]
    ranks = [start(common, RANK=str(r), WORLD_SIZE="2") for r in (0, 1)]
    stdout = ranks[0].stdout
    assert stdout is not None
    before0 = read_until(stdout, "step", min_step=3)
    for proc in ranks:
        proc.send_signal(signal.SIGTERM)
    (code0, after0), (code1, lines1) = finish(ranks[0]), finish(ranks[1])
    lines0 = before0 + after0
    assert (code0, code1) == (143, 143)
    (checkpoint,) = [line for line in lines0 if line["event"] == "checkpoint"]
    assert checkpoint["trigger"] == "sigterm" and checkpoint["rank"] == 0
    assert checkpoint["step"] == max(line["step"] for line in lines0 if line["event"] == "step")
    # rank 1 wrote nothing; it completed that step too, or was stopped while its result was on the wire
    # (every contribution to a step is in before rank 0 completes it), never a later one
    assert [line for line in lines1 if line["event"] == "checkpoint"] == []
    assert max(line["step"] for line in lines1 if line["event"] == "step") in (checkpoint["step"] - 1,
                                                                               checkpoint["step"])
    assert read_checkpoint(ckpt / checkpoint["file"])["world_size"] == 2


def test_sigterm_cuts_a_slow_write_short_at_once_and_a_storage_without_the_rename_promise_keeps_it_torn(
        tmp_path: Path) -> None:
    ckpt, driver = tmp_path / "ckpt", tmp_path / "clocks.json"
    driver.write_text(json.dumps({"atomic_rename": False}))
    proc = start(["--checkpoint-dir", str(ckpt), "--checkpoint-every", "3", "--checkpoint-seconds", "30"],
                 FIREDRILL_DEVICE_CLOCKS=str(driver))
    assert proc.stdout is not None
    before = read_until(proc.stdout, "checkpoint-begin")
    time.sleep(0.3)  # some of the 20 chunks are written (one each 1.5 s: the first at once)
    began = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code, after = finish(proc)
    assert code == 143 and time.monotonic() - began < 5  # not the 30 s the write would take
    begin = before[-1]
    assert (begin["step"], begin["file"]) == (3, "ckpt-0000000003.json")
    assert [line for line in after if line["event"] == "checkpoint"] == []
    assert [p.name for p in ckpt.iterdir()] == [begin["file"]]  # torn under its final name

    again = start(["--checkpoint-dir", str(ckpt), "--checkpoint-every", "1000", "--steps-total", "1"])
    code, lines = finish(again)
    resumed = next(line for line in lines if line["event"] == "resumed")
    assert code == 0 and (resumed["from_step"], resumed["skipped"]) == (0, [begin["file"]])
