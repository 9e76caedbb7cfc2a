"""The Ray target's pure parts (issue 50): a node known by its name across restarts (a node started again gets a
new id; the GCS keeps the old one DEAD beside it), and the canary's lines read back from a job's log as Ray
forwards them (each worker's line behind its ``(Class pid=...)`` prefix, in colour)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from drills.ray.state import RayNode
from drills.target.raytarget import DRILL_JOB, by_name, node_service
from drills.workloads.canarylog import CanaryEvent, parse_line
from drills.workloads.raytraining import RayJobLog, said_node_id


def node(node_id: str, name: str, alive: bool, end: int | None = None, head: bool = False) -> RayNode:
    return RayNode(node_id, name, "127.0.0.1", alive, head, {"GPU": 8.0, "firedrill": 1.0}, end_time_ms=end)


def test_a_node_started_again_is_its_alive_record_and_a_dead_one_its_newest() -> None:
    nodes = [node("b2", "w1", True), node("a1", "w1", False, end=1000), node("c3", "w2", False, end=900),
             node("d4", "w2", False, end=2000), node("h", "head", True, head=True)]
    named = by_name(nodes)
    assert named["w1"].node_id == "b2" and named["w2"].node_id == "d4" and named["head"].head
    served = node_service(named["w2"])
    assert not served.ready and served.gpus == 8 and served.name == "w2"


def test_only_a_runs_own_jobs_are_drill_jobs() -> None:
    assert DRILL_JOB.match("canary-fd0a1b2c") and DRILL_JOB.match("gang-b-fd0a1b2c")
    assert not DRILL_JOB.match("raysubmit_123") and not DRILL_JOB.match("canary-prod")


@dataclass
class GrowingLog:
    """Stands in for the dashboard's answer to GET /api/jobs/<id>/logs: the log so far (no Ray runs here; the
    real answer is read in tests/realray)."""

    text: str = ""
    asked: list[str] = field(default_factory=list)

    def job_logs(self, submission_id: str, max_age: float = 0.0) -> str:
        self.asked.append(submission_id)
        return self.text


def test_each_canary_line_comes_once_behind_rays_prefix_and_colours_and_a_partial_line_waits() -> None:
    start = ('{"seq":1,"ts":"2026-12-05T10:00:00.000000Z","event":"start","rank":1,"world_size":2,'
             '"generation":"0","pid":7,"config":{"node_id":"abc"},"gpus":["0","1"]}')
    logs = GrowingLog("2026-12-05 driver line\n\x1b[36m(RayTrainWorker pid=7)\x1b[0m " + start + "\n"
                      + '(RayTrainWorker pid=7) {"seq":2,"ts":"2026-12-05T10:00')
    reader = RayJobLog(logs, "canary-fd000001")  # type: ignore[arg-type]
    first = reader.new_lines()
    assert first == [start]
    line = parse_line(first[0], pod="", uid="", node="", mono=0.0, wall=0.0)
    assert line is not None and line.event is CanaryEvent.START and said_node_id(line) == "abc"
    logs.text += ':00.100000Z","event":"step","rank":1,"world_size":2,"generation":"0","step":1}\n'
    second = reader.new_lines()
    assert len(second) == 1 and '"event":"step"' in second[0] and reader.new_lines() == []
    assert logs.asked == ["canary-fd000001"] * 3


def test_a_checkpoint_given_on_resume_is_whole_only_when_its_digest_matches_its_bytes(tmp_path: Path) -> None:
    """The Ray canary's rank 0 logs the checkpoint Ray handed a new worker group as complete (Ray registered it)
    only when its bytes are whole: a rank 0 that died between Ray registering a checkpoint and announcing it had
    left it unlogged, and a resume from it read as one from nowhere (found on the real Ray)."""
    from drills.canary.raytrain import DIGEST_FILE, STATE_FILE, _write_state, whole_state

    digest = _write_state(tmp_path, 10, 0)
    assert whole_state(tmp_path) == (10, digest)
    (tmp_path / STATE_FILE).write_bytes(b'{"generation":0,"step":10}  ')  # the same step, other bytes: torn
    assert whole_state(tmp_path) == (10, None)
    (tmp_path / DIGEST_FILE).unlink()
    assert whole_state(tmp_path) == (10, None)
