"""The out-of-band desk of a cluster `firedrill up` runs (drills.target.oob): real child processes stand for the
agents, signalled by the desk as the supervisor signals its own; the desk's clock is injected, so an expiry is
a step of the clock, not a wait."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from drills.target.faults import ReferenceFaults
from drills.target.oob import Desk, OobAction, OobError, OobRequest, ask, desk_dir
from tests.unit.drills.test_faults import Child

# A stand-in agent: its own session (so its group is its pid), SIGUSR1/SIGUSR2 written to a file as the agent's
# partition gate would take them; one line printed once the handlers are in place.
AGENT = """
import pathlib, signal, sys, time
out = pathlib.Path(sys.argv[1])
signal.signal(signal.SIGUSR1, lambda *_: out.write_text("partitioned"))
signal.signal(signal.SIGUSR2, lambda *_: out.write_text("healed"))
print("up", flush=True)
while True:
    time.sleep(0.05)
"""


class Agent(Child):
    def __init__(self, gate: Path) -> None:
        super().__init__(AGENT, str(gate))
        self.gate = gate

    def state(self) -> str:
        return Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]

    def heard(self) -> str:
        return self.gate.read_text() if self.gate.exists() else ""


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Desk, dict[str, Agent], Clock, list[str]]]:
    agents = {"n0": Agent(tmp_path / "n0.gate")}
    restarted: list[str] = []

    def restart(node: str) -> None:
        if not agents[node].alive():
            restarted.append(node)
            agents[node] = Agent(tmp_path / f"{node}.gate")
    clock = Clock()
    desk = Desk(tmp_path / "data", ReferenceFaults(agents.get, restart), restart, clock=clock)
    yield desk, agents, clock, restarted
    for agent in agents.values():
        if agent.alive():
            agent.signal_group(signal.SIGCONT)
            agent.kill()
        assert agent.popen.stdout is not None
        agent.popen.stdout.close()


def _take(desk: Desk, node: str, action: OobAction, expire: float | None = None):  # noqa: ANN202 - OobAnswer
    return desk.take(OobRequest("t", node, action, expire))


def test_a_hang_with_an_expiry_is_undone_by_the_desk_when_its_time_comes(cluster) -> None:  # noqa: ANN001
    desk, agents, clock, _ = cluster
    answer = _take(desk, "n0", OobAction.HANG, expire=30)
    assert answer.ok and "undoes itself in 30 s" in answer.detail
    assert agents["n0"].state() == "T"
    clock.now += 29.9
    desk.poll()
    assert agents["n0"].state() == "T" and "n0" in desk.standing
    clock.now += 0.2
    desk.poll()
    assert agents["n0"].state() != "T" and desk.standing == {}


def test_a_partition_is_healed_by_restore_and_a_second_fault_is_refused_meanwhile(cluster) -> None:  # noqa: ANN001
    desk, agents, _, _ = cluster
    assert _take(desk, "n0", OobAction.PARTITION).ok
    _wait(lambda: agents["n0"].heard() == "partitioned")
    refused = _take(desk, "n0", OobAction.KILL)
    assert not refused.ok and "already has a fault standing (partition)" in refused.detail and agents["n0"].alive()
    assert _take(desk, "n0", OobAction.RESTORE).ok
    _wait(lambda: agents["n0"].heard() == "healed")


def test_a_killed_node_starts_again_on_restore_and_restore_twice_is_harmless(cluster) -> None:  # noqa: ANN001
    desk, agents, _, restarted = cluster
    killed = agents["n0"]
    assert _take(desk, "n0", OobAction.KILL, expire=60).ok
    assert not killed.alive()
    first = _take(desk, "n0", OobAction.RESTORE)
    assert first.ok and "kill undone" in first.detail and restarted == ["n0"] and agents["n0"].alive()
    again = _take(desk, "n0", OobAction.RESTORE)
    assert again.ok and "no fault of the desk stood" in again.detail and restarted == ["n0"]


def test_a_node_the_supervisor_has_no_agent_for_is_refused_by_name(cluster) -> None:  # noqa: ANN001
    desk, _, _, _ = cluster
    answer = _take(desk, "n9", OobAction.KILL)
    assert not answer.ok and "node n9 has no running agent" in answer.detail and desk.standing == {}


def test_ask_leaves_a_request_the_desk_answers_and_drops_a_malformed_one(cluster, tmp_path) -> None:  # noqa: ANN001
    desk, agents, _, _ = cluster
    (desk_dir(tmp_path / "data") / "requests" / "bad.json").write_text("{not json")
    stop = threading.Event()

    def supervise() -> None:
        while not stop.wait(0.01):
            desk.poll()
    thread = threading.Thread(target=supervise)
    thread.start()
    try:
        answer = ask(tmp_path / "data", "n0", OobAction.HANG, 5, supervisor_alive=lambda: True, timeout=10)
    finally:
        stop.set()
        thread.join()
    assert answer.ok and agents["n0"].state() == "T"
    assert list((desk_dir(tmp_path / "data") / "requests").iterdir()) == []
    assert list((desk_dir(tmp_path / "data") / "answers").iterdir()) == []


def test_ask_with_no_supervisor_says_so_and_takes_back_an_unread_request(tmp_path: Path) -> None:
    with pytest.raises(OobError, match="no `firedrill up` is running on"):
        ask(tmp_path, "n0", OobAction.KILL, supervisor_alive=lambda: False)
    with pytest.raises(OobError, match="did not take the request \\(kill n0\\) within 0.1 s"):
        ask(tmp_path, "n0", OobAction.KILL, supervisor_alive=lambda: True, timeout=0.1)
    assert list((desk_dir(tmp_path) / "requests").iterdir()) == []


@pytest.mark.parametrize("text, problem", [
    ('{"id": "a", "node": "n0", "action": "reboot"}', "not a request"),
    ('{"id": "a", "action": "kill"}', "not a request"),
    ('{"id": "a", "node": "n0", "action": "kill", "expireSeconds": 0}', "expireSeconds 0 must be above 0"),
])
def test_a_malformed_request_is_named_with_where_it_was(text: str, problem: str) -> None:
    with pytest.raises(OobError, match=f"^desk/x.json: .*{problem}"):
        OobRequest.from_json(text, "desk/x.json")


def _wait(condition, timeout: float = 5.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)
