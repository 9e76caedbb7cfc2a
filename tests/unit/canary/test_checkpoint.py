"""Checkpoints: atomic and whole, digest-checked, and a start resumes from the newest valid one."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from drills.canary.checkpoint import (
    checkpoint_name, digest_of, find_resume, prune, read_checkpoint, write_checkpoint,
)

TS = "2026-11-30T10:00:00.000000Z"


def write(directory: Path, step: int, accumulator: int = 7) -> str:
    return write_checkpoint(directory, step, 2, "g1", {"accumulator": accumulator}, TS).file


def test_a_checkpoint_is_the_named_object_with_a_sha256_of_its_canonical_json(tmp_path: Path) -> None:
    written = write_checkpoint(tmp_path / "ck", 40, 2, "g1", {"accumulator": 9}, TS)
    assert written.file == "ckpt-0000000040.json" == checkpoint_name(40)
    content = json.loads((tmp_path / "ck" / written.file).read_text())
    body = {"step": 40, "world_size": 2, "generation": "g1", "state": {"accumulator": 9}, "written_at": TS}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    assert content == {**body, "digest": "sha256:" + hashlib.sha256(canonical).hexdigest()}
    assert written.digest == content["digest"] == digest_of(content)
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["ckpt-0000000040.json"]  # no temp file left


def test_an_empty_or_missing_directory_is_a_fresh_start(tmp_path: Path) -> None:
    assert find_resume(None).from_step == 0
    missing = find_resume(tmp_path / "nowhere")
    assert (missing.from_step, missing.checkpoint, missing.skipped) == (0, None, [])


def test_resume_takes_the_newest_valid_checkpoint_and_its_state(tmp_path: Path) -> None:
    write(tmp_path, 10, accumulator=1)
    write(tmp_path, 20, accumulator=2)
    (tmp_path / ".ckpt-0000000030.json.tmp-99").write_text("{")  # a crashed write's temp file is not a checkpoint
    (tmp_path / "notes.txt").write_text("x")
    resume = find_resume(tmp_path)
    assert (resume.from_step, resume.checkpoint, resume.skipped, resume.state) == (
        20, "ckpt-0000000020.json", [], {"accumulator": 2})


def test_a_torn_newest_checkpoint_is_skipped_and_named(tmp_path: Path) -> None:
    write(tmp_path, 10)
    newest = tmp_path / write(tmp_path, 20)
    data = newest.read_bytes()
    newest.write_bytes(data[: len(data) // 2])
    (tmp_path / checkpoint_name(30)).write_bytes(b"")
    resume = find_resume(tmp_path)
    assert (resume.from_step, resume.checkpoint) == (10, "ckpt-0000000010.json")
    assert resume.skipped == ["ckpt-0000000030.json", "ckpt-0000000020.json"]


def test_a_digest_mismatch_or_a_misnamed_step_is_invalid(tmp_path: Path) -> None:
    write(tmp_path, 10)
    tampered = tmp_path / write(tmp_path, 20)
    content = json.loads(tampered.read_text())
    content["state"]["accumulator"] = 8  # edited after the digest was taken
    tampered.write_text(json.dumps(content))
    moved = json.loads((tmp_path / checkpoint_name(10)).read_text())
    (tmp_path / checkpoint_name(30)).write_text(json.dumps(moved))  # step 10's content under step 30's name
    for name, why in ((checkpoint_name(20), "digest mismatch"), (checkpoint_name(30), "does not match")):
        try:
            read_checkpoint(tmp_path / name)
        except ValueError as exc:
            assert why in str(exc)
        else:
            raise AssertionError(f"{name} was accepted")
    resume = find_resume(tmp_path)
    assert resume.from_step == 10 and resume.skipped == ["ckpt-0000000030.json", "ckpt-0000000020.json"]


def test_only_invalid_files_is_a_fresh_start_that_names_them(tmp_path: Path) -> None:
    (tmp_path / checkpoint_name(5)).write_text("[1, 2]")
    resume = find_resume(tmp_path)
    assert (resume.from_step, resume.checkpoint, resume.skipped) == (0, None, ["ckpt-0000000005.json"])


def test_prune_keeps_the_newest(tmp_path: Path) -> None:
    for step in (10, 20, 30, 40):
        write(tmp_path, step)
    assert prune(tmp_path, 0) == []
    assert prune(tmp_path, 2) == ["ckpt-0000000020.json", "ckpt-0000000010.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-0000000030.json", "ckpt-0000000040.json"]
